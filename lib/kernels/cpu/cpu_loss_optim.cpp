// CPU backend: softmax cross-entropy (serial and vocab-parallel), reductions, AdamW, memory helpers.
// Legend: N rows, V true vocabulary, Vp padded vocabulary (logits columns v >= V are masked out); vocab-parallel:
// this rank holds the global columns [v0, v0+Vl) of Vp, of which the first Vr = clamp(V - v0, 0, Vl) are real.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_math.hpp"

namespace hpct::kernels::cpu {
namespace {

constexpr int64_t kMinParallel = 1 << 14;  // below this many elements a pointwise op stays serial
constexpr int kMaxChunks = 256;            // chunks of a global sum: its order depends on n only

void check_targets(const char* op, const int32_t* targets, int N, int V, int Vp) {
  HPCT_CHECK(V > 0 && V <= Vp, "{}: vocabulary V={} must lie in [1, Vp={}]", op, V, Vp);
  for (int n = 0; n < N; n++)
    HPCT_CHECK(targets[n] >= 0 && targets[n] < V, "{}: target {} of row {} is outside [0, V={})", op, targets[n], n, V);
}

// Row max and sum of exp(x - max) over the first V logits: the max-subtracted (overflow-free) log-sum-exp.
// When `e` is not null it receives the exponentials.
inline void softmax_stats(const float* x, float* e, int V, float& max_out, float& sum_out) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int v = 0; v < V; v++) m = x[v] > m ? x[v] : m;
  float s = 0.0f;
  if (e) {
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < V; v++) {
      e[v] = exp_simd(x[v] - m);
      s += e[v];
    }
  } else {
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < V; v++) s += exp_simd(x[v] - m);
  }
  max_out = m;
  sum_out = s;
}

// Checks a vocab-parallel slice and its targets; returns Vr, the number of real (non-padded) local columns.
int check_vp_slice(const char* op, const int32_t* targets, int v0, int Vl, int V, int N) {
  HPCT_CHECK(V > 0 && v0 >= 0 && Vl > 0, "{}: bad vocabulary slice [v0={}, v0+Vl={}) of V={}", op, v0, v0 + Vl, V);
  if (targets)
    for (int n = 0; n < N; n++)
      HPCT_CHECK(targets[n] >= 0 && targets[n] < V, "{}: target {} of row {} is outside [0, V={})", op, targets[n], n,
                 V);
  return std::clamp(V - v0, 0, Vl);
}

// sum over x[0, n) of f(x[i]) in double, over a fixed grid of chunks summed in order: the result depends on n
// only, not on the number of threads or on their timing (unlike an `omp reduction`).
template <bool kSquare>
double chunked_sum(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t nchunks = std::min<int64_t>(kMaxChunks, (n + 4095) / 4096);
  const int64_t chunk = (n + nchunks - 1) / nchunks;
  double partial[kMaxChunks];
#pragma omp parallel for schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < nchunks; i++) {
    const int64_t lo = i * chunk, hi = std::min(n, lo + chunk);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t j = lo; j < hi; j++) {
      const double xj = x[j];
      acc += kSquare ? xj * xj : xj;
    }
    partial[i] = acc;
  }
  double total = 0.0;
  for (int64_t i = 0; i < nchunks; i++) total += partial[i];
  return total;
}

}  // namespace

// ---- softmax cross-entropy --------------------------------------------------------------------
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V, int Vp) {
  check_targets("crossentropy_forward", targets, N, V, Vp);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits + static_cast<int64_t>(n) * Vp;  // (Vp), only [0, V) is read
    float m, s;
    softmax_stats(x, nullptr, V, m, s);
    losses[n] = (m - x[targets[n]]) + std::log(s);  // -log softmax(x)[target] = logsumexp(x) - x[target]
  }
}

void crossentropy_forward_backward(float* losses, float* logits, const int32_t* targets, float dloss, int N, int V,
                                   int Vp) {
  check_targets("crossentropy_forward_backward", targets, N, V, Vp);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = logits + static_cast<int64_t>(n) * Vp;  // (Vp) logits in, dlogits out
    const int tgt = targets[n];
    const float x_tgt = x[tgt];
    float m, s;
    softmax_stats(x, x, V, m, s);  // x[v] <- exp(x[v] - m)
    losses[n] = (m - x_tgt) + std::log(s);
    const float k = dloss / s;
#pragma omp simd
    for (int v = 0; v < V; v++) x[v] *= k;  // dloss * softmax
    x[tgt] -= dloss;
    for (int v = V; v < Vp; v++) x[v] = 0.0f;  // padded columns: no gradient
  }
}

// ---- label-smoothed softmax cross-entropy (kernels.hpp): lse - (1 - eps) z[y] - eps mean(z) ------------------
void crossentropy_smoothed_forward(float* losses, const float* logits, const int32_t* targets, float eps, int N,
                                   int K) {
  check_targets("crossentropy_smoothed_forward", targets, N, K, K);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits + static_cast<int64_t>(n) * K;  // (K)
    float m, s, zsum = 0.0f;
    softmax_stats(x, nullptr, K, m, s);
    for (int k = 0; k < K; k++) zsum += x[k];
    // (1 - eps)(lse - z[y]) + eps (lse - mean z), lse = m + log s
    losses[n] = (1.0f - eps) * ((m - x[targets[n]]) + std::log(s)) + eps * ((m - zsum / K) + std::log(s));
  }
}

void crossentropy_smoothed_forward_backward(float* losses, float* logits, const int32_t* targets, float dloss,
                                            float eps, int N, int K) {
  check_targets("crossentropy_smoothed_forward_backward", targets, N, K, K);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = logits + static_cast<int64_t>(n) * K;  // (K) logits in, dlogits out
    const int tgt = targets[n];
    const float x_tgt = x[tgt];
    float zsum = 0.0f;
    for (int k = 0; k < K; k++) zsum += x[k];
    float m, s;
    softmax_stats(x, x, K, m, s);  // x[k] <- exp(x[k] - m)
    losses[n] = (1.0f - eps) * ((m - x_tgt) + std::log(s)) + eps * ((m - zsum / K) + std::log(s));
    const float c = dloss / s, uniform = dloss * eps / K;
    for (int k = 0; k < K; k++) x[k] = x[k] * c - uniform;  // dloss (p - eps / K)
    x[tgt] -= dloss * (1.0f - eps);
  }
}

// ---- vocab-parallel softmax cross-entropy (kernels.hpp): the local slices of crossentropy_forward_backward ------
// The same float operations as the serial kernel, row by row (no cross-thread reduction): the max is exact whatever
// the split; only the sum of exponentials is split into per-rank partial sums (added by the SUM allreduce), which
// is the sole source of difference from the serial kernel (a summation order, ~1e-7 relative).
void crossentropy_vp_local_max(float* max_out, const float* logits_local, int v0, int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_local_max", nullptr, v0, Vl, V, N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits_local + static_cast<int64_t>(n) * Vl;  // (Vl), only the real [0, Vr) is read
    float m = -INFINITY;                                           // a rank of padding only: -inf, the MAX identity
#pragma omp simd reduction(max : m)
    for (int v = 0; v < Vr; v++) m = x[v] > m ? x[v] : m;
    max_out[n] = m;
  }
}

void crossentropy_vp_local_sumexp(float* sumexp_out, float* target_logit_out, const float* logits_local,
                                  const float* global_max, const int32_t* targets, int v0, int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_local_sumexp", targets, v0, Vl, V, N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits_local + static_cast<int64_t>(n) * Vl;  // (Vl), only the real [0, Vr) is read
    const float m = global_max[n];                                 // subtracted before exp: no overflow
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < Vr; v++) s += exp_simd(x[v] - m);
    sumexp_out[n] = s;
    const int j = targets[n] - v0;                           // local column of the target; in range on exactly one rank
    target_logit_out[n] = (j >= 0 && j < Vr) ? x[j] : 0.0f;  // 0 elsewhere: the SUM allreduce yields x[target]
  }
}

void crossentropy_vp_loss_backward(float* losses, float* logits_local, const float* global_max,
                                   const float* global_sumexp, const float* global_target_logit, const int32_t* targets,
                                   float dloss, int v0, int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_loss_backward", targets, v0, Vl, V, N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = logits_local + static_cast<int64_t>(n) * Vl;  // (Vl) logits in, dlogits out
    const float m = global_max[n], s = global_sumexp[n];     // s >= 1: the max column contributes exp(0)
    losses[n] = (m - global_target_logit[n]) + std::log(s);  // as crossentropy_forward_backward
    const float k = dloss / s;
#pragma omp simd
    for (int v = 0; v < Vr; v++) x[v] = exp_simd(x[v] - m) * k;  // dloss * softmax
    const int j = targets[n] - v0;
    if (j >= 0 && j < Vr) x[j] -= dloss;
    for (int v = Vr; v < Vl; v++) x[v] = 0.0f;  // padded columns: no gradient
  }
}

void crossentropy_vp_loss(float* losses, const float* global_max, const float* global_sumexp,
                          const float* global_target_logit, int N) {
#pragma omp parallel for schedule(static) if (N >= kMinParallel)
  for (int n = 0; n < N; n++) losses[n] = (global_max[n] - global_target_logit[n]) + std::log(global_sumexp[n]);
}

// ---- reductions ---------------------------------------------------------------------------------
void sum(float* out, const float* x, int64_t n) { *out = static_cast<float>(chunked_sum<false>(x, n)); }

void sum_squares_accumulate(double* out, const float* x, int64_t n) { *out += chunked_sum<true>(x, n); }

void scale(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

// ---- AdamW ----------------------------------------------------------------------------------------
// In the operation order of torch.optim.AdamW (1.13, single-tensor path), so that a PyTorch reference run can
// be matched to fp32 rounding: decoupled decay first, then the moments, then the bias-corrected step.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, float grad_scale, int t) {
  HPCT_CHECK(t >= 1, "adamw_update: the step t={} must be 1-based", t);
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);  // bias corrections in double, as torch
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  const float decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float one_minus_b1 = 1.0f - beta1, one_minus_b2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) {
    const float g = grads[i] * grad_scale;
    const float p = params[i] * decay;
    const float mi = m[i] * beta1 + g * one_minus_b1;
    const float vi = v[i] * beta2 + g * g * one_minus_b2;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    params[i] = p - step_size * (mi / denom);
  }
}

// ---- memory (host memory on the CPU backend; every op has completed when it returns) -----------------
void fill_zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}
void copy_to_host(void* host_dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, static_cast<size_t>(bytes));
}
void copy_from_host(void* dst, const void* host_src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, static_cast<size_t>(bytes));
}
void copy_device(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}
void synchronize() {}

}  // namespace hpct::kernels::cpu
