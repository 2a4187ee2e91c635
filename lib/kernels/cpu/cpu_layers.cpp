// CPU backend: encoder (serial and vocab-parallel), LayerNorm, GELU, residual. Legend: B batch, T time, C channels,
// N = B*T rows; vocab-parallel: this rank holds the wte rows [v0, v0+Vl) of the padded vocabulary Vp.
// Forward and backward are paired; parameter grads +=, activation grads = (LayerNorm's dinp +=).
// Parameter-gradient reductions over the N rows are split over column blocks, never over rows, so their
// summation order is fixed whatever the number of threads (bitwise reproducible runs).

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_math.hpp"

namespace hpct::kernels::cpu {
namespace {

constexpr int kColBlock = 32;              // columns per task of a column-split reduction (one AVX2 line x 4)
constexpr int64_t kMinParallel = 1 << 14;  // below this many elements a pointwise op stays serial

void check_tokens(const int32_t* inp, int64_t n) {
  // the upper bound (Vp) is not passed to the encoder; the data loader checks tokens against the vocabulary
  for (int64_t i = 0; i < n; i++) HPCT_CHECK(inp[i] >= 0, "encoder: token {} at position {} is negative", inp[i], i);
}

}  // namespace

// ---- encoder ----------------------------------------------------------------------------------
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  check_tokens(inp, N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float* o = out + n * C;                                   // (C)
    const float* w = wte + static_cast<int64_t>(inp[n]) * C;  // (C)
    const float* p = wpe + (n % T) * C;                       // (C)
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = w[c] + p[c];
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  check_tokens(inp, N);
  const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel
  {
    // dwte: rows are scattered by token id (several positions may share one), so split the columns:
    // each task owns dwte[:, c0:c1) and walks the positions in order.
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock);
      for (int64_t n = 0; n < N; n++) {
        float* dw = dwte + static_cast<int64_t>(inp[n]) * C;
        const float* d = dout + n * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) dw[c] += d[c];
      }
    }
    // dwpe[t] += sum_b dout[b, t]
#pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
      float* dp = dwpe + static_cast<int64_t>(t) * C;
      for (int b = 0; b < B; b++) {
        const float* d = dout + (static_cast<int64_t>(b) * T + t) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) dp[c] += d[c];
      }
    }
  }
}

// ---- vocab-parallel encoder: this rank holds wte rows [v0, v0+Vl) (kernels.hpp) -----------------------------
void encoder_forward_vocab_parallel(float* out, const int32_t* inp, const float* wte_local, const float* wpe, int v0,
                                    int Vl, int B, int T, int C) {
  HPCT_CHECK(v0 >= 0 && Vl > 0, "encoder_forward_vocab_parallel: bad vocabulary slice [v0={}, v0+Vl={})", v0, v0 + Vl);
  const int64_t N = static_cast<int64_t>(B) * T;
  check_tokens(inp, N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float* o = out + n * C;                               // (C)
    const int64_t j = static_cast<int64_t>(inp[n]) - v0;  // local row, or outside [0, Vl): another rank's
    const float* p = wpe ? wpe + (n % T) * C : nullptr;   // (C) or null
    if (j >= 0 && j < Vl) {
      const float* w = wte_local + j * C;  // (C)
      if (p) {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c] + p[c];
      } else {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c];
      }
    } else if (p) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = p[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = 0.0f;
    }
  }
}

void encoder_backward_vocab_parallel(float* dwte_local, float* dwpe, const float* dout, const int32_t* inp, int v0,
                                     int Vl, int B, int T, int C) {
  HPCT_CHECK(v0 >= 0 && Vl > 0, "encoder_backward_vocab_parallel: bad vocabulary slice [v0={}, v0+Vl={})", v0, v0 + Vl);
  const int64_t N = static_cast<int64_t>(B) * T;
  check_tokens(inp, N);
  const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel
  {
    // dwte_local: as encoder_backward, column blocks walking the positions in order (no atomics, fixed order), and
    // only the positions whose token is in this rank's rows
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock);
      for (int64_t n = 0; n < N; n++) {
        const int64_t j = static_cast<int64_t>(inp[n]) - v0;
        if (j < 0 || j >= Vl) continue;
        float* dw = dwte_local + j * C;  // (C)
        const float* d = dout + n * C;   // (C)
#pragma omp simd
        for (int c = c0; c < c1; c++) dw[c] += d[c];
      }
    }
    // dwpe[t] += sum_b dout[b, t], as encoder_backward (every TP rank: dout is the same on all of them)
    if (dwpe) {
#pragma omp for schedule(static)
      for (int t = 0; t < T; t++) {
        float* dp = dwpe + static_cast<int64_t>(t) * C;
        for (int b = 0; b < B; b++) {
          const float* d = dout + (static_cast<int64_t>(b) * T + t) * C;
#pragma omp simd
          for (int c = 0; c < C; c++) dp[c] += d[c];
        }
      }
    }
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------------
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
  constexpr float eps = 1e-5f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<int64_t>(n) * C;  // (C)
    float* o = out + static_cast<int64_t>(n) * C;        // (C)
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    const float m = s / C;
    float v = 0.0f;  // two-pass variance: no E[x^2] - m^2 cancellation
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(v / C + eps);
    if (bias) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * weight[c] + bias[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * weight[c];
    }
    mean[n] = m;
    rstd[n] = r;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel
  {
    // dinp += rstd * (w dout - mean(w dout) - norm * mean(w dout norm)), row by row
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++) {
      const float* x = inp + static_cast<int64_t>(n) * C;
      const float* d = dout + static_cast<int64_t>(n) * C;
      float* dx = dinp + static_cast<int64_t>(n) * C;
      const float m = mean[n], r = rstd[n];
      float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
      for (int c = 0; c < C; c++) {
        const float dnorm = weight[c] * d[c];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * (x[c] - m) * r;
      }
      const float dnorm_mean = dnorm_sum / C, dnorm_norm_mean = dnorm_norm_sum / C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        const float norm = (x[c] - m) * r;
        dx[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * r;
      }
    }
    // dweight += sum_n dout * norm, dbias += sum_n dout: column blocks, accumulated in double over the N rows
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kColBlock, w = std::min(C - c0, kColBlock);
      double acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
      for (int n = 0; n < N; n++) {
        const float* x = inp + static_cast<int64_t>(n) * C + c0;
        const float* d = dout + static_cast<int64_t>(n) * C + c0;
        const float m = mean[n], r = rstd[n];
#pragma omp simd
        for (int c = 0; c < w; c++) {
          acc_w[c] += d[c] * ((x[c] - m) * r);
          acc_b[c] += d[c];
        }
      }
      for (int c = 0; c < w; c++) {
        dweight[c0 + c] += static_cast<float>(acc_w[c]);
        if (dbias) dbias[c0 + c] += static_cast<float>(acc_b[c]);
      }
    }
  }
}

// ---- GELU (tanh approximation) ------------------------------------------------------------------
void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) out[i] = gelu_simd(inp[i]);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) dinp[i] = gelu_grad_simd(inp[i]) * dout[i];
}

// ---- residual -------------------------------------------------------------------------------------
void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

}  // namespace hpct::kernels::cpu
