#include "kernels/cuda/cuda_cudnn.hpp"

#include <vector>

#include "core/cuda_check.hpp"

namespace hpct::kernels::cuda {

cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::vector<cudnnHandle_t> handles;  // per device; never destroyed (cuda_cudnn.hpp says why)
  if (static_cast<size_t>(dev) >= handles.size()) handles.resize(static_cast<size_t>(dev) + 1, nullptr);
  if (!handles[dev]) CUDNN_CHECK(cudnnCreate(&handles[dev]));
  CUDNN_CHECK(cudnnSetStream(handles[dev], stream));
  return handles[dev];
}

}  // namespace hpct::kernels::cuda
