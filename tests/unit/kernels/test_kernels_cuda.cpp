// The CUDA smoke test of this stage (label `cuda`): one kernel of ours and one cuBLAS GEMM on the device, checked
// against the host. Skips when no device is usable (CI, or this machine: "driver version is insufficient").
#include <gtest/gtest.h>

#include "kernels/cuda/cuda_probe.hpp"

namespace hpct::kernels {
namespace {

TEST(KernelsCuda, DeviceCountNeverThrows) {
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  EXPECT_GE(n, 0);
}

TEST(KernelsCuda, SelfTestKernelAndCublas) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable CUDA device";
  EXPECT_NO_THROW(cuda_selftest());
}

}  // namespace
}  // namespace hpct::kernels
