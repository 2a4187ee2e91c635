#pragma once
// What the training loop (train/loop/training_loop.hpp) needs of a model: the TrainTask. The loop owns everything every
// model shares (steps, gradient accumulation through a pipeline schedule, data-parallel gradient sync, loss scaling,
// the optimizer step, evaluation cadence, logging, metrics.jsonl, checkpoints and the collective stop decision, the
// PERFORMANCE line, MFU); a task owns its model, its data and what only it reports. train_gpt and train_resnet are the
// two tasks (gpt_trainer.cpp, resnet_trainer.cpp).
//
// Per optimizer step the loop calls, in this order:
//   begin_step(s, dloss)        zero the gradients, stage the step's micro-batches (this rank's share)
//   run_schedule(stage())       forward + backward of every micro-batch, in the schedule's order
//   end_step()                  this rank's sums (loss, ...) and any reduction that must precede the DP sync
//   ... DP gradient sync, loss = sums[0] / loss_terms, gradient norm, optimizer step under the loss scaler ...
//   after_gradients(s)          (e.g. a reference dump of step 1's gradients; called before the optimizer step)
//   report_step(...)            the task's metrics.jsonl fields and step-line text
// and, when due, evaluate(); before a checkpoint before_checkpoint(), checkpoint_attrs() and check_replicas().
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/tensor_source.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/optimizer.hpp"
#include "optim/segment.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "tensor/tensor.hpp"
#include "train/checkpoint/protocol.hpp"
#include "train/loop/memory_record.hpp"

namespace hpct::train {

// metrics.jsonl fields in order (nullopt: null)
using MetricFields = std::vector<std::pair<std::string, std::optional<double>>>;

// What one optimizer step is, constant over the run.
struct StepShape {
  // terms of the global loss per step (tokens or images): the loss gradient is 1 / loss_terms; also the job's
  // throughput units per step
  double loss_terms = 0.0;
  std::string unit;        // "tokens" | "images": metrics key <unit>_per_s
  std::string unit_short;  // "tok" | "img": the step line's "<n> tok/s"
  int rate_decimals = 0;   // digits of the PERFORMANCE line's rates
  double flops = 0.0;      // training FLOPs of one step, the whole job (docs/performance.md)
};

// An evaluation's result: the loss, and the task's extra figures for metrics.jsonl (e.g. val_acc).
struct EvalResult {
  double loss = 0.0;
  MetricFields extra;
  std::string text;  // the step line's evaluation text (" | val loss 1.234567")
};

// The PERFORMANCE line's task columns: layout (after "ranks"), quality (after the rates) and communication (after
// comm_exposed_ms comm_exposed_frac): {header names, values}.
struct PerfColumns {
  std::string layout_names, layout_values;
  std::string quality_names, quality_values;
  std::string comm_names, comm_values;
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;

  // ---- the model's state, for the loop's gradient sync, optimizer and checkpoints ----------------------------------
  // The model as the data-parallel layer sees it (parallel/data_parallel.hpp): its slabs, write order and hooks, and
  // under ZeRO-3 (model_shards_params) its initialisation, which the task then leaves to the loop.
  virtual parallel::DataParallelModel& model() = 0;
  // The model's optimizer over this rank's segments (whole tensors, or its ZeRO share of them).
  virtual std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<optim::Segment> segments) = 0;
  // The model's own 16-bit compute copy of its parameters (bf16 or fp16 storage, unsharded), or nullptr; and the
  // loop's word that the optimizer keeps it current from the first step on (optim::Optimizer::keep_compute_copy), so
  // the model casts the masters into it only once more.
  virtual Slab* compute_copy() { return nullptr; }
  virtual void set_compute_copy_kept() {}
  // Where each local parameter tensor sits in the serial model, and which replica writes it.
  virtual std::vector<TensorPlacement> placements() const = 0;
  // Which tensors count in the gradient norm (a replica counts once), by tensor index; nullptr: all.
  virtual const std::vector<bool>* counted_in_norm() const { return nullptr; }
  // More DP-replicated tensors a checkpoint stores beside the parameters (BN running statistics); nullptr: none.
  virtual Slab* extra_state() { return nullptr; }

  // ---- fine-tuning (model.init_from) ----------------------------------------------------------------------------
  // The weights a fresh run starts from instead of its initialisation ("" = none), and their source: the loop opens it
  // only on a fresh start (a resumed run takes its checkpoint's weights) and loads it through the placements
  // (load_parameters); the optimizer state stays fresh.
  virtual std::string init_from() const { return ""; }
  virtual std::unique_ptr<ckpt::TensorSource> open_init_source() { return nullptr; }

  // ---- the run --------------------------------------------------------------------------------------------------
  virtual const StepShape& shape() const = 0;
  virtual int64_t steps() const = 0;
  virtual const optim::LrSchedule& lr_schedule() const = 0;
  // Logs what only the task knows, after the loop's layout and gradient-sync lines (model, memory, data).
  virtual void log_setup(const optim::Optimizer& opt) = 0;
  // The model's slabs by kind of the memory record (train/loop/memory_record.hpp): params, grads, activations, workspace;
  // the loop adds the optimizer, communication and checkpoint staging.
  virtual MemoryKinds model_memory() const = 0;
  // The layout line's axes ("dp 2 x tp 1 x pp 1 (tp-dp-pp)") and its tail (" | 1024 tokens/step").
  virtual std::string layout_axes() const = 0;
  virtual std::string layout_tail() const = 0;
  // Before the first step of this run (fresh or resumed): e.g. the reference dump's initial state.
  virtual void before_first_step() {}

  // ---- one step -------------------------------------------------------------------------------------------------
  virtual void begin_step(int64_t step, float dloss) = 0;
  virtual parallel::PipelineStage& stage() = 0;
  // Whether every gradient is final as soon as the last backward has produced it; false when a reduction must run
  // between the schedule and the data-parallel sync (the GPT's tied embedding across pipeline stages), in which case
  // the DP sync starts after end_step().
  virtual bool gradients_final_in_last_backward() const = 0;
  // This rank's sums of the step, summed over DP by the loop: [0] = the loss sum, then the task's own (e.g. correct
  // predictions). Also runs the reductions that precede the DP sync.
  virtual std::vector<double> end_step() = 0;
  virtual void after_gradients(int64_t /*step*/) {}
  // The task's metrics.jsonl fields of a step and its step-line text, from the DP-summed sums.
  struct StepReport {
    MetricFields position;                             // after "step" (e.g. epoch)
    MetricFields train;                                // after "loss" (e.g. acc)
    MetricFields perf;                                 // after "comm_exposed_ms" (e.g. tp_comm_ms)
    std::string position_text, train_text, comm_text;  // step-line pieces
  };
  virtual StepReport report_step(int64_t step, const std::vector<double>& sums) = 0;
  // The record of a step (the loop's reference dump hook): loss, lr, gradient norm.
  virtual void record_step(int64_t /*step*/, double /*loss*/, double /*lr*/, double /*norm*/) {}

  // ---- evaluation -----------------------------------------------------------------------------------------------
  // Whether step s evaluates when train.eval_every = 0 (ResNet: at every epoch's end); the last step always does.
  virtual bool default_eval_step(int64_t /*step*/) const { return false; }
  virtual EvalResult evaluate() = 0;
  // After a step's line was logged (the ResNet's epoch line).
  virtual void after_step_logged(int64_t /*step*/, const std::optional<EvalResult>& /*eval*/) {}

  // ---- checkpoints ----------------------------------------------------------------------------------------------
  virtual void before_checkpoint() {}
  // On resume, before the checkpoint is loaded: the task's own compatibility checks against its attributes (the GPT's
  // shard list and data order), UsageError on a mismatch.
  virtual void check_resume(const ckpt::Reader& /*reader*/) {}
  // Attributes only this task stores (tokens_seen, epoch, model.vocab_size, the layout text, ...).
  virtual void checkpoint_attrs(ckpt::Attrs& a, int64_t step) const = 0;
  // Replicas must stay bitwise equal (docs/parallelism.md): params is host memory (CheckpointStaging::params()).
  virtual void check_replicas(CheckpointStaging& staging, const std::string& when) = 0;

  // ---- the end ----------------------------------------------------------------------------------------------------
  // After the last step (exit_code 0) or a stop (3): final dumps, the text sample.
  virtual void finish(int exit_code) = 0;
  virtual PerfColumns perf_columns(double last_loss, const std::optional<EvalResult>& last_eval) const = 0;
};

// Helpers of the tasks' implementations.
// Weight-decay flags of a parameter layout (any model's ParamSpec list with a `decay` member), by tensor index.
template <class Layout>
std::vector<bool> decay_flags(const Layout& layout) {
  std::vector<bool> d;
  for (const auto& p : layout) d.push_back(p.decay);
  return d;
}
// The forwards every DP rank runs when it evaluates its block of n_eval items, micro_batch at a time: with sharded
// parameters (ZeRO-3) every forward gathers over DP, so each rank runs as many as the largest block needs; else 0 (each
// rank as many as its own block needs).
inline int64_t evaluation_forwards(bool params_sharded, int64_t n_eval, int dp, int micro_batch) {
  if (!params_sharded) return 0;
  return ((n_eval + dp - 1) / dp + micro_batch - 1) / micro_batch;
}

}  // namespace hpct::train
