#include "train/loop/loss_scaling.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "train/loop/run_config.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "kernels/kernels.hpp"

namespace hpct::train {

void add_precision_keys(ConfigSchema& s) {
  s.string_key("train.precision", "fp32",
               "fp32 | bf16 (both backends: bf16 activations, activation gradients, logits and GEMM inputs with fp32 "
               "accumulation; fp32 master weights, optimizer state and gradient accumulation) | tf32 (CUDA only: "
               "tf32 tensor-core products on fp32 storage) | fp16 (CUDA only: bf16's scheme in fp16, with dynamic "
               "loss scaling by default); docs/precision.md",
               {"fp32", "tf32", "bf16", "fp16"});
  s.string_key("train.loss_scale", "auto",
               "loss scaling: auto (dynamic for fp16, none otherwise) | none | dynamic | a fixed positive number");
  s.float_key("train.loss_scale_init", 65536.0, "dynamic loss scaling: the initial scale", 1e-30, 3.4e38);
  s.int_key("train.loss_scale_window", 2000,
            "dynamic loss scaling: double the scale after this many consecutive finite steps (at most 2^24)", 1, 1e12);
  s.float_key("train.loss_scale_min", 1.0,
              "dynamic loss scaling: a non-finite step at this scale stops the run (divergence, not overflow)", 1e-30,
              1e38);
}

optim::LossScaleConfig loss_scale_config(const RunConfig& cfg, Precision precision) {
  const TrainSection& t = cfg.train;
  return optim::parse_loss_scale(t.loss_scale, precision, t.loss_scale_init, t.loss_scale_window, t.loss_scale_min,
                                 fmt::format("deck {}", cfg.deck_path));
}

void log_precision(const ExecContext& ctx, const optim::LossScaler& scaler) {
  if (ctx.precision == Precision::FP32 && !scaler.active()) return;
  const optim::LossScaleConfig& c = scaler.config();
  std::string scaling = "none";
  if (c.mode == optim::LossScaleConfig::Mode::Fixed) scaling = fmt::format("fixed {}", c.init);
  if (c.mode == optim::LossScaleConfig::Mode::Dynamic)
    scaling = fmt::format("dynamic (init {}, x{} after {} finite steps up to {}, x{} on a non-finite step, min {})",
                          c.init, c.growth, c.growth_interval, c.max_scale, c.backoff, c.min_scale);
  if (ctx.precision == Precision::BF16 || ctx.precision == Precision::FP16) {
    // 16-bit storage (docs/precision.md). The CPU line says whether the CPU multiplies bf16 natively or widens to fp32
    // (no bf16 instructions); fp16 exists on CUDA only. The loss scale multiplies the loss gradient, so under fp16 the
    // stored activation gradients are scaled (what keeps small ones above fp16's subnormals); the optimizer unscales.
    const char* t = ctx.precision == Precision::BF16 ? "bf16" : "fp16";
    log_info("precision: {} activations, activation gradients, logits and GEMM inputs with fp32 accumulation; fp32 "
             "master weights (a {} compute copy cast once per step), gradients, optimizer state, statistics and "
             "losses{}{}",
             t, t, scaler.active() || ctx.precision == Precision::FP16 ? " | loss scaling " + scaling : std::string(),
             ctx.device == Device::CPU ? " | CPU: " + kernels::cpu_bf16_arithmetic() : std::string());
    return;
  }
  log_info("precision: {} products, fp32 storage, master weights and accumulation | loss scaling {}",
           precision_name(ctx.precision), scaling);
}

void add_loss_scaler_attrs(ckpt::Attrs& a, const ExecContext& ctx, const optim::LossScaler& scaler) {
  a.strings["precision"] = precision_name(ctx.precision);
  a.strings["loss_scale.mode"] = optim::loss_scale_mode_name(scaler.config().mode);
  a.floats["loss_scale.scale"] = scaler.scale();
  a.ints["loss_scale.good_steps"] = scaler.good_steps();
}

void restore_loss_scaler(optim::LossScaler& scaler, const ckpt::Attrs& a) {
  const auto s = a.floats.find("loss_scale.scale");
  const auto g = a.ints.find("loss_scale.good_steps");
  const auto m = a.strings.find("loss_scale.mode");
  // only a dynamic scale carries over, and only from a run that was scaling dynamically too
  if (s == a.floats.end() || g == a.ints.end() || m == a.strings.end() || m->second != "dynamic") return;
  scaler.restore(s->second, g->second);
  if (scaler.config().mode == optim::LossScaleConfig::Mode::Dynamic)
    log_info("loss scale resumed at {} ({} finite steps since its last change)", scaler.scale(), scaler.good_steps());
}

void log_skipped_step(int64_t step, const optim::LossScaler::Outcome& o) {
  log_info(
      "step {}: non-finite gradients (gradient norm {}) at loss scale {}: optimizer step skipped, loss scale -> {}",
      step, std::isnan(o.norm) ? std::string("NaN") : fmt::format("{}", o.norm), o.scale, o.next_scale);
}

void add_loss_scale_metrics(std::vector<std::pair<std::string, std::optional<double>>>& rec,
                            const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o) {
  if (!scaler.active()) return;
  rec.push_back({"loss_scale", o.scale});
  if (o.skip) rec.push_back({"skipped", 1.0});
}

float scaled_loss_gradient(float dloss, const optim::LossScaler& scaler) {
  return static_cast<float>(static_cast<double>(dloss) * scaler.scale());
}

InjectedOverflow InjectedOverflow::from_environment() {
  InjectedOverflow o;
  const char* e = std::getenv("HPCT_TEST_INF_DLOSS_STEPS");
  if (!e) return o;
  std::string item;
  for (const char* c = e;; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!item.empty()) {
        char* end = nullptr;
        const long long step = std::strtoll(item.c_str(), &end, 10);
        HPCT_USAGE_CHECK(end && *end == '\0',
                         "HPCT_TEST_INF_DLOSS_STEPS=\"{}\": \"{}\" is not a step number; give "
                         "comma-separated steps, e.g. 2,3,7 (a test hook: unset it for real runs)",
                         e, item);
        o.steps_.push_back(step);
      }
      item.clear();
      if (*c == '\0') break;
    } else {
      item += *c;
    }
  }
  return o;
}

float InjectedOverflow::apply(float dloss, int64_t step, int dp_rank) const {
  if (dp_rank == 0 && std::find(steps_.begin(), steps_.end(), step) != steps_.end())
    return std::numeric_limits<float>::infinity();
  return dloss;
}

std::string loss_scale_suffix(const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o) {
  if (!scaler.active()) return "";
  return fmt::format(" | scale {}{}", o.scale, o.skip ? " | SKIPPED" : "");
}

optim::LossScaler::Outcome scaled_optimizer_step(const ExecContext& ctx, optim::Optimizer& opt,
                                                 optim::LossScaler& scaler, double sumsq, int64_t step, double lr) {
  const optim::LossScaler::Outcome o = scaler.update(sumsq, step);
  if (o.skip) log_skipped_step(step, o);
  else
    opt.step(ctx, static_cast<float>(lr), optim::LossScaler::grad_scale(opt.clip_scale(o.norm), o));
  return o;
}

}  // namespace hpct::train
