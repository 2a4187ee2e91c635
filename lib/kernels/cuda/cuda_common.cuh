#pragma once
// Shared by the CUDA backend's .cu files (host side): the stream of a context, launches and their checks. The
// device side (warp and block reductions, shared-memory macros) is cuda_device_common.cuh, which the emulated tests
// compile too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/cuda_device_common.cuh"
#include "kernels/exec_context.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"

namespace hpct::kernels::cuda {

// Devices a process may address: the size of the per-device tables of handles and buffers kept for its life.
constexpr int kMaxDevices = 64;

inline cudaStream_t stream_of(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

inline dim3 to_dim3(const LaunchDim& d) { return dim3(d.x, d.y, d.z); }

// The device storage type of an interface type A (kernels.hpp): float, __nv_bfloat16 for hpct::bf16, __half for
// hpct::fp16, each the same bits as the host type (cuda_device_common.cuh); dev_ptr reinterprets a pointer at the
// boundary between the ops and the kernels.
template <typename A>
using DeviceStorage =
    std::conditional_t<std::is_same_v<A, bf16>, __nv_bfloat16, std::conditional_t<std::is_same_v<A, fp16>, __half, A>>;
static_assert(sizeof(__nv_bfloat16) == sizeof(bf16) && alignof(__nv_bfloat16) == alignof(bf16),
              "hpct::bf16 and __nv_bfloat16 are the same 16 bits");
static_assert(sizeof(__half) == sizeof(fp16) && alignof(__half) == alignof(fp16),
              "hpct::fp16 and __half are the same 16 bits");

// The 16-bit storage types (bf16, fp16): the tensor-core GEMMs and convolutions on the tensors as they are.
template <typename A>
inline constexpr bool kHalfPrecisionStorage = std::is_same_v<A, bf16> || std::is_same_v<A, fp16>;
template <typename A>
DeviceStorage<A>* dev_ptr(A* p) {
  return reinterpret_cast<DeviceStorage<A>*>(p);
}
template <typename A>
const DeviceStorage<A>* dev_ptr(const A* p) {
  return reinterpret_cast<const DeviceStorage<A>*>(p);
}

// Raises a kernel's dynamic shared memory limit to `bytes` (a block above the 48 KiB default needs it), after checking
// the device's opt-in maximum: a clear error instead of a failed launch.
template <typename Kernel>
void raise_dynamic_shared_limit(Kernel* kernel, int64_t bytes, const char* name) {
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  HPCT_CHECK(bytes <= optin,
             "kernels::cuda: {} needs {} bytes of dynamic shared memory per block; device {} allows {} "
             "(cudaDevAttrMaxSharedMemoryPerBlockOptin)",
             name, bytes, dev, optin);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// A device-wide buffer: table[d] is device d's, `bytes` long, allocated on the current device at the first call and
// kept for the life of the process (a static destructor's cudaFree could run after the CUDA runtime is torn down);
// `what` names it in errors. The cuBLASLt workspace and the reduction partials are two. Defined in cuda_core.cu.
void* device_lifetime_buffer(void* (&table)[kMaxDevices], size_t bytes, const char* what);
// The device's buffer of reduction partials (kernels.hpp kCudaReducePartialsBytes; cuda_reduce_kernels.cuh), for op's
// reduction, which needs at least `min_bytes` of it (one row group's partials; checked: a clear error where a shape is
// too wide for the buffer). Its users run on the rank's compute stream, one reduction after another (stream order is
// what keeps two reductions from sharing it at once). Defined in cuda_core.cu.
double* reduce_partials(const char* op, int64_t min_bytes);

// kernel<<<shape>>>(args...) on `stream`, the geometry computed by the host function shared with the emulated tests
// (which check it against the H100's limits, the opt-in included); a shape with shared_opt_in raises the limit first.
#define HPCT_LAUNCH(kernel, shape, stream, ...)                                                                   \
  do {                                                                                                            \
    const ::hpct::kernels::cuda::LaunchShape& hpct_shape_ = (shape);                                              \
    if (hpct_shape_.shared_opt_in)                                                                                \
      ::hpct::kernels::cuda::raise_dynamic_shared_limit(kernel, hpct_shape_.shared_bytes, #kernel);               \
    kernel<<<::hpct::kernels::cuda::to_dim3(hpct_shape_.grid), ::hpct::kernels::cuda::to_dim3(hpct_shape_.block), \
             static_cast<size_t>(hpct_shape_.shared_bytes), stream>>>(__VA_ARGS__);                               \
  } while (0)

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
