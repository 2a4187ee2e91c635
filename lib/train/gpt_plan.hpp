#pragma once
// `train_gpt DECK --plan WORLD [--json] [--device-name NAME]` (docs/contracts.md): the memory plan of every distinct
// rank, and with --json one more line, a JSON object for scripts (docs/performance.md "FLOPs and MFU").
#include <string>

#include "core/config.hpp"

namespace hpct::train {

struct PlanOutput {
  bool json = false;        // also print the `{"plan":{...}}` line after the table
  std::string device_name;  // the device for the peak lookup (core/device_peaks.hpp); empty: unknown
};

// Validates the model and the layout (parallel.tp, parallel.pp, order) for a world of WORLD ranks and prints every
// distinct rank's memory plan (parameters, gradients, optimizer, activations) without data, MPI collectives or
// allocation; returns the exit code. The JSON line:
// {"plan":{"app":"train_gpt","deck":..,"world":..,"tp":..,"pp":..,"dp":..,"micro_batch":..,"global_batch":..,
//  "seq_len":..,"parameters":<all, padding rows included>,"parameters_for_flops":<N of 6N + 12 L C T>,
//  "flops_per_token":..,"tokens_per_step":..,"training_flops_per_step":..,"memory_bytes_max_rank":..,
//  "activation_bytes_max_rank":.. (activations and their gradients, one micro-batch),
//  "activation_dtype":"f32"|"bf16"|"f16",
//  "device":<train.device>,"precision":<train.precision>,"device_name":..|null,"device_peaks":{..}|null,
//  "peak_tflops":..|null,"log_peak_tflops":..}}
int plan_gpt(const Config& deck, int world, const PlanOutput& out = {});

}  // namespace hpct::train
