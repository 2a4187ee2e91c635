#pragma once
// Shared by the CUDA backend's .cu files: the stream of a context, checked launches, grid sizes, warp reductions.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.hpp"
#include "kernels/exec_context.hpp"

namespace hpct::kernels::cuda {

inline cudaStream_t stream_of(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// Blocks of `threads` covering n elements (at least 1 block), capped so that grid-stride loops cover the rest.
inline unsigned grid_for(int64_t n, int threads = 256, int64_t max_blocks = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

// Every launch is checked (cudaGetLastError names a bad configuration at once; asynchronous faults surface at the next
// synchronising call with the op that follows, which is why the tests synchronise after each op).
#define HPCT_CUDA_LAUNCH_CHECK(op_name)                                                                         \
  do {                                                                                                          \
    cudaError_t hpct_launch_rc_ = cudaGetLastError();                                                           \
    if (hpct_launch_rc_ != cudaSuccess)                                                                         \
      ::hpct::throw_error(__FILE__, __LINE__,                                                                   \
                          fmt::format("kernels::cuda::{}: kernel launch failed: {} ({})", op_name,              \
                                      cudaGetErrorString(hpct_launch_rc_), cudaGetErrorName(hpct_launch_rc_))); \
  } while (0)

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block whose size is a multiple of 32 (<= 1024); every thread gets the result. `shared` holds >= 32.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may be reused by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? shared[lane] : T(0);
  return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(r);
}

}  // namespace hpct::kernels::cuda
