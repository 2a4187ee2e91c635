// Device placement (cuda_device.hpp): the reason CUDA is unusable, the GPU choice by node-local rank, the compute
// stream. Host code only (no kernels); every runtime call checked.
#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cudnn.h>

#include <cstdio>

#include "core/cuda_check.hpp"
#include "core/shared_object.hpp"
#include "kernels/cuda/cuda_device.hpp"

namespace hpct::kernels {

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error state so later runtime calls do not report it
    return fmt::format("{} ({})", cudaGetErrorString(rc), cudaGetErrorName(rc));
  }
  if (count <= 0) return "the CUDA runtime sees no device (cudaGetDeviceCount = 0)";
  return "";
}

// Each library's version as it reports it, "unknown" where the query fails (a log line must not stop a run).
std::vector<std::string> cuda_libraries() {
  std::vector<std::string> libs;
  const size_t cudnn = cudnnGetVersion();  // 91300 for 9.13.0 (cuDNN 9: major * 10000 + minor * 100 + patch)
  libs.push_back(cudnn > 0 ? fmt::format("cudnn {}.{}.{} {}", cudnn / 10000, cudnn / 100 % 100, cudnn % 100,
                                         shared_object_of(reinterpret_cast<const void*>(&cudnnGetVersion)))
                           : std::string("cudnn (version unknown)"));
  int major = 0, minor = 0, patch = 0;
  const bool cublas_ok = cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
                         cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
                         cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS;
  libs.push_back(cublas_ok ? fmt::format("cublas {}.{}.{} {}", major, minor, patch,
                                         shared_object_of(reinterpret_cast<const void*>(&cublasGetProperty)))
                           : std::string("cublas (version unknown)"));
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) {
    libs.push_back(fmt::format("cudart {}.{} {}", rt / 1000, rt % 1000 / 10,
                               shared_object_of(reinterpret_cast<const void*>(&cudaRuntimeGetVersion))));
  } else {
    (void)cudaGetLastError();  // clear the error state: later runtime calls must not report it
    libs.push_back("cudart (version unknown)");
  }
  return libs;
}

int cudnn_runtime_version() { return static_cast<int>(cudnnGetVersion()); }

CudaDeviceInfo cuda_select_device(int local_rank) {
  HPCT_CHECK(local_rank >= 0, "cuda_select_device: local rank {} is negative", local_rank);
  CudaDeviceInfo info;
  CUDA_CHECK(cudaGetDeviceCount(&info.count));
  HPCT_CHECK(info.count > 0, "cuda_select_device: no CUDA device is visible");
  info.index = local_rank % info.count;
  CUDA_CHECK(cudaSetDevice(info.index));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, info.index));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));  // also creates the context on this device
  return info;
}

size_t cuda_device_memory_in_use() {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes - free_bytes;
}

void cuda_profiler_start() {
  CUDA_CHECK(cudaDeviceSynchronize());  // the work queued before the step stays outside the range
  CUDA_CHECK(cudaProfilerStart());
}

void cuda_profiler_stop() {
  CUDA_CHECK(cudaDeviceSynchronize());  // the step's work, NCCL's included, inside the range
  CUDA_CHECK(cudaProfilerStop());
}

CudaStream::CudaStream() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));  // blocking: see cuda_device.hpp
  stream_ = s;
}

CudaStream::~CudaStream() {
  if (stream_ == nullptr) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // Destructors must not throw: an error here (a fault of queued work) is reported, the stream still destroyed.
  cudaError_t rc = cudaStreamSynchronize(s);
  if (rc == cudaSuccess) rc = cudaStreamDestroy(s);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "hpctrain: destroying the compute stream: %s (%s)\n", cudaGetErrorString(rc),
                 cudaGetErrorName(rc));
  }
}

}  // namespace hpct::kernels
