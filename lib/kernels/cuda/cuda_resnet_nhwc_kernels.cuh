#pragma once
// The CUDA backend's ResNet kernels for channels-last activations (ExecContext::channels_last: every activation and
// activation gradient (N,H,W,C), kernels.hpp), and the filter reorders that cuDNN's NHWC convolutions need. The NCHW
// kernels' twins (cuda_resnet_kernels.cuh, whose header holds for these too: device code compiled by nvcc through
// cuda_resnet.cu and, as plain C++, by the host emulation, tests/cuda_emu/test_emu_resnet_nhwc.cpp, which runs every
// kernel here at the geometry below against the CPU backend's channels-last ops; no float atomics).
//
// Legend: a "position" is one (n, h, w) of an activation, its C channels contiguous; P positions = N*HW.
//
// BatchNorm's statistics and gradient sums are column reductions over positions: a block of kNhwcChannels x
// kNhwcRows threads takes kNhwcChannels neighbouring channels (x: a warp's lanes over contiguous channels, so a warp
// reads one position's channels in one transaction) of a group of positions (y: kNhwcRows positions in flight, each
// thread striding over the group's positions in order), sums in double, and adds its rows in row order in shared
// memory. It writes the NCHW kernels' partials layout (partials[(k C + c) G + g]), so the second stages are theirs
// (bn_stats_finish_kernel, bn_grad_finish_kernel): deterministic, the order a function of the shape only.
// The pointwise passes walk the tensor in 16-byte packs of consecutive channels (P | C, every pointer aligned:
// nhwc_pack_width), the channel of a pack's first value (k P) mod C; each value gets the NCHW kernels' float formula.
// Pooling: one thread per output (max-pool forward, average-pool forward over (n, c)) or per input (the max-pool
// backward's gather, the average-pool backward), consecutive threads over consecutive channels.
#include <cstdint>

#include "kernels/cuda/cuda_resnet_kernels.cuh"

namespace hpct::kernels::cuda {
namespace {  // internal linkage: each includer (the .cu, the emulated test) compiles its own copy

constexpr int kNhwcChannels = 32;                   // channels of a column-reduction block (x)
constexpr int kNhwcRows = 8;                        // positions in flight per column-reduction block (y)
constexpr int64_t kBnNhwcMinGroupPositions = 1024;  // positions per group at least: 128 per thread and pass
constexpr int kNhwcPointwiseThreads = 256;          // the pointwise and pooling launches (grid-stride)

// ---------------------------------------------------------------------------------------------------------------
// BatchNorm2d statistics, stage one: block (g, t) takes channels t*32 + threadIdx.x of the positions
// [g per_group, (g + 1) per_group): (count, mean, M2) two-pass in double (the sum, then the squared deviations from
// the group's mean), written as bn_stats_partial_kernel writes them.
template <typename S>
__global__ void __launch_bounds__(kNhwcChannels* kNhwcRows)
    bn_nhwc_stats_partial_kernel(double* __restrict__ partials, const S* __restrict__ inp, int C, int64_t positions,
                                 int64_t per_group) {
  HPCT_SHARED(double, rows, [kNhwcRows][kNhwcChannels]);
  HPCT_SHARED(double, group_mean, [kNhwcChannels]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.y * kNhwcChannels + tx;
  const bool live = c < C;
  const int64_t G = gridDim.x;
  const int64_t j0 = blockIdx.x * per_group, j1 = j0 + per_group < positions ? j0 + per_group : positions;
  const double count = static_cast<double>(j1 - j0);
  double s = 0.0;
  if (live)
    for (int64_t j = j0 + ty; j < j1; j += kNhwcRows) s += static_cast<double>(to_float(inp[j * C + c]));
  rows[ty][tx] = s;
  __syncthreads();
  if (ty == 0) {
    double t = 0.0;
    for (int r = 0; r < kNhwcRows; r++) t += rows[r][tx];
    group_mean[tx] = t / count;
  }
  __syncthreads();
  const double mean = group_mean[tx];
  double q = 0.0;
  if (live)
    for (int64_t j = j0 + ty; j < j1; j += kNhwcRows) {
      const double dx = static_cast<double>(to_float(inp[j * C + c])) - mean;
      q += dx * dx;
    }
  rows[ty][tx] = q;  // the first sum's rows were read before the barrier above
  __syncthreads();
  if (ty == 0 && live) {
    double t = 0.0;
    for (int r = 0; r < kNhwcRows; r++) t += rows[r][tx];
    partials[(0 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = count;
    partials[(1 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = mean;
    partials[(2 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = t;
  }
}

// The gradient sums, stage one (as bn_grad_partial_kernel, over the statistics' column groups): sum dout and
// sum dout * xhat in double, xhat = (x - mean) * rstd in float; kRelu: dout masked by relu_out (bn_masked_dy).
template <typename S, bool kRelu = false>
__global__ void __launch_bounds__(kNhwcChannels* kNhwcRows)
    bn_nhwc_grad_partial_kernel(double* __restrict__ partials, const S* __restrict__ dout,
                                const S* __restrict__ relu_out, const S* __restrict__ inp,
                                const float* __restrict__ save_mean, const float* __restrict__ save_rstd, int C,
                                int64_t positions, int64_t per_group) {
  HPCT_SHARED(double, rows, [2][kNhwcRows][kNhwcChannels]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.y * kNhwcChannels + tx;
  const bool live = c < C;
  const int64_t G = gridDim.x;
  const int64_t j0 = blockIdx.x * per_group, j1 = j0 + per_group < positions ? j0 + per_group : positions;
  double a = 0.0, b = 0.0;
  if (live) {
    const float mean = save_mean[c], rstd = save_rstd[c];
    for (int64_t j = j0 + ty; j < j1; j += kNhwcRows) {
      const int64_t off = j * C + c;
      const float dy = bn_masked_dy<kRelu>(dout, relu_out, off);
      a += static_cast<double>(dy);
      b += static_cast<double>(dy) * static_cast<double>((to_float(inp[off]) - mean) * rstd);
    }
  }
  rows[0][ty][tx] = a;
  rows[1][ty][tx] = b;
  __syncthreads();
  if (ty == 0 && live) {
    double ta = 0.0, tb = 0.0;
    for (int r = 0; r < kNhwcRows; r++) {
      ta += rows[0][r][tx];
      tb += rows[1][r][tx];
    }
    partials[(0 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = ta;
    partials[(1 * static_cast<int64_t>(C) + c) * G + blockIdx.x] = tb;
  }
}

// out = (x - m) * scale + shift over `packs` packs of P channels, factors(c, m, scale, shift) giving a channel's
// (bn_affine_plane's formula and bn_epilogue: kRelu, or the residual add and ReLU where residual is given).
template <int P, bool kRelu, typename S, typename Factors>
__device__ __forceinline__ void bn_nhwc_affine(S* __restrict__ out, const S* __restrict__ inp,
                                               const S* __restrict__ residual, int64_t packs, int C,
                                               Factors&& factors) {
  HPCT_GRID_STRIDE_LOOP(k, packs) {
    const int c0 = static_cast<int>((k * P) % C);
    const Pack<S, P> xv = load_pack<P>(inp + k * P);
    Pack<S, P> rv{};
    if (residual) rv = load_pack<P>(residual + k * P);
    Pack<S, P> ov;
#pragma unroll
    for (int j = 0; j < P; j++) {
      float m, scale, shift;
      factors(c0 + j, m, scale, shift);
      ov.v[j] = bn_epilogue<kRelu>((to_float(xv.v[j]) - m) * scale + shift, residual, rv.v[j]);
    }
    store_pack<P>(out + k * P, ov);
  }
}

// out = (x - mean) * (rstd * gamma) + beta (bn_apply_kernel's factors).
template <int P, typename S, bool kRelu = false>
__global__ void bn_nhwc_apply_kernel(S* __restrict__ out, const S* __restrict__ inp, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, const S* __restrict__ gamma,
                                     const S* __restrict__ beta, int64_t packs, int C,
                                     const S* __restrict__ residual = nullptr) {
  bn_nhwc_affine<P, kRelu>(out, inp, residual, packs, C, [&](int c, float& m, float& scale, float& shift) {
    m = mean[c];
    scale = rstd[c] * to_float(gamma[c]);
    shift = to_float(beta[c]);
  });
}

// Evaluation: out = (x - running_mean) * bn_eval_scale + beta (bn_eval_kernel's factors).
template <int P, typename S, bool kRelu = false>
__global__ void bn_nhwc_eval_kernel(S* __restrict__ out, const S* __restrict__ inp, const S* __restrict__ gamma,
                                    const S* __restrict__ beta, const float* __restrict__ running_mean,
                                    const float* __restrict__ running_var, int64_t packs, int C, float eps,
                                    const S* __restrict__ residual = nullptr) {
  bn_nhwc_affine<P, kRelu>(out, inp, residual, packs, C, [&](int c, float& m, float& scale, float& shift) {
    m = running_mean[c];
    scale = bn_eval_scale(running_var[c], eps, to_float(gamma[c]));
    shift = to_float(beta[c]);
  });
}

// dinp from the gradient sums over `count` values per channel (bn_backward_apply_kernel's formula; kRelu: dout masked
// by relu_out).
template <int P, typename S, bool kRelu = false>
__global__ void bn_nhwc_backward_apply_kernel(S* __restrict__ dinp, const S* __restrict__ dout,
                                              const S* __restrict__ relu_out, const S* __restrict__ inp,
                                              const float* __restrict__ save_mean, const float* __restrict__ save_rstd,
                                              const S* __restrict__ gamma, const float* __restrict__ global_sums,
                                              double count, int64_t packs, int C) {
  HPCT_GRID_STRIDE_LOOP(k, packs) {
    const int c0 = static_cast<int>((k * P) % C);
    const Pack<S, P> xv = load_pack<P>(inp + k * P), dyv = load_pack<P>(dout + k * P);
    Pack<S, P> yv{};
    if constexpr (kRelu) yv = load_pack<P>(relu_out + k * P);
    Pack<S, P> dxv;
#pragma unroll
    for (int j = 0; j < P; j++) {
      const int c = c0 + j;
      const BnDinpFactors f = bn_dinp_factors(c, save_mean, save_rstd, to_float(gamma[c]), global_sums, count);
      dxv.v[j] = from_float<S>(bn_dinp_value(bn_relu_masked<kRelu>(to_float(dyv.v[j]), yv.v[j]), to_float(xv.v[j]), f));
    }
    store_pack<P>(dinp + k * P, dxv);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// MaxPool2d forward, one thread per output (n, oh, ow, c): maxpool_window_max over the channel's values (step C);
// idx = ih*W + iw, the plane index as in NCHW.
template <typename S>
__global__ void maxpool_nhwc_forward_kernel(S* __restrict__ out, int32_t* __restrict__ idx, const S* __restrict__ inp,
                                            int64_t total, int C, int H, int W, int OH, int OW, int K, int stride,
                                            int pad) {
  HPCT_GRID_STRIDE_LOOP(o, total) {
    const int c = static_cast<int>(o % C);
    const int64_t r = o / C;  // (n OH + oh) OW + ow
    const int ow = static_cast<int>(r % OW);
    const int64_t r2 = r / OW;
    const int oh = static_cast<int>(r2 % OH);
    const int64_t n = r2 / OH;
    int32_t arg;
    const float best = maxpool_window_max(inp + n * H * W * C + c, C, H, W, oh, ow, K, stride, pad, arg);
    out[o] = from_float<S>(best);  // a value of the input: exact
    idx[o] = arg;
  }
}

// MaxPool2d backward as a gather (maxpool_gather over the channel's outputs, step C), one thread per input
// (n, ih, iw, c).
template <typename S>
__global__ void maxpool_nhwc_backward_kernel(S* __restrict__ dinp, const S* __restrict__ dout,
                                             const int32_t* __restrict__ idx, int64_t total, int C, int H, int W,
                                             int OH, int OW, int K, int stride, int pad) {
  HPCT_GRID_STRIDE_LOOP(i, total) {
    const int c = static_cast<int>(i % C);
    const int64_t r = i / C;  // (n H + ih) W + iw
    const int iw = static_cast<int>(r % W);
    const int64_t r2 = r / W;
    const int ih = static_cast<int>(r2 % H);
    const int64_t n = r2 / H;
    const int64_t base = n * OH * OW * C + c;
    dinp[i] = from_float<S>(maxpool_gather(dout + base, idx + base, C, ih, iw, W, OH, OW, K, stride, pad));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Global average pooling forward, one thread per (n, c): a double sum over the positions in order.
template <typename S>
__global__ void global_avgpool_nhwc_forward_kernel(S* __restrict__ out, const S* __restrict__ inp, int64_t NC, int C,
                                                   int HW) {
  HPCT_GRID_STRIDE_LOOP(t, NC) {
    const int c = static_cast<int>(t % C);
    const S* x = inp + (t / C) * HW * C + c;
    double s = 0.0;
    for (int i = 0; i < HW; i++) s += static_cast<double>(to_float(x[static_cast<int64_t>(i) * C]));
    out[t] = from_float<S>(static_cast<float>(s / HW));
  }
}

// Backward: dinp[n, i, c] = dout[n, c] / HW (global_avgpool_backward_kernel's value), one thread per input.
template <typename S>
__global__ void global_avgpool_nhwc_backward_kernel(S* __restrict__ dinp, const S* __restrict__ dout, int64_t total,
                                                    int C, int HW) {
  HPCT_GRID_STRIDE_LOOP(i, total) {
    const int64_t n = i / (static_cast<int64_t>(HW) * C);
    const int c = static_cast<int>(i % C);
    dinp[i] = from_float<S>(to_float(dout[n * C + c]) / static_cast<float>(HW));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The data pipeline's fp32 NCHW images into channels-last activations: out[n, i, c] = images[n, c, i] rounded to S,
// one thread per output.
template <typename S>
__global__ void images_to_nhwc_kernel(S* __restrict__ out, const float* __restrict__ images, int64_t total, int C,
                                      int HW) {
  HPCT_GRID_STRIDE_LOOP(o, total) {
    const int c = static_cast<int>(o % C);
    const int64_t r = o / C;  // n HW + i
    const int64_t n = r / HW;
    const int i = static_cast<int>(r - n * HW);
    out[o] = from_float<S>(images[(n * C + c) * HW + i]);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// cuDNN's NHWC convolutions take the filter channels-last too (OC, KH, KW, C): the stored (OC, C, KH, KW) weights are
// reordered into the workspace before the convolution (a copy, exact), and its filter gradient comes back in that
// order and is added to the (OC, C, KH, KW) fp32 gradient in fp32. For 1x1 kernels the two orders coincide and
// neither runs (cuda_resnet.cu).
// dst[oc, r, c] = src[oc, c, r], r over the KH*KW taps; one thread per dst element.
template <typename S>
__global__ void filter_to_channels_last_kernel(S* __restrict__ dst, const S* __restrict__ src, int64_t total, int C,
                                               int KHW) {
  HPCT_GRID_STRIDE_LOOP(e, total) {
    const int c = static_cast<int>(e % C);
    const int64_t q = e / C;  // oc KHW + r
    const int r = static_cast<int>(q % KHW);
    const int64_t oc = q / KHW;
    dst[e] = src[(oc * C + c) * KHW + r];
  }
}
// dweight[oc, c, r] += float(src[oc, r, c]); one thread per dweight element.
template <typename S>
__global__ void accumulate_channels_last_filter_kernel(float* __restrict__ dweight, const S* __restrict__ src,
                                                       int64_t total, int C, int KHW) {
  HPCT_GRID_STRIDE_LOOP(e, total) {
    const int r = static_cast<int>(e % KHW);
    const int64_t q = e / KHW;  // oc C + c
    const int c = static_cast<int>(q % C);
    const int64_t oc = q / C;
    dweight[e] += to_float(src[(oc * KHW + r) * C + c]);
  }
}

// Conv2d bias on channels-last outputs: out[i] = bias[i mod OC] (kSeed) or out[i] += bias[i mod OC] (as
// plane_bias_kernel); one thread per element.
template <bool kSeed, typename S>
__global__ void nhwc_bias_kernel(S* __restrict__ out, const S* __restrict__ bias, int64_t total, int OC) {
  HPCT_GRID_STRIDE_LOOP(i, total) {
    const S b = bias[i % OC];
    if constexpr (kSeed) {
      out[i] = b;
    } else {
      out[i] = from_float<S>(to_float(out[i]) + to_float(b));
    }
  }
}
// dbias[c] += sum over the positions of dout[., c] in double, in position order; one thread per channel (consecutive
// threads read consecutive channels). A ResNet's convolutions have no bias (a BatchNorm follows each): kept simple.
template <typename S>
__global__ void nhwc_channel_sum_accumulate_kernel(float* __restrict__ dbias, const S* __restrict__ dout,
                                                   int64_t positions, int C) {
  HPCT_GRID_STRIDE_LOOP(c, C) {
    double acc = 0.0;
    for (int64_t j = 0; j < positions; j++) acc += static_cast<double>(to_float(dout[j * C + c]));
    dbias[c] += static_cast<float>(acc);
  }
}

// ---- launch geometry (host) -----------------------------------------------------------------------------------------
// The two stages of a channels-last per-channel reduction over N*HW positions (3 doubles per group and channel for the
// statistics, 2 for the gradient sums) with `partials_bytes` of partials: groups of at least kBnNhwcMinGroupPositions
// positions, at most kBnMaxGroups and no more than fit; blocks (group, 32-channel tile); the finish as bn_groups_launch.
BnGroupsLaunch bn_nhwc_groups_launch(int N, int C, int HW, int64_t partials_bytes, int doubles_per_group) {
  BnGroupsLaunch l = bn_groups_split(static_cast<int64_t>(N) * HW, C, partials_bytes, doubles_per_group,
                                     kBnNhwcMinGroupPositions);
  l.partial = {{static_cast<unsigned>(l.groups), static_cast<unsigned>((C + kNhwcChannels - 1) / kNhwcChannels), 1},
               {kNhwcChannels, kNhwcRows, 1},
               0};
  return l;
}

// The pack width of the channels-last pointwise passes: kPack<S> where C is a multiple of it (a pack never crosses a
// position's channels) and every pointer is 16-byte aligned, else 1.
template <typename S>
int nhwc_pack_width(int C, std::initializer_list<const void*> ptrs) {
  return pack_width<S>(C, ptrs);
}

// A grid-stride launch over n threads' worth of work.
LaunchShape nhwc_pointwise_shape(int64_t n) { return grid_stride_shape(n, kNhwcPointwiseThreads); }

}  // namespace
}  // namespace hpct::kernels::cuda
