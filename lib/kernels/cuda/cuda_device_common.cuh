#pragma once
// Device code shared by the kernel headers (*_kernels.cuh, cuda_flash_attention.cuh): warp and block reductions and
// the shared-memory declarations. Compiled by nvcc (through the .cu files) and, as plain C++, by the host emulation
// of the kernels (tests/cuda_emu/cuda_emu.hpp, included first, which supplies the CUDA built-ins and its own
// definitions of the two shared-memory macros). Hence: no CUDA header here, only built-ins nvcc knows.
//
// Shared memory is declared through two macros, never with a bare __shared__ (the emulation refuses one at compile
// time): the emulation must find every shared array to fill it with NaN before each block, so that a read of
// anything not written first poisons the result.
//   HPCT_SHARED(type, name, [dims]...)  a static shared array:   __shared__ type name[dims]...
//   HPCT_DYNAMIC_SHARED(type, name)     the dynamic shared memory of the launch as `type* name`
#include <cstdint>

#include "kernels/cuda/launch_shape.hpp"

#if !defined(HPCT_CUDA_EMULATION)
#define HPCT_SHARED(type, name, ...) __shared__ type name __VA_ARGS__
#define HPCT_DYNAMIC_SHARED(type, name)                               \
  extern __shared__ __align__(16) unsigned char hpct_dynamic_smem_[]; \
  type* name = reinterpret_cast<type*>(hpct_dynamic_smem_)
#endif

// Grid-stride loop of a 1-D launch: i = the global thread index, then + the grid's thread count.
#define HPCT_GRID_STRIDE_LOOP(i, n)                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace hpct::kernels::cuda {
namespace {  // internal linkage: nvcc's copy and the emulation's never meet in one link

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

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

}  // namespace
}  // namespace hpct::kernels::cuda
