#pragma once
// The kernels of the CUDA backend's ResNet group (cuda_resnet.cu launches them; cuDNN does the convolutions
// themselves, the CPU backend's cpu/cpu_conv.cpp is the reference) and the host functions that give their launch
// geometry. Device code compiled by nvcc through cuda_resnet.cu and, as plain C++, by the host emulation
// (tests/cuda_emu/test_emu_resnet.cpp), which runs every kernel here at the geometry below against the CPU backend.
// Keep it so: CUDA built-ins only (no CUDA header), shared memory through HPCT_SHARED, and every new kernel with its
// emulated test.
//
// Legend: N images, C channels (OC: a convolution's output channels), HW = H*W, a "plane" is one (n, c) image channel
// of HW contiguous floats (NCHW). No float atomics anywhere: every reduction runs in a fixed order, so a run reproduces
// itself bit for bit on the same GPU.
//
// BatchNorm2d (our kernels, not cuDNN's): the forward statistics and the backward's gradient sums are full-grid
// two-stage reductions: each channel's N*HW values are cut into groups (bn_groups_launch), one block per (group,
// channel) reduces its group in double (bn_stats_partial_kernel: (count, mean, M2) two-pass; bn_grad_partial_kernel:
// sum dout and sum dout * xhat) into the device's partials buffer (cuda_common.cuh reduce_partials), and one warp per
// channel combines the groups in a fixed order (bn_stats_finish_kernel with Chan's formula, bn_grad_finish_kernel by
// adding). All deterministic. Statistics are written as float (count, mean, M2) triples like the CPU (which takes them
// two-pass over the whole channel in double: the same values to double rounding); normalisation uses the biased
// M2 / count, running_var the unbiased M2 / (count - 1); SyncBN's merge folds Chan's formula (batchnorm_stats.hpp)
// over the ranks in rank order, one thread per channel. The conv's dbias runs one block per channel,
// kChannelReduceThreads threads walking the channel's N*HW values in a fixed strided order (for_channel_range) with a
// double accumulator, then a fixed-shape block reduction (cuda_device_common.cuh block_sum). Pointwise passes
// (BatchNorm apply and eval, the SyncBN dinp, max-pooling forward and backward, global-average-pooling backward, the
// conv bias) use a "plane" launch (plane_shape): threadIdx.x/blockIdx.x over the positions of a plane (the BatchNorm
// passes: over its 16-byte packs where they fit, bn_affine_plane),
// threadIdx.y/blockIdx.y over planes, so that the channel of a thread is a plane index modulo C (no 64-bit division
// per element) and small planes (7x7) still fill the block. Global average pooling's forward runs one warp per plane
// (a double sum, then a shuffle tree).
//
// Storage types (cuda_device_common.cuh): activations and their gradients (inp, out, dout, dinp) and the parameters
// read (gamma, beta, the conv bias) have the storage type S (float or __nv_bfloat16); the statistics (stats, save_mean,
// save_rstd, running averages, SyncBN sums) and the parameter gradients (dgamma, dbeta, dbias, dweight) are float.
// Arithmetic in float (double where noted), each stored activation rounded once to S.
#include <cmath>
#include <cstdint>

#include "kernels/batchnorm_stats.hpp"
#include "kernels/cuda/cuda_device_common.cuh"

namespace hpct::kernels::cuda {
namespace {  // internal linkage: each includer (the .cu, the emulated test) compiles its own copy

constexpr int kChannelReduceThreads = 512;    // one block per channel for the BatchNorm / dbias reductions
constexpr int kPerChannelThreads = 128;       // one thread per channel (BatchNorm mean/rstd, merge, running stats)
constexpr int kPlaneThreads = 256;            // threads of a plane launch (x * y)
constexpr int kMaxGridY = 65535;              // gridDim.y limit; the plane loops stride over the rest
constexpr int kMaxGridX = 65535;              // kept modest: the position loops stride over the rest
constexpr int kAvgPoolThreads = 256;          // global average pooling forward: 8 warps, 8 planes per block
constexpr int64_t kAvgPoolMaxBlocks = 65535;  // its grid cap (the plane loop strides over the rest)
constexpr int kCastPackResnet = 4;            // accumulate_float_kernel: 4 floats (16 bytes) per pack
constexpr int kBnGroupThreads = 256;          // bn_stats_partial_kernel: threads per (group, channel) block
constexpr int64_t kBnMinGroupValues = 8192;   // values per group at least: 32 per thread and pass
constexpr int kBnMaxGroups = 512;             // groups per channel at most (bn_stats_finish_kernel merges them)

// Loops of a thread in a plane launch (plane_shape below).
#define HPCT_FOR_PLANES(p, planes)                                                            \
  for (int64_t p = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; p < (planes); \
       p += static_cast<int64_t>(gridDim.y) * blockDim.y)
#define HPCT_FOR_POSITIONS(i, len) HPCT_GRID_STRIDE_LOOP(i, len)  // x: the positions of the plane

// Calls f(offset) for every value of channel c of an (N, C, HW) tensor in the flat range [j0, j1) (flat index
// j = n*HW + i over the channel's N*HW values) that this thread owns: j = j0 + threadIdx.x, j0 + threadIdx.x +
// blockDim.x, ... (n, i) advance incrementally, so the loop divides once; the order is fixed for a given block size.
// A one-block-per-channel reduction walks [0, N*HW), a block of a group its group.
template <typename F>
__device__ __forceinline__ void for_channel_range(int c, int C, int HW, int64_t j0, int64_t j1, F&& f) {
  const int S = blockDim.x;
  int64_t j = j0 + threadIdx.x;
  int64_t n = j / HW;
  int i = static_cast<int>(j - n * HW);
  const int dn = S / HW, di = S % HW;
  for (; j < j1; j += S) {
    f((n * C + c) * HW + i);
    i += di;
    n += dn;
    if (i >= HW) {
      i -= HW;
      n++;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Conv2d bias: out[n, oc, :] += bias[oc] (kSeed: out[n, oc, :] = bias[oc]), plane p = n*OC + oc. float storage adds
// the bias to the convolution's output; bf16 storage seeds the output with it before cuDNN accumulates the
// convolution onto it (beta = 1, cuda_resnet.cu), so that the sum is rounded to bf16 once.
template <bool kSeed, typename S>
__global__ void plane_bias_kernel(S* __restrict__ out, const S* __restrict__ bias, int64_t planes, int C, int64_t len) {
  HPCT_FOR_PLANES(p, planes) {
    const S b = bias[p % C];
    S* o = out + p * len;
    if constexpr (kSeed) {
      HPCT_FOR_POSITIONS(i, len) o[i] = b;
    } else {
      HPCT_FOR_POSITIONS(i, len) o[i] = from_float<S>(to_float(o[i]) + to_float(b));
    }
  }
}

// dbias[c] += sum over (n, i) of dout[n, c, i], in double; one block per channel.
template <typename S>
__global__ void channel_sum_accumulate_kernel(float* __restrict__ dbias, const S* __restrict__ dout, int N, int C,
                                              int HW) {
  HPCT_SHARED(double, shared, [32]);
  const int c = blockIdx.x;
  double acc = 0.0;
  for_channel_range(c, C, HW, 0, static_cast<int64_t>(N) * HW,
                    [&](int64_t off) { acc += static_cast<double>(to_float(dout[off])); });
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) dbias[c] += static_cast<float>(acc);
}

// ---------------------------------------------------------------------------------------------------------------
// BatchNorm2d statistics: stats[c] = (count, mean, M2) in double, two stages (the header comment); optionally
// save_mean / save_rstd from the float triple exactly as the CPU's apply_channel: mean = st[1],
// rstd = float(1 / sqrt(double(st[2]) / st[0] + eps)).
// Stage one of the full-grid statistics: block (g, c) takes the (count, mean, M2) of channel c's flat values
// [g per_group, (g + 1) per_group) two-pass in double (the sum, then the squared deviations from its mean) and
// writes them as partials[(k C + c) G + g] for k = 0, 1, 2 (G = gridDim.x: each channel's groups contiguous).
template <typename S>
__global__ void __launch_bounds__(kBnGroupThreads)
    bn_stats_partial_kernel(double* __restrict__ partials, const S* __restrict__ inp, int N, int C, int HW,
                            int64_t per_group) {
  HPCT_SHARED(double, shared, [32]);
  const int c = blockIdx.y;
  const int64_t G = gridDim.x, total = static_cast<int64_t>(N) * HW;
  const int64_t j0 = blockIdx.x * per_group, j1 = j0 + per_group < total ? j0 + per_group : total;
  double s = 0.0;
  for_channel_range(c, C, HW, j0, j1, [&](int64_t off) { s += static_cast<double>(to_float(inp[off])); });
  s = block_sum(s, shared);
  const double count = static_cast<double>(j1 - j0), mean = s / count;
  double q = 0.0;
  for_channel_range(c, C, HW, j0, j1, [&](int64_t off) {
    const double dx = static_cast<double>(to_float(inp[off])) - mean;
    q += dx * dx;
  });
  q = block_sum(q, shared);
  if (threadIdx.x == 0) {
    partials[(0 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = count;
    partials[(1 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = mean;
    partials[(2 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = q;
  }
}

// Stage two: one warp per channel merges its G groups with Chan's formula in double (lane l: the groups l, l + 32,
// ... in order, then a shuffle-down tree, lane 0 last), writes the float (count, mean, M2) triple and optionally
// save_mean / save_rstd exactly as the CPU's apply_channel (above).
__global__ void bn_stats_finish_kernel(float* __restrict__ stats, float* __restrict__ save_mean,
                                       float* __restrict__ save_rstd, const double* __restrict__ partials, int C, int G,
                                       float eps) {
  const int c = blockIdx.x, lane = threadIdx.x;
  const double* pc = partials + static_cast<int64_t>(c) * G;
  const int64_t plane = static_cast<int64_t>(C) * G;
  BnStats<double> acc{0.0, 0.0, 0.0};
  for (int g = lane; g < G; g += 32)
    acc = batchnorm_merge_stats(acc, BnStats<double>{pc[g], pc[plane + g], pc[2 * plane + g]});
  for (int o = 16; o > 0; o >>= 1) {
    const BnStats<double> other{__shfl_down_sync(0xffffffffu, acc.count, o), __shfl_down_sync(0xffffffffu, acc.mean, o),
                                __shfl_down_sync(0xffffffffu, acc.m2, o)};
    if (lane + o < 32) acc = batchnorm_merge_stats(acc, other);
  }
  if (lane == 0) {
    const float st0 = static_cast<float>(acc.count), st1 = static_cast<float>(acc.mean),
                st2 = static_cast<float>(acc.m2);
    stats[3 * c + 0] = st0;
    stats[3 * c + 1] = st1;
    stats[3 * c + 2] = st2;
    if (save_mean) {
      save_mean[c] = st1;
      save_rstd[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(st2) / st0 + static_cast<double>(eps)));
    }
  }
}

// save_mean / save_rstd from (count, mean, M2) rows, one thread per channel (forward_apply's prologue).
__global__ void bn_mean_rstd_kernel(float* __restrict__ save_mean, float* __restrict__ save_rstd,
                                    const float* __restrict__ stats, int C, float eps) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float st0 = stats[3 * c + 0], st1 = stats[3 * c + 1], st2 = stats[3 * c + 2];
  save_mean[c] = st1;
  save_rstd[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(st2) / st0 + static_cast<double>(eps)));
}

// The ReLU that may follow a BatchNorm, in its own passes (kernels.hpp, the batchnorm2d_relu ops; kRelu): the
// forward stores relu_forward_kernel's value of the rounded output, the backward masks dout where relu_forward's output
// is not positive, as relu_backward_kernel does: the bits of the two ops, one pass fewer each way.
template <bool kRelu, typename S>
__device__ __forceinline__ S bn_store(float v) {
  const S r = from_float<S>(v);
  if constexpr (kRelu) {
    const float f = to_float(r);
    return from_float<S>(f > 0.0f ? f : 0.0f);
  } else {
    return r;
  }
}
// A block's last BatchNorm with the residual add and ReLU that end the block (kernels.hpp, batchnorm2d_add_relu): where
// `residual` is given, the BatchNorm's output rounded to S, plus the residual, rounded once, then the ReLU:
// residual_kernel<S, true>'s bits on the BatchNorm op's output; else bn_store.
template <bool kRelu, typename S>
__device__ __forceinline__ S bn_epilogue(float v, const S* residual, S res) {
  if (residual) return bn_store<true, S>(to_float(from_float<S>(v)) + to_float(res));
  return bn_store<kRelu, S>(v);
}
// dy through the ReLU whose output is y (kRelu), as relu_backward_kernel passes it; dy itself otherwise.
template <bool kRelu, typename S>
__device__ __forceinline__ float bn_relu_masked(float dy, S y) {
  if constexpr (kRelu) return to_float(y) > 0.0f ? dy : 0.0f;
  return dy;
}
template <bool kRelu, typename S>
__device__ __forceinline__ float bn_masked_dy(const S* __restrict__ dout, const S* __restrict__ relu_out, int64_t off) {
  return bn_relu_masked<kRelu>(to_float(dout[off]), kRelu ? relu_out[off] : S{});
}

// The pointwise BatchNorm passes (apply, eval, backward apply) move a plane's values in packs of P (a plane launch
// over HW / P packs: P = kPack<S>, 16 bytes, where the host's pack_width finds HW a multiple of it and every pointer
// 16-byte aligned, else 1). Each value gets the same float formula either way: packs only widen the loads and stores
// (scalar 2-byte accesses left these passes at a sixth of the H200's bandwidth).
//
// out = (x - m) * scale + shift over the plane's values, P at a time (then bn_epilogue: the ReLU where kRelu, the
// residual add and ReLU where r, the plane's residual, is given).
template <int P, bool kRelu, typename S>
__device__ __forceinline__ void bn_affine_plane(S* __restrict__ o, const S* __restrict__ x, const S* __restrict__ r,
                                                int HW, float m, float scale, float shift) {
  HPCT_FOR_POSITIONS(k, HW / P) {
    const Pack<S, P> xv = load_pack<P>(x + k * P);
    Pack<S, P> rv{};
    if (r) rv = load_pack<P>(r + k * P);
    Pack<S, P> ov;
#pragma unroll
    for (int j = 0; j < P; j++) ov.v[j] = bn_epilogue<kRelu>((to_float(xv.v[j]) - m) * scale + shift, r, rv.v[j]);
    store_pack<P>(o + k * P, ov);
  }
}

// out = (x - mean) * (rstd * gamma) + beta, plane p = n*C + c (residual: null, or added before the ReLU; it does not
// alias out).
template <int P, typename S, bool kRelu = false>
__global__ void bn_apply_kernel(S* __restrict__ out, const S* __restrict__ inp, const float* __restrict__ mean,
                                const float* __restrict__ rstd, const S* __restrict__ gamma, const S* __restrict__ beta,
                                int64_t planes, int C, int HW, const S* __restrict__ residual = nullptr) {
  HPCT_FOR_PLANES(p, planes) {
    const int c = static_cast<int>(p % C);
    bn_affine_plane<P, kRelu>(out + p * HW, inp + p * HW, residual ? residual + p * HW : nullptr, HW, mean[c],
                              rstd[c] * to_float(gamma[c]), to_float(beta[c]));
  }
}

// Evaluation's scale of a channel: float(1 / sqrt(double(running_var) + eps)) * gamma, as the CPU's.
__device__ __forceinline__ float bn_eval_scale(float running_var, float eps, float gamma) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(running_var) + static_cast<double>(eps))) * gamma;
}

// Evaluation: out = (x - running_mean) * bn_eval_scale + beta (residual as bn_apply_kernel's).
template <int P, typename S, bool kRelu = false>
__global__ void bn_eval_kernel(S* __restrict__ out, const S* __restrict__ inp, const S* __restrict__ gamma,
                               const S* __restrict__ beta, const float* __restrict__ running_mean,
                               const float* __restrict__ running_var, int64_t planes, int C, int HW, float eps,
                               const S* __restrict__ residual = nullptr) {
  HPCT_FOR_PLANES(p, planes) {
    const int c = static_cast<int>(p % C);
    const float scale = bn_eval_scale(running_var[c], eps, to_float(gamma[c]));
    bn_affine_plane<P, kRelu>(out + p * HW, inp + p * HW, residual ? residual + p * HW : nullptr, HW, running_mean[c],
                              scale, to_float(beta[c]));
  }
}

// Chan's merge of R rank rows in rank order, in double, one thread per channel.
__global__ void bn_merge_kernel(float* __restrict__ merged, const float* __restrict__ gathered, int R, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  BnStats<double> acc{0.0, 0.0, 0.0};
  for (int r = 0; r < R; r++) {
    const float* g = gathered + (static_cast<int64_t>(r) * C + c) * 3;
    acc = batchnorm_merge_stats(acc, BnStats<double>{static_cast<double>(g[0]), static_cast<double>(g[1]),
                                                     static_cast<double>(g[2])});
  }
  merged[3 * c + 0] = static_cast<float>(acc.count);
  merged[3 * c + 1] = static_cast<float>(acc.mean);
  merged[3 * c + 2] = static_cast<float>(acc.m2);
}

__global__ void bn_update_running_kernel(float* __restrict__ running_mean, float* __restrict__ running_var,
                                         const float* __restrict__ stats, int C, float momentum) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double count = stats[3 * c], mean = stats[3 * c + 1], m2 = stats[3 * c + 2];
  const double mom = momentum;
  running_mean[c] = static_cast<float>((1.0 - mom) * running_mean[c] + mom * mean);
  running_var[c] = static_cast<float>((1.0 - mom) * running_var[c] + mom * (m2 / (count - 1.0)));
}

// dx = gamma rstd (dy - sum_dy / count - xhat sum_dy_xhat / count), in float, as the CPU's dinp_channel, from a
// channel's factors (bn_dinp_factors: the saved mean and rstd, k0 = gamma rstd, the two sums over count).
struct BnDinpFactors {
  float mean, rstd, k0, mdy, mdyx;
};
__device__ __forceinline__ BnDinpFactors bn_dinp_factors(int c, const float* save_mean, const float* save_rstd,
                                                         float gamma, const float* global_sums, double count) {
  const float rstd = save_rstd[c];
  return {save_mean[c], rstd, gamma * rstd, static_cast<float>(static_cast<double>(global_sums[2 * c]) / count),
          static_cast<float>(static_cast<double>(global_sums[2 * c + 1]) / count)};
}
__device__ __forceinline__ float bn_dinp_value(float dy, float x, const BnDinpFactors& f) {
  return f.k0 * (dy - f.mdy - (x - f.mean) * f.rstd * f.mdyx);
}

// The gradient sums as a full-grid two-stage reduction (the statistics' groups, bn_groups_launch with 2 doubles):
// block (g, c) sums dout and dout * xhat over its group in double (xhat = (x - mean) * rstd in float, as the CPU), into
// partials[(k C + c) G + g] for k = 0 (sum dout), 1 (sum dout xhat). kRelu: dout masked by relu_out (bn_masked_dy).
template <typename S, bool kRelu = false>
__global__ void __launch_bounds__(kBnGroupThreads)
    bn_grad_partial_kernel(double* __restrict__ partials, const S* __restrict__ dout, const S* __restrict__ relu_out,
                           const S* __restrict__ inp, const float* __restrict__ save_mean,
                           const float* __restrict__ save_rstd, int N, int C, int HW, int64_t per_group) {
  HPCT_SHARED(double, shared, [32]);
  const int c = blockIdx.y;
  const int64_t G = gridDim.x, total = static_cast<int64_t>(N) * HW;
  const int64_t j0 = blockIdx.x * per_group, j1 = j0 + per_group < total ? j0 + per_group : total;
  const float mean = save_mean[c], rstd = save_rstd[c];
  double a = 0.0, b = 0.0;
  for_channel_range(c, C, HW, j0, j1, [&](int64_t off) {
    const float dy = bn_masked_dy<kRelu>(dout, relu_out, off);
    a += static_cast<double>(dy);
    b += static_cast<double>(dy) * static_cast<double>((to_float(inp[off]) - mean) * rstd);
  });
  a = block_sum(a, shared);
  b = block_sum(b, shared);
  if (threadIdx.x == 0) {
    partials[(0 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = a;
    partials[(1 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = b;
  }
}

// Stage two: one warp per channel adds its G groups in double in a fixed order (lane l: the groups l, l + 32, ...,
// then a shuffle-down tree), and writes sums[2 c + k] (assigned, float) and dbeta[c] += sum dout, dgamma[c] +=
// sum dout xhat. The single-process backward then writes dinp with bn_backward_apply_kernel from these sums, SyncBN
// allreduces them first.
__global__ void bn_grad_finish_kernel(float* __restrict__ sums, float* __restrict__ dgamma, float* __restrict__ dbeta,
                                      const double* __restrict__ partials, int C, int G) {
  const int c = blockIdx.x, lane = threadIdx.x;
  const double* pc = partials + static_cast<int64_t>(c) * G;
  const int64_t plane = static_cast<int64_t>(C) * G;
  double a = 0.0, b = 0.0;
  for (int g = lane; g < G; g += 32) {
    a += pc[g];
    b += pc[plane + g];
  }
  for (int o = 16; o > 0; o >>= 1) {
    const double oa = __shfl_down_sync(0xffffffffu, a, o), ob = __shfl_down_sync(0xffffffffu, b, o);
    if (lane + o < 32) {
      a += oa;
      b += ob;
    }
  }
  if (lane == 0) {
    sums[2 * c + 0] = static_cast<float>(a);
    sums[2 * c + 1] = static_cast<float>(b);
    dbeta[c] += static_cast<float>(a);
    dgamma[c] += static_cast<float>(b);
  }
}

// SyncBN backward, step 3: dinp from the allreduced sums, pointwise over planes, P values at a time (as bn_apply);
// kRelu: dout masked by relu_out.
template <int P, typename S, bool kRelu = false>
__global__ void bn_backward_apply_kernel(S* __restrict__ dinp, const S* __restrict__ dout,
                                         const S* __restrict__ relu_out, const S* __restrict__ inp,
                                         const float* __restrict__ save_mean, const float* __restrict__ save_rstd,
                                         const S* __restrict__ gamma, const float* __restrict__ global_sums,
                                         double count, int64_t planes, int C, int HW) {
  HPCT_FOR_PLANES(p, planes) {
    const int c = static_cast<int>(p % C);
    const BnDinpFactors f = bn_dinp_factors(c, save_mean, save_rstd, to_float(gamma[c]), global_sums, count);
    const S* x = inp + p * HW;
    const S* dy = dout + p * HW;
    const S* y = kRelu ? relu_out + p * HW : nullptr;
    S* dx = dinp + p * HW;
    HPCT_FOR_POSITIONS(k, HW / P) {
      const Pack<S, P> xv = load_pack<P>(x + k * P), dyv = load_pack<P>(dy + k * P);
      Pack<S, P> yv{};
      if constexpr (kRelu) yv = load_pack<P>(y + k * P);
      Pack<S, P> dxv;
#pragma unroll
      for (int j = 0; j < P; j++)
        dxv.v[j] = from_float<S>(
            bn_dinp_value(bn_relu_masked<kRelu>(to_float(dyv.v[j]), yv.v[j]), to_float(xv.v[j]), f));
      store_pack<P>(dx + k * P, dxv);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// MaxPool2d's window of output (oh, ow) over a channel whose value (ih, iw) is x[(ih W + iw) step] (step 1 in NCHW, C
// channels-last): the first maximum in row-major window order wins (as the CPU); arg = ih W + iw, the plane index.
template <typename S>
__device__ __forceinline__ float maxpool_window_max(const S* __restrict__ x, int64_t step, int H, int W, int oh, int ow,
                                                    int K, int stride, int pad, int32_t& arg) {
  const int h0 = oh * stride - pad, w0 = ow * stride - pad;
  const int h_lo = max(h0, 0), h_hi = min(h0 + K, H), w_lo = max(w0, 0), w_hi = min(w0 + K, W);
  float best = -INFINITY;
  arg = -1;
  for (int ih = h_lo; ih < h_hi; ih++)
    for (int iw = w_lo; iw < w_hi; iw++) {
      const float v = to_float(x[(ih * W + iw) * step]);
      if (v > best || arg < 0) {
        best = v;
        arg = ih * W + iw;
      }
    }
  return best;
}

// MaxPool2d backward's gather for input (ih, iw) of a channel whose dout / idx of output (oh, ow) are at
// ((oh OW + ow) step): dout summed over the windows that contain it and whose idx names it, in increasing (oh, ow)
// order, i.e. the order of the CPU's scatter loop: the same float adds in the same order, bit for bit.
template <typename S>
__device__ __forceinline__ float maxpool_gather(const S* __restrict__ dy, const int32_t* __restrict__ id, int64_t step,
                                                int ih, int iw, int W, int OH, int OW, int K, int stride, int pad) {
  const int self = ih * W + iw;
  // windows oh with oh*stride - pad <= ih < oh*stride - pad + K, i.e. ceil((ih+pad-K+1)/stride) <= oh <=
  // floor((ih+pad)/stride); ih + pad >= 0 always
  const int hn = ih + pad - K + 1, wn = iw + pad - K + 1;
  const int oh_lo = hn <= 0 ? 0 : (hn + stride - 1) / stride;
  const int oh_hi = min(OH - 1, (ih + pad) / stride);
  const int ow_lo = wn <= 0 ? 0 : (wn + stride - 1) / stride;
  const int ow_hi = min(OW - 1, (iw + pad) / stride);
  float acc = 0.0f;
  for (int oh = oh_lo; oh <= oh_hi; oh++)
    for (int ow = ow_lo; ow <= ow_hi; ow++) {
      const int64_t o = (static_cast<int64_t>(oh) * OW + ow) * step;
      if (id[o] == self) acc += to_float(dy[o]);
    }
  return acc;
}

// MaxPool2d forward: one thread per output (maxpool_window_max).
template <typename S>
__global__ void maxpool_forward_kernel(S* __restrict__ out, int32_t* __restrict__ idx, const S* __restrict__ inp,
                                       int64_t planes, int H, int W, int OH, int OW, int K, int stride, int pad) {
  const int64_t OHW = static_cast<int64_t>(OH) * OW;
  HPCT_FOR_PLANES(p, planes) {
    const S* x = inp + p * H * W;
    HPCT_FOR_POSITIONS(j, OHW) {
      const int jj = static_cast<int>(j);  // < OH*OW < 2^31: 32-bit division
      int32_t arg;
      const float best = maxpool_window_max(x, 1, H, W, jj / OW, jj % OW, K, stride, pad, arg);
      out[p * OHW + j] = from_float<S>(best);  // a value of the input: exact
      idx[p * OHW + j] = arg;
    }
  }
}

// MaxPool2d backward as a gather (no atomics, maxpool_gather), one thread per input.
template <typename S>
__global__ void maxpool_backward_kernel(S* __restrict__ dinp, const S* __restrict__ dout,
                                        const int32_t* __restrict__ idx, int64_t planes, int H, int W, int OH, int OW,
                                        int K, int stride, int pad) {
  const int64_t HW = static_cast<int64_t>(H) * W, OHW = static_cast<int64_t>(OH) * OW;
  HPCT_FOR_PLANES(p, planes) {
    const S* dy = dout + p * OHW;
    const int32_t* id = idx + p * OHW;
    HPCT_FOR_POSITIONS(j, HW) {
      const int jj = static_cast<int>(j);  // < H*W < 2^31: 32-bit division
      dinp[p * HW + j] = from_float<S>(maxpool_gather(dy, id, 1, jj / W, jj % W, W, OH, OW, K, stride, pad));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Global average pooling forward: one warp per plane, a double sum in a fixed (lane-strided, then shuffle-tree) order.
template <typename S>
__global__ void global_avgpool_forward_kernel(S* __restrict__ out, const S* __restrict__ inp, int64_t planes, int HW) {
  const int lane = threadIdx.x % 32;
  const int64_t warps_per_block = blockDim.x / 32;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / 32; p < planes;
       p += static_cast<int64_t>(gridDim.x) * warps_per_block) {
    const S* x = inp + p * HW;
    double s = 0.0;
    for (int i = lane; i < HW; i += 32) s += static_cast<double>(to_float(x[i]));
    s = warp_sum(s);
    if (lane == 0) out[p] = from_float<S>(static_cast<float>(s / HW));
  }
}

template <typename S>
__global__ void global_avgpool_backward_kernel(S* __restrict__ dinp, const S* __restrict__ dout, int64_t planes,
                                               int HW) {
  HPCT_FOR_PLANES(p, planes) {
    const S g = from_float<S>(to_float(dout[p]) / static_cast<float>(HW));
    S* dx = dinp + p * HW;
    HPCT_FOR_POSITIONS(i, HW) dx[i] = g;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// dst[i] += src[i] in float: the bf16 filter gradient that cuDNN computed into a scratch, added to the fp32 master
// gradient (cuda_resnet.cu, conv2d_backward). 16-byte packs of src where aligned (for_each_pack).
template <typename S>
__global__ void accumulate_float_kernel(float* __restrict__ dst, const S* __restrict__ src, int64_t n, int64_t packs) {
  for_each_pack<kCastPackResnet>(n, packs, [&](int64_t i, auto w) {
    constexpr int W = decltype(w)::value;
    const Pack<S, W> x = load_pack<W>(src + i);
    Pack<float, W> d = load_pack<W>(dst + i);
#pragma unroll
    for (int j = 0; j < W; j++) d.v[j] += to_float(x.v[j]);
    store_pack<W>(dst + i, d);
  });
}

// ---- launch geometry (host) -----------------------------------------------------------------------------------------
// Plane launches: plane p in [0, planes), position i in [0, len) of that plane. x covers the positions of a plane in
// warps (at most kPlaneThreads), y fills the block with planes.
LaunchShape plane_shape(int64_t planes, int64_t len) {
  int64_t tx = ((len + 31) / 32) * 32;
  if (tx > kPlaneThreads) tx = kPlaneThreads;
  if (tx < 32) tx = 32;
  const int64_t ty = kPlaneThreads / tx;
  int64_t gx = (len + tx - 1) / tx;
  if (gx > kMaxGridX) gx = kMaxGridX;
  if (gx < 1) gx = 1;
  int64_t gy = (planes + ty - 1) / ty;
  if (gy > kMaxGridY) gy = kMaxGridY;
  if (gy < 1) gy = 1;
  return {{static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1},
          {static_cast<unsigned>(tx), static_cast<unsigned>(ty), 1},
          0};
}

// One block of kChannelReduceThreads per channel (bn_backward, bn_backward_local_sums, channel_sum_accumulate).
LaunchShape channel_reduce_shape(int C) { return {{static_cast<unsigned>(C), 1, 1}, {kChannelReduceThreads, 1, 1}, 0}; }
// The two stages of a per-channel reduction of C channels of N*HW values (the statistics: 3 doubles per group and
// channel; the gradient sums: 2) with `partials_bytes` of partials: groups of at least kBnMinGroupValues values, at
// most kBnMaxGroups per channel and no more than fit.
struct BnGroupsLaunch {
  LaunchShape partial, finish;
  int64_t groups = 1, per_group = 0;
};
// The groups of a channel's `total` values (either layout): at least min_per values each, at most kBnMaxGroups and no
// more than `partials_bytes` hold; the finish stage, one warp per channel.
BnGroupsLaunch bn_groups_split(int64_t total, int C, int64_t partials_bytes, int doubles_per_group, int64_t min_per) {
  int64_t max_groups = partials_bytes /
                       (doubles_per_group * static_cast<int64_t>(C) * static_cast<int64_t>(sizeof(double)));
  max_groups = max_groups < 1 ? 1 : (max_groups > kBnMaxGroups ? kBnMaxGroups : max_groups);
  int64_t per = (total + max_groups - 1) / max_groups;
  if (per < min_per) per = min_per;
  BnGroupsLaunch l;
  l.groups = total == 0 ? 1 : (total + per - 1) / per;
  l.per_group = per;
  l.finish = {{static_cast<unsigned>(C), 1, 1}, {32, 1, 1}, 0};
  return l;
}
BnGroupsLaunch bn_groups_launch(int N, int C, int HW, int64_t partials_bytes, int doubles_per_group) {
  BnGroupsLaunch l = bn_groups_split(static_cast<int64_t>(N) * HW, C, partials_bytes, doubles_per_group,
                                     kBnMinGroupValues);
  l.partial = {{static_cast<unsigned>(l.groups), static_cast<unsigned>(C), 1}, {kBnGroupThreads, 1, 1}, 0};
  return l;
}

// One thread per channel (bn_mean_rstd, bn_merge, bn_update_running).
unsigned blocks_for(int n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }
LaunchShape per_channel_shape(int C) {
  return {{blocks_for(C, kPerChannelThreads), 1, 1}, {kPerChannelThreads, 1, 1}, 0};
}

// accumulate_float_kernel over n elements: its packs argument and launch.
int64_t accumulate_packs(int64_t n, const float* dst, const void* src) {
  return vector_packs(n, kCastPackResnet, {dst, src});
}
LaunchShape accumulate_shape(int64_t n, int64_t packs) { return pack_shape(n, packs, kCastPackResnet); }

// One warp per plane, grid-stride over the planes.
LaunchShape global_avgpool_forward_shape(int64_t planes) {
  return grid_stride_shape(planes * 32, kAvgPoolThreads, kAvgPoolMaxBlocks);
}

}  // namespace
}  // namespace hpct::kernels::cuda
