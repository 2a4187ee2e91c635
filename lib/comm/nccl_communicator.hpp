#pragma once
// NcclCommunicator: the Communicator (communicator.hpp) over NCCL, for CUDA device buffers. Built only with CUDA and
// NCCL (HPCT_HAVE_NCCL); bootstrapped over an MpiCommunicator of the same ranks.
//
// Contract, beyond communicator.hpp's:
//  - Construction is collective over the bootstrap communicator: rank 0 makes the ncclUniqueId, the bootstrap's
//    broadcast hands it to the others (MPI_Ibcast, bounded by the bootstrap's timeout_s), every rank creates the
//    communicator on its *current* CUDA device (cudaSetDevice before, one GPU per rank: one GPU cannot host several
//    ranks of one communicator).
//  - The communicator is NCCL's non-blocking kind (ncclCommInitRankConfig with config.blocking = 0; NCCL >= 2.14), so
//    that no wait escapes options().timeout_s: the constructor polls ncclCommGetAsyncError with back-off
//    (wait_backoff.hpp) until the initialisation has finished, for at most timeout_s; a peer that is stuck or dead,
//    or unreachable (NCCL_SOCKET_IFNAME), makes it call ncclCommAbort and throw hpct::Error naming the communicator,
//    the rank, the CUDA device, the timeout and those causes. Likewise every enqueue (an operation outside a group,
//    group_end()) may return ncclInProgress while NCCL connects to the peers in the background: the operation is on
//    stream() only once the state is ncclSuccess, so each is awaited (bounded, abort + throw on a timeout) before
//    its completion event is recorded. The destructor finalises (ncclCommFinalize, awaited, bounded) and then
//    destroys; on a timeout or failure there, or while an exception unwinds, it aborts instead. (NCCL_COMM_BLOCKING=1
//    in the environment overrides config.blocking: the code stays correct, but NCCL's own calls block again.)
//  - Operations are enqueued on the communicator's own non-blocking stream (stream()). Each first waits (on the GPU,
//    through an event) for the work issued so far on the input stream (set_input_stream; default the legacy
//    default stream), so buffers written by kernels on that stream are ready. Counts are size_t in NCCL: no INT_MAX
//    limit. Avg is ncclAvg. BF16 is ncclBfloat16: NCCL widens to fp32 for each combination and rounds the partial
//    result to bf16 at every step of its ring or tree, so, as with MpiCommunicator's bf16 operations, the result is
//    reproducible for a fixed communicator size and algorithm but not bitwise equal to MPI's. F16 is ncclFloat16,
//    reduced the same way (fp32 per combination, rounded to fp16 at each step). The uneven forms are
//    one NCCL group of ncclReduce (reduce_scatter_v) or ncclBroadcast (allgather_v) calls, one per rank. In place as
//    in MpiCommunicator: allgather's send may be block rank() of recv, reduce_scatter's recv may be block rank() of
//    send.
//  - Work::wait() is stream-ordered (docs/cuda.md): it makes the input stream wait on an event recorded after the
//    operation (cudaStreamWaitEvent) and returns at once; kernels queued on the input stream afterwards see the
//    result. It throws if the operation already failed (an asynchronous NCCL error, an aborted communicator). The host
//    reads results only after a copy on the input stream and a synchronize of it; on the compute stream that is
//    kernels::synchronize, which ParallelContext bounds with its sync guard (nccl_sync_guard.hpp: cudaStreamQuery
//    polled with back-off, every NCCL communicator's ncclCommGetAsyncError checked, ncclCommAbort + hpct::Error past
//    comm.timeout_s). waited_ms() of a stream-ordered wait is 0.
//  - Work::wait_host() blocks the host until the operation has completed on the GPU: it polls cudaEventQuery on that
//    event, and ncclCommGetAsyncError, with back-off (wait_backoff.hpp), for at most options().timeout_s. On a timeout
//    or an asynchronous NCCL error it calls ncclCommAbort (the communicator is unusable afterwards: every later
//    operation throws) and throws hpct::Error naming the operation. Destroying an unfinished Work waits for it in
//    stream order (wait()); on failure the destructor prints and calls MPI_Abort(MPI_COMM_WORLD, 1). The
//    communicator's destructor waits for the Works still in flight on the host (wait_host()).
//  - Point-to-point: the tag is ignored (NCCL matches sends and receives by order, per peer). A send only completes
//    while its receive runs, so a rank that both sends and receives in one step (a ring, 1F1B) brackets those calls
//    with group_start() / group_end() (ncclGroupStart / ncclGroupEnd); their Works can be waited on after group_end().
//    A group holds the operations of this communicator only (group_end() awaits this communicator's state).
//    connect_p2p(): one grouped send + receive of one element with a peer, waited on the host; it makes NCCL set up
//    its point-to-point connections with that peer collectively, at a time both ranks choose (construction), instead
//    of lazily at the first send or receive, where the enqueue (awaited on the host, bounded) would wait for the peer
//    to reach its matching call.
//  - progress() only marks finished operations complete (NCCL progresses on the GPU by itself).
//  - For the sync guard: async_error() reports an asynchronous NCCL error ("" when none), unfinished() describes the
//    last operation issued when it has not completed on the GPU ("" otherwise), abort() calls ncclCommAbort.
//  - One thread drives a communicator and its Works. Works must not outlive their communicator (the destructor
//    completes and detaches the ones still in flight, as MpiCommunicator's does).
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/op_desc.hpp"

namespace hpct::comm {

class NcclWork;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MpiCommunicator& bootstrap, std::string name, CommOptions options = {});
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::CUDA; }
  const std::string& name() const override { return name_; }
  const CommOptions& options() const override { return options_; }

  WorkPtr allreduce_async(void* buf, int64_t count, DType dtype, ReduceOp op, const std::string& what) override;
  WorkPtr reduce_scatter_async(const void* send, void* recv, int64_t recv_count, DType dtype, ReduceOp op,
                               const std::string& what) override;
  WorkPtr allgather_async(const void* send, void* recv, int64_t send_count, DType dtype,
                          const std::string& what) override;
  WorkPtr reduce_scatter_v_async(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                                 ReduceOp op, const std::string& what) override;
  WorkPtr allgather_v_async(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                            const std::string& what) override;
  WorkPtr broadcast_async(void* buf, int64_t count, DType dtype, int root, const std::string& what) override;
  WorkPtr send_async(const void* buf, int64_t count, DType dtype, int peer, int tag, const std::string& what) override;
  WorkPtr recv_async(void* buf, int64_t count, DType dtype, int peer, int tag, const std::string& what) override;
  WorkPtr barrier_async(const std::string& what) override;
  void progress() override;

  // Bracket operations that must run concurrently (send + recv of one step); calls nest.
  void group_start();
  void group_end();

  cudaStream_t stream() const { return stream_; }
  // Operations start after the work issued so far on this stream (nullptr: the legacy default stream).
  void set_input_stream(cudaStream_t s) { input_stream_ = s; }
  cudaStream_t input_stream() const { return input_stream_; }
  int cuda_device() const { return cuda_device_; }
  bool aborted() const { return aborted_; }
  size_t in_flight() const { return in_flight_.size(); }

  // Sets up the point-to-point connections with `peer` (see above); collective with the peer's connect_p2p(rank()).
  void connect_p2p(int peer, const std::string& what);
  // "" when NCCL reports no asynchronous error (ncclCommGetAsyncError: ncclSuccess or ncclInProgress), else the error
  // named with the communicator; an aborted communicator reports that it was aborted. Never throws.
  std::string async_error() const;
  // "" when the last operation issued has completed on the GPU (or none was issued), else its description. Never throws.
  std::string unfinished() const;
  // ncclCommAbort (once); every later operation throws. Never throws.
  void abort() { abort_(); }

 private:
  friend class NcclWork;
  template <typename Enqueue>
  WorkPtr issue_(detail::OpDesc desc, Enqueue&& enqueue);  // defined and used in the .cpp only
  void check_usable_(const char* op, const std::string& what) const;
  void abort_();
  // Polls ncclCommGetAsyncError with back-off until the state leaves ncclInProgress, for at most timeout_s; returns
  // it (ncclInProgress: timed out). Never throws.
  ncclResult_t await_state_();
  // await_state_() after an enqueue at group depth 0: of the operation `desc`, or (nullptr) of the group ended by
  // group_end(); on a timeout or an error aborts and throws hpct::Error naming it.
  void await_enqueued_(const detail::OpDesc* desc);
  cudaEvent_t take_event_();
  void give_event_(cudaEvent_t e) { free_events_.push_back(e); }

  std::string name_;
  CommOptions options_;
  int rank_ = 0;
  int size_ = 1;
  int cuda_device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t input_stream_ = nullptr;
  cudaEvent_t input_ready_ = nullptr;     // recorded on input_stream_, waited on by stream_, per operation
  int32_t* barrier_scratch_ = nullptr;    // (3,) on the device: [0] a barrier's allreduce, [1..2] connect_p2p
  cudaEvent_t last_done_ = nullptr;       // recorded on stream_ after every operation (unfinished())
  detail::OpDesc last_op_;                // that operation (op "" before the first)
  size_t last_group_ = 0;                 // > 0: it ended a group of that many operations
  std::vector<cudaEvent_t> free_events_;  // completion events, reused (nothing allocates per op in steady state)
  std::vector<NcclWork*> in_flight_;
  std::vector<NcclWork*> group_works_;  // issued inside group_start/group_end: events recorded at group_end
  int group_depth_ = 0;
  bool aborted_ = false;
};

// NCCL datatype of a DType (ncclFloat32, ncclFloat64, ncclInt32, ncclInt64, ncclUint8, ncclBfloat16, ncclFloat16).
ncclDataType_t nccl_datatype(DType t);

// The NCCL this process loaded (ncclGetVersion: e.g. 22809 for 2.28.9, 23007 for 2.30.7), and the same as
// "nccl 2.28.9 (/usr/local/cuda/lib/libnccl.so.2)" for the logs and the GPU records. The loaded library's version,
// not the header's: LD_LIBRARY_PATH may bring another one.
int nccl_version();
std::string nccl_library();

}  // namespace hpct::comm
