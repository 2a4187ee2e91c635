#include "train/plan/memory_plan.hpp"

#include "parallel/staged_communicator.hpp"

#include <algorithm>
#include <cstdio>

#include "core/error.hpp"
#include "core/format.hpp"
#include "kernels/kernels.hpp"
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

// The memory on the run's device: everything but the checkpoint's host staging on CUDA (host memory there).
double device_bytes(const MemoryKinds& k, double peak, Device device) {
  return device == Device::CPU ? peak : peak - k.ckpt_staging;
}

}  // namespace

int sync_group_size(const RunConfig& run, int dp) {
  const int shard = parallel::zero_shard_size(run.parallel.sync.zero_group, dp, fmt::format("deck {}", run.deck_path));
  return run.parallel.sync.zero ? shard : dp;
}

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

bool model_allocates_grads(const parallel::GradSyncOptions& sync, int dp_size) {
  return !(sync.zero >= 2 && dp_size > 1);
}

bool model_shards_params(const parallel::GradSyncOptions& sync, int dp_size) { return sync.zero == 3 && dp_size > 1; }

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

DeviceNeed largest_device_need(const MemoryPlanTable& plan) {
  DeviceNeed need;
  need.bytes = -1.0;
  for (const PlannedRanks& row : plan.rows) {
    const double bytes = device_bytes(row.kinds, row.peak, plan.device) - row.host_comm;
    if (bytes <= need.bytes) continue;
    need = {bytes, row.pp_rank, row.tp_rank, "", -1.0};
    for (const auto& [name, value] : memory_fields(MemoryRecord{row.kinds, row.peak, 0.0}))
      if (name != "ckpt_staging" && name != "peak" && name != "rss" && *value > need.largest_bytes)
        need.largest_kind = name, need.largest_bytes = *value;
  }
  return need;
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
    std::string advice;
    if (kind == "optimizer" && zero == 0)
      advice = "use parallel.zero = 1 (the optimizer state sharded over the data-parallel group)";
    else if (kind == "grads" && zero < 2 && plan.dp > 1)
      advice = "use parallel.zero = 2 (gradients sharded too: no full-size gradient buffer)";
    else if (kind == "params" && zero < 3 && plan.dp > 1 && plan.pp == 1)
      advice = "use parallel.zero = 3 (parameters sharded too: each layer gathered when it computes)";
    else if (kind == "params" || kind == "grads" || kind == "optimizer")
      advice = plan.split_advice;
    else if (kind == "activations" || kind == "workspace")
      advice = "lower train.micro_batch (the global batch stays: more micro-batches per step) or store activations "
               "in bf16 (train.precision = bf16)";
    else
      advice = "parallel.grad_dtype = fp32 has no bf16 bucket buffer, and parallel.schedule = 1f1b keeps fewer "
               "micro-batches in flight than gpipe";
    const std::string ranks = plan.rows_are_positions
                                  ? fmt::format("the rank(s) at pp {} tp {}", row.pp_rank, row.tp_rank)
                                  : std::string("every rank");
    HPCT_USAGE_FAIL("train.memory_limit_gb = {}: {} of {} plan {} on the {} ({} over the limit); the largest kind is "
                    "{} ({}): {}. `{}` shows every kind of every rank",
                    limit_gb, ranks, plan.app, human_bytes(need), device_name(plan.device), human_bytes(need - limit),
                    kind, human_bytes(largest.second), advice, plan_hint);
  }
}

}  // namespace hpct::train
