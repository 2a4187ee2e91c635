#pragma once
// NcclSyncGuard: the bounded host wait on a CUDA stream that NCCL work is queued on (kernels/exec_context.hpp's
// StreamSyncGuard; docs/invariants.md (invariant 3) and docs/cuda.md). ParallelContext builds one on CUDA, watching
// every NcclCommunicator it owns, and installs it in its exec(), so every kernels::synchronize of the compute stream
// goes through it.
//
// synchronize(stream, what) polls cudaStreamQuery(stream) with back-off (wait_backoff.hpp) for at most timeout_s;
// while it waits it checks ncclCommGetAsyncError of every watched communicator (NcclCommunicator::async_error()).
// An asynchronous error, or the deadline, makes it abort every watched communicator (ncclCommAbort: their kernels
// exit, so the stream drains) and throw hpct::Error naming the rank, `what`, the time waited and, on a timeout, the
// NCCL operations still unfinished (NcclCommunicator::unfinished()). A CUDA error of the stream is thrown as it is.
// The decisions are comm/guarded_wait.hpp's (unit-tested without a GPU). Built with NCCL only (HPCT_HAVE_NCCL).
#include <string>
#include <vector>

#include "comm/nccl_communicator.hpp"
#include "kernels/exec_context.hpp"

namespace hpct::comm {

class NcclSyncGuard final : public StreamSyncGuard {
 public:
  // rank: this process's world rank (messages); timeout_s: comm.timeout_s.
  NcclSyncGuard(int rank, double timeout_s);
  // The communicators whose operations may be queued on the synchronized streams; they must outlive the guard's use.
  void watch(NcclCommunicator& comm) { comms_.push_back(&comm); }
  size_t watched() const { return comms_.size(); }
  void synchronize(void* stream, const char* what) override;
  void abort_communication() noexcept override;
  double waited_ms() const { return waited_ms_; }  // the host time spent in synchronize(), summed

 private:
  int rank_;
  double timeout_s_;
  std::vector<NcclCommunicator*> comms_;
  double waited_ms_ = 0.0;
};

}  // namespace hpct::comm
