#pragma once
// Execution context every kernel takes (DESIGN.md §7): which backend runs it and on which stream.
// On the CPU the stream is unused (kernels complete before they return); on CUDA it is a cudaStream_t.
#include "tensor/device.hpp"

namespace hpct {

// A bounded host wait on a stream (DESIGN.md invariant 3). Once NCCL work is queued on the compute stream (the
// communicators' Work::wait() is stream-ordered: the stream waits on their completion events), a plain
// cudaStreamSynchronize could block forever on a peer that stalled. lib/parallel's ParallelContext installs an
// implementation in its exec() (comm/nccl_sync_guard.hpp) that polls the stream with back-off, watches the NCCL
// communicators' asynchronous errors and, past comm.timeout_s, aborts them and throws hpct::Error naming the rank and
// what it waited for. An interface here, so that lib/kernels builds without MPI and NCCL.
class StreamSyncGuard {
 public:
  virtual ~StreamSyncGuard() = default;
  // Blocks the host until all work queued so far on `stream` (a cudaStream_t) has completed; throws hpct::Error on a
  // timeout or a failure (`what` names the wait in the message).
  virtual void synchronize(void* stream, const char* what) = 0;
};

struct ExecContext {
  Device device = Device::CPU;
  void* stream = nullptr;  // cudaStream_t on Device::CUDA, unused on Device::CPU
  // CUDA: kernels::synchronize() waits through it when set (else cudaStreamSynchronize), and so do copy_to_host /
  // copy_from_host with pageable host memory before the copy (the runtime would block on the stream itself there);
  // unused on the CPU.
  StreamSyncGuard* sync_guard = nullptr;
};

}  // namespace hpct
