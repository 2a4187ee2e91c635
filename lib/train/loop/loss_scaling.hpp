#pragma once
// Loss scaling in a training step (both apps alike): the deck keys, the scaler's configuration, its log line,
// checkpoint attributes and metrics, the optimizer step under the scaler, and the loss gradient times the scale.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "core/config.hpp"
#include "kernels/exec_context.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/optimizer.hpp"

namespace hpct::train {

struct RunConfig;  // train/loop/run_config.hpp

// The [train] keys of mixed precision (both apps): train.precision, train.loss_scale, train.loss_scale_init,
// train.loss_scale_window, train.loss_scale_min. Add them inside the [train] section.
void add_precision_keys(ConfigSchema& s);
// The loss scaling those keys describe, for the run's effective precision (RunDevice::exec().precision).
optim::LossScaleConfig loss_scale_config(const RunConfig& cfg, Precision precision);

// The loss scaler in a trainer's step (both apps alike):
//   log_precision          one log line: the precision of the products, and the loss scaling when active
//   add_loss_scaler_attrs  checkpoint attributes: precision, loss_scale.mode, loss_scale.scale, loss_scale.good_steps
//   restore_loss_scaler    a resumed run continues the checkpoint's dynamic scale (absent attributes: the deck's init)
//   scaled_optimizer_step  the step's update under the scaler (below)
//   add_loss_scale_metrics metrics.jsonl fields loss_scale (S of the step) and skipped (1) when scaling is active
//   loss_scale_suffix      " | scale S" (and " | SKIPPED") for the step line, "" without scaling
void log_precision(const ExecContext& ctx, const optim::LossScaler& scaler);
void add_loss_scaler_attrs(ckpt::Attrs& a, const ExecContext& ctx, const optim::LossScaler& scaler);
void restore_loss_scaler(optim::LossScaler& scaler, const ckpt::Attrs& a);
void log_skipped_step(int64_t step, const optim::LossScaler::Outcome& o);  // (scaled_optimizer_step's line)
void add_loss_scale_metrics(std::vector<std::pair<std::string, std::optional<double>>>& rec,
                            const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o);
std::string loss_scale_suffix(const optim::LossScaler& scaler, const optim::LossScaler::Outcome& o);
// One optimizer step (AdamW, Sgd: clip_scale and step) under the loss scaler. sumsq: the global sum of squares of the
// scaled gradients, the same on every rank, so all ranks decide alike. A finite step updates with grad_scale = clip / S
// (clip from the unscaled norm); a skipped one updates nothing and logs one line. Returns the scaler's outcome (norm:
// the unscaled gradient norm).
optim::LossScaler::Outcome scaled_optimizer_step(const ExecContext& ctx, optim::Optimizer& opt,
                                                 optim::LossScaler& scaler, double sumsq, int64_t step, double lr);
// The loss gradient times the loss scale S: dloss x S (exact for power-of-two S).
float scaled_loss_gradient(float dloss, const optim::LossScaler& scaler);

// Test seam (tests/integration/check_loss_scale.py), read once at start-up: HPCT_TEST_INF_DLOSS_STEPS="3,4" makes the
// ranks of DP rank 0 use an infinite loss gradient on those steps, a deterministic stand-in for an fp16 overflow (fp32
// on the CPU cannot overflow at any representable scale); the other DP ranks see it only through the gradient
// reduction, as with a real overflow. Unset (every real run): inert. A malformed value is a UsageError.
class InjectedOverflow {
 public:
  static InjectedOverflow from_environment();
  // dloss, or +inf when this step overflows on this DP rank
  float apply(float dloss, int64_t step, int dp_rank) const;

 private:
  std::vector<int64_t> steps_;
};

}  // namespace hpct::train
