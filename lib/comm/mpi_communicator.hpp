#pragma once
// MpiCommunicator: the Communicator (communicator.hpp) over an MPI communicator, for host buffers.
//
// Contract, beyond communicator.hpp's:
//  - It works on a private duplicate of the MPI communicator it is given (MPI_Comm_dup, freed by the destructor),
//    so its messages never match another library's; that duplicate returns MPI errors (MPI_ERRORS_RETURN), which
//    MPI_CHECK throws as hpct::Error.
//  - Every operation is one non-blocking MPI call: MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather,
//    MPI_Ibcast, MPI_Isend / MPI_Irecv, MPI_Ibarrier. Counts are element counts of at most INT_MAX (MPI's int
//    counts); more is an error asking to split the buffer. DTypes: f32, f64, i32, i64, u8 (u8 sums wrap modulo 256),
//    bf16 and f16. MPI has neither 16-bit float: each travels as a committed contiguous 2-byte datatype and is reduced
//    by user-defined operations (sum: widen to fp32, add, round once to nearest even; max, min: compare in fp32, keep
//    an operand), applied pairwise in the order MPI's algorithm chooses. The result is reproducible bit for bit for a
//    fixed communicator size, element count and MPI library, and the same on every rank, but a sum over n ranks is
//    rounded n - 1 times at places the algorithm fixes (mpi_communicator.cpp, "bf16"). f16 buffers come from the
//    host-staged CUDA backend under train.precision = fp16 (parallel/staged_communicator.hpp).
//    The uneven forms are MPI_Ireduce_scatter and MPI_Iallgatherv; their sum(counts) is limited to INT_MAX too
//    (int displacements).
//  - MPI_Iallreduce of >= 64 KiB runs libnbc's reduce-scatter + allgather schedule: Open MPI 4.1's libnbc would pick
//    a binomial tree (reduce + broadcast, ~2x slower) for every in-place call; selected per call through the MPI_T
//    control variable coll_libnbc_iallreduce_algorithm unless the user set it (mpi_communicator.cpp).
//  - Avg is MPI_SUM followed by a division by size() on the host buffer when the Work completes (in wait(), test()
//    or progress()); on integer types the division truncates toward zero; on bf16 it divides in fp32 and rounds once
//    more (the rounded sum / size(), rounded).
//  - In place: allgather's send may be block rank() of recv (MPI_IN_PLACE); reduce_scatter's recv may be block
//    rank() of send (likewise for the _v forms) (the other blocks of send are then unspecified afterwards, as with NCCL). Any other overlap of
//    send and recv is an error.
//  - Host memory only: Open MPI here is not CUDA-aware. In a CUDA build, with a GPU present, a device pointer is
//    rejected with an error (cudaPointerGetAttributes); managed memory is accepted. Without CUDA there is nothing
//    to check.
//  - Work::wait() polls MPI_Test with back-off (wait_backoff.hpp) for at most options().timeout_s, then throws
//    hpct::Error naming the operation, its size and label, the communicator and the rank. The request stays in
//    flight and the Work stays valid: a later wait() (with a fresh timeout) may still complete it; normally main()
//    aborts the job instead. Destroying an unfinished Work waits for it; if that times out, the destructor prints
//    the message to stderr and calls MPI_Abort(MPI_COMM_WORLD, 1) (a destructor cannot throw).
//  - progress() calls MPI_Test on every operation in flight (non-blocking collectives progress only inside MPI
//    calls here, docs/platform.md) and completes those that finished, Avg division included.
//  - One thread drives a communicator and its Works (no locking). Works should not outlive their communicator;
//    if they do, the communicator's destructor completes them first (bounded by the timeout) and detaches them.
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace hpct::comm {

class MpiWork;

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm`: duplicates it. `name` ("world", "dp", "tp", "pp") appears in every message.
  MpiCommunicator(MPI_Comm comm, std::string name, CommOptions options = {});
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::CPU; }
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

  // Collective over this communicator (MPI_Comm_split): ranks with the same color form a group, ordered by key
  // (ties by rank here). color MPI_UNDEFINED gives nullptr. The new communicator inherits options().
  std::unique_ptr<MpiCommunicator> split(int color, int key, const std::string& name) const;

  // The private duplicate (for MPI calls the interface lacks, e.g. NCCL's bootstrap). Do not free it.
  MPI_Comm mpi_comm() const { return comm_; }
  // Operations posted and not yet completed (by wait(), test() or progress()).
  size_t in_flight() const { return in_flight_.size(); }

 private:
  friend class MpiWork;
  struct Adopt {};
  MpiCommunicator(Adopt, MPI_Comm comm, std::string name, CommOptions options);  // takes ownership of comm
  void init_();
  void forget_(MpiWork* w);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  CommOptions options_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<MpiWork*> in_flight_;  // registry for progress(); Works remove themselves when complete
};

// MPI datatype of a DType (MPI_FLOAT, MPI_DOUBLE, MPI_INT32_T, MPI_INT64_T, MPI_UINT8_T; bf16: the committed
// contiguous 2-byte type, created on first use).
MPI_Datatype mpi_datatype(DType t);
// MPI operation reducing elements of type t (MPI_SUM, MPI_MAX, MPI_MIN; bf16: the user-defined operations above). Avg
// maps to the sum: the caller divides afterwards.
MPI_Op mpi_op(ReduceOp op, DType t);

}  // namespace hpct::comm
