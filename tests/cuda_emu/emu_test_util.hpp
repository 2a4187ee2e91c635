#pragma once
// Helpers of the emulated kernel tests (test_emu_*.cpp): run a sequence of emulated launches under the in-order, the
// shuffled and the run-ahead schedule, from the same initial outputs, and require bitwise-equal results (a race
// between threads shows as a difference). (kernel_test_util.hpp has the comparisons with the CPU backend.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_emu.hpp"
#include "kernel_test_util.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"

namespace hpct::kernels::test {

// An output buffer of the launches: snapshot, restored between the two runs, compared after.
struct EmuOutput {
  std::string name;
  void* data;
  size_t bytes;
};
template <typename T>
EmuOutput emu_output(const std::string& name, std::vector<T>& v) {
  return {name, v.data(), v.size() * sizeof(T)};
}

// The kernels' view of a host buffer: float as it is; hpct::bf16 as the emulation's __nv_bfloat16, the same 16 bits
// (what cuda_common.cuh's dev_ptr does at the .cu boundary).
inline float* emu_ptr(std::vector<float>& v) { return v.data(); }
inline const float* emu_ptr(const std::vector<float>& v) { return v.data(); }
inline __nv_bfloat16* emu_ptr(std::vector<bf16>& v) { return reinterpret_cast<__nv_bfloat16*>(v.data()); }
inline const __nv_bfloat16* emu_ptr(const std::vector<bf16>& v) {
  return reinterpret_cast<const __nv_bfloat16*>(v.data());
}
static_assert(sizeof(__nv_bfloat16) == sizeof(bf16) && alignof(__nv_bfloat16) == alignof(bf16));
// hpct::fp16 as the emulation's __half, likewise.
inline __half* emu_ptr(std::vector<fp16>& v) { return reinterpret_cast<__half*>(v.data()); }
inline const __half* emu_ptr(const std::vector<fp16>& v) { return reinterpret_cast<const __half*>(v.data()); }
static_assert(sizeof(__half) == sizeof(fp16) && alignof(__half) == alignof(fp16));

// The device storage type of an interface type A (cuda_common.cuh's DeviceStorage).
template <typename A>
using EmuStorage =
    std::conditional_t<std::is_same_v<A, bf16>, __nv_bfloat16, std::conditional_t<std::is_same_v<A, fp16>, __half, A>>;

// bf16 outputs against a reference that computes the same float values in another order (the CPU backend, or the float
// kernel): both round once to nearest even, so they differ only where the two float results straddle a rounding
// boundary, by one bf16 ulp: at most 2^-7 of the value (8 significant bits). kBf16Ulp is that, on top of the float
// comparison's own tolerance.
inline constexpr double kBf16Ulp = 1.0 / 128.0;
// fp16 likewise: 11 significant bits, so one fp16 ulp is at most 2^-10 of the value (a single rounding errs by at most
// half of that, 2^-11; two sides that round different float values may land one ulp apart).
inline constexpr double kFp16Ulp = 1.0 / 1024.0;
// The ulp of a 16-bit storage type A: the tests written once over A (bf16, fp16) add it to the float tolerance.
template <typename A>
inline constexpr double kStorageUlp = std::is_same_v<A, fp16> ? kFp16Ulp : kBf16Ulp;

// The schedules every launch sequence runs under (cuda_emu.hpp): in order, shuffled rounds, run-ahead; the seeds are
// fixed so that a failure reproduces.
inline const cuda_emu::Schedule kSchedules[] = {{cuda_emu::ScheduleKind::InOrder, 0},
                                                {cuda_emu::ScheduleKind::Shuffled, 0x5eedULL},
                                                {cuda_emu::ScheduleKind::RunAhead, 0xa4eadULL}};
inline const char* schedule_name(cuda_emu::ScheduleKind k) {
  return k == cuda_emu::ScheduleKind::InOrder    ? "in-order"
         : k == cuda_emu::ScheduleKind::Shuffled ? "shuffled"
                                                 : "run-ahead";
}

// Runs `launches` under each schedule of kSchedules, every time from the same initial contents of `outputs`; passes
// when all leave every output bit for bit the same (a race between threads shows as a difference). The outputs keep
// the first (in-order) run's results.
inline ::testing::AssertionResult emulate_schedules(const std::function<void()>& launches,
                                                    const std::vector<EmuOutput>& outputs) {
  std::vector<std::vector<unsigned char>> initial, first;
  for (const EmuOutput& o : outputs) {
    const auto* p = static_cast<const unsigned char*>(o.data);
    initial.emplace_back(p, p + o.bytes);
  }
  for (const cuda_emu::Schedule& schedule : kSchedules) {
    if (!first.empty())
      for (size_t k = 0; k < outputs.size(); k++) std::memcpy(outputs[k].data, initial[k].data(), outputs[k].bytes);
    {
      cuda_emu::ScopedSchedule s(schedule);
      launches();
    }
    if (first.empty()) {
      for (const EmuOutput& o : outputs) {
        const auto* p = static_cast<const unsigned char*>(o.data);
        first.emplace_back(p, p + o.bytes);
      }
      continue;
    }
    for (size_t k = 0; k < outputs.size(); k++) {
      if (std::memcmp(outputs[k].data, first[k].data(), outputs[k].bytes) == 0) continue;
      size_t at = 0;
      const auto* p = static_cast<const unsigned char*>(outputs[k].data);
      while (at < outputs[k].bytes && p[at] == first[k][at]) at++;
      return ::testing::AssertionFailure() << outputs[k].name << " differs between the in-order and the "
                                           << schedule_name(schedule.kind) << " schedule (a race) from byte " << at;
    }
  }
  for (size_t k = 0; k < outputs.size(); k++) std::memcpy(outputs[k].data, first[k].data(), outputs[k].bytes);
  return ::testing::AssertionSuccess();
}

}  // namespace hpct::kernels::test
