// The bounded wait on a non-blocking NCCL communicator's state (comm/nccl_wait.hpp), with a scripted state in place
// of ncclCommGetAsyncError, and the message of an initialisation that timed out: no GPU needed (NCCL builds only).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "comm/nccl_wait.hpp"

namespace hpct::comm {
namespace {

using clock_type = std::chrono::steady_clock;

TEST(NcclWait, ReturnsSuccessOnceNoLongerInProgress) {
  int polls = 0;
  double waited = 0.0;
  const ncclResult_t r = detail::await_nccl_state([&] { return ++polls < 300 ? ncclInProgress : ncclSuccess; }, 10.0,
                                                  waited);
  EXPECT_EQ(r, ncclSuccess);
  EXPECT_EQ(polls, 300);
  EXPECT_LT(waited, 1000.0);
}

TEST(NcclWait, ReturnsAnErrorAtOnce) {
  int polls = 0;
  double waited = 0.0;
  const ncclResult_t r = detail::await_nccl_state(
      [&] {
        ++polls;
        return ncclRemoteError;
      },
      10.0, waited);
  EXPECT_EQ(r, ncclRemoteError);
  EXPECT_EQ(polls, 1);
}

TEST(NcclWait, TimesOutInProgress) {
  const auto t0 = clock_type::now();
  double waited = 0.0;
  const ncclResult_t r = detail::await_nccl_state([] { return ncclInProgress; }, 0.05, waited);
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  EXPECT_EQ(r, ncclInProgress);
  EXPECT_GE(s, 0.05);
  EXPECT_LT(s, 1.0);
  EXPECT_GE(waited, 50.0);
}

TEST(NcclWait, InitTimeoutMessageNamesCommunicatorRankTimeoutAndCauses) {
  const std::string m = detail::nccl_init_timeout_message("dp", 1, 2, 3, 5.0);
  EXPECT_NE(m.find("communicator dp (rank 1 of 2, CUDA device 3)"), std::string::npos) << m;
  EXPECT_NE(m.find("timed out after 5 s (comm.timeout_s)"), std::string::npos) << m;
  EXPECT_NE(m.find("stalled or died"), std::string::npos) << m;
  EXPECT_NE(m.find("NCCL_SOCKET_IFNAME"), std::string::npos) << m;
  EXPECT_NE(m.find("ncclCommInitRankConfig"), std::string::npos) << m;
}

}  // namespace
}  // namespace hpct::comm
