#pragma once
// Bounded polling with back-off, shared by the communicators' Work::wait() (docs/invariants.md, invariant 3).
//
// wait_with_backoff(done, timeout_s, waited_ms) calls done() until it returns true or timeout_s seconds
// have passed on the steady clock. Between polls it backs off so that oversubscribed ranks (more ranks than
// cores) leave the core to the rank they are waiting for: about 100 tight polls, then std::this_thread::yield()
// until 1 ms has passed, then sleeps that double from 10 us up to 1 ms. It returns true when done() did,
// false on timeout (done() is always polled once more at the deadline), and adds the milliseconds spent
// to waited_ms. done() may throw; the time spent is still added.
#include <chrono>

namespace hpct::comm {

class Backoff {
 public:
  static constexpr int kSpins = 100;              // tight polls first: a small op is done in us
  static constexpr double kYieldS = 1e-3;         // then yield for this long
  static constexpr long kSleepMinNs = 10'000;     // then sleep 10 us, doubling ...
  static constexpr long kSleepMaxNs = 1'000'000;  // ... up to 1 ms (latency cost at most ~1 ms)

  explicit Backoff(std::chrono::steady_clock::time_point start) : start_(start) {}
  // One pause; `now` is the caller's current steady-clock time.
  void pause(std::chrono::steady_clock::time_point now);
  long next_sleep_ns() const { return sleep_ns_; }  // for tests

 private:
  std::chrono::steady_clock::time_point start_;
  int spins_ = 0;
  long sleep_ns_ = kSleepMinNs;
};

template <typename Done>
bool wait_with_backoff(Done&& done, double timeout_s, double& waited_ms) {
  using clock = std::chrono::steady_clock;
  const clock::time_point start = clock::now();
  Backoff backoff(start);
  struct AddElapsed {  // adds the elapsed time also when done() throws
    clock::time_point start;
    double& waited_ms;
    ~AddElapsed() { waited_ms += std::chrono::duration<double, std::milli>(clock::now() - start).count(); }
  } add_elapsed{start, waited_ms};
  for (;;) {
    if (done()) return true;
    const clock::time_point now = clock::now();
    if (std::chrono::duration<double>(now - start).count() >= timeout_s) return done();
    backoff.pause(now);
  }
}

}  // namespace hpct::comm
