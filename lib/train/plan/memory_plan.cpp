#include "train/plan/memory_plan.hpp"

#include "parallel/staged_communicator.hpp"

#include <algorithm>
#include <cstdio>

#include "core/error.hpp"
#include "core/format.hpp"
#include "kernels/kernels.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "models/gpt/gpt_stage.hpp"
#include "models/resnet/resnet_stage.hpp"
#include "parallel/grid.hpp"
#include "parallel/param_gather.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/loop/run_device.hpp"
#include "train/loop/run_config.hpp"
#include "train/loop/run_environment.hpp"

namespace hpct::train {

namespace {

constexpr double kBytesPerGb = 1e9;  // train.memory_limit_gb counts decimal gigabytes, as device labels do

double max_kind(double a, double b) { return std::max(a, b); }

MemoryKinds kinds_max(const MemoryKinds& a, const MemoryKinds& b) {
  return {max_kind(a.params, b.params),
          max_kind(a.grads, b.grads),
          max_kind(a.optimizer, b.optimizer),
          max_kind(a.comm, b.comm),
          max_kind(a.activations, b.activations),
          max_kind(a.workspace, b.workspace),
          max_kind(a.ckpt_staging, b.ckpt_staging)};
}

// The ranks the gradient sync reduces (and ZeRO shards) over: the DP group, or a zero shard group under hybrid
// sharding (validated as ParallelContext validates it).
int sync_group_size(const RunConfig& run, int dp) {
  const int shard = parallel::zero_shard_size(run.parallel.sync.zero_group, dp, fmt::format("deck {}", run.deck_path));
  return run.parallel.sync.zero ? shard : dp;
}

// A row: the model's kinds plus the loop's, for every DP rank of the row (they differ by their ZeRO share only).
PlannedRanks plan_row(const MemoryKinds& model, const LoopMemoryInputs& in) {
  PlannedRanks row;
  for (int r = 0; r < in.dp_size; ++r) {
    const MemoryKinds k = add_loop_memory(model, in, r);
    row.kinds = kinds_max(row.kinds, k);
    row.host_comm = in.device == Device::CPU ? 0.0 : static_cast<double>(in.staging_bytes);
    row.peak = std::max(row.peak, k.total());
  }
  return row;
}

// The memory on the run's device: everything but the checkpoint's host staging on CUDA (host memory there).
double device_bytes(const MemoryKinds& k, double peak, Device device) {
  return device == Device::CPU ? peak : peak - k.ckpt_staging;
}

}  // namespace

MemoryRecord MemoryPlanTable::record() const {
  MemoryRecord r;
  for (const PlannedRanks& row : rows) {
    r.kinds = kinds_max(r.kinds, row.kinds);
    r.peak = std::max(r.peak, row.peak);
  }
  return r;
}

PlanTarget plan_target(const RunConfig& run) {
  const bool fp16 = run.train.precision == Precision::FP16;
  if (fp16) decide_precision(run.train.device, Device::CPU, run.train.precision, run.deck_path, nullptr);
  return {run.train.device == "cuda" || fp16 ? Device::CUDA : Device::CPU, activation_dtype(run.train.precision)};
}

size_t staging_bytes_of(const RunConfig& run, Device device, int dp, int pp, int pp_rank,
                        const std::vector<parallel::Action>& schedule, int64_t boundary_numel, DType act) {
  if (!parallel::uses_host_staging(device, run.comm.device_backend)) return 0;
  const bool hybrid = parallel::zero_shard_size(run.parallel.sync.zero_group, dp,
                                                fmt::format("deck {}", run.deck_path)) != dp;
  const bool pipelined = pp > 1 && boundary_numel > 0;
  return parallel::planned_staging_bytes(pp_rank == 0 || pp_rank == pp - 1, hybrid,
                                         pipelined ? parallel::PipelineBuffers::planned_transfers(schedule) : 0,
                                         static_cast<size_t>(boundary_numel) * dtype_size(act));
}

MemoryKinds add_loop_memory(MemoryKinds k, const LoopMemoryInputs& in, int dp_rank) {
  HPCT_CHECK(in.grads != nullptr, "add_loop_memory without a gradient slab");
  const parallel::BucketPlan buckets = parallel::plan_buckets(*in.grads, in.sync, in.dp_size, dp_rank, &in.order);
  const auto owned = static_cast<size_t>(buckets.owned_numel());
  const auto n_state = static_cast<size_t>(in.optimizer_buffers);
  k.grads += static_cast<double>(buckets.shard_bytes() + buckets.bucket_bytes());
  k.optimizer += static_cast<double>(n_state * owned * sizeof(float));
  k.comm += static_cast<double>(buckets.comm_bytes() + in.pipeline_bytes + in.staging_bytes);
  const bool sharded_params = in.sync.zero == 3 && in.dp_size > 1;
  if (sharded_params) {  // ZeRO-3: the masters (and the 16-bit shard), the gather slots and pinned places
    const parallel::GatherPlan gather = parallel::plan_gather(buckets);
    k.params += static_cast<double>(gather.shard_bytes(in.act));
    k.comm += static_cast<double>(gather.gather_bytes(in.act));
  }
  // CheckpointStaging on CUDA, or for background saves: a host twin of the fp32 masters (laid out as the gradient slab; ZeRO-3: one more host
  // buffer of the owned elements instead), of the extra state, and one host buffer per optimizer state buffer
  if (in.device != Device::CPU || in.snapshot_checkpoints)
    k.ckpt_staging += static_cast<double>((sharded_params ? 0 : in.grads->bytes()) + in.extra_state_bytes +
                                          (n_state + (sharded_params ? 1 : 0)) * slab_aligned(owned * sizeof(float)));
  return k;
}

MemoryKinds gpt_model_kinds(const gpt::MemoryPlan& m, size_t batch_bytes, size_t workspace_bytes) {
  MemoryKinds k;
  k.params = static_cast<double>(m.param_bytes + m.compute_param_bytes);
  k.grads = static_cast<double>(m.grad_bytes);
  k.activations = static_cast<double>(m.activation_bytes + m.activation_grad_bytes + batch_bytes);
  k.workspace = static_cast<double>(workspace_bytes);
  return k;
}

MemoryKinds resnet_model_kinds(const resnet::MemoryPlan& m, size_t batch_bytes, size_t device_workspace_bytes) {
  MemoryKinds k;
  k.params = static_cast<double>(m.param_bytes + m.compute_param_bytes + m.buffer_bytes);
  k.grads = static_cast<double>(m.grad_bytes);
  k.activations = static_cast<double>(m.activation_bytes + m.activation_grad_bytes + batch_bytes);
  k.workspace = static_cast<double>(m.workspace_bytes + device_workspace_bytes);
  return k;
}

bool model_allocates_grads(const parallel::GradSyncOptions& sync, int dp_size) {
  return !(sync.zero >= 2 && dp_size > 1);
}

bool model_shards_params(const parallel::GradSyncOptions& sync, int dp_size) { return sync.zero == 3 && dp_size > 1; }

MemoryPlanTable plan_gpt_memory(const gpt::GptConfig& cfg, const RunConfig& run, int world, const PlanTarget& target) {
  const int tp = run.parallel.tp, pp = run.parallel.pp, v = run.parallel.virtual_stages;
  const std::string where = fmt::format("deck {}", run.deck_path);
  const parallel::Grid grid(world, tp, pp, run.parallel.order, where);
  gpt::validate_model_parallel(cfg, tp, pp, where, v);
  const int MB = run.train.micro_batch;
  const int n_micro = static_cast<int>(micro_batches_per_step(run, grid.dp()));
  MemoryPlanTable plan{"train_gpt", world, grid.dp(), tp, pp, target.device, target.act, {}};
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) {
      const gpt::ModelParallel mp{tp, t, pp, p, run.parallel.sp, v};
      const std::vector<gpt::StagePlan> chunks = gpt::chunk_plans(cfg, pp, p, v);
      const std::vector<parallel::Action> schedule = parallel::make_schedule(run.parallel.schedule, pp, p, n_micro, v);
      gpt::MemoryPlan m = gpt::memory_plan(cfg, mp, MB, target.device, target.act,
                                           {run.train.recompute, gpt::GptStage::kept_sets(schedule, chunks)});
      if (!model_allocates_grads(run.parallel.sync, grid.dp())) m.grad_bytes = 0;
      if (model_shards_params(run.parallel.sync, grid.dp())) m.param_bytes = m.compute_param_bytes = 0;
      const MemoryKinds model = gpt_model_kinds(m,
                                                gpt::GptStage::planned_bytes(cfg, mp, schedule, MB, target.act) +
                                                    gpt::GptEvaluator::planned_bytes(cfg, mp, MB, target.act),
                                                kernels::device_workspace_bytes(target.device, target.act));
      Slab grads("gradients (planned)", target.device);  // the model's gradient slab, never allocated
      std::vector<gpt::ParamSpec> layout;
      for (const gpt::ShardSpec& s : gpt::parameter_layout(cfg, mp)) {
        grads.add(s.spec.name, s.spec.shape);
        layout.push_back(s.spec);
      }
      const bool only_stage = pp == 1;
      const int64_t boundary = only_stage ? 0 : gpt::boundary_numel(cfg, mp, MB);
      LoopMemoryInputs in;
      in.grads = &grads;
      in.sync = run.parallel.sync;
      in.dp_size = sync_group_size(run, grid.dp());
      in.optimizer_buffers = 2;  // AdamW
      in.pipeline_bytes = parallel::PipelineBuffers::planned_bytes(schedule, boundary, target.act);
      in.staging_bytes = staging_bytes_of(run, target.device, grid.dp(), pp, p, schedule, boundary, target.act);
      in.device = target.device;
      in.snapshot_checkpoints = run.checkpoint.async;
      in.order = {gpt::grad_write_groups(layout), gpt::grad_pinned(layout)};
      in.act = target.act;
      PlannedRanks row = plan_row(model, in);
      row.pp_rank = p;
      row.tp_rank = t;
      if (pp > 1) {
        row.layers.clear();
        for (const gpt::StagePlan& ch : chunks)
          row.layers += (row.layers.empty() ? "" : ",") +
                        (ch.num_layers() == 1 ? std::to_string(ch.first_layer)
                                              : fmt::format("{}..{}", ch.first_layer, ch.end_layer - 1));
      }
      plan.rows.push_back(row);
    }
  return plan;
}

MemoryPlanTable plan_resnet_memory(const resnet::ResNetConfig& cfg, const RunConfig& run, int world, bool sync_bn,
                                   int optimizer_buffers, const PlanTarget& target) {
  HPCT_USAGE_CHECK(run.parallel.tp == 1 && run.parallel.pp == 1,
                   "deck {}: parallel.tp = {} and parallel.pp = {}: train_resnet is data-parallel only (DP = the world "
                   "size); set both to 1",
                   run.deck_path, run.parallel.tp, run.parallel.pp);
  const int dp = world, MB = run.train.micro_batch;
  micro_batches_per_step(run, dp);  // the global batch's split, checked as the run checks it
  // the model's slabs as the run plans them, on the run's device (the convolution workspace is the device's)
  resnet::ResNet planned(cfg, MB, target.device, nullptr, /*allocate=*/false, target.act, Precision::FP32,
                         sync_bn ? dp : 1, /*allocate_grads=*/true, /*shard_params=*/false, run.train.recompute);
  resnet::MemoryPlan m = planned.memory();
  if (!model_allocates_grads(run.parallel.sync, dp)) m.grad_bytes = 0;
  if (model_shards_params(run.parallel.sync, dp)) m.param_bytes = m.compute_param_bytes = 0;
  const MemoryKinds model = resnet_model_kinds(m, resnet::ResNetStage::planned_bytes(cfg, MB),
                                               kernels::device_workspace_bytes(target.device, target.act));
  LoopMemoryInputs in;
  in.grads = &planned.grads();
  in.sync = run.parallel.sync;
  in.dp_size = sync_group_size(run, dp);
  in.optimizer_buffers = optimizer_buffers;
  in.device = target.device;
  in.snapshot_checkpoints = run.checkpoint.async;
  in.extra_state_bytes = m.buffer_bytes;
  in.order = {planned.grad_write_groups(), {}};
  in.act = target.act;
  in.staging_bytes = staging_bytes_of(run, target.device, dp, 1, 0, {}, 0, target.act);
  MemoryPlanTable plan{"train_resnet", world, dp, 1, 1, target.device, target.act, {plan_row(model, in)}};
  return plan;
}

void print_memory_plan(const MemoryPlanTable& plan) {
  // the record's fields in its order; rss is measured, not planned
  std::printf("%8s %8s %10s |", "pp_rank", "tp_rank", "layers");
  for (const auto& [name, value] : memory_fields(MemoryRecord{}))
    if (name != "rss") std::printf(" %12s", name.c_str());
  std::printf("\n");
  auto print = [&](const std::string& pp, const std::string& tp, const std::string& layers, const MemoryKinds& k,
                   double peak) {
    std::printf("%8s %8s %10s |", pp.c_str(), tp.c_str(), layers.c_str());
    for (const auto& [name, value] : memory_fields(MemoryRecord{k, peak, 0.0}))
      if (name != "rss") std::printf(" %12s", human_bytes(*value).c_str());
    std::printf("\n");
  };
  for (const PlannedRanks& r : plan.rows)
    print(std::to_string(r.pp_rank), std::to_string(r.tp_rank), r.layers, r.kinds, r.peak);
  const MemoryRecord rec = plan.record();
  print("max", "", "", rec.kinds, rec.peak);
  std::printf("(each row: the maximum over its %d DP rank(s); the memory record of the run reports the last line, plus "
              "rss, measured)\n",
              plan.dp);
}

std::string memory_plan_json(const MemoryPlanTable& plan) {
  const MemoryRecord r = plan.record();
  std::string s = "\"memory\":{";
  const auto fields = memory_fields(r);
  bool first = true;
  for (const auto& [name, value] : fields) {
    if (name == "rss") continue;  // measured, not planned
    s += fmt::format("{}\"{}\":{:.0f}", first ? "" : ",", name, *value);
    first = false;
  }
  return s + "}";
}

void add_memory_limit_key(ConfigSchema& s) {
  s.float_key("train.memory_limit_gb", 0.0,
              "fail before allocating when a rank's planned memory on the run's device exceeds this many GB (1e9 "
              "bytes), naming the kind that is largest and what to change (0: no limit; `--plan WORLD` shows the plan)",
              0.0, 1e9);
}

void check_memory_limit(double limit_gb, const MemoryPlanTable& plan, int zero, const std::string& plan_hint) {
  if (limit_gb <= 0.0) return;
  const double limit = limit_gb * kBytesPerGb;
  for (const PlannedRanks& row : plan.rows) {
    const double need = device_bytes(row.kinds, row.peak, plan.device) - row.host_comm;
    if (need <= limit) continue;
    // the largest kind on the device (the checkpoint's staging is host memory on CUDA, and 0 on the CPU)
    std::pair<std::string, double> largest{"", -1.0};
    for (const auto& [name, value] : memory_fields(MemoryRecord{row.kinds, row.peak, 0.0}))
      if (name != "ckpt_staging" && name != "peak" && name != "rss" && *value > largest.second)
        largest = {name, *value};
    const std::string kind = largest.first;
    const bool gpt = plan.app == "train_gpt";
    std::string advice;
    if (kind == "optimizer" && zero == 0)
      advice = "use parallel.zero = 1 (the optimizer state sharded over the data-parallel group)";
    else if (kind == "grads" && zero < 2 && plan.dp > 1)
      advice = "use parallel.zero = 2 (gradients sharded too: no full-size gradient buffer)";
    else if (kind == "params" && zero < 3 && plan.dp > 1 && plan.pp == 1)
      advice = "use parallel.zero = 3 (parameters sharded too: each layer gathered when it computes)";
    else if (kind == "params" || kind == "grads" || kind == "optimizer")
      advice = gpt ? "split the model over more ranks with parallel.tp or parallel.pp"
                   : "train_resnet is data-parallel only: choose a smaller model (model.depth, model.base_width)";
    else if (kind == "activations" || kind == "workspace")
      advice = "lower train.micro_batch (the global batch stays: more micro-batches per step) or store activations "
               "in bf16 (train.precision = bf16)";
    else
      advice = "parallel.grad_dtype = fp32 has no bf16 bucket buffer, and parallel.schedule = 1f1b keeps fewer "
               "micro-batches in flight than gpipe";
    const std::string ranks = gpt ? fmt::format("the rank(s) at pp {} tp {}", row.pp_rank, row.tp_rank)
                                  : std::string("every rank");
    HPCT_USAGE_FAIL("train.memory_limit_gb = {}: {} of {} plan {} on the {} ({} over the limit); the largest kind is "
                    "{} ({}): {}. `{}` shows every kind of every rank",
                    limit_gb, ranks, plan.app, human_bytes(need), device_name(plan.device), human_bytes(need - limit),
                    kind, human_bytes(largest.second), advice, plan_hint);
  }
}

}  // namespace hpct::train
