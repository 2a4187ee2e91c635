#pragma once
// The decisions of a bounded host wait on a CUDA stream that NCCL work is queued on (NcclSyncGuard,
// comm/nccl_sync_guard.hpp; docs/invariants.md (invariant 3) and docs/cuda.md). Plain C++: the queries are parameters,
// so the logic runs in tests without a GPU (tests/unit/comm/test_guarded_wait.cpp). Internal to lib/comm.
//
// Why it is needed: NcclCommunicator's Work::wait() is stream-ordered (the compute stream waits on the operation's
// completion event), so a collective whose peer stalled shows up as a compute stream that never drains, and a plain
// cudaStreamSynchronize would block forever. The guarded wait instead
//  - polls done() (the stream has drained: cudaStreamQuery) with back-off (wait_backoff.hpp), for at most timeout_s;
//  - after every unsuccessful poll asks async_error() for an asynchronous error of any watched communicator
//    (ncclCommGetAsyncError; "" when there is none), so that a failed peer stops the wait at once;
//  - on such an error, or past the deadline, calls abort_all() (ncclCommAbort of every watched communicator: their
//    kernels exit, the stream can drain, later operations on them throw) and throws hpct::Error naming the rank,
//    what the host waited for, the time, and (timeout) pending(): the NCCL operations still unfinished.
// done() may throw (a CUDA error of the stream): the exception propagates without an abort (main() aborts the job,
// the communicators' destructors abort them while it unwinds).
#include <string>

#include "comm/wait_backoff.hpp"
#include "core/error.hpp"

namespace hpct::comm::detail {

// "rank 3: kernels::synchronize of the compute stream timed out after 300 s (comm.timeout_s) ..." (the message of a
// timeout; error: "" for a timeout, else the asynchronous error that stopped the wait).
std::string guarded_wait_message(int rank, const std::string& what, double waited_s, double timeout_s,
                                 const std::string& error, const std::string& pending);

template <typename Done, typename AsyncError, typename AbortAll, typename Pending>
void guarded_host_wait(Done&& done, AsyncError&& async_error, AbortAll&& abort_all, Pending&& pending, double timeout_s,
                       int rank, const std::string& what, double& waited_ms) {
  std::string error;
  const double before_ms = waited_ms;
  const bool stopped = wait_with_backoff(
      [&] {
        if (done()) return true;
        error = async_error();
        return !error.empty();
      },
      timeout_s, waited_ms);
  if (stopped && error.empty()) return;  // drained
  // A timeout or an asynchronous error: describe first (the communicators are still intact), then abort.
  const std::string unfinished = error.empty() ? pending() : std::string();
  abort_all();
  HPCT_FAIL("{}", guarded_wait_message(rank, what, (waited_ms - before_ms) / 1e3, timeout_s, error, unfinished));
}

}  // namespace hpct::comm::detail
