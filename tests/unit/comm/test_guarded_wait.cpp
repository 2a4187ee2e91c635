// The decisions of the bounded host wait on a stream NCCL work is queued on (comm/guarded_wait.hpp, used by
// NcclSyncGuard), with scripted queries in place of cudaStreamQuery, ncclCommGetAsyncError and ncclCommAbort: no GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "comm/guarded_wait.hpp"
#include "core/error.hpp"

namespace hpct::comm {
namespace {

using clock_type = std::chrono::steady_clock;

struct Script {
  int polls = 0, error_checks = 0, aborts = 0, pending_calls = 0;
};

TEST(GuardedWait, ReturnsOnceTheStreamDrainsWithoutAborting) {
  Script s;
  double waited = 0.0;
  detail::guarded_host_wait([&] { return ++s.polls >= 250; },
                            [&] {
                              ++s.error_checks;
                              return std::string();
                            },
                            [&] { ++s.aborts; },
                            [&] {
                              ++s.pending_calls;
                              return std::string("x");
                            },
                            10.0, 3, "synchronize", waited);
  EXPECT_EQ(s.polls, 250);
  EXPECT_EQ(s.error_checks, 249);  // after every unsuccessful poll
  EXPECT_EQ(s.aborts, 0);
  EXPECT_EQ(s.pending_calls, 0);
  EXPECT_GE(waited, 0.0);
  EXPECT_LT(waited, 5000.0);
}

TEST(GuardedWait, AnAsynchronousErrorAbortsAtOnceAndNamesRankWaitAndError) {
  Script s;
  double waited = 0.0;
  const auto t0 = clock_type::now();
  try {
    detail::guarded_host_wait([&] { return ++s.polls < 0; },  // never drains
                              [&] {
                                return ++s.error_checks == 7
                                           ? std::string("NCCL error on communicator dp: remote error")
                                           : std::string();
                              },
                              [&] { ++s.aborts; },
                              [&] {
                                ++s.pending_calls;
                                return std::string("allreduce (grad bucket 0)");
                              },
                              60.0, 5, "kernels::synchronize of the compute stream", waited);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 5"), std::string::npos) << m;
    EXPECT_NE(m.find("kernels::synchronize of the compute stream failed"), std::string::npos) << m;
    EXPECT_NE(m.find("NCCL error on communicator dp: remote error"), std::string::npos) << m;
    EXPECT_NE(m.find("aborted"), std::string::npos) << m;
  }
  EXPECT_EQ(s.error_checks, 7);
  EXPECT_EQ(s.polls, 7);
  EXPECT_EQ(s.aborts, 1);
  EXPECT_EQ(s.pending_calls, 0);  // an error names itself; pending() is for timeouts
  EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 30.0);
}

TEST(GuardedWait, ATimeoutAbortsAndNamesTheUnfinishedOperations) {
  Script s;
  double waited = 0.0;
  const double timeout_s = 0.3;
  const auto t0 = clock_type::now();
  try {
    detail::guarded_host_wait([&] { return ++s.polls < 0; }, [&] { return std::string(); }, [&] { ++s.aborts; },
                              [&] {
                                ++s.pending_calls;
                                return std::string("recv of 1.00 MiB f32 from rank 0 (pipeline activation of "
                                                   "micro-batch 3) on communicator pp link 0-1 activations");
                              },
                              timeout_s, 2, "kernels::synchronize of the compute stream", waited);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
    EXPECT_NE(m.find("timed out after"), std::string::npos) << m;
    EXPECT_NE(m.find("comm.timeout_s = 0.3"), std::string::npos) << m;
    EXPECT_NE(m.find("pipeline activation of micro-batch 3"), std::string::npos) << m;
  }
  const double elapsed = std::chrono::duration<double>(clock_type::now() - t0).count();
  EXPECT_GE(elapsed, timeout_s);
  EXPECT_LT(elapsed, timeout_s + 2.0);
  EXPECT_GE(waited, 1e3 * timeout_s);
  EXPECT_EQ(s.aborts, 1);
  EXPECT_EQ(s.pending_calls, 1);
  EXPECT_GT(s.polls, 100);  // it kept polling (with back-off) until the deadline
}

TEST(GuardedWait, ATimeoutWithNothingPendingSaysSo) {
  double waited = 0.0;
  try {
    detail::guarded_host_wait([] { return false; }, [] { return std::string(); }, [] {}, [] { return std::string(); },
                              0.05, 0, "wait", waited);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no unfinished NCCL operation"), std::string::npos) << e.what();
  }
}

TEST(GuardedWait, DrainingAtTheDeadlineIsNotATimeout) {
  Script s;
  double waited = 0.0;
  const auto t0 = clock_type::now();
  const double timeout_s = 0.1;
  detail::guarded_host_wait([&] { return std::chrono::duration<double>(clock_type::now() - t0).count() >= timeout_s; },
                            [&] { return std::string(); }, [&] { ++s.aborts; }, [&] { return std::string(); },
                            timeout_s, 0, "wait", waited);
  EXPECT_EQ(s.aborts, 0);
}

TEST(GuardedWait, AFailingStreamQueryPropagatesWithoutAbort) {
  Script s;
  double waited = 0.0;
  EXPECT_THROW(detail::guarded_host_wait(
                   [&]() -> bool {
                     if (++s.polls == 3) throw std::runtime_error("cudaStreamQuery failed");
                     return false;
                   },
                   [&] { return std::string(); }, [&] { ++s.aborts; }, [&] { return std::string(); }, 10.0, 0, "wait",
                   waited),
               std::runtime_error);
  EXPECT_EQ(s.polls, 3);
  EXPECT_EQ(s.aborts, 0);
}

}  // namespace
}  // namespace hpct::comm
