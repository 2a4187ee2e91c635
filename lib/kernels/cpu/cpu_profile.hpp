#pragma once
// The per-op profile of kernels.hpp (profile_enable / profile_take), seen from inside the backends: a scope that adds
// its wall time to the row `name` when profiling is on. Use outside parallel regions only (one host thread).
#include <chrono>
#include <string_view>

namespace hpct::kernels {

bool profile_on();
void profile_add(std::string_view name, double ms);

class ProfileScope {
 public:
  explicit ProfileScope(std::string_view name) : on_(profile_on()), name_(name) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (on_)
      profile_add(name_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  bool on_;
  std::string_view name_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace hpct::kernels
