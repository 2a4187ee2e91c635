#pragma once
// What an operation in flight is, for the messages of errors and timeouts; shared by the communicators.
// Internal to lib/comm.
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/communicator.hpp"

namespace hpct::comm::detail {

struct OpDesc {
  const char* op = "";      // "allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv", "barrier"
  bool has_reduce = false;  // reductions name their operator
  ReduceOp reduce = ReduceOp::Sum;
  size_t bytes = 0;  // payload of this rank's buffer
  DType dtype = DType::F32;
  const char* peer_role = nullptr;  // "to rank", "from rank", "from root" (send, recv, broadcast)
  int peer = -1;
  std::string what;  // the caller's label ("grad bucket 3")

  void set_reduce(ReduceOp r) {
    has_reduce = true;
    reduce = r;
  }
};

// "allreduce (sum) of 4.00 MiB f32 (grad bucket 3) on communicator dp (rank 1 of 2)"
std::string describe(const OpDesc& d, const Communicator& comm);
// describe() + " timed out after 5 s (comm.timeout_s): a rank of this group stalled or died; the job aborts"
std::string timeout_message(const OpDesc& d, const Communicator& comm);

// Throws hpct::Error unless 0 <= count (and count <= max_count when max_count >= 0).
void check_count(int64_t count, int64_t max_count, const char* op, const std::string& what, const Communicator& comm);
// Throws unless 0 <= peer < size() (p2p peers and broadcast roots).
void check_peer(int peer, const char* role, const char* op, const std::string& what, const Communicator& comm);

// True when [a, a+a_bytes) and [b, b+b_bytes) share a byte.
inline bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace hpct::comm::detail
