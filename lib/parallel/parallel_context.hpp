#pragma once
// ParallelContext: built once in main() and passed down (DESIGN.md invariant 2: no hidden global state).
// It owns the world communicator and one sub-communicator per grid axis (parallel/grid.hpp): the TP
// group (adjacent ranks), the DP group (same tp and pp) and the PP group (same tp and dp). Every
// communicator carries comm.timeout_s, so no wait in the job is unbounded (invariant 3).
// The embedding group (DESIGN.md §6, tied embeddings under PP) joins the first and the last pipeline stage
// of the same (tp, dp): they both hold the embedding and sum its gradient over this group. Ranks of the
// middle stages have none (has_embedding_group() false); at PP = 1 it is the rank alone.
//
// Host and device communicators (DESIGN.md §7: the communicator matches the device). world(), tp_group(),
// dp_group(), pp_group() and embedding_group() are MpiCommunicators and take host buffers: the run's host-side
// decisions and scalars (stop flags, barriers, checkpoint manifests, loss and norm sums, replica CRCs) and the pipeline's
// host-staged activations. The device_*_group() communicators carry buffers on device(): on the CPU they are those same
// MPI communicators; on CUDA they are NcclCommunicators over the same ranks (bootstrapped over the matching MPI group,
// MPI_Bcast of the unique id), whose operations start after the work queued so far on the compute stream (exec.stream)
// and whose Work::wait() returns once they completed on the GPU (comm/nccl_communicator.hpp): gradient buckets,
// tensor-parallel activations and gradients, the tied-embedding gradient, SyncBN statistics. Pipeline activations
// stay host-staged over pp_group() (the model copies them to and from the host), so there is no device PP group.
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "kernels/exec_context.hpp"
#include "parallel/grid.hpp"

namespace hpct::parallel {

class ParallelContext {
 public:
  // Collective over MPI_COMM_WORLD. tp, pp and order come from the deck's parallel.* keys; where names
  // the deck for error messages. An impossible layout is a UsageError before any work starts.
  // exec: the run's device and compute stream. On Device::CUDA the CUDA device must already be current
  // (kernels::cuda_select_device) and the build must have NCCL (HPCT_HAVE_NCCL): the NCCL groups are created here.
  ParallelContext(int tp, int pp, const std::string& order, const comm::CommOptions& opts, const std::string& where,
                  const ExecContext& exec = {});
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

  // Host buffers (MPI).
  comm::Communicator& world() { return *world_; }
  comm::Communicator& tp_group() { return *tp_; }
  comm::Communicator& dp_group() { return *dp_; }
  comm::Communicator& pp_group() { return *pp_; }
  bool has_embedding_group() const { return emb_ != nullptr; }
  comm::Communicator& embedding_group() {
    HPCT_CHECK(emb_ != nullptr, "pipeline stage {} of {} holds no embedding", coord_.pp, grid_.pp());
    return *emb_;
  }

  // Buffers on device() (the same ranks as the host groups): NCCL on CUDA, the MPI groups on the CPU.
  comm::Communicator& device_tp_group() { return dev_tp_ ? *dev_tp_ : *tp_; }
  comm::Communicator& device_dp_group() { return dev_dp_ ? *dev_dp_ : *dp_; }
  comm::Communicator& device_embedding_group() {
    HPCT_CHECK(emb_ != nullptr, "pipeline stage {} of {} holds no embedding", coord_.pp, grid_.pp());
    return dev_emb_ ? *dev_emb_ : *emb_;
  }
  // "MPI (host buffers)" or "NCCL tp, dp, embedding (device buffers); world, pp and host scalars over MPI", for the log.
  std::string describe_device_groups() const;

 private:
  Grid grid_;
  int rank_ = 0;
  Coord coord_;
  Device device_ = Device::CPU;
  std::unique_ptr<comm::Communicator> world_, tp_, dp_, pp_, emb_;
  std::unique_ptr<comm::Communicator> dev_tp_, dev_dp_, dev_emb_;  // NCCL on CUDA; null on the CPU
};

}  // namespace hpct::parallel
