#pragma once
// The memory plan (docs/contracts.md "--plan WORLD"): the memory record's kinds (train/loop/memory_record.hpp) for every
// rank of a deck at a world size, computed from formulas and from slabs that are planned but never allocated, the way
// the run allocates them: the model's slabs (the tasks' model_memory; each model's plan and its `--plan` command live in
// its task folder, e.g. tasks/gpt/gpt_plan.hpp), then what the training loop adds around them
// (the gradient sync's ZeRO shard and bf16 image, the optimizer state, the pipeline buffers, the checkpoint's host
// staging on CUDA). `--plan WORLD` prints it without data, MPI or allocation; train.memory_limit_gb checks it before
// the run allocates anything. The memory record of a real run equals the plan kind by kind (tested by
// check_memory_record.py); `rss`, the libraries' own buffers (oneDNN scratchpads, NCCL's buffers, the CUDA context)
// and the gradient norm's accumulator and chunk table (optim/optimizer.hpp, 24 bytes per 64K elements) are outside the
// kinds and outside the plan.
#include <string>
#include <vector>

#include "core/config.hpp"
#include "parallel/grad_sync.hpp"
#include "tensor/tensor.hpp"
#include "train/loop/memory_record.hpp"
#include "train/loop/run_config.hpp"

namespace hpct::train {

// One row of the plan: the ranks that share a model shard (a (pp, tp) position; the DP ranks of the row differ only by
// their ZeRO share), each kind its maximum over those ranks, peak the maximum of their totals.
struct PlannedRanks {
  int pp_rank = 0, tp_rank = 0;
  std::string layers =
      "all";  // a pipelined model's layers on this stage, "0..3" (with virtual stages one range per chunk)
  MemoryKinds kinds;
  double peak = 0;
  double host_comm = 0;  // on CUDA, the part of comm in host memory (the host-staged groups' blocks)
};

struct MemoryPlanTable {
  std::string app;  // the app's name (train/tasks/registry.hpp), for messages
  int world = 1, dp = 1, tp = 1, pp = 1;
  Device device = Device::CPU;
  DType act = DType::F32;  // activation storage
  std::vector<PlannedRanks> rows;
  // The model's own words for train.memory_limit_gb's message: rows_are_positions: its rows are (pp, tp) positions
  // (named so), else one row stands for every rank; split_advice: what to change when the model's own state (params,
  // grads, optimizer) is what does not fit and ZeRO has nothing more to shard.
  bool rows_are_positions = false;
  std::string split_advice;
  // Over all rows: what the memory record of the run reports (each kind's maximum, the maximum total).
  MemoryRecord record() const;
};

// The device and activation type --plan sizes for: train.device = cuda (or fp16, which exists on CUDA only) plans the
// CUDA backend's sizes, cpu and auto the CPU's (auto falls back to it without a GPU); activations as the run stores
// them. fp16 with train.device = cpu is the trainers' UsageError, raised here too.
struct PlanTarget {
  Device device = Device::CPU;
  DType act = DType::F32;
};
PlanTarget plan_target(const RunConfig& run);

// What the training loop allocates around a model (training_loop.cpp), for DP rank dp_rank: added to `model`.
struct LoopMemoryInputs {
  const Slab* grads = nullptr;  // the model's gradient slab (planned or allocated)
  parallel::GradSyncOptions sync;
  int dp_size = 1;                    // the gradient sync's group: DP, or the zero shard group under hybrid sharding
  int optimizer_buffers = 0;          // AdamW 2, SGD with momentum 1, without 0
  size_t pipeline_bytes = 0;          // parallel::PipelineBuffers of this stage
  Device device = Device::CPU;        // on CUDA, checkpoints stage through host copies
  bool snapshot_checkpoints = false;  // checkpoint.async: the CPU stages through host copies too
  size_t extra_state_bytes = 0;       // the task's extra_state() slab (e.g. BatchNorm running statistics)
  parallel::GradWriteOrder order;     // the model's (ZeRO-2 places its buckets by it)
  DType act = DType::F32;             // the type the kernels read the parameters in (ZeRO-3 gathers it)
  size_t staging_bytes = 0;           // host-staged device groups: their page-locked blocks (comm)
};
// The page-locked staging of a rank's host-staged device groups (comm.backend = mpi on CUDA, or the CPU emulation;
// 0 otherwise): parallel::planned_staging_bytes for the rank at pipeline stage pp_rank, whose pipeline transfers carry
// boundary_numel elements of act (pp > 1).
size_t staging_bytes_of(const RunConfig& run, Device device, int dp, int pp, int pp_rank,
                        const std::vector<parallel::Action>& schedule, int64_t boundary_numel, DType act);
// The ranks the gradient sync reduces (and ZeRO shards) over: the DP group, or a zero shard group under hybrid
// sharding (validated as ParallelContext validates it).
int sync_group_size(const RunConfig& run, int dp);
// A row of a model's plan: the model's kinds plus the loop's, for every DP rank of the row (they differ by their ZeRO
// share only).
PlannedRanks plan_row(const MemoryKinds& model, const LoopMemoryInputs& in);
// ZeRO-2 at DP > 1: the model's gradient slab is not allocated (model.grads must not count it); the buckets are.
// ZeRO-3 at DP > 1: nor are its parameters (model.params must not count them); the shard and the gathers are.
MemoryKinds add_loop_memory(MemoryKinds model, const LoopMemoryInputs& in, int dp_rank);
// Whether the run's model allocates its gradient slab (not under ZeRO-2 at DP > 1, where the buckets hold them).
bool model_allocates_grads(const parallel::GradSyncOptions& sync, int dp_size);
// Whether the model's parameters are sharded (ZeRO-3 at DP > 1): it allocates no parameter memory of its own
// (parallel/param_gather.hpp).
bool model_shards_params(const parallel::GradSyncOptions& sync, int dp_size);

// `APP DECK --plan WORLD` (docs/contracts.md): the output options of the app's plan command (each model's in its
// task folder: plan_gpt, plan_resnet).
struct PlanOutput {
  bool json = false;        // also print the `{"plan":{...}}` line after the table
  std::string device_name;  // the device for the peak lookup (core/device_peaks.hpp); empty: unknown
};

// The table `--plan` prints: one line per row with every kind and the peak, then the record's maximum.
void print_memory_plan(const MemoryPlanTable& plan);
// `"memory":{...}` members for the --json line: the record's keys (no rss: that is measured), in bytes.
std::string memory_plan_json(const MemoryPlanTable& plan);

// train.memory_limit_gb (> 0): every rank's planned memory on the run's device (on CUDA without ckpt_staging and the
// host-staged groups' blocks, which are host memory) must fit, else a UsageError naming the rank, the kind that is
// largest, and what to change. `where`: the deck, for the message; plan_hint: the --plan command that shows the table.
void check_memory_limit(double limit_gb, const MemoryPlanTable& plan, int zero, const std::string& plan_hint);

// The row that needs the most memory on the run's device (what train.memory_limit_gb checks: on CUDA without the
// checkpoint's host staging and the host-staged groups' blocks), its need and its largest kind (the layout planner's
// fit and reason).
struct DeviceNeed {
  double bytes = 0;
  int pp_rank = 0, tp_rank = 0;
  std::string largest_kind;
  double largest_bytes = 0;
};
DeviceNeed largest_device_need(const MemoryPlanTable& plan);

}  // namespace hpct::train
