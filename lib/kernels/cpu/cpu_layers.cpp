// CPU backend: encoder (serial and vocab-parallel), LayerNorm, GELU, residual. Legend: B batch, T time, C channels,
// N = B*T rows; vocab-parallel: this rank holds the wte rows [v0, v0+Vl) of the padded vocabulary Vp.
// Forward and backward are paired; parameter grads +=, activation grads = (LayerNorm's dinp +=).
// Parameter-gradient reductions over the N rows are split over column blocks, never over rows, so their
// summation order is fixed whatever the number of threads (bitwise reproducible runs).
//
// Storage type A (kernels.hpp): float or bf16. Every load goes through to_f32 (the identity for float, an exact
// widening for bf16), the arithmetic is fp32, and every store through from_f32<A> (the identity for float, one
// round-to-nearest-even for bf16): the float instantiation runs exactly the float operations it always ran, and
// the bf16 one the same operations on the widened values. Both conversions are integer operations, so the
// `omp simd` loops vectorise for either type.

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

// dwpe[t] += sum_b dout[b, t] (T,C), one task per position t: the batch sum runs in b order whatever the threads.
// Called inside an `omp parallel` region (an orphaned `omp for`).
template <typename A>
void accumulate_dwpe(float* dwpe, const A* dout, int B, int T, int C) {
#pragma omp for schedule(static)
  for (int t = 0; t < T; t++) {
    float* dp = dwpe + static_cast<int64_t>(t) * C;
    for (int b = 0; b < B; b++) {
      const A* d = dout + (static_cast<int64_t>(b) * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) dp[c] += to_f32(d[c]);
    }
  }
}

}  // namespace

// ---- encoder ----------------------------------------------------------------------------------
template <typename A>
void encoder_forward(A* out, const int32_t* inp, const A* wte, const A* wpe, int B, int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  check_tokens(inp, N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    A* o = out + n * C;                                   // (C)
    const A* w = wte + static_cast<int64_t>(inp[n]) * C;  // (C)
    const A* p = wpe + (n % T) * C;                       // (C)
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = from_f32<A>(to_f32(w[c]) + to_f32(p[c]));
  }
}

template <typename A>
void encoder_backward(float* dwte, float* dwpe, const A* dout, const int32_t* inp, int B, int T, int C) {
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
        const A* d = dout + n * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) dw[c] += to_f32(d[c]);
      }
    }
    accumulate_dwpe(dwpe, dout, B, T, C);
  }
}

// ---- vocab-parallel encoder: this rank holds wte rows [v0, v0+Vl) (kernels.hpp) -----------------------------
template <typename A>
void encoder_forward_vocab_parallel(A* out, const int32_t* inp, const A* wte_local, const A* wpe, int v0, int Vl, int B,
                                    int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  check_tokens(inp, N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    A* o = out + n * C;                                   // (C)
    const int64_t j = static_cast<int64_t>(inp[n]) - v0;  // local row, or outside [0, Vl): another rank's
    const A* p = wpe ? wpe + (n % T) * C : nullptr;       // (C) or null
    if (j >= 0 && j < Vl) {
      const A* w = wte_local + j * C;  // (C)
      if (p) {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = from_f32<A>(to_f32(w[c]) + to_f32(p[c]));
      } else {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c];
      }
    } else if (p) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = p[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = from_f32<A>(0.0f);
    }
  }
}

template <typename A>
void encoder_backward_vocab_parallel(float* dwte_local, float* dwpe, const A* dout, const int32_t* inp, int v0, int Vl,
                                     int B, int T, int C) {
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
        const A* d = dout + n * C;       // (C)
#pragma omp simd
        for (int c = c0; c < c1; c++) dw[c] += to_f32(d[c]);
      }
    }
    // dwpe[t] += sum_b dout[b, t], as encoder_backward (every TP rank: dout is the same on all of them)
    if (dwpe) accumulate_dwpe(dwpe, dout, B, T, C);
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------------
template <typename A>
void layernorm_forward(A* out, float* mean, float* rstd, const A* inp, const A* weight, const A* bias, int N, int C) {
  constexpr float eps = 1e-5f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const A* x = inp + static_cast<int64_t>(n) * C;  // (C)
    A* o = out + static_cast<int64_t>(n) * C;        // (C)
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += to_f32(x[c]);
    const float m = s / C;
    float v = 0.0f;  // two-pass variance: no E[x^2] - m^2 cancellation
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (to_f32(x[c]) - m) * (to_f32(x[c]) - m);
    const float r = 1.0f / std::sqrt(v / C + eps);
    if (bias) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = from_f32<A>((to_f32(x[c]) - m) * r * to_f32(weight[c]) + to_f32(bias[c]));
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = from_f32<A>((to_f32(x[c]) - m) * r * to_f32(weight[c]));
    }
    mean[n] = m;
    rstd[n] = r;
  }
}

template <typename A>
void layernorm_backward(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp, const A* weight,
                        const float* mean, const float* rstd, int N, int C) {
  const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel
  {
    // dinp += rstd * (w dout - mean(w dout) - norm * mean(w dout norm)), row by row; under bf16 the sum is formed
    // in fp32 from the stored dinp and rounded once
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++) {
      const A* x = inp + static_cast<int64_t>(n) * C;
      const A* d = dout + static_cast<int64_t>(n) * C;
      A* dx = dinp + static_cast<int64_t>(n) * C;
      const float m = mean[n], r = rstd[n];
      float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
      for (int c = 0; c < C; c++) {
        const float dnorm = to_f32(weight[c]) * to_f32(d[c]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * (to_f32(x[c]) - m) * r;
      }
      const float dnorm_mean = dnorm_sum / C, dnorm_norm_mean = dnorm_norm_sum / C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        const float norm = (to_f32(x[c]) - m) * r;
        dx[c] = from_f32<A>(to_f32(dx[c]) +
                            (to_f32(weight[c]) * to_f32(d[c]) - dnorm_mean - norm * dnorm_norm_mean) * r);
      }
    }
    // dweight += sum_n dout * norm, dbias += sum_n dout: column blocks, accumulated in double over the N rows
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kColBlock, w = std::min(C - c0, kColBlock);
      double acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
      for (int n = 0; n < N; n++) {
        const A* x = inp + static_cast<int64_t>(n) * C + c0;
        const A* d = dout + static_cast<int64_t>(n) * C + c0;
        const float m = mean[n], r = rstd[n];
#pragma omp simd
        for (int c = 0; c < w; c++) {
          acc_w[c] += to_f32(d[c]) * ((to_f32(x[c]) - m) * r);
          acc_b[c] += to_f32(d[c]);
        }
      }
      for (int c = 0; c < w; c++) {
        dweight[c0 + c] += static_cast<float>(acc_w[c]);
        if (dbias) dbias[c0 + c] += static_cast<float>(acc_b[c]);
      }
    }
  }
}

// ---- GELU (tanh approximation), residual -------------------------------------------------------------
// Element-wise, so HPCT_WIDE_SIMD (cpu_math.hpp) changes no result. It takes effect only on a function's first
// declaration, hence the private templates behind the ones cpu_kernels.hpp declares.
namespace {

template <typename A>
HPCT_WIDE_SIMD void gelu_forward_wide(A* out, const A* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) out[i] = from_f32<A>(gelu_simd(to_f32(inp[i])));
}

template <typename A>
HPCT_WIDE_SIMD void gelu_backward_wide(A* dinp, const A* inp, const A* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) dinp[i] = from_f32<A>(gelu_grad_simd(to_f32(inp[i])) * to_f32(dout[i]));
}

template <typename A>
HPCT_WIDE_SIMD void residual_forward_wide(A* out, const A* a, const A* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) out[i] = from_f32<A>(to_f32(a[i]) + to_f32(b[i]));
}

}  // namespace

template <typename A>
void gelu_forward(A* out, const A* inp, int64_t n) {
  gelu_forward_wide(out, inp, n);
}

template <typename A>
void gelu_backward(A* dinp, const A* inp, const A* dout, int64_t n) {
  gelu_backward_wide(dinp, inp, dout, n);
}

template <typename A>
void residual_forward(A* out, const A* a, const A* b, int64_t n) {
  residual_forward_wide(out, a, b, n);
}

// Both storage types (kernels.hpp instantiates its dispatch for float and bf16).
#define HPCT_INSTANTIATE_LAYERS(A)                                                                                     \
  template void encoder_forward<A>(A*, const int32_t*, const A*, const A*, int, int, int);                             \
  template void encoder_backward<A>(float*, float*, const A*, const int32_t*, int, int, int);                          \
  template void encoder_forward_vocab_parallel<A>(A*, const int32_t*, const A*, const A*, int, int, int, int, int);    \
  template void encoder_backward_vocab_parallel<A>(float*, float*, const A*, const int32_t*, int, int, int, int, int); \
  template void layernorm_forward<A>(A*, float*, float*, const A*, const A*, const A*, int, int);                      \
  template void layernorm_backward<A>(A*, float*, float*, const A*, const A*, const A*, const float*, const float*,    \
                                      int, int);                                                                       \
  template void gelu_forward<A>(A*, const A*, int64_t);                                                                \
  template void gelu_backward<A>(A*, const A*, const A*, int64_t);                                                     \
  template void residual_forward<A>(A*, const A*, const A*, int64_t);
HPCT_INSTANTIATE_LAYERS(float)
HPCT_INSTANTIATE_LAYERS(bf16)
#undef HPCT_INSTANTIATE_LAYERS

}  // namespace hpct::kernels::cpu
