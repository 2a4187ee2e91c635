#pragma once
// Communicator: the collective and point-to-point operations hpctrain needs, over one group of ranks
// (docs/architecture.md, docs/style.md "Interfaces like PyTorch c10d").
//
// Contract: every rank of the group calls collectives in the same order with matching counts and types.
// Every operation has an async form returning a Work handle; the blocking form is async + wait().
// docs/cuda.md: Work::wait() means completion *in stream order*; synchronize() (kernels.hpp) means the host blocks.
// For host buffers (MpiCommunicator) the two coincide: wait() returns once the buffer is readable and reusable. For
// device buffers (NcclCommunicator) wait() makes the communicator's input stream (the compute stream) wait on the
// operation and returns at once: kernels queued afterwards on that stream see the result, but the host may read a
// result only after a copy on the compute stream and a synchronize of it (kernels::synchronize, bounded through the
// ParallelContext's sync guard). Work::wait_host() is the host-blocking form for the few callers that need one.
// Every host wait is bounded by CommOptions::timeout_s: past it, wait() throws hpct::Error naming the rank,
// host, the operation and its `what` label ("allreduce of 4.00 MiB (grad bucket 3) on dp group timed out
// after 300 s"), and main() aborts the job (docs/invariants.md, invariant 3). Wait loops back off (spin, yield,
// then sleeps growing to 1 ms) so that oversubscribed ranks do not starve each other.
// Buffers are on the communicator's device(): MpiCommunicator takes host buffers only (Open MPI here is
// not CUDA-aware) and rejects device memory; NcclCommunicator takes device buffers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/device.hpp"
#include "tensor/tensor.hpp"

namespace hpct::comm {

enum class ReduceOp { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);

// How a CUDA run moves device buffers (deck key comm.backend): NCCL, or MPI over pinned host staging
// (parallel/staged_communicator.hpp: every collective crosses PCIe twice; the fallback for sites without NCCL and for
// several ranks on one GPU). The CPU has one backend, MPI, whatever the key says.
enum class DeviceBackend { Nccl, HostStagedMpi };
// "nccl" | "mpi"; the inverse parses the deck value (anything else: hpct::Error naming the accepted values).
const char* device_backend_name(DeviceBackend b);
DeviceBackend parse_device_backend(const std::string& s);

struct CommOptions {
  double timeout_s = 300.0;                            // deck key comm.timeout_s
  DeviceBackend device_backend = DeviceBackend::Nccl;  // deck key comm.backend
};

// Handle of an operation in flight. wait(): the operation has completed in stream order (host buffers: readable and
// reusable when it returns; device buffers: the communicator's input stream waits for it, the host does not).
// wait_host(): the host blocks until the operation has completed (device buffers: on the GPU), bounded by
// timeout_s; for host buffers the same as wait(). test(): non-blocking completion check that also drives progress.
// Destroying an unfinished Work waits for it (in stream order).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual void wait_host() { wait(); }
  virtual bool test() = 0;
  // Milliseconds the host spent blocked inside wait() or wait_host() (for the exposed-communication figures; a
  // stream-ordered wait() on device buffers does not block: about 0).
  double waited_ms() const { return waited_ms_; }

 protected:
  double waited_ms_ = 0.0;
};
using WorkPtr = std::unique_ptr<Work>;

// The payload bytes a rank passed to a communicator's operations, by kind, counted the nccl-tests way (its "size"):
// allreduce and broadcast the buffer; reduce-scatter the whole input (every rank's block), allgather the whole output;
// send and receive their buffer. A benchmark turns them into bus bytes (allreduce x 2(n-1)/n, reduce-scatter and
// allgather x (n-1)/n) to compare with the formulas (docs/parallelism.md).
struct CommVolume {
  double allreduce = 0, reduce_scatter = 0, allgather = 0, broadcast = 0, p2p = 0;
  int64_t operations = 0;
  CommVolume& operator+=(const CommVolume& o) {
    allreduce += o.allreduce;
    reduce_scatter += o.reduce_scatter;
    allgather += o.allgather;
    broadcast += o.broadcast;
    p2p += o.p2p;
    operations += o.operations;
    return *this;
  }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;
  virtual const std::string& name() const = 0;  // "world", "dp", "tp", "pp" (used in messages)
  virtual const CommOptions& options() const = 0;

  // In place: buf (count elements) on every rank becomes the reduction over ranks. Avg divides by size().
  virtual WorkPtr allreduce_async(void* buf, int64_t count, DType dtype, ReduceOp op, const std::string& what) = 0;
  // send: size()*recv_count elements; rank r receives the reduction of block r in recv (recv_count).
  virtual WorkPtr reduce_scatter_async(const void* send, void* recv, int64_t recv_count, DType dtype, ReduceOp op,
                                       const std::string& what) = 0;
  // send: send_count elements; recv: size()*send_count elements, block r from rank r. send may alias
  // block rank() of recv (in place).
  virtual WorkPtr allgather_async(const void* send, void* recv, int64_t send_count, DType dtype,
                                  const std::string& what) = 0;
  // Uneven forms (ZeRO shards of buckets whose length is not a multiple of size()): counts[r] elements
  // for rank r, blocks laid out back to back in rank order. reduce_scatter_v: send holds sum(counts)
  // elements, rank r receives the reduction of its block (counts[r] elements) in recv.
  // allgather_v: send holds counts[rank()] elements (may alias its block of recv: in place), recv holds
  // sum(counts). MPI: MPI_Ireduce_scatter / MPI_Iallgatherv. NCCL: grouped ncclReduce / ncclBroadcast.
  virtual WorkPtr reduce_scatter_v_async(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                                         ReduceOp op, const std::string& what) = 0;
  virtual WorkPtr allgather_v_async(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                                    const std::string& what) = 0;
  virtual WorkPtr broadcast_async(void* buf, int64_t count, DType dtype, int root, const std::string& what) = 0;
  virtual WorkPtr send_async(const void* buf, int64_t count, DType dtype, int peer, int tag,
                             const std::string& what) = 0;
  virtual WorkPtr recv_async(void* buf, int64_t count, DType dtype, int peer, int tag, const std::string& what) = 0;
  virtual WorkPtr barrier_async(const std::string& what) = 0;

  // What this rank's operations carried since the last reset_volume() (CommVolume).
  const CommVolume& volume() const { return volume_; }
  void reset_volume() { volume_ = CommVolume{}; }

  // Drives progress of operations in flight without blocking (MPI: MPI_Test on each; docs/platform.md: non-
  // blocking collectives progress only inside MPI calls). Call it between kernels or layers.
  virtual void progress() = 0;

  // Blocking forms.
  void allreduce(void* buf, int64_t count, DType dtype, ReduceOp op, const std::string& what) {
    allreduce_async(buf, count, dtype, op, what)->wait();
  }
  void reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype, ReduceOp op,
                      const std::string& what) {
    reduce_scatter_async(send, recv, recv_count, dtype, op, what)->wait();
  }
  void allgather(const void* send, void* recv, int64_t send_count, DType dtype, const std::string& what) {
    allgather_async(send, recv, send_count, dtype, what)->wait();
  }
  void broadcast(void* buf, int64_t count, DType dtype, int root, const std::string& what) {
    broadcast_async(buf, count, dtype, root, what)->wait();
  }
  void send(const void* buf, int64_t count, DType dtype, int peer, int tag, const std::string& what) {
    send_async(buf, count, dtype, peer, tag, what)->wait();
  }
  void recv(void* buf, int64_t count, DType dtype, int peer, int tag, const std::string& what) {
    recv_async(buf, count, dtype, peer, tag, what)->wait();
  }
  void barrier(const std::string& what) { barrier_async(what)->wait(); }

 protected:
  // Implementations call it once per operation issued: op is the OpDesc's name ("allreduce", "reduce_scatter_v", ...),
  // bytes the payload as CommVolume counts it.
  void record_volume(const char* op, double bytes);

 private:
  CommVolume volume_;
};

// Rank root's string on every rank of a host communicator (metadata: a length, then the bytes).
std::string broadcast_string(Communicator& comm, std::string s, int root, const std::string& what);

}  // namespace hpct::comm
