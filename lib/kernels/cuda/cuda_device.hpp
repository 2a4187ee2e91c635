#pragma once
// Device placement for the training apps (train.device = cuda): which GPU a rank computes on, why none is usable,
// and the rank's compute stream. Plain C++ (no CUDA headers), so lib/train uses it from .cpp files; implemented in
// cuda_device.cu, compiled and linked only with HPCT_HAVE_CUDA (target hpct_kernels_cuda).
//
// One rank per GPU: a rank takes device local_rank % cudaGetDeviceCount(), local_rank being its index among the
// ranks of its node (parallel/launch_env.hpp). With CUDA_VISIBLE_DEVICES set per task by the scheduler (one visible
// device each, e.g. srun --gpus-per-task=1) that is device 0 of each task's own list.
#include <cstddef>
#include <string>
#include <vector>

namespace hpct::kernels {

// Why this process cannot compute on CUDA: "" when cudaGetDeviceCount succeeds with at least one device; else the
// CUDA runtime's reason, e.g. "CUDA driver version is insufficient for CUDA runtime version
// (cudaErrorInsufficientDriver)", or "the CUDA runtime sees no device (cudaGetDeviceCount = 0)". Never throws; clears
// the runtime's error state, so that later calls do not report it.
std::string cuda_unavailable_reason();

struct CudaDeviceInfo {
  int index = 0;     // the device this rank uses (cudaSetDevice)
  int count = 0;     // devices visible to this process
  std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0;  // device memory
  size_t free_bytes = 0;   // free when selected (cudaMemGetInfo)
};

// Makes device local_rank % count current on the calling thread (cudaSetDevice; every later CUDA call of the rank,
// NCCL's included, uses it) and returns its properties. Throws hpct::Error (CUDA_CHECK) on failure, or when no
// device is visible. Requires local_rank >= 0.
CudaDeviceInfo cuda_select_device(int local_rank);

// The CUDA libraries this process loaded, with the version each reports at run time and the shared object it came
// from (dladdr): {"cudnn 9.13.0 (/usr/local/cuda/lib/libcudnn.so.9)", "cublas 13.0.0 (...)", "cudart 13.0 (...)"}.
// The GPU bundle keeps the machine's own copies where it has them: these name what actually ran.
std::vector<std::string> cuda_libraries();
// cudnnGetVersion() of the cuDNN this process loaded (91300 for 9.13.0): what a convolution algorithm number refers to.
int cudnn_runtime_version();

// Device memory in use on the current device now: total minus free (cudaMemGetInfo), so every process's allocations
// on it, the CUDA context and the libraries' workspaces included (the memory record's `rss` on CUDA).
size_t cuda_device_memory_in_use();

// The start and the end of what a profiler started without collecting records (ncu --profile-from-start off, nsys
// profile --capture-range=cudaProfilerApi): cudaProfilerStart / cudaProfilerStop, each after cudaDeviceSynchronize, so
// that exactly the work between the two calls is recorded (train.profile_step brackets one training step with them).
void cuda_profiler_start();
void cuda_profiler_stop();

// The rank's compute stream (ExecContext::stream), created on the current device. Deliberately a *blocking* stream
// (cudaStreamDefault, not cudaStreamNonBlocking): device_alloc (tensor/device.cpp) zeroes every slab with cudaMemset
// on the legacy default stream, asynchronously to the host, and only a blocking stream is ordered after that memset
// (and before any later legacy-stream work). No step-loop work uses the legacy stream, so this costs nothing there;
// NCCL runs on its own non-blocking stream (comm/nccl_communicator.hpp). Destroyed with the owner (after
// cudaStreamSynchronize, so no queued work refers to a freed stream). Not copyable.
class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  void* get() const { return stream_; }  // the cudaStream_t

 private:
  void* stream_ = nullptr;
};

}  // namespace hpct::kernels
