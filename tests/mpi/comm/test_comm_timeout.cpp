// The timeout contract at np 2 (docs/invariants.md, invariant 3): rank 1 joins an allreduce 4 s late; rank 0, with
// comm.timeout_s = 1, gets an hpct::Error naming the operation within about a second, not a hang. The request
// stays valid after the timeout: rank 0 then completes it with further waits, and both ranks finish in step.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm/comm.hpp"
#include "core/error.hpp"

namespace hpct::comm {
namespace {

TEST(MpiCommunicatorTimeout, LateRankTimesOutWithANamedOperation) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != 2) GTEST_SKIP() << "needs exactly 2 ranks";
  CommOptions opts;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  opts.timeout_s = rank == 0 ? 1.0 : 30.0;
  MpiCommunicator comm(MPI_COMM_WORLD, "dp", opts);
  comm.barrier("align");

  std::vector<float> grad(1 << 20, static_cast<float>(rank + 1));  // 4.00 MiB of f32
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    comm.allreduce(grad.data(), static_cast<int64_t>(grad.size()), DType::F32, ReduceOp::Sum, "grad bucket 3");
  } else {
    WorkPtr w = comm.allreduce_async(grad.data(), static_cast<int64_t>(grad.size()), DType::F32, ReduceOp::Sum,
                                     "grad bucket 3");
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    try {
      w->wait();
    } catch (const Error& e) {
      msg = e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(s, 0.95);
    EXPECT_LT(s, 3.0) << "the timeout must fire after comm.timeout_s = 1 s, not when the late rank arrives";
    EXPECT_NE(msg.find("allreduce (sum) of 4.00 MiB f32 (grad bucket 3) on communicator dp (rank 0 of 2) timed out "
                       "after 1 s (comm.timeout_s)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("[rank 0 on "), std::string::npos) << msg;  // the error machinery's prefix
    EXPECT_GE(w->waited_ms(), 950.0);
    EXPECT_EQ(comm.in_flight(), 1u);  // still in flight, still valid
    // Complete the late request: each further wait has a fresh 1 s window; rank 1 arrives at about 4 s.
    bool done = false;
    for (int attempt = 0; attempt < 10 && !done; ++attempt) {
      try {
        w->wait();
        done = true;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
      }
    }
    ASSERT_TRUE(done);
    EXPECT_EQ(comm.in_flight(), 0u);
  }
  for (float v : grad) ASSERT_EQ(v, 3.0f);  // 1 + 2: the late allreduce still computed the right sum
  comm.barrier("end");
}

}  // namespace
}  // namespace hpct::comm
