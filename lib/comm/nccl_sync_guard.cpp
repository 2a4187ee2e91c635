#include "comm/nccl_sync_guard.hpp"

#include <cuda_runtime.h>

#include "comm/guarded_wait.hpp"
#include "core/error.hpp"

namespace hpct::comm {

NcclSyncGuard::NcclSyncGuard(int rank, double timeout_s) : rank_(rank), timeout_s_(timeout_s) {
  HPCT_CHECK(timeout_s_ > 0, "sync guard: comm.timeout_s must be > 0 seconds, is {}", timeout_s_);
}

void NcclSyncGuard::synchronize(void* stream, const char* what) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  detail::guarded_host_wait(
      [s, what] {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return true;
        if (e == cudaErrorNotReady) return false;
        (void)cudaGetLastError();
        // a fault of a kernel or copy queued on the stream: thrown as it is
        HPCT_FAIL("{}: cudaStreamQuery failed: {} ({}), from an operation queued on the stream", what,
                  cudaGetErrorString(e), cudaGetErrorName(e));
        return false;
      },
      [this] {
        for (const NcclCommunicator* c : comms_) {
          std::string e = c->async_error();
          if (!e.empty()) return e;
        }
        return std::string();
      },
      [this] {
        for (NcclCommunicator* c : comms_) c->abort();
      },
      [this] {
        std::string all;
        for (const NcclCommunicator* c : comms_) {
          const std::string u = c->unfinished();
          if (!u.empty()) all += (all.empty() ? "" : "; ") + u;
        }
        return all;
      },
      timeout_s_, rank_, what, waited_ms_);
}

void NcclSyncGuard::abort_communication() noexcept {
  for (NcclCommunicator* c : comms_) c->abort();
}

}  // namespace hpct::comm
