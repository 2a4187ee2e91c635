#pragma once
// The GPT's memory plan (train/plan/memory_plan.hpp: the memory record's kinds of every rank at a world size) and its
// `train_gpt DECK --plan WORLD [--json] [--device-name NAME]` command (docs/contracts.md): no training data, no MPI
// collective, nothing allocated.
#include "core/config.hpp"
#include "models/gpt/gpt.hpp"
#include "train/loop/memory_record.hpp"
#include "train/loop/run_config.hpp"
#include "train/plan/memory_plan.hpp"

namespace hpct::train {

// The GPT's plan at `world` ranks (the grid and the model's split are validated first: UsageErrors naming the keys).
// first_tp_rank_only: one row per stage, its TP rank 0's: every TP rank of a stage holds an equal shard (the split's
// divisibility is validated), so the layout planner, which plans thousands of layouts, plans one of them.
// attention: train.attention as asked (the plan sizes what the target gets of it, kernels::effective_attention).
MemoryPlanTable plan_gpt_memory(const gpt::GptConfig& cfg, const RunConfig& run, int world, const PlanTarget& target,
                                AttentionImpl attention, bool first_tp_rank_only = false);

// A model's slabs by kind: what the tasks' model_memory() reports from the allocated model and the plan counts from
// the model's sizing functions. The GPT: params = the fp32 masters and the 16-bit compute copy, grads = its gradient
// slab (0 when bound to ZeRO-2's buckets), activations = activations, backward scratch and the step's batch buffers
// (batch_bytes: the pipeline stage's and the evaluator's), workspace = the backend's device-wide buffers
// (workspace_bytes: kernels::device_workspace_bytes).
MemoryKinds gpt_model_kinds(const gpt::MemoryPlan& m, size_t batch_bytes, size_t workspace_bytes);

// Validates the model and the layout (parallel.tp, parallel.pp, order, the global batch's split) for a world of WORLD
// ranks and prints the plan; returns the exit code. The JSON line:
// {"plan":{"app":"train_gpt","deck":..,"world":..,"tp":..,"pp":..,"dp":..,"zero":..,"micro_batch":..,
//  "global_batch":..,"seq_len":..,"parameters":<all, padding rows included>,"parameters_for_flops":<N of 6N + 12 L C T>,
//  "flops_per_token":..,"tokens_per_step":..,"training_flops_per_step":..,"memory_bytes_max_rank":<peak>,
//  "activation_bytes_max_rank":.. (activations and their gradients, one micro-batch),
//  "memory":{"params":..,"grads":..,"optimizer":..,"comm":..,"activations":..,"workspace":..,"ckpt_staging":..,
//  "peak":..} (the memory record's keys without rss, each the maximum over ranks),"activation_dtype":"f32"|"bf16"|"f16",
//  "device":<train.device>,"precision":<train.precision>,"device_name":..|null,"device_peaks":{..}|null,
//  "peak_tflops":..|null,"log_peak_tflops":..}}
int plan_gpt(const Config& deck, int world, const PlanOutput& out = {});

}  // namespace hpct::train
