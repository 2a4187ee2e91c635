#pragma once
// Helpers of the backend-vs-CPU tests (label `cuda`): a device buffer with explicit uploads and downloads through
// the kernels' own copy ops, the device context, and the skip when no GPU is usable. Each test runs an op through
// kernels.hpp's dispatch on Device::CUDA and on Device::CPU with the same inputs and compares with
// kernel_test_util.hpp's all_close. Compiled only with HPCT_HAVE_CUDA; the tests skip at run time without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cuda/cuda_probe.hpp"
#include "kernels/kernels.hpp"
#include "tensor/device.hpp"

namespace hpct::kernels::test {

// The default stream of the current device: the ops are stream-ordered, downloads synchronize.
inline const ExecContext& gpu_ctx() {
  static const ExecContext c{Device::CUDA, nullptr};
  return c;
}

#define HPCT_REQUIRE_GPU() \
  if (::hpct::kernels::cuda_device_count() == 0) GTEST_SKIP() << "no usable CUDA device"

// n elements of T on the device; upload/download through copy_from_host / copy_to_host (+ synchronize).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n), p_(static_cast<T*>(device_alloc(Device::CUDA, bytes()))) {
    fill_zero(gpu_ctx(), p_, static_cast<int64_t>(bytes()));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { device_free(Device::CUDA, p_); }
  T* get() { return p_; }
  const T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T) > 0 ? n_ * sizeof(T) : sizeof(T); }
  void upload(const std::vector<T>& host) {
    copy_from_host(gpu_ctx(), p_, host.data(), static_cast<int64_t>(n_ * sizeof(T)));
    synchronize(gpu_ctx());
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    copy_to_host(gpu_ctx(), host.data(), p_, static_cast<int64_t>(n_ * sizeof(T)));
    synchronize(gpu_ctx());
    return host;
  }

 private:
  size_t n_;
  T* p_;
};

// ---- reduced-precision products (train.precision, exec_context.hpp) ----------------------------------------------
// Unit roundoff of the type the tensor cores round fp32 inputs to: tf32 and fp16 keep 10 mantissa bits (2^-11), bf16
// keeps 7 (2^-8); fp32 itself 2^-24.
inline double unit_roundoff(Precision p) {
  switch (p) {
    case Precision::FP32: return 0x1p-24;
    case Precision::TF32: return 0x1p-11;
    case Precision::BF16: return 0x1p-8;
    case Precision::FP16: return 0x1p-11;
  }
  return 1.0;
}

// A sum of K products sum_k a_k b_k with both inputs rounded to unit roundoff u and fp32 accumulation differs from the
// exact sum by at most (2u + u^2 + K 2^-24) sum_k |a_k b_k| (Higham, Accuracy and Stability, 3.1: rounding of the
// inputs, then the recursive summation's gamma_K), plus, for fp16, the absolute error of inputs below its normal range
// (6.1e-5), rounded with absolute error <= 2^-25: + 2^-25 sum_k (|a_k| + |b_k|). `abs_products` holds sum_k |a_k b_k|,
// `abs_inputs` sum_k (|a_k| + |b_k|) per output element; `extra` per-element terms already added exactly in fp32
// (a bias, the accumulated old value) add 2^-23 |extra| each. The returned bound has a 1% margin.
inline double product_bound(double u, int64_t K, double abs_products, double abs_inputs, double extra) {
  return 1.01 * ((2 * u + u * u + static_cast<double>(K + 2) * 0x1p-24) * abs_products + 0x1p-25 * abs_inputs +
                 0x1p-23 * extra);
}

inline ::testing::AssertionResult within_bounds(const std::string& what, const std::vector<float>& got,
                                                const std::vector<double>& exact, const std::vector<double>& bound) {
  if (got.size() != exact.size() || got.size() != bound.size())
    return ::testing::AssertionFailure() << what << ": sizes differ";
  size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < got.size(); i++) {
    const double err = std::fabs(static_cast<double>(got[i]) - exact[i]);
    const double ratio = std::isfinite(err) ? err / std::max(bound[i], 1e-300) : INFINITY;
    if (!(ratio <= 1.0)) bad++;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess() << what << ": worst error " << worst_ratio << " of its bound";
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " elements outside the rounding bound; worst element " << worst << " got "
                                       << got[worst] << ", exact " << exact[worst] << ", bound " << bound[worst]
                                       << " (error " << worst_ratio << " x bound)";
}

}  // namespace hpct::kernels::test
