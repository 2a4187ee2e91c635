#pragma once
// The kernels of the CUDA backend's GPT group other than flash attention (cuda_flash_attention.cuh): the Linear bias
// (broadcast seed and dbias) and the softmax cross-entropies (plain with vocabulary padding, label-smoothed, and the
// three vocabulary-parallel phases), with the host functions that give their launch geometry. cuda_gpt.cu launches
// them (its header: contracts, determinism, targets); the CPU backend is their reference. Device code compiled by
// nvcc through cuda_gpt.cu and, as plain C++, by the host emulation (tests/cuda_emu/test_emu_gpt.cpp), which runs
// every kernel here at the geometry below against the CPU backend. Keep it so: CUDA built-ins only (no CUDA header),
// shared memory through HPCT_SHARED, and every new kernel with its emulated test.
//
// Storage types (cuda_device_common.cuh): logits and dout have the storage type S (float or __nv_bfloat16), losses,
// dbias and the vocabulary-parallel statistics are float; arithmetic in float, each stored dlogit rounded once. The
// plain cross-entropy reads bf16 rows in 16-byte packs where the padded row length allows (P = 8, row_pack; each
// thread then owns the same packs in every loop, so the in-place rewrite stays within the thread's own columns);
// float rows element by element as they always have.
//
// No atomics: every reduction (dbias over rows, the cross-entropy sums) runs in a fixed order that depends on the
// shapes only. Targets cannot be checked on the device: an out-of-range target makes that row's loss NaN (and its
// dlogits NaN; for the vocabulary-parallel pieces the target logit is NaN, so the reduced loss is NaN on every rank).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_device_common.cuh"
#include "kernels/cuda/cuda_reduce_kernels.cuh"

namespace hpct::kernels::cuda {
namespace {  // internal linkage: each includer (the .cu, the emulated test) compiles its own copy

constexpr int kBiasBroadcastThreads = 128;  // bias_broadcast_kernel: threads per block (columns)
constexpr int kBiasBroadcastRows = 8192;    // bias_broadcast_kernel: at most this many blocks along the rows
constexpr int kVpLossThreads = 256;         // vp_loss_kernel: threads per block (grid-stride loop)
constexpr int kRowMaxThreads = 512;         // one-block-per-row kernels: the largest block (row_threads)

// ================================================================================================================
// Linear
// ================================================================================================================

// out[n, o] = bias[o] for every row: the seed onto which the float GEMM accumulates with beta = 1 (as the CPU backend;
// 16-bit storage adds the bias in cuBLASLt's epilogue, cuda_gpt.cu), for any storage type S. Thread x
// of block (bx, by) holds the P columns from P (bx blockDim.x + x) in registers and stores them into the rows by,
// by + gridDim.y, ..: coalesced P-element stores (P = kPack<S>: 16 bytes, when pack_width allows) and no
// index division, so it runs at the speed of the stores (one element per thread with a 64-bit modulo ran at a sixth of
// it on an H100).
template <typename S, int P>
__global__ void bias_broadcast_kernel(S* __restrict__ out, const S* __restrict__ bias, int64_t N, int OC) {
  const int o = (blockIdx.x * blockDim.x + threadIdx.x) * P;
  if (o >= OC) return;
  const Pack<S, P> b = load_pack<P>(bias + o);
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) store_pack<P>(out + n * OC + o, b);
}

// dbias[o] += sum over the N rows of dout[n, o], in double (as the CPU backend), as a full-grid column reduction
// (cuda_device_common.cuh): block (bx, g) sums the rows of group g (rows_per_group of them) for kBiasCols P
// columns; thread (x, y) holds the P columns from (bx kBiasCols + x) P (one P-element load per row: coalesced, 16
// bytes where pack_width allows) and sums the group's rows y, y + kBiasRows, ... in double; then the block adds
// the kBiasRows sums of each column in order y = 0, 1, ... into its group g of the column's partials, and
// column_partials_kernel adds the groups. The order of every column's sum is the same for any P: it depends on N, OC and the buffer's size.
constexpr int kBiasCols = 32;
constexpr int kBiasRows = 8;
constexpr int kBiasMinRows = 128;  // rows per group at least: each thread sums kBiasMinRows / kBiasRows rows or more

template <typename S, int P>
__global__ void bias_grad_partial_kernel(double* __restrict__ partials, const S* __restrict__ dout, int64_t N, int OC,
                                         int64_t rows_per_group) {
  HPCT_SHARED(double, part, [kBiasRows][kBiasCols * P + 1]);
  const int x = threadIdx.x, y = threadIdx.y;
  const int o = (blockIdx.x * kBiasCols + x) * P;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_group;
  const int64_t end = first + rows_per_group < N ? first + rows_per_group : N;
  double acc[P];
#pragma unroll
  for (int j = 0; j < P; j++) acc[j] = 0.0;
  if (o < OC)
    for (int64_t n = first + y; n < end; n += kBiasRows) {
      const Pack<S, P> d = load_pack<P>(dout + n * OC + o);  // o + P <= OC: OC is a multiple of P
#pragma unroll
      for (int j = 0; j < P; j++) acc[j] += static_cast<double>(to_float(d.v[j]));
    }
#pragma unroll
  for (int j = 0; j < P; j++) part[y][x * P + j] = acc[j];
  __syncthreads();
  const int col0 = blockIdx.x * kBiasCols * P;
  for (int t = y * kBiasCols + x; t < kBiasCols * P; t += kBiasCols * kBiasRows) {
    if (col0 + t >= OC) continue;
    double total = 0.0;
    for (int r = 0; r < kBiasRows; r++) total += part[r][t];
    partials[static_cast<int64_t>(col0 + t) * gridDim.y + blockIdx.y] = total;  // column-major (column_partials_kernel)
  }
}

// ================================================================================================================
// Cross-entropies: one block per row, block reductions (cuda_device_common.cuh)
// ================================================================================================================

// Plain softmax cross-entropy over the first V of Vp logits; kBackward: also dlogits in place (padding -> 0).
// CPU twin: crossentropy_forward / crossentropy_forward_backward (softmax_stats: max, then sum of exp(x - max)).
// One pass over the row for the statistics: each thread keeps the online softmax (m, s) of its columns, a pack at a
// time (softmax_add_pack), the block merges them (block_softmax_stats); the backward then writes dlogits over the
// row, each dlogit from __expf (as the statistics: a conversion, a subtraction, the hardware's exp2 and a product
// per value; the accurate expf's range reduction was most of the kernel's instructions). Without
// kHoldRow it reads the row from global memory again for that (two reads and a write); with kHoldRow the first pass
// also copies the row into the block's dynamic shared memory (Vp values: crossentropy_held_shape) and the second
// reads it there, one read of the logits and a write, the same arithmetic in the same order, bit for bit. (Held in
// registers instead, GPT-2's 50304 bf16 columns need 13 packs a thread at 512 threads: ptxas kept their float
// conversions too, 151 registers, over the 128 a block of 512 may use.) The logits are const in the forward-only
// instantiation. Thread t owns the packs of P columns starting at t P, t P + blockDim.x P, ... in every loop (P = 1:
// the columns t, t + blockDim.x, ...).
template <bool kBackward, typename S>
using LogitsPtr = std::conditional_t<kBackward, S*, const S*>;

template <bool kBackward, typename S, int P, bool kHoldRow = false>
__global__ void crossentropy_kernel(float* __restrict__ losses, LogitsPtr<kBackward, S> __restrict__ logits,
                                    const int32_t* __restrict__ targets, float dloss, int V, int Vp) {
  static_assert(kBackward || !kHoldRow, "only the backward reads the row twice");
  HPCT_SHARED(float, shared, [64]);
  const int n = blockIdx.x;
  const LogitsPtr<kBackward, S> x = logits + static_cast<int64_t>(n) * Vp;
  const int tgt = targets[n];
  const bool valid = tgt >= 0 && tgt < V;
  // read by every thread before the first block reduction's barrier, hence before any thread writes the row
  const float x_tgt = valid ? to_float(x[tgt]) : NAN;
  const int step = blockDim.x * P;
  float m = -INFINITY, s = 0.0f;
  if constexpr (kHoldRow) {
    HPCT_DYNAMIC_SHARED(S, row);  // [Vp]
    for (int v0 = threadIdx.x * P; v0 < Vp; v0 += step) {
      const Pack<S, P> pk = load_pack<P>(x + v0);
      store_pack<P>(row + v0, pk);  // read back below by this thread only
      if (v0 < V) softmax_add_pack(m, s, pk, V - v0);
    }
  } else {
    for (int v0 = threadIdx.x * P; v0 < V; v0 += step)
      softmax_add_pack(m, s, load_pack<P>(x + v0), V - v0);  // v0 + P <= Vp: Vp is a multiple of P
  }
  block_softmax_stats(m, s, shared);
  if (threadIdx.x == 0) losses[n] = valid ? (m - x_tgt) + logf(s) : NAN;  // logsumexp - x[target]
  if constexpr (kBackward) {
    const float k = dloss / s;
    // each thread rewrites only the columns it read above (same packs): no cross-thread hazard
    for (int v0 = threadIdx.x * P; v0 < Vp; v0 += step) {
      Pack<S, P> pk;
      if constexpr (kHoldRow) {
        HPCT_DYNAMIC_SHARED(S, row);
        pk = load_pack<P>(row + v0);
      } else {
        pk = load_pack<P>(x + v0);
      }
#pragma unroll
      for (int j = 0; j < P; j++) {
        const int v = v0 + j;
        float g = 0.0f;  // padded columns: no gradient
        if (v < V) {
          // dloss * softmax, rounded before the subtraction, as the CPU
          g = __fmul_rn(__expf(to_float(pk.v[j]) - m), k);
          if (v == tgt) g -= dloss;
        }
        pk.v[j] = from_float<S>(valid ? g : NAN);
      }
      store_pack<P>(x + v0, pk);
    }
  }
}

// Label-smoothed cross-entropy over K classes (no padding). CPU twin: crossentropy_smoothed_forward(_backward):
//   loss = (1 - eps) ((m - z[y]) + log s) + eps ((m - sum(z) / K) + log s);  dlogits = p c - eps dloss / K,
//   minus dloss (1 - eps) at the target, with c = dloss / s.
template <bool kBackward, typename S>
__global__ void crossentropy_smoothed_kernel(float* __restrict__ losses, LogitsPtr<kBackward, S> __restrict__ logits,
                                             const int32_t* __restrict__ targets, float dloss, float eps, int K) {
  HPCT_SHARED(float, shared, [32]);
  const int n = blockIdx.x;
  const LogitsPtr<kBackward, S> x = logits + static_cast<int64_t>(n) * K;
  const int tgt = targets[n];
  const bool valid = tgt >= 0 && tgt < K;
  const float x_tgt = valid ? to_float(x[tgt]) : NAN;
  float m = -INFINITY, z = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const float xk = to_float(x[k]);
    m = fmaxf(m, xk);
    z += xk;
  }
  m = block_max(m, shared);
  const float zsum = block_sum(z, shared);
  float s = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) s += expf(to_float(x[k]) - m);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    const float lse_part = logf(s);
    losses[n] = valid ? (1.0f - eps) * ((m - x_tgt) + lse_part) + eps * ((m - zsum / K) + lse_part) : NAN;
  }
  if constexpr (kBackward) {
    const float c = dloss / s, uniform = dloss * eps / K;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
      float g = expf(to_float(x[k]) - m) * c - uniform;
      if (k == tgt) g -= dloss * (1.0f - eps);
      x[k] = from_float<S>(valid ? g : NAN);
    }
  }
}

// ---- vocabulary-parallel pieces: this rank holds columns [v0, v0 + Vl), of which [0, Vr) are real ----
template <typename S>
__global__ void vp_local_max_kernel(float* __restrict__ max_out, const S* __restrict__ logits_local, int Vl, int Vr) {
  HPCT_SHARED(float, shared, [32]);
  const int n = blockIdx.x;
  const S* x = logits_local + static_cast<int64_t>(n) * Vl;
  float m = -INFINITY;  // a rank of padding only: -inf, the identity of the MAX allreduce
  for (int v = threadIdx.x; v < Vr; v += blockDim.x) m = fmaxf(m, to_float(x[v]));
  m = block_max(m, shared);
  if (threadIdx.x == 0) max_out[n] = m;
}

template <typename S>
__global__ void vp_local_sumexp_kernel(float* __restrict__ sumexp_out, float* __restrict__ target_logit_out,
                                       const S* __restrict__ logits_local, const float* __restrict__ global_max,
                                       const int32_t* __restrict__ targets, int v0, int Vl, int Vr, int V) {
  HPCT_SHARED(float, shared, [32]);
  const int n = blockIdx.x;
  const S* x = logits_local + static_cast<int64_t>(n) * Vl;
  const float m = global_max[n];  // subtracted before exp: no overflow
  float s = 0.0f;
  for (int v = threadIdx.x; v < Vr; v += blockDim.x) s += expf(to_float(x[v]) - m);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    sumexp_out[n] = s;
    const int tgt = targets[n];
    const int j = tgt - v0;                                 // local column of the target; in range on exactly one rank
    float tl = (j >= 0 && j < Vr) ? to_float(x[j]) : 0.0f;  // 0 elsewhere: the SUM allreduce yields x[target]
    if (tgt < 0 || tgt >= V) tl = NAN;  // a bad target: NaN on every rank, NaN loss after the allreduce
    target_logit_out[n] = tl;
  }
}

template <typename S>
__global__ void vp_loss_backward_kernel(float* __restrict__ losses, S* __restrict__ logits_local,
                                        const float* __restrict__ global_max, const float* __restrict__ global_sumexp,
                                        const float* __restrict__ global_target_logit,
                                        const int32_t* __restrict__ targets, float dloss, int v0, int Vl, int Vr,
                                        int V) {
  const int n = blockIdx.x;
  S* x = logits_local + static_cast<int64_t>(n) * Vl;
  const float m = global_max[n], s = global_sumexp[n];  // s >= 1: the max column contributes exp(0)
  const int tgt = targets[n];
  const bool valid = tgt >= 0 && tgt < V;
  const int j = tgt - v0;
  if (threadIdx.x == 0) losses[n] = valid ? (m - global_target_logit[n]) + logf(s) : NAN;
  const float k = dloss / s;
  for (int v = threadIdx.x; v < Vl; v += blockDim.x) {
    float g = 0.0f;  // padded columns: no gradient
    if (v < Vr) {
      g = __fmul_rn(expf(to_float(x[v]) - m), k);  // dloss * softmax, rounded before the subtraction, as the CPU
      if (v == j) g -= dloss;
    }
    x[v] = from_float<S>(valid ? g : NAN);
  }
}

__global__ void vp_loss_kernel(float* __restrict__ losses, const float* __restrict__ global_max,
                               const float* __restrict__ global_sumexp, const float* __restrict__ global_target_logit,
                               int N) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    losses[n] = (global_max[n] - global_target_logit[n]) + logf(global_sumexp[n]);
}

// ================================================================================================================
// Launch geometry (host)
// ================================================================================================================

// Threads of a one-block-per-row kernel for rows of `len` elements: a multiple of 32 (block_sum / block_max need
// it), at least one warp, at most kRowMaxThreads = 512 (a 50k-column vocabulary row then gives each thread ~100
// elements).
int row_threads(int64_t len) {
  int64_t t = (len + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(t, 32, kRowMaxThreads));
}

// bias_broadcast_kernel over N rows of OC elements in packs of P: blocks of kBiasBroadcastThreads packs across the
// columns, up to max_rows along the rows (each block then strides over the rest; tests pass a small max_rows to
// exercise that).
LaunchShape bias_broadcast_shape(int64_t N, int OC, int P, int max_rows = kBiasBroadcastRows) {
  const int64_t packs = (OC + P - 1) / P;
  const int64_t cols = (packs + kBiasBroadcastThreads - 1) / kBiasBroadcastThreads;
  const int64_t rows = std::clamp<int64_t>(N, 1, max_rows);
  return {{static_cast<unsigned>(cols), static_cast<unsigned>(rows), 1}, {kBiasBroadcastThreads, 1, 1}, 0};
}
// bias_grad_partial_kernel over N rows of OC columns in packs of P: blocks of (kBiasCols, kBiasRows) threads, one
// per kBiasCols P columns and row group (partial_row_groups: groups of at least kBiasMinRows rows, no more than the
// partials buffer of partials_bytes holds).
struct BiasGradLaunch {
  LaunchShape shape;
  RowGroups rows;
};
BiasGradLaunch bias_grad_launch(int64_t N, int OC, int P, int64_t partials_bytes) {
  const RowGroups rows = partial_row_groups(N, OC, kBiasMinRows, partials_bytes);
  const int64_t cols = (OC + int64_t{kBiasCols} * P - 1) / (int64_t{kBiasCols} * P);
  return {{{static_cast<unsigned>(cols), static_cast<unsigned>(rows.groups), 1}, {kBiasCols, kBiasRows, 1}, 0}, rows};
}
// the one-block-per-row kernels (the cross-entropies and the vocabulary-parallel local pieces): N rows, each block
// sized for rows of `len` elements read `pack` at a time
LaunchShape row_shape(int N, int64_t len, int pack = 1) {
  return {{static_cast<unsigned>(N), 1, 1}, {static_cast<unsigned>(row_threads((len + pack - 1) / pack)), 1, 1}, 0};
}
// crossentropy_kernel<true, S, P, true>: row_shape's block with the row of Vp values in dynamic shared memory (the
// opt-in above 48 KiB: GPT-2's padded vocabulary in bf16 takes 98.3 KiB, two blocks on an H100's or H200's 228 KiB).
LaunchShape crossentropy_held_shape(int N, int V, int Vp, int P, int64_t value_bytes) {
  LaunchShape shape = row_shape(N, V, P);
  shape.shared_bytes = int64_t{Vp} * value_bytes;
  shape.shared_opt_in = shape.shared_bytes > kSharedDefaultBytes;
  return shape;
}
// Whether the backward holds the row: its Vp values within the device's dynamic shared memory per block (the opt-in
// limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, less the kernel's static 256 bytes) and within
// kCrossentropyHeldBytes, which keeps two blocks on an SM of 228 KiB.
constexpr int64_t kCrossentropyHeldBytes = 112 * 1024;
bool crossentropy_holds_row(int Vp, int64_t value_bytes, int64_t device_optin_bytes) {
  const int64_t bytes = int64_t{Vp} * value_bytes;
  return bytes <= kCrossentropyHeldBytes && bytes + 256 <= device_optin_bytes;
}
// vp_loss_kernel over the N rows
LaunchShape vp_loss_shape(int N) { return grid_stride_shape(N, kVpLossThreads); }

}  // namespace
}  // namespace hpct::kernels::cuda
