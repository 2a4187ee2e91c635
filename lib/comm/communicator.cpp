#include "comm/communicator.hpp"

#include <string_view>

#include "comm/guarded_wait.hpp"
#include "comm/op_desc.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace hpct::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

const char* device_backend_name(DeviceBackend b) { return b == DeviceBackend::Nccl ? "nccl" : "mpi"; }

DeviceBackend parse_device_backend(const std::string& s) {
  if (s == "nccl") return DeviceBackend::Nccl;
  if (s == "mpi") return DeviceBackend::HostStagedMpi;
  HPCT_FAIL("comm.backend = \"{}\": use \"nccl\" (device buffers through NCCL) or \"mpi\" (through MPI over pinned "
            "host staging)",
            s);
}

void Communicator::record_volume(const char* op, double bytes) {
  const std::string_view o(op);
  if (o == "allreduce") volume_.allreduce += bytes;
  else if (o.rfind("reduce_scatter", 0) == 0)
    volume_.reduce_scatter += bytes;
  else if (o.rfind("allgather", 0) == 0)
    volume_.allgather += bytes;
  else if (o == "broadcast")
    volume_.broadcast += bytes;
  else if (o == "send" || o == "recv")
    volume_.p2p += bytes;
  ++volume_.operations;
}

namespace detail {

std::string describe(const OpDesc& d, const Communicator& comm) {
  std::string s = d.op;
  if (d.has_reduce) s += fmt::format(" ({})", reduce_op_name(d.reduce));
  if (std::string_view(d.op) != "barrier")
    s += fmt::format(" of {} {}", human_bytes(static_cast<double>(d.bytes)), dtype_name(d.dtype));
  if (d.peer_role) s += fmt::format(" {} {}", d.peer_role, d.peer);
  if (!d.what.empty()) s += fmt::format(" ({})", d.what);
  s += fmt::format(" on communicator {} (rank {} of {})", comm.name(), comm.rank(), comm.size());
  return s;
}

std::string timeout_message(const OpDesc& d, const Communicator& comm) {
  return fmt::format("{} timed out after {:g} s (comm.timeout_s): a rank of this group stalled or died; the job aborts",
                     describe(d, comm), comm.options().timeout_s);
}

void check_count(int64_t count, int64_t max_count, const char* op, const std::string& what, const Communicator& comm) {
  HPCT_CHECK(count >= 0, "{} ({}) on communicator {}: negative element count {}", op, what, comm.name(), count);
  HPCT_CHECK(max_count < 0 || count <= max_count,
             "{} ({}) on communicator {}: {} elements exceed the {} elements one MPI call can take (int counts); "
             "split the buffer into several operations",
             op, what, comm.name(), count, max_count);
}

void check_peer(int peer, const char* role, const char* op, const std::string& what, const Communicator& comm) {
  HPCT_CHECK(peer >= 0 && peer < comm.size(), "{} ({}) on communicator {}: {} {} is not a rank of this group of {}", op,
             what, comm.name(), role, peer, comm.size());
}

std::string guarded_wait_message(int rank, const std::string& what, double waited_s, double timeout_s,
                                 const std::string& error, const std::string& pending) {
  if (!error.empty())
    return fmt::format(
        "rank {}: {} failed after {:.3g} s: {}; every NCCL communicator of this rank was aborted and the "
        "job aborts",
        rank, what, waited_s, error);
  return fmt::format("rank {}: {} timed out after {:.3g} s (comm.timeout_s = {:g}): the stream waits on NCCL work that "
                     "did not complete ({}); a rank of one of those groups stalled or died; every NCCL communicator of "
                     "this rank was aborted and the job aborts",
                     rank, what, waited_s, timeout_s,
                     pending.empty() ? std::string("no unfinished NCCL operation was found: the stall is in the "
                                                   "kernels themselves")
                                     : pending);
}

}  // namespace detail

std::string broadcast_string(Communicator& comm, std::string s, int root, const std::string& what) {
  int64_t len = static_cast<int64_t>(s.size());
  comm.broadcast(&len, 1, DType::I64, root, what + " (length)");
  s.resize(static_cast<size_t>(len));
  if (len > 0) comm.broadcast(s.data(), len, DType::U8, root, what);
  return s;
}

}  // namespace hpct::comm
