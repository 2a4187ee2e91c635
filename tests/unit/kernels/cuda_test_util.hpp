#pragma once
// Helpers of the backend-vs-CPU tests (label `cuda`): a device buffer with explicit uploads and downloads through
// the kernels' own copy ops, the device context, and the skip when no GPU is usable. Each test runs an op through
// kernels.hpp's dispatch on Device::CUDA and on Device::CPU with the same inputs and compares with
// kernel_test_util.hpp's all_close. Compiled only with HPCT_HAVE_CUDA; the tests skip at run time without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_probe.hpp"
#include "kernels/kernels.hpp"
#include "tensor/device.hpp"

namespace hpct::kernels::test {

inline const ExecContext& cpu_ctx() {
  static const ExecContext c{Device::CPU, nullptr};
  return c;
}
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

}  // namespace hpct::kernels::test
