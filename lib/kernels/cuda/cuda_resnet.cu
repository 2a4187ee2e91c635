// CUDA backend: the convolutional layers of a ResNet, NCHW (kernels.hpp has the contracts, cpu/cpu_conv.cpp the
// reference these ops must match). Legend: N images, C input channels, H W input size, OC output channels, KH KW
// kernel, OH OW output size, HW = H*W, OHW = OH*OW, a "plane" is one (n, c) image channel of HW contiguous floats.
// Every op is asynchronous on stream_of(ctx), allocates nothing on the device (scratch comes from the caller) and
// never reads device data on the host. No float atomics anywhere: every reduction runs in a fixed order, so a run
// reproduces itself bit for bit on the same GPU.
//
// Conv2d: cuDNN 9's legacy convolution API (cudnn_cnn.h), fp32 NCHW, CUDNN_CROSS_CORRELATION (torch's Conv2d),
// groups 1, dilation 1. The math type follows ctx.precision (exec_context.hpp): fp32 -> CUDNN_FMA_MATH (no TF32 tensor
// cores: fp32 results within the tests' 1e-4-level tolerances); tf32 and bf16 -> CUDNN_TENSOR_OP_MATH (TF32 tensor cores
// on fp32 data; the legacy API has no bf16 conversion of fp32 tensors); fp16 -> CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
// (fp32 data converted to fp16 for the tensor cores).
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7: no benchmarking, no device allocation),
// filtered to CUDNN_DETERMINISTIC, supported ones (under fp32 also non-tensor-op) whose workspace is at most kMaxWorkspaceBytes, in the
// heuristics' order; a known deterministic algorithm (IMPLICIT_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1) is appended
// as the last resort. Each call runs the FIRST candidate whose workspace fits the one passed in, so with the size
// conv2d_workspace_floats returns (the largest of the three first choices) every phase runs its preferred algorithm,
// whatever else shares the workspace; a smaller workspace falls back to a cheaper candidate, and when none fits the
// op fails naming the sizes. The choice depends only on the shape, the GPU model and the workspace size: the same
// bits on every run. Bias (forward) is a separate add kernel; dbias is our own per-channel reduction in double.
// Handles: one cudnnHandle_t per (host thread, device), created on first use, set to the op's stream each call;
// descriptors and candidate lists are cached per (thread, device, shape). Both are deliberately never destroyed:
// destroying cuDNN handles from thread_local/static destructors at process exit can run after the CUDA runtime has
// torn down (PyTorch leaks its handles for the same reason); the caches hold one entry per distinct conv shape.
//
// BatchNorm2d (our kernels, not cuDNN's): per-channel statistics and gradient sums run one block per channel,
// kReduceThreads threads, each thread walking the channel's N*HW values in a fixed strided order with a double
// accumulator, then a fixed-shape block reduction (cuda_common.cuh block_sum): deterministic. Statistics are two-pass
// in double (mean, then M2 = sum (x - mean)^2), written as float (count, mean, M2) triples like the CPU; normalisation
// uses the biased M2 / count, running_var the unbiased M2 / (count - 1); SyncBN's merge folds Chan's formula
// (batchnorm_stats.hpp) over the ranks in rank order, one thread per channel. Pointwise passes (apply, eval, the
// SyncBN dinp, pooling backward, the conv bias) use a "plane" launch: threadIdx.x/blockIdx.x over the positions of a
// plane, threadIdx.y/blockIdx.y over planes, so that the channel of a thread is a plane index modulo C (no 64-bit
// division per element) and small planes (7x7) still fill the block.
//
// The CPU backend's host-side checks of statistics values (count > 0 in forward_apply, count > 1 in update_running)
// cannot run here without reading device memory: a zero count gives inf/NaN in the outputs instead of an error.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "kernels/batchnorm_stats.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.hpp"

#define CUDNN_CHECK(expr)                                                                                              \
  do {                                                                                                                 \
    cudnnStatus_t hpct_cudnn_rc_ = (expr);                                                                             \
    if (hpct_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                                                        \
      ::hpct::throw_error(__FILE__, __LINE__,                                                                          \
                          fmt::format("`{}` failed: cuDNN status {} ({})", #expr, cudnnGetErrorString(hpct_cudnn_rc_), \
                                      static_cast<int>(hpct_cudnn_rc_)));                                              \
  } while (0)

namespace hpct::kernels::cuda {
namespace {

constexpr int kReduceThreads = 512;                     // one block per channel for the BatchNorm / dbias reductions
constexpr int kPlaneThreads = 256;                      // threads of a plane launch (x * y)
constexpr int kMaxGridY = 65535;                        // gridDim.y limit; the plane loops stride over the rest
constexpr int kMaxGridX = 65535;                        // kept modest: the position loops stride over the rest
constexpr size_t kMaxWorkspaceBytes = size_t(1) << 30;  // candidates needing more (large FFTs) are skipped

// ---------------------------------------------------------------------------------------------------------------
// Plane launches: plane p in [0, planes), position i in [0, len) of that plane.
struct PlaneLaunch {
  dim3 grid, block;
};

PlaneLaunch plane_launch(int64_t planes, int64_t len) {
  // x covers the positions of a plane in warps (at most kPlaneThreads), y fills the block with planes
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
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

// Loops of a thread in a plane launch.
#define HPCT_FOR_PLANES(p, planes)                                                            \
  for (int64_t p = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; p < (planes); \
       p += static_cast<int64_t>(gridDim.y) * blockDim.y)
#define HPCT_FOR_POSITIONS(i, len)                                                         \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (len); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Calls f(offset) for every value of channel c of an (N, C, HW) tensor that this thread owns in a one-block-per-channel
// reduction: flat index j = n*HW + i over the channel's N*HW values, j = threadIdx.x, threadIdx.x + blockDim.x, ...
// (n, i) advance incrementally, so the loop has no division; the order is fixed for a given block size.
template <typename F>
__device__ __forceinline__ void for_channel_values(int c, int N, int C, int HW, F&& f) {
  const int S = blockDim.x;
  int n = static_cast<int>(threadIdx.x) / HW, i = static_cast<int>(threadIdx.x) % HW;
  const int dn = S / HW, di = S % HW;
  while (n < N) {
    f((static_cast<int64_t>(n) * C + c) * HW + i);
    i += di;
    n += dn;
    if (i >= HW) {
      i -= HW;
      n++;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Conv2d bias: out[n, oc, :] += bias[oc], plane p = n*OC + oc.
__global__ void add_plane_bias_kernel(float* __restrict__ out, const float* __restrict__ bias, int64_t planes, int C,
                                      int64_t len) {
  HPCT_FOR_PLANES(p, planes) {
    const float b = bias[p % C];
    float* o = out + p * len;
    HPCT_FOR_POSITIONS(i, len) o[i] += b;
  }
}

// dbias[c] += sum over (n, i) of dout[n, c, i], in double; one block per channel.
__global__ void channel_sum_accumulate_kernel(float* __restrict__ dbias, const float* __restrict__ dout, int N, int C,
                                              int HW) {
  __shared__ double shared[32];
  const int c = blockIdx.x;
  double acc = 0.0;
  for_channel_values(c, N, C, HW, [&](int64_t off) { acc += static_cast<double>(dout[off]); });
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) dbias[c] += static_cast<float>(acc);
}

// ---------------------------------------------------------------------------------------------------------------
// BatchNorm2d statistics: stats[c] = (count, mean, M2) two-pass in double; optionally save_mean / save_rstd from the
// float triple exactly as the CPU's apply_channel: mean = st[1], rstd = float(1 / sqrt(double(st[2]) / st[0] + eps)).
__global__ void bn_stats_kernel(float* __restrict__ stats, float* __restrict__ save_mean, float* __restrict__ save_rstd,
                                const float* __restrict__ inp, int N, int C, int HW, float eps) {
  __shared__ double shared[32];
  const int c = blockIdx.x;
  double s = 0.0;
  for_channel_values(c, N, C, HW, [&](int64_t off) { s += static_cast<double>(inp[off]); });
  s = block_sum(s, shared);
  const double count = static_cast<double>(N) * HW;
  const double mean = s / count;
  double q = 0.0;
  for_channel_values(c, N, C, HW, [&](int64_t off) {
    const double dx = static_cast<double>(inp[off]) - mean;
    q += dx * dx;
  });
  q = block_sum(q, shared);
  if (threadIdx.x == 0) {
    const float st0 = static_cast<float>(count), st1 = static_cast<float>(mean), st2 = static_cast<float>(q);
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

// out = (x - mean) * (rstd * gamma) + beta, plane p = n*C + c.
__global__ void bn_apply_kernel(float* __restrict__ out, const float* __restrict__ inp, const float* __restrict__ mean,
                                const float* __restrict__ rstd, const float* __restrict__ gamma,
                                const float* __restrict__ beta, int64_t planes, int C, int HW) {
  HPCT_FOR_PLANES(p, planes) {
    const int c = static_cast<int>(p % C);
    const float m = mean[c], scale = rstd[c] * gamma[c], shift = beta[c];
    const float* x = inp + p * HW;
    float* o = out + p * HW;
    HPCT_FOR_POSITIONS(i, HW) o[i] = (x[i] - m) * scale + shift;
  }
}

// Evaluation: out = (x - running_mean) * (float(1 / sqrt(double(running_var) + eps)) * gamma) + beta.
__global__ void bn_eval_kernel(float* __restrict__ out, const float* __restrict__ inp, const float* __restrict__ gamma,
                               const float* __restrict__ beta, const float* __restrict__ running_mean,
                               const float* __restrict__ running_var, int64_t planes, int C, int HW, float eps) {
  HPCT_FOR_PLANES(p, planes) {
    const int c = static_cast<int>(p % C);
    const float m = running_mean[c];
    const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + static_cast<double>(eps))) *
                        gamma[c];
    const float shift = beta[c];
    const float* x = inp + p * HW;
    float* o = out + p * HW;
    HPCT_FOR_POSITIONS(i, HW) o[i] = (x[i] - m) * scale + shift;
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

// (sum dout, sum dout * xhat) of channel c in double, xhat = (x - mean) * rstd in float (as the CPU); every thread of
// the block gets both sums.
__device__ __forceinline__ void bn_grad_sums(const float* __restrict__ dout, const float* __restrict__ inp, float mean,
                                             float rstd, int c, int N, int C, int HW, double* shared, double& sum_dy,
                                             double& sum_dy_xhat) {
  double a = 0.0, b = 0.0;
  for_channel_values(c, N, C, HW, [&](int64_t off) {
    const float dy = dout[off];
    a += static_cast<double>(dy);
    b += static_cast<double>(dy) * static_cast<double>((inp[off] - mean) * rstd);
  });
  sum_dy = block_sum(a, shared);
  sum_dy_xhat = block_sum(b, shared);
}

// dx = gamma rstd (dy - sum_dy / count - xhat sum_dy_xhat / count), in float, as the CPU's dinp_channel.
__device__ __forceinline__ float bn_dinp_value(float dy, float x, float mean, float rstd, float k0, float mdy,
                                               float mdyx) {
  return k0 * (dy - mdy - (x - mean) * rstd * mdyx);
}

// Single-process backward: one block per channel computes the sums, accumulates dgamma / dbeta, then writes dinp.
__global__ void bn_backward_kernel(float* __restrict__ dinp, float* __restrict__ dgamma, float* __restrict__ dbeta,
                                   const float* __restrict__ dout, const float* __restrict__ inp,
                                   const float* __restrict__ save_mean, const float* __restrict__ save_rstd,
                                   const float* __restrict__ gamma, int N, int C, int HW) {
  __shared__ double shared[32];
  const int c = blockIdx.x;
  const float mean = save_mean[c], rstd = save_rstd[c];
  double sdy, sdyx;
  bn_grad_sums(dout, inp, mean, rstd, c, N, C, HW, shared, sdy, sdyx);
  if (threadIdx.x == 0) {
    dbeta[c] += static_cast<float>(sdy);
    dgamma[c] += static_cast<float>(sdyx);
  }
  const double count = static_cast<double>(N) * HW;
  const float k0 = gamma[c] * rstd;
  const float mdy = static_cast<float>(sdy / count), mdyx = static_cast<float>(sdyx / count);
  for_channel_values(c, N, C, HW,
                     [&](int64_t off) { dinp[off] = bn_dinp_value(dout[off], inp[off], mean, rstd, k0, mdy, mdyx); });
}

// SyncBN backward, step 1: this rank's sums (assigned) and the local dgamma / dbeta (+=); one block per channel.
__global__ void bn_backward_local_sums_kernel(float* __restrict__ sums, float* __restrict__ dgamma,
                                              float* __restrict__ dbeta, const float* __restrict__ dout,
                                              const float* __restrict__ inp, const float* __restrict__ save_mean,
                                              const float* __restrict__ save_rstd, int N, int C, int HW) {
  __shared__ double shared[32];
  const int c = blockIdx.x;
  double sdy, sdyx;
  bn_grad_sums(dout, inp, save_mean[c], save_rstd[c], c, N, C, HW, shared, sdy, sdyx);
  if (threadIdx.x == 0) {
    sums[2 * c + 0] = static_cast<float>(sdy);
    sums[2 * c + 1] = static_cast<float>(sdyx);
    dbeta[c] += static_cast<float>(sdy);
    dgamma[c] += static_cast<float>(sdyx);
  }
}

// SyncBN backward, step 3: dinp from the allreduced sums, pointwise over planes.
__global__ void bn_backward_apply_kernel(float* __restrict__ dinp, const float* __restrict__ dout,
                                         const float* __restrict__ inp, const float* __restrict__ save_mean,
                                         const float* __restrict__ save_rstd, const float* __restrict__ gamma,
                                         const float* __restrict__ global_sums, double count, int64_t planes, int C,
                                         int HW) {
  HPCT_FOR_PLANES(p, planes) {
    const int c = static_cast<int>(p % C);
    const float mean = save_mean[c], rstd = save_rstd[c];
    const float k0 = gamma[c] * rstd;
    const float mdy = static_cast<float>(static_cast<double>(global_sums[2 * c]) / count);
    const float mdyx = static_cast<float>(static_cast<double>(global_sums[2 * c + 1]) / count);
    const float* x = inp + p * HW;
    const float* dy = dout + p * HW;
    float* dx = dinp + p * HW;
    HPCT_FOR_POSITIONS(i, HW) dx[i] = bn_dinp_value(dy[i], x[i], mean, rstd, k0, mdy, mdyx);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// MaxPool2d forward: one thread per output; the first maximum in row-major window order wins (as the CPU).
__global__ void maxpool_forward_kernel(float* __restrict__ out, int32_t* __restrict__ idx,
                                       const float* __restrict__ inp, int64_t planes, int H, int W, int OH, int OW,
                                       int K, int stride, int pad) {
  const int64_t OHW = static_cast<int64_t>(OH) * OW;
  HPCT_FOR_PLANES(p, planes) {
    const float* x = inp + p * H * W;
    HPCT_FOR_POSITIONS(j, OHW) {
      const int jj = static_cast<int>(j);  // < OH*OW < 2^31: 32-bit division
      const int oh = jj / OW, ow = jj % OW;
      const int h0 = oh * stride - pad, w0 = ow * stride - pad;
      const int h_lo = max(h0, 0), h_hi = min(h0 + K, H), w_lo = max(w0, 0), w_hi = min(w0 + K, W);
      float best = -INFINITY;
      int32_t arg = -1;
      for (int ih = h_lo; ih < h_hi; ih++)
        for (int iw = w_lo; iw < w_hi; iw++) {
          const float v = x[ih * W + iw];
          if (v > best || arg < 0) {
            best = v;
            arg = ih * W + iw;
          }
        }
      out[p * OHW + j] = best;
      idx[p * OHW + j] = arg;
    }
  }
}

// MaxPool2d backward as a gather (no atomics): input (ih, iw) sums dout over the windows that contain it and whose
// idx names it, the windows taken in increasing (oh, ow) order, i.e. the order of the CPU's scatter loop: the same
// float adds in the same order, bit for bit.
__global__ void maxpool_backward_kernel(float* __restrict__ dinp, const float* __restrict__ dout,
                                        const int32_t* __restrict__ idx, int64_t planes, int H, int W, int OH, int OW,
                                        int K, int stride, int pad) {
  const int64_t HW = static_cast<int64_t>(H) * W, OHW = static_cast<int64_t>(OH) * OW;
  HPCT_FOR_PLANES(p, planes) {
    const float* dy = dout + p * OHW;
    const int32_t* id = idx + p * OHW;
    HPCT_FOR_POSITIONS(j, HW) {
      const int jj = static_cast<int>(j);  // < H*W < 2^31: 32-bit division
      const int ih = jj / W, iw = jj % W;
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
          const int64_t o = static_cast<int64_t>(oh) * OW + ow;
          if (id[o] == self) acc += dy[o];
        }
      dinp[p * HW + j] = acc;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Global average pooling forward: one warp per plane, a double sum in a fixed (lane-strided, then shuffle-tree) order.
__global__ void global_avgpool_forward_kernel(float* __restrict__ out, const float* __restrict__ inp, int64_t planes,
                                              int HW) {
  const int lane = threadIdx.x % 32;
  const int64_t warps_per_block = blockDim.x / 32;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / 32; p < planes;
       p += static_cast<int64_t>(gridDim.x) * warps_per_block) {
    const float* x = inp + p * HW;
    double s = 0.0;
    for (int i = lane; i < HW; i += 32) s += static_cast<double>(x[i]);
    s = warp_sum(s);
    if (lane == 0) out[p] = static_cast<float>(s / HW);
  }
}

__global__ void global_avgpool_backward_kernel(float* __restrict__ dinp, const float* __restrict__ dout, int64_t planes,
                                               int HW) {
  HPCT_FOR_PLANES(p, planes) {
    const float g = dout[p] / static_cast<float>(HW);
    float* dx = dinp + p * HW;
    HPCT_FOR_POSITIONS(i, HW) dx[i] = g;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// cuDNN plumbing.
cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::vector<cudnnHandle_t> handles;  // per device; never destroyed (see the header comment)
  if (static_cast<size_t>(dev) >= handles.size()) handles.resize(static_cast<size_t>(dev) + 1, nullptr);
  if (!handles[dev]) CUDNN_CHECK(cudnnCreate(&handles[dev]));
  CUDNN_CHECK(cudnnSetStream(handles[dev], stream));
  return handles[dev];
}

struct ConvDims {
  int N, C, H, W, OC, KH, KW, stride, pad, OH, OW;
};

ConvDims conv_dims(const char* op, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad) {
  HPCT_CHECK(N > 0 && C > 0 && H > 0 && W > 0 && OC > 0 && KH > 0 && KW > 0 && stride > 0 && pad >= 0,
             "{}: bad shape N={} C={} H={} W={} OC={} KH={} KW={} stride={} pad={}", op, N, C, H, W, OC, KH, KW, stride,
             pad);
  HPCT_CHECK(H + 2 * pad >= KH && W + 2 * pad >= KW, "{}: kernel {}x{} larger than the padded input {}x{}", op, KH, KW,
             H + 2 * pad, W + 2 * pad);
  return ConvDims{
      N, C, H, W, OC, KH, KW, stride, pad, (H + 2 * pad - KH) / stride + 1, (W + 2 * pad - KW) / stride + 1};
}

struct ConvAlgo {
  int algo;      // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t bytes;  // its workspace for this shape
};

// Descriptors and the deterministic candidates (preference order) of one shape on one device.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::vector<ConvAlgo> fwd, bwd_data, bwd_filter;
};

bool tensor_op_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

void add_candidate(std::vector<ConvAlgo>& list, int algo, size_t bytes) {
  if (bytes > kMaxWorkspaceBytes) return;
  for (const ConvAlgo& a : list)
    if (a.algo == algo) return;
  list.push_back({algo, bytes});
}

// The candidates of one algorithm family, in cuDNN's heuristic order (cudnnGet*Algorithm_v7: ranks without running or
// allocating): those that succeed, are CUDNN_DETERMINISTIC, use no tensor-op math unless `tensor_ops` (fp32: no TF32)
// and whose workspace query succeeds; then `fallback`, an algorithm known to be deterministic. max_count / rank / workspace wrap the family's
// cudnnGet*AlgorithmMaxCount, cudnnGet*Algorithm_v7 and cudnnGet*WorkspaceSize.
template <class Perf, class Algo, class MaxCount, class Rank, class Workspace>
void add_deterministic(std::vector<ConvAlgo>& list, bool tensor_ops, Algo fallback, MaxCount max_count, Rank rank,
                       Workspace workspace) {
  int n = 0, returned = 0;
  CUDNN_CHECK(max_count(&n));
  std::vector<Perf> perf(static_cast<size_t>(std::max(n, 1)));
  CUDNN_CHECK(rank(static_cast<int>(perf.size()), &returned, perf.data()));
  size_t bytes = 0;
  for (int i = 0; i < returned; i++) {
    const Perf& r = perf[static_cast<size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC ||
        (!tensor_ops && tensor_op_math(r.mathType)))
      continue;
    if (workspace(r.algo, &bytes) == CUDNN_STATUS_SUCCESS) add_candidate(list, r.algo, bytes);
  }
  if (workspace(fallback, &bytes) == CUDNN_STATUS_SUCCESS) add_candidate(list, fallback, bytes);
}

// The convolution math type of a precision (header comment).
cudnnMathType_t conv_math(Precision p) {
  switch (p) {
    case Precision::FP32: return CUDNN_FMA_MATH;
    case Precision::TF32:
    case Precision::BF16: return CUDNN_TENSOR_OP_MATH;
    case Precision::FP16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  }
  HPCT_FAIL("conv2d: unknown precision {}", static_cast<int>(p));
}

ConvPlan build_plan(cudnnHandle_t h, const ConvDims& d, Precision precision) {
  ConvPlan p;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d.N, d.C, d.H, d.W));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d.N, d.OC, d.OH, d.OW));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d.OC, d.C, d.KH, d.KW));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.conv, d.pad, d.pad, d.stride, d.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(p.conv, 1));
  const cudnnMathType_t math = conv_math(precision);
  const bool tensor_ops = math != CUDNN_FMA_MATH;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, math));  // fp32: plain fp32 FMAs, no TF32
  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &on, &oc, &oh, &ow));
  HPCT_CHECK(on == d.N && oc == d.OC && oh == d.OH && ow == d.OW,
             "conv2d: cuDNN's output shape ({}, {}, {}, {}) differs from torch's ({}, {}, {}, {})", on, oc, oh, ow, d.N,
             d.OC, d.OH, d.OW);

  // forward, backward data, backward filter: the same selection over cuDNN's three algorithm families
  add_deterministic<cudnnConvolutionFwdAlgoPerf_t>(
      p.fwd, tensor_ops, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
      [&](int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n); },
      [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, n, got, perf);
      },
      [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, a, bytes);
      });
  add_deterministic<cudnnConvolutionBwdDataAlgoPerf_t>(
      p.bwd_data, tensor_ops, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
      [&](int* n) { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n); },
      [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x, n, got, perf);
      },
      [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x, a, bytes);
      });
  add_deterministic<cudnnConvolutionBwdFilterAlgoPerf_t>(
      p.bwd_filter, tensor_ops, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
      [&](int* n) { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n); },
      [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w, n, got, perf);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w, a, bytes);
      });
  HPCT_CHECK(!p.fwd.empty() && !p.bwd_data.empty() && !p.bwd_filter.empty(),
             "conv2d: cuDNN offers no deterministic algorithm (math type {}) for N={} C={} H={} W={} OC={} {}x{} "
             "stride {} pad {} "
             "(forward {}, backward-data {}, backward-filter {} candidates)",
             static_cast<int>(math), d.N, d.C, d.H, d.W, d.OC, d.KH, d.KW, d.stride, d.pad, p.fwd.size(),
             p.bwd_data.size(), p.bwd_filter.size());
  return p;
}

// The cached plan of this shape on the current device (built on first use; the handle must be current).
const ConvPlan& conv_plan(cudnnHandle_t h, const ConvDims& d, Precision precision) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  using Key = std::array<int, 11>;
  thread_local std::map<Key, std::unique_ptr<ConvPlan>> plans;  // descriptors never destroyed (header comment)
  const Key key{dev, d.N, d.C, d.H, d.W, d.OC, d.KH, d.KW, d.stride, d.pad, static_cast<int>(precision)};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, std::make_unique<ConvPlan>(build_plan(h, d, precision))).first;
  return *it->second;
}

int64_t floats_of(size_t bytes) { return static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float)); }

// The first candidate whose workspace fits; fails naming the sizes when none does.
const ConvAlgo& pick(const std::vector<ConvAlgo>& list, size_t have_bytes, const char* op, const char* phase,
                     const ConvDims& d) {
  for (const ConvAlgo& a : list)
    if (a.bytes <= have_bytes) return a;
  size_t least = list.front().bytes;
  for (const ConvAlgo& a : list) least = std::min(least, a.bytes);
  HPCT_FAIL("{}: the workspace of {} floats is smaller than the {} floats the leanest deterministic cuDNN {} algorithm "
            "needs ({} for the preferred one) for N={} C={} H={} W={} OC={} {}x{} stride {} pad {}; size it with "
            "conv2d_workspace_floats",
            op, floats_of(have_bytes), floats_of(least), phase, floats_of(list.front().bytes), d.N, d.C, d.H, d.W, d.OC,
            d.KH, d.KW, d.stride, d.pad);
}

size_t workspace_bytes(const float* workspace, int64_t workspace_floats) {
  HPCT_CHECK(workspace_floats >= 0, "conv2d: negative workspace size {}", workspace_floats);
  return workspace ? static_cast<size_t>(workspace_floats) * sizeof(float) : 0;
}

void check_bn(const char* op, int N, int C, int HW) {
  HPCT_CHECK(N > 0 && C > 0 && HW > 0, "{}: bad shape N={} C={} HW={}", op, N, C, HW);
}

unsigned blocks_for(int n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

// ---- Conv2d ---------------------------------------------------------------------------------------------
int64_t conv2d_workspace_floats(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                                int pad) {
  const ConvDims d = conv_dims("conv2d_workspace_floats", N, C, H, W, OC, KH, KW, stride, pad);
  const cudnnHandle_t h = cudnn_handle(stream_of(ctx));
  const ConvPlan& p = conv_plan(h, d, ctx.precision);
  const size_t bytes = std::max({p.fwd.front().bytes, p.bwd_data.front().bytes, p.bwd_filter.front().bytes});
  return floats_of(bytes);
}

void conv2d_forward(const ExecContext& ctx, float* out, const float* inp, const float* weight, const float* bias,
                    float* workspace, int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                    int stride, int pad) {
  const ConvDims d = conv_dims("conv2d_forward", N, C, H, W, OC, KH, KW, stride, pad);
  const cudaStream_t stream = stream_of(ctx);
  const cudnnHandle_t h = cudnn_handle(stream);
  const ConvPlan& p = conv_plan(h, d, ctx.precision);
  const size_t have = workspace_bytes(workspace, workspace_floats);
  const ConvAlgo& a = pick(p.fwd, have, "conv2d_forward", "forward", d);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, p.x, inp, p.w, weight, p.conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), a.bytes ? workspace : nullptr,
                                      a.bytes, &zero, p.y, out));
  if (bias) {
    const int64_t planes = static_cast<int64_t>(N) * OC, len = static_cast<int64_t>(d.OH) * d.OW;
    const PlaneLaunch l = plane_launch(planes, len);
    add_plane_bias_kernel<<<l.grid, l.block, 0, stream>>>(out, bias, planes, OC, len);
    HPCT_CUDA_LAUNCH_CHECK("conv2d_forward (bias)");
  }
}

void conv2d_backward(const ExecContext& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, float* workspace, int64_t workspace_floats, int N, int C,
                     int H, int W, int OC, int KH, int KW, int stride, int pad) {
  const ConvDims d = conv_dims("conv2d_backward", N, C, H, W, OC, KH, KW, stride, pad);
  const cudaStream_t stream = stream_of(ctx);
  const cudnnHandle_t h = cudnn_handle(stream);
  const ConvPlan& p = conv_plan(h, d, ctx.precision);
  const size_t have = workspace_bytes(workspace, workspace_floats);
  const float one = 1.0f, zero = 0.0f;
  // dweight += dout (*) inp: beta = 1 accumulates
  const ConvAlgo& af = pick(p.bwd_filter, have, "conv2d_backward", "backward-filter", d);
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, p.x, inp, p.y, dout, p.conv,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(af.algo),
                                             af.bytes ? workspace : nullptr, af.bytes, &one, p.w, dweight));
  // dinp = conv_transpose(dout, weight): beta = 0 assigns
  if (dinp) {
    const ConvAlgo& ad = pick(p.bwd_data, have, "conv2d_backward", "backward-data", d);
    CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, p.w, weight, p.y, dout, p.conv,
                                             static_cast<cudnnConvolutionBwdDataAlgo_t>(ad.algo),
                                             ad.bytes ? workspace : nullptr, ad.bytes, &zero, p.x, dinp));
  }
  // dbias += sum over (n, oh, ow), in double, one block per output channel
  if (dbias) {
    channel_sum_accumulate_kernel<<<OC, kReduceThreads, 0, stream>>>(dbias, dout, N, OC, d.OH * d.OW);
    HPCT_CUDA_LAUNCH_CHECK("conv2d_backward (dbias)");
  }
}

// ---- BatchNorm2d ---------------------------------------------------------------------------------------
void batchnorm2d_forward_train(const ExecContext& ctx, float* out, float* stats, float* save_mean, float* save_rstd,
                               const float* inp, const float* gamma, const float* beta, int N, int C, int HW,
                               float eps) {
  check_bn("batchnorm2d_forward_train", N, C, HW);
  const cudaStream_t stream = stream_of(ctx);
  bn_stats_kernel<<<C, kReduceThreads, 0, stream>>>(stats, save_mean, save_rstd, inp, N, C, HW, eps);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_train (stats)");
  const int64_t planes = static_cast<int64_t>(N) * C;
  const PlaneLaunch l = plane_launch(planes, HW);
  bn_apply_kernel<<<l.grid, l.block, 0, stream>>>(out, inp, save_mean, save_rstd, gamma, beta, planes, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_train (apply)");
}

void batchnorm2d_local_stats(const ExecContext& ctx, float* stats, const float* inp, int N, int C, int HW) {
  check_bn("batchnorm2d_local_stats", N, C, HW);
  bn_stats_kernel<<<C, kReduceThreads, 0, stream_of(ctx)>>>(stats, nullptr, nullptr, inp, N, C, HW, 0.0f);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_local_stats");
}

void batchnorm2d_merge_stats(const ExecContext& ctx, float* merged, const float* gathered, int R, int C) {
  HPCT_CHECK(R > 0 && C > 0, "batchnorm2d_merge_stats: bad shape R={} C={}", R, C);
  bn_merge_kernel<<<blocks_for(C, 128), 128, 0, stream_of(ctx)>>>(merged, gathered, R, C);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_merge_stats");
}

void batchnorm2d_forward_apply(const ExecContext& ctx, float* out, float* save_mean, float* save_rstd, const float* inp,
                               const float* gamma, const float* beta, const float* stats, int N, int C, int HW,
                               float eps) {
  check_bn("batchnorm2d_forward_apply", N, C, HW);
  const cudaStream_t stream = stream_of(ctx);
  bn_mean_rstd_kernel<<<blocks_for(C, 128), 128, 0, stream>>>(save_mean, save_rstd, stats, C, eps);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_apply (mean, rstd)");
  const int64_t planes = static_cast<int64_t>(N) * C;
  const PlaneLaunch l = plane_launch(planes, HW);
  bn_apply_kernel<<<l.grid, l.block, 0, stream>>>(out, inp, save_mean, save_rstd, gamma, beta, planes, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_apply");
}

void batchnorm2d_update_running(const ExecContext& ctx, float* running_mean, float* running_var, const float* stats,
                                int C, float momentum) {
  HPCT_CHECK(C > 0, "batchnorm2d_update_running: bad shape C={}", C);
  bn_update_running_kernel<<<blocks_for(C, 128), 128, 0, stream_of(ctx)>>>(running_mean, running_var, stats, C,
                                                                           momentum);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_update_running");
}

void batchnorm2d_forward_eval(const ExecContext& ctx, float* out, const float* inp, const float* gamma,
                              const float* beta, const float* running_mean, const float* running_var, int N, int C,
                              int HW, float eps) {
  check_bn("batchnorm2d_forward_eval", N, C, HW);
  const int64_t planes = static_cast<int64_t>(N) * C;
  const PlaneLaunch l = plane_launch(planes, HW);
  bn_eval_kernel<<<l.grid, l.block, 0, stream_of(ctx)>>>(out, inp, gamma, beta, running_mean, running_var, planes, C,
                                                         HW, eps);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_eval");
}

void batchnorm2d_backward(const ExecContext& ctx, float* dinp, float* dgamma, float* dbeta, const float* dout,
                          const float* inp, const float* save_mean, const float* save_rstd, const float* gamma, int N,
                          int C, int HW) {
  check_bn("batchnorm2d_backward", N, C, HW);
  bn_backward_kernel<<<C, kReduceThreads, 0, stream_of(ctx)>>>(dinp, dgamma, dbeta, dout, inp, save_mean, save_rstd,
                                                               gamma, N, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_backward");
}

void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums, float* dgamma, float* dbeta,
                                     const float* dout, const float* inp, const float* save_mean,
                                     const float* save_rstd, int N, int C, int HW) {
  check_bn("batchnorm2d_backward_local_sums", N, C, HW);
  bn_backward_local_sums_kernel<<<C, kReduceThreads, 0, stream_of(ctx)>>>(sums, dgamma, dbeta, dout, inp, save_mean,
                                                                          save_rstd, N, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_backward_local_sums");
}

void batchnorm2d_backward_apply(const ExecContext& ctx, float* dinp, const float* dout, const float* inp,
                                const float* save_mean, const float* save_rstd, const float* gamma,
                                const float* global_sums, int64_t global_count, int N, int C, int HW) {
  check_bn("batchnorm2d_backward_apply", N, C, HW);
  HPCT_CHECK(global_count >= static_cast<int64_t>(N) * HW,
             "batchnorm2d_backward_apply: global count {} is smaller than this rank's {} values per channel",
             global_count, static_cast<int64_t>(N) * HW);
  const int64_t planes = static_cast<int64_t>(N) * C;
  const PlaneLaunch l = plane_launch(planes, HW);
  bn_backward_apply_kernel<<<l.grid, l.block, 0, stream_of(ctx)>>>(
      dinp, dout, inp, save_mean, save_rstd, gamma, global_sums, static_cast<double>(global_count), planes, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_backward_apply");
}

// ---- MaxPool2d ---------------------------------------------------------------------------------------------
namespace {
void check_pool(const char* op, int N, int C, int H, int W, int K, int stride, int pad) {
  HPCT_CHECK(N > 0 && C > 0 && H > 0 && W > 0 && K > 0 && stride > 0 && pad >= 0 && 2 * pad <= K && H + 2 * pad >= K &&
                 W + 2 * pad >= K,
             "{}: bad shape N={} C={} H={} W={} K={} stride={} pad={} (torch needs pad <= K/2)", op, N, C, H, W, K,
             stride, pad);
}
}  // namespace

void maxpool2d_forward(const ExecContext& ctx, float* out, int32_t* idx, const float* inp, int N, int C, int H, int W,
                       int K, int stride, int pad) {
  check_pool("maxpool2d_forward", N, C, H, W, K, stride, pad);
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
  const PlaneLaunch l = plane_launch(planes, static_cast<int64_t>(OH) * OW);
  maxpool_forward_kernel<<<l.grid, l.block, 0, stream_of(ctx)>>>(out, idx, inp, planes, H, W, OH, OW, K, stride, pad);
  HPCT_CUDA_LAUNCH_CHECK("maxpool2d_forward");
}

void maxpool2d_backward(const ExecContext& ctx, float* dinp, const float* dout, const int32_t* idx, int N, int C, int H,
                        int W, int K, int stride, int pad) {
  check_pool("maxpool2d_backward", N, C, H, W, K, stride, pad);
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
  const PlaneLaunch l = plane_launch(planes, static_cast<int64_t>(H) * W);
  maxpool_backward_kernel<<<l.grid, l.block, 0, stream_of(ctx)>>>(dinp, dout, idx, planes, H, W, OH, OW, K, stride,
                                                                  pad);
  HPCT_CUDA_LAUNCH_CHECK("maxpool2d_backward");
}

// ---- global average pooling ------------------------------------------------------------------------------------
void global_avgpool_forward(const ExecContext& ctx, float* out, const float* inp, int N, int C, int HW) {
  HPCT_CHECK(N >= 0 && C >= 0 && HW > 0, "global_avgpool_forward: bad shape N={} C={} HW={}", N, C, HW);
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (planes == 0) return;
  constexpr int threads = 256;  // 8 warps: 8 planes per block
  const unsigned blocks = grid_for(planes * 32, threads, 65535);
  global_avgpool_forward_kernel<<<blocks, threads, 0, stream_of(ctx)>>>(out, inp, planes, HW);
  HPCT_CUDA_LAUNCH_CHECK("global_avgpool_forward");
}

void global_avgpool_backward(const ExecContext& ctx, float* dinp, const float* dout, int N, int C, int HW) {
  HPCT_CHECK(N >= 0 && C >= 0 && HW > 0, "global_avgpool_backward: bad shape N={} C={} HW={}", N, C, HW);
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (planes == 0) return;
  const PlaneLaunch l = plane_launch(planes, HW);
  global_avgpool_backward_kernel<<<l.grid, l.block, 0, stream_of(ctx)>>>(dinp, dout, planes, HW);
  HPCT_CUDA_LAUNCH_CHECK("global_avgpool_backward");
}

}  // namespace hpct::kernels::cuda
