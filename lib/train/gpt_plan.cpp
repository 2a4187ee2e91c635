#include "train/gpt_plan.hpp"

#include <algorithm>
#include <cstdio>

#include "core/device_peaks.hpp"
#include "core/format.hpp"
#include "models/gpt/gpt.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "parallel/grid.hpp"
#include "train/gpt_deck.hpp"
#include "train/run_device.hpp"

namespace hpct::train {

int plan_gpt(const Config& deck, int world, const PlanOutput& out) {
  const gpt::GptConfig cfg = gpt_model_config(deck);
  const RunConfig run = read_run_config(deck);
  const int tp = run.parallel.tp, pp = run.parallel.pp;
  const std::string where = fmt::format("deck {}", deck.deck_path());
  const parallel::Grid grid(world, tp, pp, run.parallel.order, where);
  gpt::validate_model_parallel(cfg, tp, pp, where);
  const int MB = run.train.micro_batch;
  const int zero = run.parallel.sync.zero;
  const int dp = grid.dp();
  // the backend's buffer sizes (attention: T x T probabilities on the CPU, a log-sum-exp per row on CUDA); "auto"
  // is planned as the CPU, where it falls back without a GPU, except under fp16, whose storage exists on CUDA only
  // (train.device = cpu with fp16 is the trainers' UsageError, raised here too)
  const bool fp16 = run.train.precision == Precision::FP16;
  if (fp16) decide_precision(run.train.device, Device::CPU, run.train.precision, deck.deck_path(), nullptr);
  const Device plan_device = run.train.device == "cuda" || fp16 ? Device::CUDA : Device::CPU;
  // activations at their stored size: bf16 under train.precision = bf16 on either backend, f16 under fp16 (CUDA)
  const DType act = activation_dtype(run.train.precision);
  const gpt::MemoryPlan serial = gpt::memory_plan(cfg, MB, plan_device, act);
  std::printf("plan: %s | %s | micro_batch %d | ZeRO-%d | device %s | model %lld parameters (padded vocabulary %d)\n",
              deck.deck_path().c_str(), grid.describe().c_str(), MB, zero, device_name(plan_device),
              static_cast<long long>(serial.num_params), cfg.padded_vocab);
  std::printf("%8s %8s %8s | %12s %12s %12s %12s %12s\n", "pp_rank", "tp_rank", "layers", "params", "grads",
              "optimizer", "activations", "total");
  size_t max_rank_bytes = 0, max_rank_activation_bytes = 0;
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) {
      const gpt::ModelParallel mp{tp, t, pp, p};
      gpt::MemoryPlan m = gpt::memory_plan(cfg, mp, MB, plan_device, act);
      if (zero) m.optim_bytes = (m.optim_bytes + dp - 1) / dp;  // sharded over DP (to within a bucket's rounding)
      max_rank_bytes = std::max(max_rank_bytes, m.total());
      max_rank_activation_bytes = std::max(max_rank_activation_bytes, m.activation_bytes + m.activation_grad_bytes);
      const gpt::StagePlan st = gpt::stage_plan(cfg, pp, p);
      std::printf("%8d %8d %3d..%-4d | %12s %12s %12s %12s %12s\n", p, t, st.first_layer, st.end_layer - 1,
                  human_bytes(m.param_bytes).c_str(), human_bytes(m.grad_bytes).c_str(),
                  human_bytes(m.optim_bytes).c_str(), human_bytes(m.activation_bytes + m.activation_grad_bytes).c_str(),
                  human_bytes(m.total()).c_str());
    }
  std::printf("(activations: one micro-batch, stored as %s; a pipeline stage also keeps its inputs of the step's "
              "micro-batches)\n",
              dtype_name(act));
  if (out.json) {
    // FLOPs as the trainer counts them (docs/performance.md): flops_per_token x global_batch x seq_len per step
    const int64_t GB = run.train.global_batch;
    const double fpt = gpt::flops_per_token(cfg);
    const double tokens = static_cast<double>(GB) * cfg.seq_len;
    const std::string precision = precision_name(run.train.precision);
    const std::string line = fmt::format(
        R"({{"plan":{{"app":"train_gpt","deck":{},"world":{},"tp":{},"pp":{},"dp":{},"micro_batch":{},)"
        R"("global_batch":{},"seq_len":{},"parameters":{},"parameters_for_flops":{},"flops_per_token":{},)"
        R"("tokens_per_step":{},"training_flops_per_step":{},"memory_bytes_max_rank":{},)"
        R"("activation_bytes_max_rank":{},"activation_dtype":{},"device":{},"precision":{},)"
        R"({},"log_peak_tflops":{}}}}})",
        json_quote(deck.deck_path()), world, tp, pp, dp, MB, GB, cfg.seq_len, serial.num_params,
        serial.num_params_no_wpe, fpt, tokens, fpt * tokens, max_rank_bytes, max_rank_activation_bytes,
        json_quote(dtype_name(act)), json_quote(run.train.device), json_quote(precision),
        peak_json_members(out.device_name, precision), run.log.peak_tflops);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace hpct::train
