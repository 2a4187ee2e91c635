#pragma once
// The layout planner's model-independent part (`APP DECK --plan WORLD --auto --machine M`, docs/parallelism.md
// "Choosing a layout"): a model enumerates the layouts valid for its deck at a world size and predicts each one's step
// time on a machine (tasks/gpt/gpt_auto_plan.cpp, tasks/resnet/resnet_auto_plan.cpp); this part ranks them by
// predicted time, checks memory in that order with the model's exact memory plan until the best `top` that fit are
// found (the plan of a layout costs far more than its prediction), and prints them: a table, and with --json one JSON
// object per candidate.
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/recompute.hpp"
#include "parallel/grad_sync.hpp"
#include "tensor/tensor.hpp"
#include "train/loop/memory_record.hpp"
#include "train/plan/machine.hpp"
#include "train/plan/memory_plan.hpp"

namespace hpct::train {

// What a layout chooses (train_resnet uses dp, zero, zero_group, recompute, micro_batch and grad_dtype).
struct Layout {
  int dp = 1, tp = 1, pp = 1, v = 1;  // v: virtual stages (interleaved 1F1B)
  bool sp = false;
  int zero = 0, zero_group = 0;  // zero_group 0: the whole DP group
  models::Recompute recompute = models::Recompute::None;
  int micro_batch = 1;
  DType grad_dtype = DType::F32;
};

// A predicted step, by part (seconds). compute: the slowest pipeline stage's micro-batches (TP collectives apart);
// bubble: the pipeline's fill and drain; dp_exposed: the gradient sync (and ZeRO's gathers) not hidden behind backward;
// optimizer: the update on the rank's share.
struct StepTime {
  double compute = 0, tp_comm = 0, bubble = 0, p2p = 0, dp_exposed = 0, optimizer = 0;
  double total() const { return compute + tp_comm + bubble + p2p + dp_exposed + optimizer; }
};

struct Candidate {
  Layout layout;
  std::vector<std::string> set;  // the --set arguments that select it ("parallel.tp=2", ...)
  StepTime time;
  Work work;          // the slowest rank's compute work per step (the compute model's input)
  bool deck = false;  // the deck's own layout
  // the memory check (filled in predicted order, as far as the ranking needs)
  bool checked = false, fits = false;
  std::string reason;          // why it does not fit
  bool backend_limit = false;  // the reason is a limit of the backend's kernels, not memory
  MemoryRecord memory;
  double device_need = 0;  // the largest rank's bytes on the device
  int rank = 0;            // 1-based among the candidates that fit; 0: not ranked
};

struct AutoPlanOptions {
  std::string machine;  // --machine NAME|FILE
  int top = 10;         // --top K (0: every candidate)
  bool json = false;
};

// What a model hands the driver.
struct AutoPlanProblem {
  std::string app, deck_path, unit;  // unit: "tokens/s" | "images/s"
  int world = 1;
  Machine machine;
  std::string precision;              // train.precision's name (the peak for MFU)
  double samples_per_step = 0;        // tokens or images per optimizer step (the throughput)
  double flops_per_step = 0;          // the model's training FLOPs per step as the trainer counts them (MFU)
  double memory_limit_bytes = 0;      // train.memory_limit_gb; 0: the machine's memory per rank
  std::vector<Candidate> candidates;  // every valid layout, predicted
  int invalid = 0;                    // layouts the deck's rules refuse (never candidates)
  std::string deck_invalid;           // why the deck's own layout is not a candidate ("" when it is)
  std::function<MemoryPlanTable(const Candidate&)> memory_plan;  // the exact plan of a candidate's layout
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();  // the planner's time
};

// The data-parallel part of a step (both models): ZeRO-0 allreduce, ZeRO-1 reduce-scatter and the fp32 parameter
// allgather after the step, ZeRO-2 a reduce-scatter per micro-batch, ZeRO-3 that plus each micro-batch's parameter
// gathers (forward, backward, and the recomputed forward); hybrid sharding reduces within the shard group, then
// across the groups. The gradient buckets of a micro-batch overlap its backward (2/3 of its compute) when
// parallel.overlap is on, ZeRO-3's gathers its compute when parallel.prefetch is, each as far as the machine's
// comm_overlap lets compute hide communication. Exposed seconds.
struct DataParallelStep {
  parallel::GradSyncOptions sync;
  std::vector<int> dp_members;  // the ranks of one DP group, in DP order
  int ranks_per_node = 1;
  double params = 0;               // the rank's parameters (its TP / PP share)
  double micro_batches = 1;        // per step
  double micro_batch_compute = 0;  // seconds of one micro-batch's compute on the slowest stage
  double act_bytes = 4;            // the compute type's size (ZeRO-3 gathers it)
  int layers = 1;                  // the units ZeRO-3 gathers by (the stage's layers)
  bool full_recompute = false;
};
double data_parallel_seconds(const Machine& machine, const DataParallelStep& s, const std::string& where);
// The optimizer's memory traffic on the rank's share (ZeRO: 1 / the shard group of the parameters): update_bytes per
// owned parameter (AdamW 28: read p, g, m, v, write p, m, v; SGD with momentum 20), the gradient's zeroing and norm
// (8 per parameter) and, reducing in bf16 at DP > 1, its casts (6 per parameter).
Work optimizer_work(const DataParallelStep& s, double update_bytes, const std::string& where);
// A group of ranks as the machine places them (ranks fill the nodes in rank order): {ranks, nodes spanned}.
std::pair<int, int> span_of(const std::vector<int>& ranks, int ranks_per_node);

// A problem's common part: the machine (--machine), the app, the deck's path, WORLD, the unit, the precision and
// train.memory_limit_gb; the model adds its samples and FLOPs per step, its candidates and its memory plan.
AutoPlanProblem auto_plan_problem(const std::string& app, const std::string& unit, const Config& deck,
                                  const RunConfig& run, int world, const AutoPlanOptions& options);
// "cuda" | "cpu": train.device for a machine (a GPU machine implies CUDA).
const char* machine_device_key(const Machine& machine);

// Ranks, checks memory, prints; returns the exit code (0; 1 when no candidate fits).
int run_auto_plan(AutoPlanProblem& problem, const AutoPlanOptions& options);

// The divisors of n, increasing.
std::vector<int> divisors(int64_t n);
// Compact "dp 4 tp 2 pp 1 v 1 sp 0 zero 1 mb 4 ..." description (messages).
std::string describe_layout(const Layout& l);
const char* grad_dtype_key(DType t);  // "fp32" | "bf16"

}  // namespace hpct::train
