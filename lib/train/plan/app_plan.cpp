#include "train/plan/app_plan.hpp"

#include <algorithm>
#include <cstdio>

#include "core/device_peaks.hpp"
#include "core/format.hpp"
#include "data/image_dataset.hpp"
#include "models/gpt/gpt.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "models/gpt/gpt_stage.hpp"
#include "models/resnet/resnet.hpp"
#include "parallel/grid.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"
#include "train/plan/memory_plan.hpp"
#include "train/tasks/resnet/resnet_deck.hpp"
#include "train/loop/run_device.hpp"
#include "train/loop/run_config.hpp"
#include "train/loop/run_environment.hpp"

namespace hpct::train {

int plan_gpt(const Config& deck, int world, const PlanOutput& out) {
  const gpt::GptConfig cfg = gpt_model_config(deck);
  const RunConfig run = read_run_config(deck);
  const PlanTarget target = plan_target(run);
  const MemoryPlanTable plan = plan_gpt_memory(cfg, run, world, target);  // validates the grid, split and batch
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
          {run.train.recompute, gpt::GptStage::kept_sets(schedule, gpt::chunk_plans(cfg, plan.pp, p, v))});
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
