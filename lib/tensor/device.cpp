#include "tensor/device.hpp"

#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#if HPCT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace hpct {

void* device_alloc(Device d, size_t bytes) {
  if (bytes == 0) bytes = 64;
  if (d == Device::CPU) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    HPCT_CHECK(p != nullptr, "out of host memory allocating {:.1f} MiB", bytes / 1048576.0);
    // zeroed: alignment padding between a slab's tensors is then deterministic (replica CRCs cover whole slabs)
    std::memset(p, 0, rounded);
    return p;
  }
#if HPCT_HAVE_CUDA
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes);
  HPCT_CHECK(rc == cudaSuccess, "cudaMalloc of {:.1f} MiB failed: {}", bytes / 1048576.0, cudaGetErrorString(rc));
  const cudaError_t zr = cudaMemset(p, 0, bytes);  // as on the host: deterministic padding
  HPCT_CHECK(zr == cudaSuccess, "cudaMemset of {:.1f} MiB failed: {}", bytes / 1048576.0, cudaGetErrorString(zr));
  return p;
#else
  HPCT_FAIL("device memory requested but hpctrain was built without CUDA (configure with -DHPCT_ENABLE_CUDA=ON)");
#endif
}

void device_free(Device d, void* p) {
  if (!p) return;
  if (d == Device::CPU) {
    std::free(p);
    return;
  }
#if HPCT_HAVE_CUDA
  cudaFree(p);
#endif
}

}  // namespace hpct
