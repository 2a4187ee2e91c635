#pragma once
// The kernels of the CUDA backend's core group (cuda_core.cu launches them; the CPU backend is their reference, see
// cuda_core.cu's header) and the host functions that give their launch geometry. Device code compiled by nvcc
// through cuda_core.cu and, as plain C++, by the host emulation (tests/cuda_emu/test_emu_core.cpp), which runs every
// kernel here at the geometry below against the CPU backend. Keep it so: CUDA built-ins only (no CUDA header), shared
// memory through HPCT_SHARED, and every new kernel with its emulated test.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_device_common.cuh"
#include "kernels/cuda/cuda_reduce_kernels.cuh"
#include "kernels/chunk_tables.hpp"

namespace hpct::kernels::cuda {
namespace {  // internal linkage: each includer (the .cu, the emulated test) compiles its own copy

constexpr int kThreads = 256;         // elementwise kernels: threads per block (the grid is capped; grid-stride loops)
constexpr int kReduceThreads = 1024;  // sum / sum_squares_accumulate: the single block
constexpr int kTableThreads = 512;    // chunk tables (sum_squares_ranges, adamw_update_chunks): threads per chunk
constexpr int kWteGroups = 256;       // encoder dwte: row-ownership groups (row % kWteGroups); any value gives the
                                      // same bits (each row's positions are added in increasing order regardless)
constexpr int kWteThreads = 128;      // encoder dwte: columns per block (a multiple of 32: warp-wide ballots)
constexpr int kLnWarps = 8;           // LayerNorm: rows (one warp each) per block at most
constexpr int kLnRowThreads = kLnWarps * 32;  // LayerNorm forward: threads per block
constexpr int kLnRowsPerWarp = 4;  // LayerNorm backward: rows per warp of a block at least (amortises the partials)
constexpr unsigned kFullMask = 0xffffffffu;

// GELU tanh approximation: the constants and formulation of cpu/cpu_math.hpp (gelu_simd / gelu_grad_simd), with
// the device's expf in place of exp_simd (both within ~2 ulp of exp). cpu_math.hpp itself is C++20 host code.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// ---- reductions ---------------------------------------------------------------------------------------------------
// reduce_kernel and squares_chunk_kernel read float4s when x is 16-byte aligned (the order of the additions depends on
// it, see thread_sum)
__host__ __device__ inline bool float4_aligned(const float* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; }

template <bool kSquare>
__device__ __forceinline__ void accumulate(double& acc, float v) {
  const double d = v;
  acc += kSquare ? d * d : d;
}
template <bool kSquare>
__device__ __forceinline__ void accumulate4(double& acc, float4 v) {
  accumulate<kSquare>(acc, v.x);
  accumulate<kSquare>(acc, v.y);
  accumulate<kSquare>(acc, v.z);
  accumulate<kSquare>(acc, v.w);
}

// Thread tid of `stride` sums, in double and in increasing index order, the elements (or float4s when vec4: x
// 16-byte aligned) tid, tid + stride, tid + 2 stride, ... of x[0, n). The order depends on n, stride and vec4 only.
template <bool kSquare>
__device__ __forceinline__ double thread_sum(const float* x, int64_t n, bool vec4, int64_t tid, int64_t stride) {
  double acc = 0.0;
  int64_t tail = 0;  // first element of the scalar tail
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    int64_t j = tid;
    // four independent loads in flight per thread; the additions stay in increasing j order
    for (; j + 3 * stride < n4; j += 4 * stride) {
      const float4 a = __ldg(x4 + j), b = __ldg(x4 + j + stride), c = __ldg(x4 + j + 2 * stride),
                   d = __ldg(x4 + j + 3 * stride);
      accumulate4<kSquare>(acc, a);
      accumulate4<kSquare>(acc, b);
      accumulate4<kSquare>(acc, c);
      accumulate4<kSquare>(acc, d);
    }
    for (; j < n4; j += stride) accumulate4<kSquare>(acc, __ldg(x4 + j));
    tail = n4 * 4;
  }
  for (int64_t i = tail + tid; i < n; i += stride) accumulate<kSquare>(acc, __ldg(x + i));
  return acc;
}

// One block of kReduceThreads: thread_sum over the block, then a fixed tree over the block. The order depends on n and
// on the alignment of x only. Writes *out_sum = float(total) when out_sum is set, else *out_acc += total.
// Note: one SM streams a few hundred GB/s at best: the gradient norm goes through the full-grid squares_chunk_kernel.
template <bool kSquare>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_kernel(const float* x, int64_t n, bool vec4, float* out_sum, double* out_acc) {
  HPCT_SHARED(double, shared, [32]);
  const double total = block_sum(thread_sum<kSquare>(x, n, vec4, threadIdx.x, blockDim.x), shared);
  if (threadIdx.x == 0) {
    if (out_sum) *out_sum = static_cast<float>(total);
    else
      *out_acc += total;
  }
}

// The global gradient norm's two stages (sum_squares_ranges): one block per chunk of the table, each the chunk's sum
// of squares in a fixed order (thread_sum, the block's tree) into partials[chunk]; then one block sums the partials in
// chunk order (thread k: partials k, k + 1024, ... in increasing order; the tree) and adds the total to *acc. The order
// depends on the chunk table (the ranges' lengths) and the chunks' alignment only: not on the device or the timing.
__global__ void __launch_bounds__(kTableThreads)
    squares_chunk_kernel(const SquaresChunk* __restrict__ table, double* __restrict__ partials) {
  HPCT_SHARED(double, shared, [32]);
  const SquaresChunk c = table[blockIdx.x];
  const double total = block_sum(thread_sum<true>(c.x, c.n, float4_aligned(c.x), threadIdx.x, blockDim.x), shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}
__global__ void __launch_bounds__(kReduceThreads)
    partials_sum_kernel(const double* __restrict__ partials, int64_t n, double* acc) {
  HPCT_SHARED(double, shared, [32]);
  double v = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v += partials[i];
  const double total = block_sum(v, shared);
  if (threadIdx.x == 0) *acc += total;
}

// ---- pointwise ----------------------------------------------------------------------------------------------------
// (No __restrict__ on the pointwise kernels: in-place calls, out == inp, are allowed; each thread reads and writes
// only its own elements.) Storage type S (float or __nv_bfloat16), float arithmetic, one rounding per output; 16-byte
// packs over aligned buffers (for_each_pack: the results are those of the element-by-element loop, bit for bit).
__global__ void scale_kernel(float* x, float s, int64_t n) { HPCT_GRID_STRIDE_LOOP(i, n) x[i] *= s; }

// out = a + b, each sum rounded once to S; kRelu: then the ReLU of that value (exact), a ResNet block's end in one
// pass, the bits of this kernel followed by relu_forward_kernel.
template <typename S, bool kRelu = false>
__global__ void residual_kernel(S* out, const S* a, const S* b, int64_t n, int64_t packs) {
  for_each_pack<kPack<S>>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<S, W> x = load_pack<W>(a + i), y = load_pack<W>(b + i);
    Pack<S, W> o;
#pragma unroll
    for (int j = 0; j < W; j++) {
      o.v[j] = from_float<S>(to_float(x.v[j]) + to_float(y.v[j]));
      if constexpr (kRelu) {
        const float r = to_float(o.v[j]);  // relu_forward_kernel's formula on the stored sum
        o.v[j] = from_float<S>(r > 0.0f ? r : 0.0f);
      }
    }
    store_pack<W>(out + i, o);
  });
}

// e = exp(2u) (2u capped at 80) and d = 1 / (1 + e), u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh u) = e d.
__device__ __forceinline__ void gelu_parts(float x, float& e, float& d) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float two_u = 2.0f * u;
  e = expf(two_u > 80.0f ? 80.0f : two_u);
  d = 1.0f / (1.0f + e);
}
__device__ __forceinline__ float gelu_value(float x) {
  float e, d;
  gelu_parts(x, e, d);
  return x * (e * d);
}
__device__ __forceinline__ float gelu_grad(float x) {
  float e, d;
  gelu_parts(x, e, d);
  const float sech2 = 4.0f * (e * d) * d;
  return (e * d) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

template <typename S>
__global__ void gelu_forward_kernel(S* out, const S* inp, int64_t n, int64_t packs) {
  for_each_pack<kPack<S>>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<S, W> x = load_pack<W>(inp + i);
    Pack<S, W> o;
#pragma unroll
    for (int j = 0; j < W; j++) o.v[j] = from_float<S>(gelu_value(to_float(x.v[j])));
    store_pack<W>(out + i, o);
  });
}

template <typename S>
__global__ void gelu_backward_kernel(S* dinp, const S* inp, const S* dout, int64_t n, int64_t packs) {
  for_each_pack<kPack<S>>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<S, W> x = load_pack<W>(inp + i), g = load_pack<W>(dout + i);
    Pack<S, W> o;
#pragma unroll
    for (int j = 0; j < W; j++) o.v[j] = from_float<S>(gelu_grad(to_float(x.v[j])) * to_float(g.v[j]));
    store_pack<W>(dinp + i, o);
  });
}

template <typename S>
__global__ void relu_forward_kernel(S* out, const S* inp, int64_t n, int64_t packs) {
  for_each_pack<kPack<S>>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<S, W> x = load_pack<W>(inp + i);
    Pack<S, W> o;
#pragma unroll
    for (int j = 0; j < W; j++) {
      const float v = to_float(x.v[j]);
      o.v[j] = from_float<S>(v > 0.0f ? v : 0.0f);
    }
    store_pack<W>(out + i, o);
  });
}

// dinp = the gradient of a + b through the ReLU whose output is `out`: the sum rounded once to S (residual_kernel's),
// kept where out > 0, else 0 (relu_backward_kernel's formula on it): the two kernels' bits in one pass (a ResNet block
// input's gradient, its main branch's plus its shortcut's, taken through the previous block's final ReLU). In place
// allowed (dinp == a or b).
template <typename S>
__global__ void residual_relu_backward_kernel(S* dinp, const S* a, const S* b, const S* out, int64_t n, int64_t packs) {
  for_each_pack<kPack<S>>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<S, W> x = load_pack<W>(a + i), y = load_pack<W>(b + i), o = load_pack<W>(out + i);
    Pack<S, W> r;
#pragma unroll
    for (int j = 0; j < W; j++) {
      const S s = from_float<S>(to_float(x.v[j]) + to_float(y.v[j]));
      r.v[j] = from_float<S>(to_float(o.v[j]) > 0.0f ? to_float(s) : 0.0f);
    }
    store_pack<W>(dinp + i, r);
  });
}

template <typename S>
__global__ void relu_backward_kernel(S* dinp, const S* dout, const S* out, int64_t n, int64_t packs) {
  for_each_pack<kPack<S>>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<S, W> g = load_pack<W>(dout + i), y = load_pack<W>(out + i);
    Pack<S, W> o;
#pragma unroll
    for (int j = 0; j < W; j++) o.v[j] = from_float<S>(to_float(y.v[j]) > 0.0f ? to_float(g.v[j]) : 0.0f);
    store_pack<W>(dinp + i, o);
  });
}

// ---- storage-type conversions (cast): float -> bf16 rounds to nearest even, bf16 -> float is exact ------------------
// Packs of 4 (16-byte float loads, 8-byte bf16 stores, and the reverse).
constexpr int kCastPack = 4;
template <typename To, typename From>
__global__ void cast_kernel(To* __restrict__ dst, const From* __restrict__ src, int64_t n, int64_t packs) {
  for_each_pack<kCastPack>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<From, W> x = load_pack<W>(src + i);
    Pack<To, W> o;
#pragma unroll
    for (int j = 0; j < W; j++) o.v[j] = from_float<To>(to_float(x.v[j]));
    store_pack<W>(dst + i, o);
  });
}

// ---- optimizers (cpu_loss_optim.cpp adamw_update, cpu_sgd.cpp sgd_update: same expressions, same order) ----------
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n, float beta1, float beta2,
                             float eps, float grad_scale, float decay, float step_size, float bc2_sqrt,
                             float one_minus_b1, float one_minus_b2) {
  HPCT_GRID_STRIDE_LOOP(i, n) {
    const float g = grads[i] * grad_scale;
    const float p = params[i] * decay;
    const float mi = m[i] * beta1 + g * one_minus_b1;
    const float vi = v[i] * beta2 + g * g * one_minus_b2;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    params[i] = p - step_size * (mi / denom);
  }
}

// adamw_kernel's arithmetic over a chunk table (adamw_update_chunks): one block per chunk, its threads striding over
// the chunk's elements; `decay` for the chunks whose tensor decays, `no_decay` (1) for the others. Copy (__nv_bfloat16
// or __half; void: none) is the type of the compute copy each updated parameter is also stored into, rounded once as
// cast_kernel rounds it.
template <typename Copy>
__global__ void __launch_bounds__(kTableThreads)
    adamw_chunks_kernel(const AdamwChunk* __restrict__ table, float beta1, float beta2, float eps, float grad_scale,
                        float decay, float no_decay, float step_size, float bc2_sqrt, float one_minus_b1,
                        float one_minus_b2) {
  const AdamwChunk c = table[blockIdx.x];
  const float d = c.decays ? decay : no_decay;
  for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
    const float g = c.grads[i] * grad_scale;
    const float p = c.params[i] * d;
    const float mi = c.m[i] * beta1 + g * one_minus_b1;
    const float vi = c.v[i] * beta2 + g * g * one_minus_b2;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    const float updated = p - step_size * (mi / denom);
    c.m[i] = mi;
    c.v[i] = vi;
    c.params[i] = updated;
    if constexpr (!std::is_void_v<Copy>) static_cast<Copy*>(c.copy)[i] = from_float<Copy>(updated);
  }
}

enum class SgdMode : int { kNoMomentum = 0, kFirstStep = 1, kLaterStep = 2 };

__global__ void sgd_kernel(float* params, const float* grads, float* buf, int64_t n, float lr, float momentum,
                           float take, float weight_decay, bool nesterov, float grad_scale, SgdMode mode) {
  HPCT_GRID_STRIDE_LOOP(i, n) {
    const float g = grads[i] * grad_scale + weight_decay * params[i];
    float d;
    if (mode == SgdMode::kNoMomentum) {
      d = g;  // the buffer is neither read nor written (it may be null)
    } else if (mode == SgdMode::kFirstStep) {
      buf[i] = g;  // assigned, never read: the buffer may hold garbage on the first step
      d = nesterov ? g + momentum * g : g;
    } else {
      const float b = buf[i] * momentum + take * g;
      buf[i] = b;
      d = nesterov ? g + momentum * b : b;
    }
    params[i] = params[i] - lr * d;
  }
}

// ---- embedding ----------------------------------------------------------------------------------------------------
// out[n, c] = (inp[n] - v0 in [0, Vl) ? wte[inp[n] - v0, c] : 0) (+ wpe[n % T, c] when wpe is set); the serial
// encoder is v0 = 0, Vl = unbounded, wpe set. Branches as the CPU's (w + p, w, p or 0), so -0.0 survives alike; the
// sum in float, rounded once to S.
template <typename S>
__global__ void encoder_forward_kernel(S* out, const int32_t* inp, const S* wte, const S* wpe, int64_t v0, int64_t Vl,
                                       int64_t N, int T, int C) {
  const int64_t total = N * C;
  HPCT_GRID_STRIDE_LOOP(idx, total) {
    const int64_t n = idx / C;
    const int c = static_cast<int>(idx - n * C);
    const int32_t tok = inp[n];
    if (tok < 0) {
      out[idx] = from_float<S>(quiet_nan());  // an invalid token (the CPU backend throws): make it visible in the loss
      continue;
    }
    const int64_t j = static_cast<int64_t>(tok) - v0;  // local row, or outside [0, Vl): another rank's
    const bool mine = j >= 0 && j < Vl;
    if (wpe) {
      const S p = wpe[(n % T) * C + c];
      out[idx] = mine ? from_float<S>(to_float(wte[j * C + c]) + to_float(p)) : p;
    } else {
      out[idx] = mine ? wte[j * C + c] : from_float<S>(0.0f);
    }
  }
}

// dwte[j, c] += dout[n, c] for every position n whose local row j = inp[n] - v0 lies in [0, Vl), in increasing n.
// Grid (column blocks, kWteGroups): the thread of column c in group g owns the rows j with j % kWteGroups == g, so no
// two threads ever touch the same element and each element's additions run in position order: the CPU backend's
// order (bitwise equal results). A warp reads 32 tokens at once and walks only its own, in order, with a ballot.
// dwte is float (a parameter gradient), dout of the storage type S. A block's owned positions are one dependent
// read-modify-write after another, so the time is about N / kWteGroups memory latencies: at 64 groups the H200 took
// 242 us for 16,384 positions (25 MB of dout), latency- not bandwidth-bound; 256 groups (1,536 blocks at C = 768,
// every one resident on 132 SMs) cut the chain to a quarter, while each block's scan of all N token ids (L2 reads,
// a ballot per 32) stays small beside it.
template <typename S>
__global__ void __launch_bounds__(kWteThreads)
    encoder_backward_wte_kernel(float* __restrict__ dwte, const S* __restrict__ dout, const int32_t* __restrict__ inp,
                                int64_t v0, int64_t Vl, int64_t N, int C) {
  const int lane = threadIdx.x % 32;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;  // may be >= C: such lanes join the ballots, write nothing
  const int g = blockIdx.y;
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const int64_t n = n0 + lane;
    int32_t tok = -1;
    bool owned = false;
    if (n < N) {
      tok = inp[n];
      const int64_t j = static_cast<int64_t>(tok) - v0;
      owned = tok >= 0 && j >= 0 && j < Vl && j % kWteGroups == g;  // negative tokens are skipped
    }
    unsigned mask = __ballot_sync(kFullMask, owned);  // the same on every lane of the warp
    while (mask) {
      const int k = __ffs(mask) - 1;  // lowest set bit first: increasing position
      mask &= mask - 1;
      const int32_t tk = __shfl_sync(kFullMask, tok, k);
      if (c < C) {
        const int64_t j = static_cast<int64_t>(tk) - v0;
        dwte[j * C + c] += to_float(dout[(n0 + k) * C + c]);
      }
    }
  }
}

// dwpe[t, c] += dout[b, t, c] for b = 0, 1, ..., B-1 in order, in float (the CPU's order: bitwise equal results).
template <typename S>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const S* dout, int B, int T, int C) {
  const int64_t total = static_cast<int64_t>(T) * C;
  HPCT_GRID_STRIDE_LOOP(idx, total) {
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc += to_float(dout[static_cast<int64_t>(b) * total + idx]);
    dwpe[idx] = acc;
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------------------------------
// One warp per row (kLnWarps rows per block): mean and two-pass variance as float warp sums, then the output. Lane l
// reads the packs of P elements starting at l P, l P + 32 P, ... (P = 1: the elements l, l + 32, ...; P = 8: 16-byte
// bf16 loads, row_pack); mean and rstd are float, the output is rounded once to S. layernorm_row is the row's work,
// shared by the plain kernel and the one fused with the residual add before it.
template <typename S, int P>
__device__ __forceinline__ void layernorm_row(S* o, float* mean, float* rstd, const S* x, const S* weight,
                                              const S* bias, int64_t row, int C, int lane) {
  constexpr float eps = 1e-5f;
  float s = 0.0f;
  for (int c = lane * P; c < C; c += 32 * P) {
    const Pack<S, P> v = load_pack<P>(x + c);
#pragma unroll
    for (int j = 0; j < P; j++) s += to_float(v.v[j]);
  }
  s = warp_sum(s);
  const float m = s / C;
  float v = 0.0f;  // two-pass variance: no E[x^2] - m^2 cancellation
  for (int c = lane * P; c < C; c += 32 * P) {
    const Pack<S, P> xv = load_pack<P>(x + c);
#pragma unroll
    for (int j = 0; j < P; j++) v += (to_float(xv.v[j]) - m) * (to_float(xv.v[j]) - m);
  }
  v = warp_sum(v);
  const float r = 1.0f / sqrtf(v / C + eps);
  for (int c = lane * P; c < C; c += 32 * P) {
    const Pack<S, P> xv = load_pack<P>(x + c), w = load_pack<P>(weight + c);
    Pack<S, P> ov;
    if (bias) {
      const Pack<S, P> b = load_pack<P>(bias + c);
#pragma unroll
      for (int j = 0; j < P; j++)
        ov.v[j] = from_float<S>((to_float(xv.v[j]) - m) * r * to_float(w.v[j]) + to_float(b.v[j]));
    } else {
#pragma unroll
      for (int j = 0; j < P; j++) ov.v[j] = from_float<S>((to_float(xv.v[j]) - m) * r * to_float(w.v[j]));
    }
    store_pack<P>(o + c, ov);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename S, int P>
__global__ void __launch_bounds__(kLnRowThreads)
    layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp, const S* weight, const S* bias, int N,
                             int C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // uniform over the warp: the shuffles below see all 32 lanes
  layernorm_row<S, P>(out + row * C, mean, rstd, inp + row * C, weight, bias, row, C, lane);
}

// residual = a + b (each element rounded once to S, as residual_kernel), then layernorm_row over the residual row:
// the same bits as residual_kernel followed by layernorm_forward_kernel<S, P>. The lane stores its packs of the
// residual and reads back only those (the row loops give every lane the same packs), so no barrier is needed; the
// row is read once from a and b instead of written, then read again by a second kernel.
template <typename S, int P>
__global__ void __launch_bounds__(kLnRowThreads)
    residual_layernorm_forward_kernel(S* residual, S* out, float* mean, float* rstd, const S* a, const S* b,
                                      const S* weight, const S* bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // uniform over the warp
  S* res = residual + row * C;
  for (int c = lane * P; c < C; c += 32 * P) {
    const Pack<S, P> x = load_pack<P>(a + row * C + c), y = load_pack<P>(b + row * C + c);
    Pack<S, P> r;
#pragma unroll
    for (int j = 0; j < P; j++) r.v[j] = from_float<S>(to_float(x.v[j]) + to_float(y.v[j]));
    store_pack<P>(res + c, r);
  }
  layernorm_row<S, P>(out + row * C, mean, rstd, res, weight, bias, row, C, lane);
}

// LayerNorm backward in one pass over the rows, with the CPU's expressions (cpu_layers.cpp):
//   dinp += rstd * (w dout - mean(w dout) - norm * mean(w dout norm))      (float warp sums; rounded once to S)
//   dweight += sum_n dout norm, dbias += sum_n dout        (the float products added in double, as the CPU; below)
// Block b owns the rows [b R, (b + 1) R) (R = rows_per_block) and has W warps (blockDim.x / 32); warp w takes its
// rows w, w + W, ... in order, one row at a time as the forward does (lane l: the packs of P columns from l P,
// l P + 32 P, ...), and adds each row's dout norm and dout into its own double accumulators in shared memory (2 C
// doubles per warp; a lane touches only its own columns, so no barrier is needed until the end). Then the block adds
// its W warps' accumulators in order w = 0, 1, ... into its group b of the 2 C partials columns (dweight's C, then
// dbias's C), and column_partials_kernel finishes the sums: double all the way, as the CPU, in an order that depends
// on N, C and the buffer's size only. (Float accumulators, tried first, drifted by ~1e-5 relative over ~40 rows per
// warp, beyond the CPU comparison's 1e-6.)
// A warp's accumulators are stored element-major: column q P + j (lane q % 32's pack q, element j) at slot
// j C / P + q, so the 32 lanes' j-th doubles are 32 consecutive ones. Stored as the columns lie in the row, the
// lanes' doubles were P apart: a 16-way bank conflict at P = 8 on every one of the 2 C read-modify-writes of a row,
// which held the kernel to about a sixth of the HBM's bandwidth on an H200 (125 us for 16,384 rows of 768: 100 MB
// moved). Only where each sum is kept changed, not the order of its additions: the results are the same bits.
template <typename S, int P>
__global__ void __launch_bounds__(kLnRowThreads)
    layernorm_backward_kernel(S* dinp, double* partials, const S* dout, const S* inp, const S* weight,
                              const float* mean, const float* rstd, int64_t N, int C, int64_t rows_per_block) {
  HPCT_DYNAMIC_SHARED(double, acc);  // [warps][2][C]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  double* acc_w = acc + static_cast<int64_t>(warp) * 2 * C;
  double* acc_b = acc_w + C;
  const int packs = C / P;  // C is a multiple of P (row_pack)
  for (int q = lane; q < packs; q += 32)
#pragma unroll
    for (int j = 0; j < P; j++) acc_w[j * packs + q] = acc_b[j * packs + q] = 0.0;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t end = first + rows_per_block < N ? first + rows_per_block : N;
  for (int64_t row = first + warp; row < end; row += warps) {  // uniform over the warp: the shuffles see 32 lanes
    const S* x = inp + row * C;
    const S* d = dout + row * C;
    S* dx = dinp + row * C;
    const float m = mean[row], r = rstd[row];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
      const Pack<S, P> xv = load_pack<P>(x + c), dv = load_pack<P>(d + c), w = load_pack<P>(weight + c);
#pragma unroll
      for (int j = 0; j < P; j++) {
        const float dnorm = to_float(w.v[j]) * to_float(dv.v[j]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * (to_float(xv.v[j]) - m) * r;
      }
    }
    dnorm_sum = warp_sum(dnorm_sum);
    dnorm_norm_sum = warp_sum(dnorm_norm_sum);
    const float dnorm_mean = dnorm_sum / C, dnorm_norm_mean = dnorm_norm_sum / C;
    for (int c = lane * P; c < C; c += 32 * P) {
      const Pack<S, P> xv = load_pack<P>(x + c), dv = load_pack<P>(d + c), w = load_pack<P>(weight + c);
      Pack<S, P> g = load_pack<P>(dx + c);
#pragma unroll
      for (int j = 0; j < P; j++) {
        const float norm = (to_float(xv.v[j]) - m) * r, dj = to_float(dv.v[j]);
        g.v[j] = from_float<S>(to_float(g.v[j]) + (to_float(w.v[j]) * dj - dnorm_mean - norm * dnorm_norm_mean) * r);
        acc_w[j * packs + c / P] += static_cast<double>(dj * norm);  // slot of column c + j
        acc_b[j * packs + c / P] += dj;
      }
      store_pack<P>(dx + c, g);
    }
  }
  __syncthreads();
  for (int slot = threadIdx.x; slot < 2 * C; slot += blockDim.x) {     // consecutive threads, consecutive slots
    const int half = slot / C, in_half = slot % C;                     // dweight's slots, then dbias's
    const int c = half * C + (in_half % packs) * P + in_half / packs;  // the column of that slot
    double total = 0.0;
    for (int w = 0; w < warps; w++) total += acc[static_cast<int64_t>(w) * 2 * C + slot];
    partials[static_cast<int64_t>(c) * gridDim.x + blockIdx.x] = total;  // column-major: column c's groups together
  }
}

// ---- launch geometry (host) -----------------------------------------------------------------------------------------
LaunchShape elementwise_shape(int64_t n) { return grid_stride_shape(n, kThreads); }
// A pointwise kernel of storage type S over n elements through the given pointers: the `packs` argument it takes
// (for_each_pack) and its launch.
template <typename S>
int64_t pointwise_packs(int64_t n, std::initializer_list<const void*> ptrs) {
  return vector_packs<S>(n, ptrs);
}
template <typename S>
LaunchShape pointwise_shape(int64_t n, int64_t packs) {
  return pack_shape(n, packs, kPack<S>, kThreads);
}
int64_t cast_packs(int64_t n, const void* dst, const void* src) { return vector_packs(n, kCastPack, {dst, src}); }
LaunchShape cast_shape(int64_t n, int64_t packs) { return pack_shape(n, packs, kCastPack, kThreads); }
LaunchShape reduce_shape() { return {{1, 1, 1}, {kReduceThreads, 1, 1}, 0}; }
LaunchShape table_chunks_shape(int64_t chunks) {
  return {{static_cast<unsigned>(chunks), 1, 1}, {kTableThreads, 1, 1}, 0};
}
LaunchShape encoder_wte_shape(int C) {
  return {{static_cast<unsigned>((C + kWteThreads - 1) / kWteThreads), kWteGroups, 1}, {kWteThreads, 1, 1}, 0};
}
LaunchShape layernorm_rows_shape(int N) {
  return {{static_cast<unsigned>((static_cast<int64_t>(N) + kLnWarps - 1) / kLnWarps), 1, 1}, {kLnRowThreads, 1, 1}, 0};
}
// layernorm_backward_kernel: as many warps as 2 C doubles each fit in the default 48 KiB of shared memory (at most
// kLnWarps; C = 768 takes 4), a single warp with the opt-in beyond (up to the H100's 227 KiB: C <= 14,528); the rows
// cut into groups of at least kLnRowsPerWarp rows per warp and no more groups than the partials buffer holds.
struct LayernormBackwardLaunch {
  LaunchShape shape;
  RowGroups rows;
};
LayernormBackwardLaunch layernorm_backward_launch(int64_t N, int C, int64_t partials_bytes) {
  const int64_t warp_bytes = 2 * static_cast<int64_t>(C) * static_cast<int64_t>(sizeof(double));
  int64_t warps = kSharedDefaultBytes / warp_bytes;
  warps = warps < 1 ? 1 : (warps > kLnWarps ? kLnWarps : warps);
  const RowGroups rows = partial_row_groups(N, 2 * static_cast<int64_t>(C), warps * kLnRowsPerWarp, partials_bytes);
  const int64_t shared = warps * warp_bytes;
  return {{{static_cast<unsigned>(rows.groups), 1, 1},
           {static_cast<unsigned>(warps * 32), 1, 1},
           shared,
           shared > kSharedDefaultBytes},
          rows};
}

// AdamW's per-step scalars exactly as the CPU backend computes them (bias corrections in double, as torch).
struct AdamwScalars {
  float decay, step_size, bc2_sqrt, one_minus_b1, one_minus_b2;
};
AdamwScalars adamw_scalars(float lr, float beta1, float beta2, float weight_decay, int t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  return {static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay), static_cast<float>(lr / bc1),
          static_cast<float>(std::sqrt(bc2)), 1.0f - beta1, 1.0f - beta2};
}

SgdMode sgd_mode(float momentum, bool first_step) {
  return momentum == 0.0f ? SgdMode::kNoMomentum : (first_step ? SgdMode::kFirstStep : SgdMode::kLaterStep);
}

}  // namespace
}  // namespace hpct::kernels::cuda
