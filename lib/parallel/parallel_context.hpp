#pragma once
// ParallelContext: built once in main() and passed down (docs/invariants.md, invariant 2: no hidden global state).
// It owns the world communicator and one sub-communicator per grid axis (parallel/grid.hpp): the TP
// group (adjacent ranks), the DP group (same tp and pp) and the PP group (same tp and dp). Every
// communicator carries comm.timeout_s, so no wait in the job is unbounded (invariant 3).
// The embedding group (docs/parallelism.md, tied embeddings under PP) joins the first and the last pipeline stage
// of the same (tp, dp): they both hold the embedding and sum its gradient over this group. Ranks of the
// middle stages have none (has_embedding_group() false); at PP = 1 it is the rank alone.
//
// Host-staged device groups (comm.backend = mpi on CUDA, parallel/staged_communicator.hpp): the device_*_group()
// communicators are HostStagedCommunicators over the same ranks (no NCCL, no sync guard: nothing on the compute stream
// waits for a peer), and the pipeline is an MpiPipelineTransport over a host-staged pp group. On the CPU the same
// layer is used when HPCT_STAGE_DEVICE_GROUPS=1 (its copies are memcpy): the emulation the CPU tests run.
//
// Host and device communicators (docs/cuda.md: the communicator matches the device). world(), tp_group(),
// dp_group(), pp_group() and embedding_group() are MpiCommunicators and take host buffers: the run's host-side
// decisions and scalars (stop flags, barriers, checkpoint manifests, loss and norm sums, replica CRCs) and the pipeline's
// host-staged activations. The device_*_group() communicators carry buffers on device(): on the CPU they are those same
// MPI communicators; on CUDA they are NcclCommunicators over the same ranks (bootstrapped over the matching MPI group,
// MPI_Bcast of the unique id), whose operations start after the work queued so far on the compute stream (exec.stream)
// and whose Work::wait() is stream-ordered: the compute stream waits for them, the host does not
// (comm/nccl_communicator.hpp; docs/cuda.md): gradient buckets, tensor-parallel activations and gradients, the
// tied-embedding gradient, SyncBN statistics, ZeRO's parameter gathers. The host reads their results only after a copy
// on the compute stream and kernels::synchronize(exec()).
//
// exec(): the ExecContext given to the constructor, with this context's sync guard installed on CUDA
// (comm/nccl_sync_guard.hpp): kernels::synchronize(exec()) then polls the compute stream with back-off, watches every
// NCCL communicator of this context for asynchronous errors and, past comm.timeout_s, aborts them all and throws
// hpct::Error naming the rank and the unfinished NCCL operations, so that no host wait is unbounded although NCCL
// work is queued on the stream. Compute with exec(), not with the context given to the constructor.
//
// Pipeline transfers (pipeline_transport(), parallel/pipeline_transport.hpp): on the CPU, MPI over pp_group() with host
// buffers. On CUDA with pp > 1, one 2-rank NcclCommunicator per link and direction: for the link to the previous
// stage "pp link <s-1>-<s> activations" (receives) and "... gradients" (sends), for the link to the next stage the
// same with the roles swapped; each with its own stream, input stream = the compute stream, bootstrapped over the 2-rank
// MPI links of split_pipeline_links() (even links first, then odd links, then the wrap), with their point-to-point
// connections set up at construction (NcclCommunicator::connect_p2p). pp = 1 has no links. With virtual_stages > 1
// (interleaved 1F1B, parallel/pipeline_schedule.hpp) the first and the last stage are linked too ("pp link <p-1>-0
// (wrap)"), and the transport is built for that many chunks per rank on both devices.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "kernels/exec_context.hpp"
#include "parallel/grid.hpp"
#include "parallel/pipeline_transport.hpp"

namespace hpct::parallel {

class ParallelContext {
 public:
  // Collective over MPI_COMM_WORLD. tp, pp and order come from the deck's parallel.* keys; where names
  // the deck for error messages. An impossible layout is a UsageError before any work starts.
  // exec: the run's device and compute stream. On Device::CUDA the CUDA device must already be current
  // (kernels::cuda_select_device) and the build must have NCCL (HPCT_HAVE_NCCL): the NCCL groups are created here.
  // zero_group (parallel.zero_group, hybrid sharding): 0 or DP, ZeRO shards over the whole DP group; N with
  // 2 <= N < DP and N | DP, over groups of N consecutive DP ranks (the zero shard group), replicated across the DP / N
  // groups (the zero replica group: the ranks at the same place of every shard group). Anything else is a UsageError
  // naming the key.
  // virtual_stages: model chunks per pipeline rank (the schedule's, make_schedule); > 1 needs pp > 1.
  ParallelContext(int tp, int pp, const std::string& order, const comm::CommOptions& opts, const std::string& where,
                  const ExecContext& exec = {}, int zero_group = 0, int virtual_stages = 1);
  ~ParallelContext();
  ParallelContext(const ParallelContext&) = delete;
  ParallelContext& operator=(const ParallelContext&) = delete;

  const Grid& grid() const { return grid_; }
  int rank() const { return rank_; }
  int world_size() const { return grid_.world(); }
  const Coord& coord() const { return coord_; }
  int tp_rank() const { return coord_.tp; }
  int dp_rank() const { return coord_.dp; }
  int pp_rank() const { return coord_.pp; }
  int tp_size() const { return grid_.tp(); }
  int dp_size() const { return grid_.dp(); }
  int pp_size() const { return grid_.pp(); }

  Device device() const { return device_; }
  // The compute context: the constructor's, with the sync guard on CUDA (see above).
  const ExecContext& exec() const { return exec_; }
  // On the way out of a failed run: aborts every NCCL communicator of this context (their kernels exit), so that
  // freeing device memory, which waits for the device, cannot wait for a peer that will never arrive. A no-op on the
  // CPU. Never throws.
  void abort_device_communicators() noexcept {
    if (guard_) guard_->abort_communication();
  }

  // Host buffers (MPI).
  comm::Communicator& world() { return *world_; }
  // The model-parallel view a model is built with (its TP shard and pipeline stage).
  ModelParallel model_parallel() const { return {tp_size(), tp_rank(), pp_size(), pp_rank(), false, virtual_stages_}; }
  int virtual_stages() const { return virtual_stages_; }
  comm::Communicator& tp_group() { return *tp_; }
  comm::Communicator& dp_group() { return *dp_; }
  comm::Communicator& pp_group() { return *pp_; }
  bool has_embedding_group() const { return emb_ != nullptr; }
  comm::Communicator& embedding_group() {
    HPCT_CHECK(emb_ != nullptr, "pipeline stage {} of {} holds no embedding", coord_.pp, grid_.pp());
    return *emb_;
  }

  // ZeRO's groups (hybrid sharding, see the constructor): the shard group is the DP group unless parallel.zero_group
  // splits it; the replica group exists only then (null otherwise).
  int zero_shard_size() const { return shard_ ? shard_->size() : dp_size(); }
  comm::Communicator& zero_shard_group() { return shard_ ? *shard_ : *dp_; }
  comm::Communicator* zero_replica_group() { return replica_.get(); }

  // Buffers on device() (the same ranks as the host groups): NCCL on CUDA, the MPI groups on the CPU.
  comm::Communicator& device_tp_group() { return dev_tp_ ? *dev_tp_ : *tp_; }
  comm::Communicator& device_dp_group() { return dev_dp_ ? *dev_dp_ : *dp_; }
  comm::Communicator& device_zero_shard_group() {
    return dev_shard_ ? *dev_shard_ : shard_ ? *shard_ : device_dp_group();
  }
  comm::Communicator* device_zero_replica_group() { return dev_replica_ ? dev_replica_.get() : replica_.get(); }
  comm::Communicator& device_embedding_group() {
    HPCT_CHECK(emb_ != nullptr, "pipeline stage {} of {} holds no embedding", coord_.pp, grid_.pp());
    return dev_emb_ ? *dev_emb_ : *emb_;
  }
  // The pipeline's transfers between this stage and its neighbours, on device() (see above).
  PipelineTransport& pipeline_transport() { return *pipe_; }
  // "MPI for every group (host buffers)", the NCCL groups including the pipeline links, or the host-staged ones, for
  // the log.
  std::string describe_device_groups() const;
  // Whether the device groups are host-staged (comm.backend = mpi on CUDA; HPCT_STAGE_DEVICE_GROUPS=1 on the CPU).
  bool staged_device_groups() const { return staged_; }
  // Host-staged device groups with pp > 1: page-locked blocks for the pipeline's transfers, `transfers` of `bytes`
  // each (one per pipeline buffer transfer that can be in flight); call before the first step. A no-op otherwise.
  void reserve_pipeline_staging(int transfers, size_t bytes);
  // The page-locked host bytes the host-staged device groups hold (0 otherwise): comm memory in the record, equal to
  // parallel::planned_staging_bytes.
  size_t staging_bytes() const;
  // The payload this rank passed to all of its communicators (host and device groups, pipeline links) since the last
  // reset, by kind (comm::CommVolume): the training loop reports it per step.
  comm::CommVolume comm_volume() const;
  void reset_comm_volume();

 private:
  std::vector<comm::Communicator*> communicators() const;  // every communicator this context owns
  Grid grid_;
  int rank_ = 0;
  Coord coord_;
  int virtual_stages_ = 1;  // model chunks per pipeline rank
  Device device_ = Device::CPU;
  std::unique_ptr<comm::Communicator> world_, tp_, dp_, pp_, emb_;
  std::unique_ptr<comm::Communicator> dev_tp_, dev_dp_, dev_emb_;  // NCCL on CUDA; null on the CPU
  std::unique_ptr<comm::Communicator> shard_, replica_;            // hybrid sharding only
  std::unique_ptr<comm::Communicator> dev_shard_, dev_replica_;    // NCCL on CUDA under hybrid sharding
  std::unique_ptr<comm::Communicator> dev_pp_;  // host-staged device groups with pp > 1: the pipeline's transfers
  bool staged_ = false;                         // the device groups are HostStagedCommunicators
  // CUDA, pp > 1: the MPI links (bootstrap) and the NCCL communicator per link and direction; null where none.
  std::unique_ptr<comm::Communicator> link_prev_, link_next_, link_wrap_;
  std::unique_ptr<comm::Communicator> act_prev_, grad_prev_, act_next_, grad_next_;
  std::unique_ptr<PipelineTransport> pipe_;
  std::unique_ptr<StreamSyncGuard> guard_;  // CUDA: watches every NCCL communicator above; installed in exec_
  ExecContext exec_;
};

}  // namespace hpct::parallel
