#pragma once
// `train_gpt DECK --plan WORLD [--json] [--device-name NAME]` and `train_resnet DECK --plan WORLD [--json] [...]`
// (docs/contracts.md): the memory plan of every distinct rank (train/plan/memory_plan.hpp: the memory record's kinds, as the
// run at WORLD ranks will allocate them), and with --json one more line, a JSON object for scripts (docs/performance.md
// "FLOPs and MFU"). Both read no training data (the ResNet reads its dataset's header for the image shape), use no MPI
// collective and allocate nothing.
#include <string>

#include "core/config.hpp"

namespace hpct::train {

struct PlanOutput {
  bool json = false;        // also print the `{"plan":{...}}` line after the table
  std::string device_name;  // the device for the peak lookup (core/device_peaks.hpp); empty: unknown
};

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

// The ResNet's: one row (data parallelism only). The JSON line:
// {"plan":{"app":"train_resnet","deck":..,"world":..,"dp":..,"zero":..,"depth":..,"style":..,"image":[C,H,W],
//  "num_classes":..,"micro_batch":..,"global_batch":..,"parameters":..,"flops_per_image_forward":..,
//  "flops_per_image_training":..,"training_flops_per_step":..,"memory_bytes":<peak>,"activation_bytes":..,
//  "memory":{..},"activation_dtype":..,"device":..,"precision":..,"device_name":..,"device_peaks":..,"peak_tflops":..,
//  "log_peak_tflops":..}}
int plan_resnet(const Config& deck, int world, const PlanOutput& out = {});

}  // namespace hpct::train
