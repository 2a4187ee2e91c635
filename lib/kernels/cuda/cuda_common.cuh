#pragma once
// Shared by the CUDA backend's .cu files (host side): the stream of a context, launches and their checks. The
// device side (warp and block reductions, shared-memory macros) is cuda_device_common.cuh, which the emulated tests
// compile too.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.hpp"
#include "kernels/cuda/cuda_device_common.cuh"
#include "kernels/exec_context.hpp"

namespace hpct::kernels::cuda {

inline cudaStream_t stream_of(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

inline dim3 to_dim3(const LaunchDim& d) { return dim3(d.x, d.y, d.z); }

// kernel<<<shape>>>(args...) on `stream`, the geometry computed by the host function shared with the emulated tests.
#define HPCT_LAUNCH(kernel, shape, stream, ...)                                                         \
  kernel<<<::hpct::kernels::cuda::to_dim3((shape).grid), ::hpct::kernels::cuda::to_dim3((shape).block), \
           static_cast<size_t>((shape).shared_bytes), stream>>>(__VA_ARGS__)

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

}  // namespace hpct::kernels::cuda
