// The CUDA smoke test of this stage (label `cuda`): one kernel of ours and one cuBLAS GEMM on the device, checked
// against the host, and the same for bf16 storage (the casts, and one cuBLASLt GEMM with its bias epilogue). Skips
// when no device is usable (CI, or this machine: "driver version is insufficient").
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_probe.hpp"
#include "kernels/kernels.hpp"
#include "tensor/bf16.hpp"
#include "tensor/device.hpp"

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

// out (2,3) = inp (2,4) @ weight (3,4)^T + bias in bf16: small integers and halves, so every product, sum and the
// bias are exact in bf16 and the result must be bit for bit the host's; the fp32 copy of it round-trips exactly.
TEST(KernelsCuda, Bf16CastAndCublasLtGemm) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable CUDA device";
  const ExecContext gpu{Device::CUDA, nullptr, Precision::BF16};
  const int N = 2, C = 4, OC = 3;
  const std::vector<float> inp{1, 2, -1, 0.5f, 3, -2, 1, 4}, weight{1, 0, 2, -1, 0.5f, 1, 1, 1, -2, 3, 0, 1},
      bias{0.5f, -1, 2};
  std::vector<float> want(N * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      float acc = bias[o];
      for (int c = 0; c < C; c++) acc += inp[n * C + c] * weight[o * C + c];
      want[n * OC + o] = acc;
    }
  // each tensor 16-element (32- or 64-byte) aligned in one allocation, as in a slab
  constexpr size_t kSeg = 16;
  auto* f = static_cast<float*>(device_alloc(Device::CUDA, 4 * kSeg * sizeof(float)));
  auto* b = static_cast<bf16*>(device_alloc(Device::CUDA, 4 * kSeg * sizeof(bf16)));
  float *f_inp = f, *f_w = f + kSeg, *f_b = f + 2 * kSeg, *f_out = f + 3 * kSeg;
  bf16 *b_inp = b, *b_w = b + kSeg, *b_b = b + 2 * kSeg, *b_out = b + 3 * kSeg;
  fill_zero(gpu, f, static_cast<int64_t>(4 * kSeg * sizeof(float)));
  copy_from_host(gpu, f_inp, inp.data(), static_cast<int64_t>(inp.size() * sizeof(float)));
  copy_from_host(gpu, f_w, weight.data(), static_cast<int64_t>(weight.size() * sizeof(float)));
  copy_from_host(gpu, f_b, bias.data(), static_cast<int64_t>(bias.size() * sizeof(float)));
  cast(gpu, b_inp, f_inp, static_cast<int64_t>(3 * kSeg));
  matmul_forward(gpu, b_out, b_inp, b_w, b_b, N, C, OC);
  cast(gpu, f_out, b_out, N * OC);
  std::vector<float> got(want.size());
  copy_to_host(gpu, got.data(), f_out, static_cast<int64_t>(got.size() * sizeof(float)));
  synchronize(gpu);
  device_free(Device::CUDA, b);
  device_free(Device::CUDA, f);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace hpct::kernels
