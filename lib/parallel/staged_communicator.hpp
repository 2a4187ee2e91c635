#pragma once
// HostStagedCommunicator: the Communicator (comm/communicator.hpp) for device buffers over MPI, through page-locked
// host staging: what a CUDA run uses with comm.backend = "mpi" (docs/cuda.md, "The host-staged backend"). Every
// operation copies its device input to a staging block on the compute stream, waits for that stream, runs the
// MpiCommunicator operation on the block, and once it completes copies the result back on the compute stream. Like
// PyTorch's gloo backend for CUDA tensors, it runs every layout's logic on any MPI and without NCCL (a site without
// NCCL; several ranks on one GPU with an NCCL older than 2.30), and it is slower: every collective crosses PCIe twice
// and the host waits for the compute stream before each one.
//
// Contract, beyond communicator.hpp's:
//  - Buffers are on device() = exec.device. On the CPU (exec.device = CPU, the emulation the CPU tests and the dry
//    runs use: ParallelContext with HPCT_STAGE_DEVICE_GROUPS=1) the copies are memcpy and the waits no-ops, so the
//    whole protocol runs, staging blocks included, and its results equal the MpiCommunicator's bit for bit.
//  - Stream order. An operation's input is copied to the host after the work queued so far on exec.stream, and
//    exec.stream is synchronised (kernels::synchronize: the only host wait on it) before MPI reads the block. Work::wait()
//    waits for MPI (bounded by comm.timeout_s, as MpiCommunicator's) and queues the copy back on exec.stream: kernels
//    queued afterwards see the result, the host does not wait for the copy. wait_host() also synchronises the stream.
//    Nothing queued on the stream ever waits for a peer, so the stream's waits are bounded by local work alone and no
//    NCCL sync guard is needed.
//  - Operations, counts, dtypes (f16 too), in-place rules, Avg, the reduction order and the results are the
//    MpiCommunicator's (the block is laid out as MPI's in-place forms want it), and the CommVolume counts the same
//    payload.
//  - Staging. Blocks of page-locked host memory (kernels::host_register) are kept by the communicator and reused: an
//    operation takes the smallest free block that fits, or allocates one of exactly its size; the block is returned
//    when its Work completes (wait(), test() or the destructor). Once handed back, a block is free for later operations
//    even while the copy back from it is still queued: an operation that copies into the block first queues that copy
//    after it, and one that lets MPI write the block without copying into it first (recv, a non-root broadcast)
//    synchronises the stream first when the block has such a copy pending. staging_bytes() is what the blocks hold
//    (at most the payload of the operations in flight at once): the memory record counts it as comm memory.
//  - One thread drives the communicator and its Works; Works must not outlive it.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "kernels/exec_context.hpp"

namespace hpct::parallel {

class StagedWork;

class HostStagedCommunicator final : public comm::Communicator {
 public:
  // Collective over `host` (an MpiCommunicator is duplicated from it). name: for messages ("dp", "tp", ...).
  HostStagedCommunicator(const comm::MpiCommunicator& host, const ExecContext& exec, const std::string& name);
  ~HostStagedCommunicator() override;

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  Device device() const override { return exec_.device; }
  const std::string& name() const override { return mpi_->name(); }
  const comm::CommOptions& options() const override { return mpi_->options(); }

  comm::WorkPtr allreduce_async(void* buf, int64_t count, DType dtype, comm::ReduceOp op,
                                const std::string& what) override;
  comm::WorkPtr reduce_scatter_async(const void* send, void* recv, int64_t recv_count, DType dtype, comm::ReduceOp op,
                                     const std::string& what) override;
  comm::WorkPtr allgather_async(const void* send, void* recv, int64_t send_count, DType dtype,
                                const std::string& what) override;
  comm::WorkPtr reduce_scatter_v_async(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                                       comm::ReduceOp op, const std::string& what) override;
  comm::WorkPtr allgather_v_async(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                                  const std::string& what) override;
  comm::WorkPtr broadcast_async(void* buf, int64_t count, DType dtype, int root, const std::string& what) override;
  comm::WorkPtr send_async(const void* buf, int64_t count, DType dtype, int peer, int tag,
                           const std::string& what) override;
  comm::WorkPtr recv_async(void* buf, int64_t count, DType dtype, int peer, int tag, const std::string& what) override;
  comm::WorkPtr barrier_async(const std::string& what) override;
  void progress() override { mpi_->progress(); }

  // Page-locked host bytes the staging blocks hold (allocated on first need, kept until destruction).
  size_t staging_bytes() const;
  // Blocks held, and how many are lent to operations in flight (tests).
  size_t staging_blocks() const { return blocks_.size(); }
  size_t staging_blocks_in_use() const;

 private:
  friend class StagedWork;
  struct Block {
    char* host = nullptr;
    size_t bytes = 0;
    bool in_use = false;
    bool copy_back_pending = false;  // a copy from it to the device may still be queued on the stream
  };
  Block* acquire_(size_t bytes);
  void release_(Block* b, bool copy_back_queued);
  // Device bytes [src, src + bytes) into the block at `offset`, then the stream drained: MPI may read the block.
  void stage_in_(Block* b, size_t offset, const void* src, size_t bytes);
  // MPI is about to write a block nothing was copied into: wait for any copy back still reading it.
  void make_writable_(Block* b);
  void synchronize_();
  comm::WorkPtr make_work_(comm::WorkPtr inner, Block* b, void* device_dst, size_t block_offset, size_t bytes);

  std::unique_ptr<comm::MpiCommunicator> mpi_;
  ExecContext exec_;
  std::vector<std::unique_ptr<Block>> blocks_;
};

}  // namespace hpct::parallel
