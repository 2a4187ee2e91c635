#pragma once
// The collective checkpoint protocol of the trainer over lib/ckpt (which is communication-free): write_checkpoint below;
// train/checkpoint/saver.hpp runs it in the foreground or on a thread of its own.
// Ownership for writing: a replicated tensor (parameters; optimizer state without ZeRO) is cut into DP
// contiguous flat shares, share d written by DP rank d (balanced I/O, each byte written once, replica 0);
// a ZeRO-1 optimizer shard is written by its owner. Flat shares are stored as hyperslab pieces of the
// named tensors, so the checkpoint reads back as whole tensors on any layout.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "ckpt/checkpoint.hpp"
#include "ckpt/tensor_source.hpp"
#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "kernels/exec_context.hpp"
#include "optim/optimizer.hpp"
#include "parallel/parallel_context.hpp"
#include "tensor/tensor.hpp"

namespace hpct::train {

// The run's position, stored as index.h5 attributes.
struct TrainPosition {
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  int64_t sequences_seen = 0;
};

// Where a rank's local parameter tensor sits in the global (serial) tensor: a hyperslab at `offset` of
// `global_shape`, split on `split_axis` (-1: whole). `writer` is false for a replica that another rank writes
// (a TP-replicated LayerNorm on tp > 0, the last stage's copy of the tied embedding); replicated copies over
// DP are not marked: DP ranks write disjoint flat shares of them.
struct TensorPlacement {
  std::vector<int64_t> global_shape, offset;
  int split_axis = -1;
  bool writer = true;
};

// Allgathers one string per rank of comm (metadata only), in rank order.
std::vector<std::string> allgather_strings(comm::Communicator& comm, const std::string& mine, const std::string& what);

// The optimizer state a checkpoint stores: the optimizer's segments and its named state buffers, each holding
// segments()[i].numel() floats for segment i, stored as /optim/<name>/<tensor> (AdamW: exp_avg, exp_avg_sq;
// SGD: momentum, none without momentum).
// ZeRO-3 (sharded parameters): `masters` gives segment i's fp32 master values, which a checkpoint stores as the pieces
// of /model/<tensor> (the parameter slab then only names the tensors: it holds no values of its own).
struct OptimizerState {
  const std::vector<optim::Segment>* segments = nullptr;
  std::vector<std::pair<std::string, std::function<float*(size_t)>>> buffers;
  std::function<float*(size_t)> masters;
};
OptimizerState optimizer_state(optim::Optimizer& opt);

// What a checkpoint writes and reads, as host memory (docs/cuda.md: the host reads device memory only through explicit
// copies): the parameters, the optimizer's state buffers and the extra tensors (the BN running statistics). For a run on
// a device it holds host slabs of the same tensors, planned once before the first step (not per save), and copies
// through them; on the CPU it holds nothing and hands out the run's own tensors, zero-copy, unless `snapshot` asks for
// host copies there too (a background save writes from them while the step loop changes the run's tensors). On CUDA
// the host slabs are page-locked (kernels::host_register), so a save's device-to-host copies are asynchronous on the
// compute stream and run at the link's speed; HPCT_CKPT_STAGING=pageable leaves them pageable (a benchmark control).
//   save:   to_host(); check_replicas(..., params(), ...); checkpoint_pieces(..., params(), ..., optimizer(), extra())
//   resume: load_checkpoint(reader, params(), ..., optimizer(), extra()); to_device()
class CheckpointStaging {
 public:
  CheckpointStaging(const ExecContext& ctx, Slab& params, OptimizerState opt, Slab* extra = nullptr,
                    bool snapshot = false);
  ~CheckpointStaging();
  CheckpointStaging(const CheckpointStaging&) = delete;
  CheckpointStaging& operator=(const CheckpointStaging&) = delete;

  // Device -> host copies of everything, then synchronize(ctx): the views below hold the run's current values.
  void to_host();
  // Host -> device copies of everything (after load_checkpoint into the views), then synchronize(ctx).
  void to_device();

  // ZeRO-3 (OptimizerState::masters): the run's own slab, for the tensors' names only; the values are optimizer()'s
  Slab& params() { return host_params_ ? *host_params_ : params_; }
  // (staged_, not host_params_: under ZeRO-3 the masters are staged with the optimizer state and there is no params twin)
  const OptimizerState& optimizer() const { return staged_ ? host_opt_ : opt_; }
  Slab* extra() { return host_extra_ ? host_extra_.get() : extra_; }
  size_t host_bytes() const;  // host memory of the staging copies (0 on the CPU without snapshot)

 private:
  void copy(bool to_host);
  ExecContext ctx_;
  Slab& params_;
  OptimizerState opt_, host_opt_;
  Slab* extra_;
  bool staged_ = false;                                          // a run on a device: the views are host copies
  std::unique_ptr<Slab> host_params_, host_extra_, host_state_;  // host_state_: one tensor per optimizer buffer
  std::vector<void*> registered_;  // the host twins page-locked on CUDA (kernels::host_register)
};

// What this rank writes of a checkpoint of (params, optimizer, extra): its pieces, pointing into those tensors (host
// memory: for a run on a device, or a background save, CheckpointStaging's views after to_host()).
// extra (optional): more DP-replicated, unsharded tensors stored beside the parameters as /model/<name> (the BN
// running statistics: bn1.running_mean, ..., torchvision's state_dict names).
std::vector<ckpt::Piece> checkpoint_pieces(parallel::ParallelContext& pc, Slab& params,
                                           const std::vector<TensorPlacement>& placements, const OptimizerState& opt,
                                           Slab* extra = nullptr);

struct SaveResult {
  std::string dir;            // the committed step directory ("" when the save failed)
  std::string error;          // "" or what failed, naming the rank ("rank 1: cannot create checkpoint shard ...")
  double seconds = 0.0;       // this rank's protocol, directory to commit
  int64_t bytes_written = 0;  // by this rank
  int64_t total_bytes = 0;    // by every rank
  // this rank's clock: the wait for every rank's manifest after its own shard, and the library's breakdown of the
  // rest of its part (ckpt::SavePhases: its shard; on rank 0 also the index, commit and prune)
  double manifests_s = 0.0;
  ckpt::SavePhases phases;
};
// Where a rank's pieces go (checkpoint.files): its own shard file (per_rank, no communication), or a file it shares with
// the other ranks of `comm` (per_node: the node's ranks; single: every rank), written collectively (ckpt/shared_shard.hpp).
struct ShardFiles {
  std::string mode = "per_rank";
  MPI_Comm comm = MPI_COMM_NULL;  // per_node, single: the ranks that share the file (driven by the writing thread only)
  std::string file_name;          // per_node, single: node_%05d.h5, shards.h5
};

// Writes the checkpoint of step attrs.ints["step"] under root (DIR/checkpoints), collective over comm (the world, or
// the background writer's duplicate of it; only the calling thread drives comm). The protocol (docs/contracts.md):
//   rank 0 clears and creates .tmp_step_N; its outcome is broadcast
//   every rank writes its pieces into its shard file and fsyncs it (no data moves; files = per_node or single: into the
//     file its group shares, collectively over files.comm)
//   the outcomes (manifest, or failure) are allgathered; rank 0 writes index.h5 and commits (rename, latest, prune)
//     only when every rank succeeded; its outcome is broadcast: every rank returns once the checkpoint is visible
// A failure on any rank is returned in SaveResult::error on every rank (no exception; a communication failure still
// throws), and leaves `latest` and the checkpoint it names untouched.
// remover (optional, rank 0's): prunes the older checkpoints in the background (ckpt::commit).
SaveResult write_checkpoint(comm::Communicator& comm, const std::string& root, int keep, const ckpt::Attrs& attrs,
                            const std::vector<ckpt::Piece>& pieces, ckpt::BackgroundRemover* remover = nullptr,
                            const ShardFiles& files = {});

// Loads this rank's parameters (its hyperslab of every global tensor) and optimizer segments from dir,
// whatever layout wrote it, into host memory (for a run on a device: CheckpointStaging's views, then to_device()).
void load_checkpoint(const ckpt::Reader& reader, Slab& params, const std::vector<TensorPlacement>& placements,
                     const OptimizerState& opt, Slab* extra = nullptr);

// Loads this rank's parameters (its hyperslab of every global tensor, tied copies included) from a source of logical
// tensors (model.init_from: an imported model), through the placements load_checkpoint uses, so any layout works; under
// ZeRO-3 (opt.masters) into the masters' segments. The optimizer state is not touched (a fine-tuning run starts it
// fresh). Host memory, as load_checkpoint. A tensor the source lacks or whose shape differs is a UsageError.
void load_parameters(const ckpt::TensorSource& src, Slab& params, const std::vector<TensorPlacement>& placements,
                     const OptimizerState& opt);

// CRC32C of the parameter slab (host memory: on a device, CheckpointStaging::params() after to_host()), allgathered
// over comm (an MPI group: host buffers): replicas must be bitwise equal (docs/parallelism.md).
// Throws naming the ranks that disagree.
// which (optional, by tensor index): only those tensors (e.g. the TP-replicated ones over the TP group).
void check_replicas(comm::Communicator& comm, Slab& params, const std::string& when,
                    const std::vector<bool>* which = nullptr);

}  // namespace hpct::train
