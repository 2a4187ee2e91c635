#pragma once
// The bounded wait on a non-blocking NCCL communicator's state (NcclCommunicator: its initialisation, the enqueue of
// its operations, its finalisation) and the message of an initialisation that timed out. Internal to lib/comm. The
// state query is a parameter, so the loop runs in tests without a GPU (tests/unit/comm/test_nccl_wait.cpp).
#include <nccl.h>

#include <string>

#include "comm/wait_backoff.hpp"

// ncclCommInitRankConfig, ncclConfig_t.blocking and ncclCommFinalize appeared in NCCL 2.14.
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "NcclCommunicator needs NCCL >= 2.14 (non-blocking communicators: ncclCommInitRankConfig, ncclCommFinalize)"
#endif

namespace hpct::comm::detail {

// Polls state() with back-off (wait_backoff.hpp) until it returns something other than ncclInProgress, for at most
// timeout_s seconds, and adds the time spent to waited_ms. Returns the last state seen: ncclSuccess (ready), an error,
// or ncclInProgress (timed out). state() is ncclCommGetAsyncError's answer with a failure of that call folded in.
template <typename State>
ncclResult_t await_nccl_state(State&& state, double timeout_s, double& waited_ms) {
  ncclResult_t last = ncclInProgress;
  (void)wait_with_backoff(
      [&] {
        last = state();
        return last != ncclInProgress;
      },
      timeout_s, waited_ms);
  return last;
}

// "NCCL initialisation (ncclCommInitRankConfig) on communicator dp (rank 1 of 2, CUDA device 1) timed out after
// 5 s (comm.timeout_s): a rank of this group stalled or died, or ..." (the causes and what to check).
std::string nccl_init_timeout_message(const std::string& name, int rank, int size, int cuda_device, double timeout_s);

}  // namespace hpct::comm::detail
