// CPU backend: softmax cross-entropy (serial and vocab-parallel), reductions, AdamW, memory helpers.
// Legend: N rows, V true vocabulary, Vp padded vocabulary (logits columns v >= V are masked out); vocab-parallel:
// this rank holds the global columns [v0, v0+Vl) of Vp, of which the first Vr = clamp(V - v0, 0, Vl) are real.
// Logits are stored as A (float or bf16, kernels.hpp), read through to_f32; losses and statistics are float. The
// in-place dlogits are formed in fp32 and rounded once to A: under bf16 the softmax is recomputed from the logits in
// the pass that writes them (the float kernels keep their exponentials in place, in the logits, which bf16 storage
// would round).
#include <type_traits>
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

// The targets' values (the shapes were checked by the dispatch, kernels/op_checks.hpp).
void check_targets(const char* op, const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; n++)
    HPCT_CHECK(targets[n] >= 0 && targets[n] < V, "{}: target {} of row {} is outside [0, V={})", op, targets[n], n, V);
}

// Row max and sum of exp(x - max) over the first V logits: the max-subtracted (overflow-free) log-sum-exp.
// When `e` is not null it receives the exponentials.
template <typename A>
inline void softmax_stats(const A* x, float* e, int V, float& max_out, float& sum_out) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int v = 0; v < V; v++) m = to_f32(x[v]) > m ? to_f32(x[v]) : m;
  float s = 0.0f;
  if (e) {
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < V; v++) {
      e[v] = exp_simd(to_f32(x[v]) - m);
      s += e[v];
    }
  } else {
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < V; v++) s += exp_simd(to_f32(x[v]) - m);
  }
  max_out = m;
  sum_out = s;
}

// Checks a vocab-parallel slice's targets; returns Vr, the number of real (non-padded) local columns.
int check_vp_slice(const char* op, const int32_t* targets, int v0, int Vl, int V, int N) {
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
template <typename A>
void crossentropy_forward(float* losses, const A* logits, const int32_t* targets, int N, int V, int Vp) {
  check_targets("crossentropy_forward", targets, N, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const A* x = logits + static_cast<int64_t>(n) * Vp;  // (Vp), only [0, V) is read
    float m, s;
    softmax_stats(x, nullptr, V, m, s);
    losses[n] = (m - to_f32(x[targets[n]])) + std::log(s);  // -log softmax(x)[target] = logsumexp(x) - x[target]
  }
}

template <typename A>
void crossentropy_forward_backward(float* losses, A* logits, const int32_t* targets, float dloss, int N, int V,
                                   int Vp) {
  check_targets("crossentropy_forward_backward", targets, N, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    A* x = logits + static_cast<int64_t>(n) * Vp;  // (Vp) logits in, dlogits out
    const int tgt = targets[n];
    const float x_tgt = to_f32(x[tgt]);
    float m, s;
    if constexpr (std::is_same_v<A, float>) {
      softmax_stats(x, x, V, m, s);  // x[v] <- exp(x[v] - m)
      losses[n] = (m - x_tgt) + std::log(s);
      const float k = dloss / s;
#pragma omp simd
      for (int v = 0; v < V; v++) x[v] *= k;  // dloss * softmax
      x[tgt] -= dloss;
    } else {
      softmax_stats(x, nullptr, V, m, s);
      losses[n] = (m - x_tgt) + std::log(s);
      const float k = dloss / s;
#pragma omp simd
      for (int v = 0; v < V; v++)
        x[v] = from_f32<A>(exp_simd(to_f32(x[v]) - m) * k - (v == tgt ? dloss : 0.0f));  // dloss (softmax - onehot)
    }
    for (int v = V; v < Vp; v++) x[v] = from_f32<A>(0.0f);  // padded columns: no gradient
  }
}

// ---- label-smoothed softmax cross-entropy (kernels.hpp): lse - (1 - eps) z[y] - eps mean(z) ------------------
template <typename A>
void crossentropy_smoothed_forward(float* losses, const A* logits, const int32_t* targets, float eps, int N, int K) {
  check_targets("crossentropy_smoothed_forward", targets, N, K);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const A* x = logits + static_cast<int64_t>(n) * K;  // (K)
    float m, s, zsum = 0.0f;
    softmax_stats(x, nullptr, K, m, s);
    for (int k = 0; k < K; k++) zsum += to_f32(x[k]);
    // (1 - eps)(lse - z[y]) + eps (lse - mean z), lse = m + log s
    losses[n] = (1.0f - eps) * ((m - to_f32(x[targets[n]])) + std::log(s)) + eps * ((m - zsum / K) + std::log(s));
  }
}

template <typename A>
void crossentropy_smoothed_forward_backward(float* losses, A* logits, const int32_t* targets, float dloss, float eps,
                                            int N, int K) {
  check_targets("crossentropy_smoothed_forward_backward", targets, N, K);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    A* x = logits + static_cast<int64_t>(n) * K;  // (K) logits in, dlogits out
    const int tgt = targets[n];
    const float x_tgt = to_f32(x[tgt]);
    float zsum = 0.0f;
    for (int k = 0; k < K; k++) zsum += to_f32(x[k]);
    float m, s;
    if constexpr (std::is_same_v<A, float>) {
      softmax_stats(x, x, K, m, s);  // x[k] <- exp(x[k] - m)
      losses[n] = (1.0f - eps) * ((m - x_tgt) + std::log(s)) + eps * ((m - zsum / K) + std::log(s));
      const float c = dloss / s, uniform = dloss * eps / K;
      for (int k = 0; k < K; k++) x[k] = x[k] * c - uniform;  // dloss (p - eps / K)
      x[tgt] -= dloss * (1.0f - eps);
    } else {
      softmax_stats(x, nullptr, K, m, s);
      losses[n] = (1.0f - eps) * ((m - x_tgt) + std::log(s)) + eps * ((m - zsum / K) + std::log(s));
      const float c = dloss / s, uniform = dloss * eps / K;
      for (int k = 0; k < K; k++)  // dloss (p - eps / K - (1 - eps) [k == y])
        x[k] = from_f32<A>((exp_simd(to_f32(x[k]) - m) * c - uniform) - (k == tgt ? dloss * (1.0f - eps) : 0.0f));
    }
  }
}

// ---- vocab-parallel softmax cross-entropy (kernels.hpp): the local slices of crossentropy_forward_backward ------
// The same float operations as the serial kernel, row by row (no cross-thread reduction): the max is exact whatever
// the split; only the sum of exponentials is split into per-rank partial sums (added by the SUM allreduce), which
// is the sole source of difference from the serial kernel (a summation order, ~1e-7 relative).
template <typename A>
void crossentropy_vp_local_max(float* max_out, const A* logits_local, int v0, int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_local_max", nullptr, v0, Vl, V, N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const A* x = logits_local + static_cast<int64_t>(n) * Vl;  // (Vl), only the real [0, Vr) is read
    float m = -INFINITY;                                       // a rank of padding only: -inf, the MAX identity
#pragma omp simd reduction(max : m)
    for (int v = 0; v < Vr; v++) m = to_f32(x[v]) > m ? to_f32(x[v]) : m;
    max_out[n] = m;
  }
}

template <typename A>
void crossentropy_vp_local_sumexp(float* sumexp_out, float* target_logit_out, const A* logits_local,
                                  const float* global_max, const int32_t* targets, int v0, int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_local_sumexp", targets, v0, Vl, V, N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const A* x = logits_local + static_cast<int64_t>(n) * Vl;  // (Vl), only the real [0, Vr) is read
    const float m = global_max[n];                             // subtracted before exp: no overflow
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int v = 0; v < Vr; v++) s += exp_simd(to_f32(x[v]) - m);
    sumexp_out[n] = s;
    const int j = targets[n] - v0;  // local column of the target; in range on exactly one rank
    target_logit_out[n] = (j >= 0 && j < Vr) ? to_f32(x[j]) : 0.0f;  // 0 elsewhere: the SUM allreduce yields x[target]
  }
}

template <typename A>
void crossentropy_vp_loss_backward(float* losses, A* logits_local, const float* global_max, const float* global_sumexp,
                                   const float* global_target_logit, const int32_t* targets, float dloss, int v0,
                                   int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_loss_backward", targets, v0, Vl, V, N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    A* x = logits_local + static_cast<int64_t>(n) * Vl;      // (Vl) logits in, dlogits out
    const float m = global_max[n], s = global_sumexp[n];     // s >= 1: the max column contributes exp(0)
    losses[n] = (m - global_target_logit[n]) + std::log(s);  // as crossentropy_forward_backward
    const float k = dloss / s;
    const int j = targets[n] - v0;
    if constexpr (std::is_same_v<A, float>) {
#pragma omp simd
      for (int v = 0; v < Vr; v++) x[v] = exp_simd(x[v] - m) * k;  // dloss * softmax
      if (j >= 0 && j < Vr) x[j] -= dloss;
    } else {
#pragma omp simd
      for (int v = 0; v < Vr; v++)  // dloss (softmax - onehot), rounded once
        x[v] = from_f32<A>(exp_simd(to_f32(x[v]) - m) * k - (v == j ? dloss : 0.0f));
    }
    for (int v = Vr; v < Vl; v++) x[v] = from_f32<A>(0.0f);  // padded columns: no gradient
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

// The chunks in parallel, each in index order into its partial (an `omp simd` reduction, as chunked_sum's), then the
// partials in chunk order: the result depends on the chunk table only.
void sum_squares_ranges(double* acc, const SquaresChunk* table, int64_t chunks, double* partials) {
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    const float* x = table[c].x;
    const int64_t n = table[c].n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) {
      const double xj = x[j];
      s += xj * xj;
    }
    partials[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; c++) total += partials[c];
  *acc += total;
}

void scale(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

// ---- AdamW ----------------------------------------------------------------------------------------
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, float grad_scale, int t);
void cast(bf16* dst, const float* src, int64_t n);
// adamw_update per chunk, in table order: the same arithmetic per element as per tensor; with a bf16 compute copy,
// the chunk's updated parameters cast into it while they are in cache (cast's rounding: the same bits). The dispatch
// (kernels.cpp) refuses any other copy type on the CPU.
void adamw_update_chunks(const AdamwChunk* table, int64_t chunks, float lr, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int t, DType copy) {
  for (int64_t c = 0; c < chunks; c++) {
    const AdamwChunk& k = table[c];
    adamw_update(k.params, k.grads, k.m, k.v, k.n, lr, beta1, beta2, eps, k.decays ? weight_decay : 0.0f, grad_scale,
                 t);
    if (copy == DType::BF16) cast(static_cast<bf16*>(k.copy), k.params, k.n);
  }
}

// In the operation order of torch.optim.AdamW (1.13, single-tensor path), so that a PyTorch reference run can
// be matched to fp32 rounding: decoupled decay first, then the moments, then the bias-corrected step.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, float grad_scale, int t) {
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

// ---- storage-type conversions (kernels.hpp): the bf16 compute copy of the parameters, tests ---------------------
// Element-wise, so HPCT_WIDE_SIMD (cpu_math.hpp) changes no result; it takes effect only on a function's first
// declaration, hence the private functions behind the ones cpu_kernels.hpp declares.
namespace {
HPCT_WIDE_SIMD void cast_wide(bf16* dst, const float* src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) dst[i] = to_bf16(src[i]);
}
HPCT_WIDE_SIMD void cast_wide(float* dst, const bf16* src, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) dst[i] = to_f32(src[i]);
}
}  // namespace

void cast(bf16* dst, const float* src, int64_t n) { cast_wide(dst, src, n); }
void cast(float* dst, const bf16* src, int64_t n) { cast_wide(dst, src, n); }

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
// Host memory is all the CPU backend has: nothing to lock (the dispatch checked the range, as for the CUDA twin).
void host_register(void* /*host*/, int64_t /*bytes*/) {}
void host_unregister(void* /*host*/) {}

// Both storage types (kernels.hpp instantiates its dispatch for float and bf16).
#define HPCT_INSTANTIATE_LOSSES(A)                                                                                     \
  template void crossentropy_forward<A>(float*, const A*, const int32_t*, int, int, int);                              \
  template void crossentropy_forward_backward<A>(float*, A*, const int32_t*, float, int, int, int);                    \
  template void crossentropy_smoothed_forward<A>(float*, const A*, const int32_t*, float, int, int);                   \
  template void crossentropy_smoothed_forward_backward<A>(float*, A*, const int32_t*, float, float, int, int);         \
  template void crossentropy_vp_local_max<A>(float*, const A*, int, int, int, int);                                    \
  template void crossentropy_vp_local_sumexp<A>(float*, float*, const A*, const float*, const int32_t*, int, int, int, \
                                                int);                                                                  \
  template void crossentropy_vp_loss_backward<A>(float*, A*, const float*, const float*, const float*, const int32_t*, \
                                                 float, int, int, int, int);
HPCT_INSTANTIATE_LOSSES(float)
HPCT_INSTANTIATE_LOSSES(bf16)
#undef HPCT_INSTANTIATE_LOSSES

}  // namespace hpct::kernels::cpu
