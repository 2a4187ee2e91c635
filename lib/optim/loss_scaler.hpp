#pragma once
// Loss scaling (deck keys train.loss_scale*, docs/cuda.md, "Precision and loss scaling"): the loss gradient is
// multiplied by a scale S before backward, so that small activation gradients survive the fp16 rounding of the
// tensor-core products (exec_context.hpp); the optimizer receives grad_scale = clip / S, so the update is that of the
// unscaled gradients. Pure host logic, the same on every rank: it sees only the global sum of squares of the (scaled)
// gradients, which every rank of every layout holds identically after the gradient-norm reductions
// (docs/parallelism.md), so all ranks skip alike.
//
// Modes (torch.cuda.amp.GradScaler semantics for dynamic; apex's cap on growth):
//   none     S = 1; a non-finite gradient norm stops the run (training diverged).
//   fixed    S = the given value; a non-finite gradient norm stops the run (lower the scale, or use dynamic).
//   dynamic  S starts at init. A step whose gradient norm is non-finite (an inf/NaN anywhere, e.g. an fp16 overflow)
//            is skipped (no parameter or optimizer-state update, the optimizer's step count unchanged) and S *= backoff;
//            after growth_interval consecutive finite steps S *= growth (at most max_scale). A non-finite step at
//            min_scale stops the run: the gradients are not finite at any usable scale (divergence or a bug, not an
//            overflow).
// With a power-of-two S and no overflow, scaling is exact in fp32: the gradients are S times the unscaled ones bit for
// bit (every op of backward is linear in its incoming gradient), the reported norm sqrt(sumsq) / S and the update are
// bitwise those of an unscaled run (tests/integration/check_loss_scale.py checks it on the CPU).
//
// State (checkpointed: index.h5 attributes loss_scale.scale and loss_scale.good_steps): S and the finite steps since
// the last change.
#include <cstdint>
#include <string>

#include "kernels/exec_context.hpp"

namespace hpct::optim {

struct LossScaleConfig {
  enum class Mode { None, Fixed, Dynamic };
  Mode mode = Mode::None;
  double init = 65536.0;  // dynamic: the first S; fixed: S
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 2000;  // finite steps between growths
  double min_scale = 1.0;
  double max_scale = 16777216.0;  // 2^24 (apex amp's max_loss_scale): growth stops there
};

// The deck's train.loss_scale value: "auto" (dynamic for fp16, none otherwise), "none", "dynamic", or a positive number
// (fixed). init, interval and min come from train.loss_scale_init / _window / _min. Anything else (a non-positive or
// non-finite number, min > init for dynamic) is a UsageError naming the key, the value and what to use; where names the
// deck.
LossScaleConfig parse_loss_scale(const std::string& value, Precision precision, double init, int64_t interval,
                                 double min_scale, const std::string& where);
const char* loss_scale_mode_name(LossScaleConfig::Mode m);  // "none" | "fixed" | "dynamic"

class LossScaler {
 public:
  explicit LossScaler(const LossScaleConfig& cfg);

  bool active() const { return cfg_.mode != LossScaleConfig::Mode::None; }
  const LossScaleConfig& config() const { return cfg_; }
  double scale() const { return scale_; }  // S of the coming step
  int64_t good_steps() const { return good_; }
  // Restores a checkpoint's state (dynamic mode only; the other modes keep their configured S). scale must be finite
  // and in [min_scale, max(max_scale, init)]: a checkpoint outside that is an Error naming the value.
  void restore(double scale, int64_t good_steps);

  struct Outcome {
    bool skip = false;   // true: do not step the optimizer this step
    double norm = 0.0;   // the unscaled gradient norm sqrt(sumsq) / S (inf or NaN when skip)
    double scale = 1.0;  // S of this step
    double next_scale = 1.0;
  };
  // After backward and the gradient reductions: sumsq is the global sum of squares of the scaled gradients. Updates the
  // state and says whether to step. Throws hpct::UsageError (exit 2) naming the step, the norm and what to change when
  // the run cannot go on (see the modes above).
  Outcome update(double sumsq, int64_t step);

  // The optimizer's grad_scale for a step of this outcome: clip / S (exact for power-of-two S).
  static float grad_scale(float clip, const Outcome& o) {
    return static_cast<float>(static_cast<double>(clip) / o.scale);
  }

 private:
  LossScaleConfig cfg_;
  double scale_ = 1.0;
  int64_t good_ = 0;
};

}  // namespace hpct::optim
