#include "train/tasks/resnet/resnet_plan.hpp"

#include <cstdio>

#include "core/device_peaks.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "data/image_dataset.hpp"
#include "kernels/kernels.hpp"
#include "models/resnet/resnet_stage.hpp"
#include "train/loop/run_environment.hpp"
#include "train/tasks/resnet/resnet_deck.hpp"

namespace hpct::train {

MemoryKinds resnet_model_kinds(const resnet::MemoryPlan& m, size_t batch_bytes, size_t device_workspace_bytes) {
  MemoryKinds k;
  k.params = static_cast<double>(m.param_bytes + m.compute_param_bytes + m.buffer_bytes);
  k.grads = static_cast<double>(m.grad_bytes);
  k.activations = static_cast<double>(m.activation_bytes + m.activation_grad_bytes + batch_bytes);
  k.workspace = static_cast<double>(m.workspace_bytes + device_workspace_bytes);
  return k;
}

MemoryPlanTable plan_resnet_memory(const resnet::ResNetConfig& cfg, const RunConfig& run, int world, bool sync_bn,
                                   int optimizer_buffers, const PlanTarget& target) {
  check_resnet_layout(run);
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
  plan.split_advice = "train_resnet is data-parallel only: choose a smaller model (model.depth, model.base_width)";
  return plan;
}

int plan_resnet(const Config& deck, int world, const PlanOutput& out) {
  const RunConfig run = read_run_config(deck);
  const PlanTarget target = plan_target(run);
  // the image shape and classes from the dataset's header (no image is read)
  const auto ds = data::ImageDataset::open_header(resolve_data_path(deck.get_string("data.train")));
  const resnet::ResNetConfig cfg = resnet_model_config(deck, ds.channels(), ds.height(), ds.width(), ds.num_classes());
  const int momentum_buffers = deck.get_float("optim.momentum") > 0.0 ? 1 : 0;
  const MemoryPlanTable plan = plan_resnet_memory(cfg, run, world, deck.get_bool("model.sync_bn"), momentum_buffers,
                                                  target);
  const int MB = run.train.micro_batch;
  const resnet::MemoryPlan m = resnet::memory_plan(cfg, MB, target.act);
  std::printf("plan: %s | ResNet-%d (%s) on %dx%dx%d, %d classes | %lld parameters | %.3f GFLOP/image forward\n",
              deck.deck_path().c_str(), cfg.depth, cfg.style.c_str(), cfg.in_channels, cfg.height, cfg.width,
              cfg.num_classes, static_cast<long long>(m.num_params), resnet::forward_flops_per_image(cfg) / 1e9);
  std::printf("world %d = dp %d | micro_batch %d | ZeRO-%d | device %s%s\n", world, plan.dp, MB, run.parallel.sync.zero,
              device_name(target.device),
              target.device == Device::CUDA ? " (convolution workspace: cuDNN's budget from the layers' shapes, "
                                              "kernels.hpp)"
                                            : "");
  print_memory_plan(plan);
  std::printf("(activations: one micro-batch stored as %s, with the batch buffers)\n", dtype_name(target.act));
  if (out.json) {
    // FLOPs as the trainer counts them (docs/performance.md): 3 x forward per image, x global_batch per step
    const int64_t gb = run.train.global_batch;
    const double train_fpi = resnet::training_flops_per_image(cfg);
    const std::string precision = precision_name(run.train.precision);
    const std::string line = fmt::format(
        R"({{"plan":{{"app":"train_resnet","deck":{},"world":{},"dp":{},"zero":{},"depth":{},"style":{},)"
        R"("image":[{},{},{}],"num_classes":{},"micro_batch":{},"global_batch":{},"parameters":{},)"
        R"("flops_per_image_forward":{},"flops_per_image_training":{},"training_flops_per_step":{},)"
        R"("memory_bytes":{:.0f},"activation_bytes":{},{},"activation_dtype":{},"device":{},)"
        R"("precision":{},{},"log_peak_tflops":{}}}}})",
        json_quote(deck.deck_path()), world, plan.dp, run.parallel.sync.zero, cfg.depth, json_quote(cfg.style),
        cfg.in_channels, cfg.height, cfg.width, cfg.num_classes, MB, gb, m.num_params,
        resnet::forward_flops_per_image(cfg), train_fpi, train_fpi * static_cast<double>(gb), plan.record().peak,
        m.activation_bytes + m.activation_grad_bytes, memory_plan_json(plan), json_quote(dtype_name(target.act)),
        json_quote(run.train.device), json_quote(precision), peak_json_members(out.device_name, precision),
        run.log.peak_tflops);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace hpct::train
