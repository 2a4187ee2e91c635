#pragma once
// The ResNet's memory plan (train/plan/memory_plan.hpp: the memory record's kinds of every rank at a world size) and
// its `train_resnet DECK --plan WORLD [--json] [--device-name NAME]` command (docs/contracts.md): it reads the dataset's
// header for the image shape, no image, uses no MPI collective and allocates nothing.
#include "core/config.hpp"
#include "models/resnet/resnet.hpp"
#include "train/loop/memory_record.hpp"
#include "train/loop/run_config.hpp"
#include "train/plan/memory_plan.hpp"

namespace hpct::train {

// The ResNet's (data parallelism only). sync_bn: model.sync_bn; optimizer_buffers: SGD's state buffers (1 with
// momentum, else 0).
MemoryPlanTable plan_resnet_memory(const resnet::ResNetConfig& cfg, const RunConfig& run, int world, bool sync_bn,
                                   int optimizer_buffers, const PlanTarget& target);

// The ResNet: BatchNorm's running statistics count as params, the convolution workspace and the backend's device-wide
// buffers (device_workspace_bytes: kernels::device_workspace_bytes) as workspace; batch_bytes: the stage's batch
// buffers.
MemoryKinds resnet_model_kinds(const resnet::MemoryPlan& m, size_t batch_bytes, size_t device_workspace_bytes);

// The ResNet's: one row (data parallelism only). The JSON line:
// {"plan":{"app":"train_resnet","deck":..,"world":..,"dp":..,"zero":..,"depth":..,"style":..,"image":[C,H,W],
//  "num_classes":..,"micro_batch":..,"global_batch":..,"parameters":..,"flops_per_image_forward":..,
//  "flops_per_image_training":..,"training_flops_per_step":..,"memory_bytes":<peak>,"activation_bytes":..,
//  "memory":{..},"activation_dtype":..,"device":..,"precision":..,"device_name":..,"device_peaks":..,"peak_tflops":..,
//  "log_peak_tflops":..}}
int plan_resnet(const Config& deck, int world, const PlanOutput& out = {});

}  // namespace hpct::train
