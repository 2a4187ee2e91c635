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
//    whole protocol runs, staging blocks included: its data movement is the MpiCommunicator's exactly, and so are its
//    reductions over two ranks; over more, MPI may sum a chunk (or the uneven form the reduce-scatter and allgather
//    forms use) in another order than the whole buffer, so results agree within that rounding.
//  - Stream order. An operation's input is copied to the host after the work queued so far on exec.stream, and
//    exec.stream is synchronised (kernels::synchronize: the only host wait on it) before MPI reads the block.
//    Work::wait() waits for MPI (bounded by comm.timeout_s, as MpiCommunicator's) and queues the copy back on
//    exec.stream: kernels queued afterwards see the result, the host does not wait for the copy. wait_host() also
//    synchronises the stream. Nothing queued on the stream ever waits for a peer, so the stream's waits are bounded by
//    local work alone and no NCCL sync guard is needed.
//  - Operations, counts, dtypes (f16 too), in-place rules, Avg, the reduction order and the results are the
//    MpiCommunicator's (the block is laid out as MPI's in-place forms want it), and the CommVolume counts the same
//    payload.
//  - Staging is planned and fixed (nothing allocates in the step loop): StagingPlan's page-locked blocks
//    (kernels::host_register), allocated at construction and by reserve_p2p() before the first step.
//    Collectives use `slots` blocks of slot_bytes: an operation holds one slot and runs in chunks of it (for the
//    reduce-scatter and allgather forms a chunk of every rank's block, laid out as MPI's in-place forms want them),
//    each chunk staged in, reduced, copied back, the next staged once the previous completed (driven by wait(),
//    test() and progress()). MPI needs a communicator's collectives posted in the same order on every rank, so a
//    collective that still has chunks to post completes before the next collective is posted. An operation posted
//    while every slot is held first completes the oldest operation in flight (the CPU path's host waits, earlier; the
//    group's ranks post in the same order). Sends and receives take a block of the p2p blocks reserved for them (the
//    pipeline's transfers, one per buffer it can have in flight) whole, without chunks, so that a receive posted early
//    never waits for anything; with none free they fall back to a slot.
//    A block handed back with its copy back still queued is safe for an operation that copies into it first (stream
//    order); one that MPI writes directly (a receive, a non-root broadcast) synchronises the stream first.
//    staging_bytes() is what the blocks hold: the memory record and --plan count it as comm memory.
//  - One thread drives the communicator and its Works; Works must not outlive it.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/mpi_communicator.hpp"
#include "kernels/exec_context.hpp"

namespace hpct::parallel {

class StagedWork;

// The page-locked staging a HostStagedCommunicator holds (see above); every block page-rounded.
struct StagingPlan {
  int slots = 0;  // blocks for collectives, slot_bytes each
  size_t slot_bytes = 0;
  int p2p_blocks = 0;  // blocks for sends and receives of up to p2p_bytes each
  size_t p2p_bytes = 0;
  size_t bytes() const;
};
// Every staged device group's collective slots: 2 of 4 MiB (HPCT_STAGING_CHUNK_BYTES sets the slot size: the tests
// make every operation run in chunks with a few KiB).
StagingPlan collective_staging();
// Whether a run's device groups are host-staged: CUDA with comm.backend = mpi, or the CPU with
// HPCT_STAGE_DEVICE_GROUPS=1 (the emulation).
bool uses_host_staging(Device device, comm::DeviceBackend backend);
// The staging a rank holds (the plan's and the record's comm share): collective_staging() for each staged group it is
// in (tp, dp, the embedding group on the first and last stage, the zero shard and replica groups under hybrid
// sharding) and, with pp > 1, one p2p block per pipeline buffer transfer (pipeline_transfers blocks of
// pipeline_bytes).
size_t planned_staging_bytes(bool holds_embedding, bool hybrid, int pipeline_transfers, size_t pipeline_bytes);

class HostStagedCommunicator final : public comm::Communicator {
 public:
  // Collective over `host` (an MpiCommunicator is duplicated from it). name: for messages ("dp", "tp", ...). plan: its
  // collective slots (the p2p blocks come from reserve_p2p).
  HostStagedCommunicator(const comm::MpiCommunicator& host, const ExecContext& exec, const std::string& name,
                         const StagingPlan& plan);
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
  void progress() override;

  // Adds `blocks` p2p blocks of `bytes` each (before the first step: the pipeline's transfers).
  void reserve_p2p(int blocks, size_t bytes);
  // Page-locked host bytes the staging blocks hold.
  size_t staging_bytes() const;
  // Blocks held, and how many are lent to operations in flight (tests).
  size_t staging_blocks() const { return blocks_.size(); }
  size_t staging_blocks_in_use() const;

 private:
  friend class StagedWork;
  struct Block {
    char* host = nullptr;
    size_t bytes = 0;
    bool p2p = false;
    bool in_use = false;
    bool copy_back_pending = false;  // a copy from it to the device may still be queued on the stream
  };
  void add_blocks_(int n, size_t bytes, bool p2p);
  // A free collective slot, completing the oldest operation in flight while none is.
  Block* acquire_slot_(const char* op, const std::string& what);
  // A free p2p block of at least `bytes`, or null.
  Block* acquire_p2p_(size_t bytes);
  void release_(Block* b);
  // MPI is about to write a block nothing was copied into: wait for any copy back still reading it.
  void make_writable_(Block* b);
  void synchronize_();
  // Registers w (its block: a slot, a p2p block, or none for a barrier) and stages its first chunk; blocks: how many
  // rank blocks a chunk holds.
  comm::WorkPtr post_(std::unique_ptr<StagedWork> w, Block* b, DType dtype, int blocks);
  void forget_(StagedWork* w);

  std::unique_ptr<comm::MpiCommunicator> mpi_;
  ExecContext exec_;
  StagingPlan plan_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<StagedWork*> in_flight_;  // posting order: the oldest first
};

}  // namespace hpct::parallel
