#pragma once
// Helpers of the emulated kernel tests (test_emu_*.cpp): run a sequence of emulated launches twice, under the
// in-order schedule and under a shuffled one, from the same initial outputs, and require bitwise-equal results (a
// race between threads shows as a difference); compare bitwise with the CPU backend where the kernel promises it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_emu.hpp"

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

// The shuffled schedule of the second run (any non-zero seed; fixed so that a failure reproduces).
constexpr uint64_t kShuffledSchedule = 0x5eedULL;

// Runs `launches` under the in-order schedule, then, from the same initial contents of `outputs`, under the shuffled
// one; passes when both leave every output bit for bit the same. The outputs keep the first run's results.
inline ::testing::AssertionResult emulate_twice(const std::function<void()>& launches,
                                                const std::vector<EmuOutput>& outputs) {
  std::vector<std::vector<unsigned char>> initial, first;
  for (const EmuOutput& o : outputs) {
    const auto* p = static_cast<const unsigned char*>(o.data);
    initial.emplace_back(p, p + o.bytes);
  }
  {
    cuda_emu::ScopedSchedule s(0);
    launches();
  }
  for (size_t k = 0; k < outputs.size(); k++) {
    const auto* p = static_cast<const unsigned char*>(outputs[k].data);
    first.emplace_back(p, p + outputs[k].bytes);
    std::memcpy(outputs[k].data, initial[k].data(), outputs[k].bytes);
  }
  {
    cuda_emu::ScopedSchedule s(kShuffledSchedule);
    launches();
  }
  for (size_t k = 0; k < outputs.size(); k++) {
    if (std::memcmp(outputs[k].data, first[k].data(), outputs[k].bytes) != 0) {
      size_t at = 0;
      const auto* p = static_cast<const unsigned char*>(outputs[k].data);
      while (at < outputs[k].bytes && p[at] == first[k][at]) at++;
      return ::testing::AssertionFailure() << outputs[k].name << " differs between the in-order and the shuffled "
                                           << "schedule (a race) from byte " << at;
    }
  }
  return ::testing::AssertionSuccess();
}

// Bitwise equality (NaN payloads and -0.0 included), naming the first difference.
template <typename T>
::testing::AssertionResult bitwise_equal(const std::string& what, const std::vector<T>& got,
                                         const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < got.size(); i++)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << what << ": element " << i << " differs: " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

}  // namespace hpct::kernels::test
