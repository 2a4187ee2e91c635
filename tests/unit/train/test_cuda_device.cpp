// lib/kernels/cuda/cuda_device (label cuda): why CUDA is unusable (here, without a GPU: a non-empty reason, never an
// exception), and on a GPU the choice local_rank % devices and the compute stream.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/cuda_probe.hpp"

namespace hpct::kernels {
namespace {

TEST(CudaDevice, ReasonAgreesWithDeviceCount) {
  std::string why;
  EXPECT_NO_THROW(why = cuda_unavailable_reason());
  EXPECT_EQ(why.empty(), cuda_device_count() > 0) << why;
  if (!why.empty()) {
    // the runtime is still usable for the next query (the error state was cleared)
    EXPECT_EQ(cuda_unavailable_reason(), why);
  }
}

TEST(CudaDevice, SelectsLocalRankModuloCount) {
  const int n = cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  for (int local_rank : {0, 1, n, 2 * n + 1}) {
    const CudaDeviceInfo info = cuda_select_device(local_rank);
    EXPECT_EQ(info.count, n);
    EXPECT_EQ(info.index, local_rank % n);
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, local_rank % n);
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.total_bytes, 0u);
    EXPECT_LE(info.free_bytes, info.total_bytes);
  }
  cuda_select_device(0);
}

TEST(CudaDevice, StreamRunsCopiesInOrder) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  cuda_select_device(0);
  CudaStream stream;
  ASSERT_NE(stream.get(), nullptr);
  cudaStream_t s = static_cast<cudaStream_t>(stream.get());
  std::vector<float> host(4096), back(4096, 0.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f + static_cast<float>(i);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, host.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), dev, host.size() * 4, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

}  // namespace
}  // namespace hpct::kernels
