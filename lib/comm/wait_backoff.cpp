#include "comm/wait_backoff.hpp"

#include <time.h>

#include <algorithm>
#include <thread>

namespace hpct::comm {

void Backoff::pause(std::chrono::steady_clock::time_point now) {
  if (spins_ < kSpins) {
    ++spins_;
    return;
  }
  if (std::chrono::duration<double>(now - start_).count() < kYieldS) {
    std::this_thread::yield();
    return;
  }
  timespec ts{0, sleep_ns_};
  nanosleep(&ts, nullptr);  // an early wake-up (signal) only means an earlier poll
  sleep_ns_ = std::min(sleep_ns_ * 2, kSleepMaxNs);
}

}  // namespace hpct::comm
