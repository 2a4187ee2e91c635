// The bounded back-off wait of lib/comm (no MPI needed): it returns as soon as the condition holds, times out after
// timeout_s (not much later), accounts its time, and its sleeps grow from 10 us to at most 1 ms.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>

#include "comm/wait_backoff.hpp"

namespace hpct::comm {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

TEST(WaitBackoff, ReturnsWhenDone) {
  int polls = 0;
  double waited = 0.0;
  EXPECT_TRUE(wait_with_backoff([&] { return ++polls == 500; }, 10.0, waited));
  EXPECT_EQ(polls, 500);
  EXPECT_LT(waited, 1000.0);
}

TEST(WaitBackoff, CompletesAfterAFewMilliseconds) {
  const auto t0 = clock_type::now();
  double waited = 0.0;
  EXPECT_TRUE(wait_with_backoff([&] { return seconds_since(t0) > 0.02; }, 10.0, waited));
  const double s = seconds_since(t0);
  EXPECT_GE(s, 0.02);
  EXPECT_LT(s, 0.2);  // at most one 1 ms sleep late, plus scheduling noise
  EXPECT_GE(waited, 20.0);
}

TEST(WaitBackoff, TimesOutOnTime) {
  const auto t0 = clock_type::now();
  double waited = 5.0;  // accumulates
  int polls = 0;
  EXPECT_FALSE(wait_with_backoff(
      [&] {
        ++polls;
        return false;
      },
      0.3, waited));
  const double s = seconds_since(t0);
  EXPECT_GE(s, 0.3);
  EXPECT_LT(s, 0.5);
  EXPECT_GE(waited, 305.0);
  // Backed off: 100 spins + ~1 ms of yields + sleeps up to 1 ms, so a few hundred to a few thousand polls, not
  // the millions a busy loop makes in 0.3 s. The lower bound says the sleeps stay short (at most ~2 ms each, not
  // 1 ms: on a loaded 2-core CI machine every sleep overshoots, and 304 polls were seen where ~400 is nominal).
  EXPECT_GT(polls, 100 + 100);
  EXPECT_LT(polls, 200000);
}

TEST(WaitBackoff, SleepsGrowToOneMillisecond) {
  const auto t0 = clock_type::now();
  Backoff b(t0);
  for (int i = 0; i < Backoff::kSpins; ++i) b.pause(t0);  // spins: no sleep yet
  EXPECT_EQ(b.next_sleep_ns(), Backoff::kSleepMinNs);
  const auto later = t0 + std::chrono::milliseconds(2);  // past the yield phase
  b.pause(later);
  EXPECT_EQ(b.next_sleep_ns(), 2 * Backoff::kSleepMinNs);
  for (int i = 0; i < 20; ++i) b.pause(later);
  EXPECT_EQ(b.next_sleep_ns(), Backoff::kSleepMaxNs);
}

TEST(WaitBackoff, ExceptionFromThePollPropagatesAndIsTimed) {
  double waited = 0.0;
  int polls = 0;
  EXPECT_THROW(wait_with_backoff(
                   [&]() -> bool {
                     if (++polls == 3) throw std::runtime_error("MPI error");
                     return false;
                   },
                   10.0, waited),
               std::runtime_error);
  EXPECT_GE(waited, 0.0);
  EXPECT_EQ(polls, 3);
}

}  // namespace
}  // namespace hpct::comm
