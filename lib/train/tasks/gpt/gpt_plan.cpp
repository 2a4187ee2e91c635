#include "train/tasks/gpt/gpt_plan.hpp"

#include <algorithm>
#include <cstdio>

#include "core/device_peaks.hpp"
#include "core/format.hpp"
#include "kernels/kernels.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "models/gpt/gpt_stage.hpp"
#include "parallel/grid.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"

namespace hpct::train {

MemoryKinds gpt_model_kinds(const gpt::MemoryPlan& m, size_t batch_bytes, size_t workspace_bytes) {
  MemoryKinds k;
  k.params = static_cast<double>(m.param_bytes + m.compute_param_bytes);
  k.grads = static_cast<double>(m.grad_bytes);
  k.activations = static_cast<double>(m.activation_bytes + m.activation_grad_bytes + batch_bytes);
  k.workspace = static_cast<double>(workspace_bytes);
  return k;
}

MemoryPlanTable plan_gpt_memory(const gpt::GptConfig& cfg, const RunConfig& run, int world, const PlanTarget& target,
                                AttentionImpl attention, bool first_tp_rank_only) {
  const AttentionImpl gets = kernels::effective_attention(attention, target.device, target.act);
  const int tp = run.parallel.tp, pp = run.parallel.pp, v = run.parallel.virtual_stages;
  const std::string where = fmt::format("deck {}", run.deck_path);
  const parallel::Grid grid(world, tp, pp, run.parallel.order, where);
  gpt::validate_model_parallel(cfg, tp, pp, where, v);
  const int MB = run.train.micro_batch;
  const int n_micro = static_cast<int>(micro_batches_per_step(run, grid.dp()));
  MemoryPlanTable plan{"train_gpt", world, grid.dp(), tp, pp, target.device, target.act, {}};
  plan.rows_are_positions = true;
  plan.split_advice = "split the model over more ranks with parallel.tp or parallel.pp";
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < (first_tp_rank_only ? 1 : tp); ++t) {
      const gpt::ModelParallel mp{tp, t, pp, p, run.parallel.sp, v};
      const std::vector<gpt::StagePlan> chunks = gpt::chunk_plans(cfg, pp, p, v);
      const std::vector<parallel::Action> schedule = parallel::make_schedule(run.parallel.schedule, pp, p, n_micro, v);
      gpt::MemoryPlan m = gpt::memory_plan(cfg, mp, MB, target.device, target.act,
                                           {run.train.recompute, gpt::GptStage::kept_sets(schedule, chunks), gets});
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

int plan_gpt(const Config& deck, int world, const PlanOutput& out) {
  const gpt::GptConfig cfg = gpt_model_config(deck);
  const RunConfig run = read_run_config(deck);
  const PlanTarget target = plan_target(run);
  const AttentionImpl attention = gpt_attention(deck);
  const MemoryPlanTable plan = plan_gpt_memory(cfg, run, world, target, attention);  // validates grid, split, batch
  const parallel::Grid grid(world, plan.tp, plan.pp, run.parallel.order, fmt::format("deck {}", deck.deck_path()));
  const int MB = run.train.micro_batch;
  const gpt::MemoryPlan serial = gpt::memory_plan(cfg, MB, target.device, target.act);
  std::printf("plan: %s | %s | micro_batch %d | ZeRO-%d | device %s | model %lld parameters (padded vocabulary %d)\n",
              deck.deck_path().c_str(), grid.describe().c_str(), MB, run.parallel.sync.zero, device_name(target.device),
              static_cast<long long>(serial.num_params), cfg.padded_vocab);
  print_memory_plan(plan);
  std::printf("(activations: what each stage keeps for its micro-batches in flight under train.recompute = %s, stored "
              "as %s, with the step's batch and pipeline-stage buffers)\n",
              models::recompute_name(run.train.recompute), dtype_name(target.act));
  if (out.json) {
    size_t act_max = 0;  // the activations a stage keeps (train.recompute, its micro-batches in flight), the largest
    const int n_micro = static_cast<int>(micro_batches_per_step(run, grid.dp()));
    for (int p = 0; p < plan.pp; ++p) {
      const int v = run.parallel.virtual_stages;
      const gpt::ModelParallel mp{plan.tp, 0, plan.pp, p, run.parallel.sp, v};
      const auto schedule = parallel::make_schedule(run.parallel.schedule, plan.pp, p, n_micro, v);
      const gpt::MemoryPlan m = gpt::memory_plan(
          cfg, mp, MB, target.device, target.act,
          {run.train.recompute, gpt::GptStage::kept_sets(schedule, gpt::chunk_plans(cfg, plan.pp, p, v)),
           kernels::effective_attention(attention, target.device, target.act)});
      act_max = std::max(act_max, m.activation_bytes + m.activation_grad_bytes);
    }
    // FLOPs as the trainer counts them (docs/performance.md): flops_per_token x global_batch x seq_len per step
    const int64_t GB = run.train.global_batch;
    const double fpt = gpt::flops_per_token(cfg);
    const double tokens = static_cast<double>(GB) * cfg.seq_len;
    const std::string precision = precision_name(run.train.precision);
    const std::string line = fmt::format(
        R"({{"plan":{{"app":"train_gpt","deck":{},"world":{},"tp":{},"pp":{},"dp":{},"zero":{},"micro_batch":{},)"
        R"("global_batch":{},"seq_len":{},"parameters":{},"parameters_for_flops":{},"flops_per_token":{},)"
        R"("tokens_per_step":{},"training_flops_per_step":{},"memory_bytes_max_rank":{:.0f},)"
        R"("activation_bytes_max_rank":{},{},"activation_dtype":{},"device":{},"precision":{},)"
        R"({},"log_peak_tflops":{}}}}})",
        json_quote(deck.deck_path()), world, plan.tp, plan.pp, plan.dp, run.parallel.sync.zero, MB, GB, cfg.seq_len,
        serial.num_params, serial.num_params_no_wpe, fpt, tokens, fpt * tokens, plan.record().peak, act_max,
        memory_plan_json(plan), json_quote(dtype_name(target.act)), json_quote(run.train.device), json_quote(precision),
        peak_json_members(out.device_name, precision), run.log.peak_tflops);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace hpct::train
