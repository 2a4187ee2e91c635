#pragma once
// The deck sections every training app shares, typed and validated in one place (read_run_config), then passed by
// value: [train] (the run's size and cadences), [parallel] (the layout and the data-parallel gradient sync), [comm],
// [checkpoint] and [log]. The model, data and optimizer sections are each app's (gpt_deck.cpp, resnet_deck.cpp).
//
// Derived defaults follow what the user set and never fail by themselves (docs/contracts.md): optim.decay_steps = 0
// means max(train.steps, optim.warmup_steps), so `--set train.steps=1` on a deck with a warm-up runs.
#include <cstdint>
#include <string>

#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "kernels/exec_context.hpp"
#include "models/recompute.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/pipeline_schedule.hpp"

namespace hpct::train {

struct TrainSection {
  int64_t steps = 0;                      // train.steps (train_resnet: train.epochs x steps per epoch when epochs > 0)
  uint64_t seed = 0;                      // train.seed
  int64_t global_batch = 0;               // train.global_batch: sequences or images per optimizer step
  int micro_batch = 0;                    // train.micro_batch: per forward/backward pass on one rank
  int64_t deadline = 0;                   // train.deadline: Unix time, 0 = none
  int64_t eval_every = 0;                 // train.eval_every: 0 = the app's default cadence
  int64_t profile_step = 0;               // train.profile_step: the step a CUDA profiler records, 0 = none
  std::string device = "cpu";             // train.device: cpu | cuda | auto
  Precision precision = Precision::FP32;  // train.precision, as requested (RunDevice decides the effective one)
  std::string loss_scale = "auto";        // train.loss_scale: auto | none | dynamic | a fixed number
  double loss_scale_init = 65536.0;       // train.loss_scale_init
  int64_t loss_scale_window = 2000;       // train.loss_scale_window
  double loss_scale_min = 1.0;            // train.loss_scale_min
  double memory_limit_gb = 0.0;           // train.memory_limit_gb: 0 = none (train/plan/memory_plan.hpp)
  models::Recompute recompute = models::Recompute::None;  // train.recompute (models/recompute.hpp)
};

struct ParallelSection {
  int tp = 1, pp = 1;                                              // parallel.tp, parallel.pp (DP = world / (tp x pp))
  std::string order = "tp-dp-pp";                                  // parallel.order
  parallel::ScheduleKind schedule = parallel::ScheduleKind::None;  // parallel.schedule at pp > 1; none at pp = 1
  parallel::GradSyncOptions sync;  // parallel.zero, parallel.bucket_mb, parallel.overlap
  bool sp = false;                 // parallel.sp: sequence parallelism over the TP group (train_gpt)
  int virtual_stages = 1;          // parallel.virtual_stages: model chunks per pipeline rank (train_gpt)
};

struct CheckpointSection {
  int64_t every = 0;               // checkpoint.every (steps, 0 = off)
  double every_minutes = 0.0;      // checkpoint.every_minutes (0 = off)
  int keep = 3;                    // checkpoint.keep (0 = all)
  bool at_end = true;              // checkpoint.at_end
  std::string resume = "none";     // checkpoint.resume
  bool async = true;               // checkpoint.async: snapshot to host staging, write on a thread of its own
  std::string files = "per_rank";  // checkpoint.files: per_rank | per_node | single (shard files per checkpoint)
};

struct LogSection {
  int64_t every = 1;         // log.every
  double peak_tflops = 0.0;  // log.peak_tflops: one device's peak, for MFU (0 = unknown)
};

struct RunConfig {
  std::string deck_path;
  TrainSection train;
  ParallelSection parallel;
  comm::CommOptions comm;
  CheckpointSection checkpoint;
  LogSection log;
};

// Reads and validates the shared sections (train.deadline in the future, ...). UsageError naming key, value and fix.
RunConfig read_run_config(const Config& deck);

// Micro-batches per step on each rank: train.global_batch / (DP x train.micro_batch); a UsageError naming both keys when
// it does not divide (the run and the memory plan check it alike).
int64_t micro_batches_per_step(const RunConfig& cfg, int dp);

// The shared sections' keys, each declared once here, next to read_run_config which reads them. An app words the few
// things that differ (its unit, defaults, recompute modes, what its layout keys mean) in SharedKeyWords, declares its
// [model] and [data], then: add_train_keys and its own train.* keys; its [optim]; add_layout_keys, its own parallel.*
// keys and add_run_keys; add_log_keys and its own sections.
struct SharedKeyWords {
  std::string unit;           // what a batch counts: "sequences" | "images"
  std::string steps_doc;      // train.steps
  int64_t global_batch = 8;   // train.global_batch's default
  int64_t micro_batch = 8;    // train.micro_batch's default
  std::string seeded;         // what train.seed seeds besides the parameters' init: "data order and sampling"
  std::string recompute_doc;  // train.recompute's doc and choices (none first)
  std::vector<std::string> recompute_choices;
  std::string eval_every_doc;  // train.eval_every
  std::string parallel_doc;    // the [parallel] section
  std::string tp_doc, pp_doc, order_doc;
  int64_t log_every = 1;  // log.every's default
};
// [train]: steps, seed, global_batch, micro_batch, device, precision and loss scaling (add_precision_keys),
// memory_limit_gb, recompute, deadline, eval_every.
void add_train_keys(ConfigSchema& s, const SharedKeyWords& w);
// [parallel]: tp, pp, order (the app adds its own parallel.* keys after them, then add_run_keys).
void add_layout_keys(ConfigSchema& s, const SharedKeyWords& w);
// Inside [parallel]: parallel.zero, parallel.bucket_mb, parallel.overlap and the other gradient-sync keys; then the
// [comm] (comm.timeout_s) and [checkpoint] sections (every, every_minutes, keep, at_end, async, resume).
void add_run_keys(ConfigSchema& s);
// [log]: every, peak_tflops.
void add_log_keys(ConfigSchema& s, const SharedKeyWords& w);

// The warm-up + cosine LR of optim.lr, optim.final_lr_frac, optim.warmup_steps, optim.decay_steps over `steps` steps.
// decay_steps = 0 derives max(steps, warmup_steps); a decay_steps the user set before the warm-up's end is a UsageError
// naming both keys.
optim::LrSchedule read_cosine_schedule(const Config& deck, int64_t steps);

}  // namespace hpct::train
