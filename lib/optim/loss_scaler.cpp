#include "optim/loss_scaler.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.hpp"

namespace hpct::optim {

const char* loss_scale_mode_name(LossScaleConfig::Mode m) {
  switch (m) {
    case LossScaleConfig::Mode::None: return "none";
    case LossScaleConfig::Mode::Fixed: return "fixed";
    case LossScaleConfig::Mode::Dynamic: return "dynamic";
  }
  return "?";
}

LossScaleConfig parse_loss_scale(const std::string& value, Precision precision, double init, int64_t interval,
                                 double min_scale, const std::string& where) {
  LossScaleConfig c;
  c.init = init;
  c.growth_interval = interval;
  c.min_scale = min_scale;
  if (value == "auto") {
    c.mode = precision == Precision::FP16 ? LossScaleConfig::Mode::Dynamic : LossScaleConfig::Mode::None;
  } else if (value == "none") {
    c.mode = LossScaleConfig::Mode::None;
  } else if (value == "dynamic") {
    c.mode = LossScaleConfig::Mode::Dynamic;
  } else {
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    HPCT_USAGE_CHECK(!value.empty() && end && *end == '\0' && errno == 0 && std::isfinite(v) && v > 0,
                     "{}: train.loss_scale = \"{}\" is neither auto, none, dynamic nor a positive number; use e.g. "
                     "\"dynamic\" (fp16), \"none\", or a fixed power of two such as \"1024\"",
                     where, value);
    c.mode = LossScaleConfig::Mode::Fixed;
    c.init = v;
  }
  if (c.mode == LossScaleConfig::Mode::Dynamic) {
    HPCT_USAGE_CHECK(std::isfinite(init) && init > 0, "{}: train.loss_scale_init = {} must be a positive number", where,
                     init);
    HPCT_USAGE_CHECK(std::isfinite(min_scale) && min_scale > 0 && min_scale <= init,
                     "{}: train.loss_scale_min = {} must be positive and at most train.loss_scale_init = {}", where,
                     min_scale, init);
    HPCT_USAGE_CHECK(interval >= 1, "{}: train.loss_scale_window = {} must be at least 1", where, interval);
  }
  if (precision == Precision::FP16 && c.mode == LossScaleConfig::Mode::None)
    HPCT_USAGE_FAIL("{}: train.precision = fp16 with train.loss_scale = none: fp16 products flush gradients below 6e-8 "
                    "to zero and overflow above 65504; use train.loss_scale = dynamic (or auto), or a fixed scale",
                    where);
  return c;
}

LossScaler::LossScaler(const LossScaleConfig& cfg) : cfg_(cfg) {
  scale_ = cfg_.mode == LossScaleConfig::Mode::None ? 1.0 : cfg_.init;
}

void LossScaler::restore(double scale, int64_t good_steps) {
  if (cfg_.mode != LossScaleConfig::Mode::Dynamic) return;
  const double hi = std::max(cfg_.max_scale, cfg_.init);
  HPCT_CHECK(std::isfinite(scale) && scale >= cfg_.min_scale && scale <= hi && good_steps >= 0,
             "loss scaler: the checkpoint's loss_scale.scale = {} / good_steps = {} is outside [{}, {}] / >= 0", scale,
             good_steps, cfg_.min_scale, hi);
  scale_ = scale;
  good_ = good_steps % cfg_.growth_interval;
}

LossScaler::Outcome LossScaler::update(double sumsq, int64_t step) {
  Outcome o;
  o.scale = scale_;
  const bool finite = std::isfinite(sumsq);
  switch (cfg_.mode) {
    case LossScaleConfig::Mode::None:
      HPCT_USAGE_CHECK(finite,
                       "gradient norm is {} at step {}: training diverged (or the data holds a bad value); lower "
                       "optim.lr, or resume from an earlier checkpoint",
                       std::sqrt(sumsq), step);
      break;
    case LossScaleConfig::Mode::Fixed:
      HPCT_USAGE_CHECK(
          finite,
          "gradient norm is {} at step {} with the fixed loss scale {}: the scaled gradients overflowed or "
          "training diverged; lower train.loss_scale, use train.loss_scale = dynamic, or lower optim.lr",
          std::sqrt(sumsq), step, scale_);
      break;
    case LossScaleConfig::Mode::Dynamic:
      if (!finite) {
        HPCT_USAGE_CHECK(scale_ > cfg_.min_scale,
                         "gradient norm is {} at step {} at the minimum loss scale {} (train.loss_scale_min): the "
                         "gradients are not finite at any usable scale, training diverged; lower optim.lr, or resume "
                         "from an earlier checkpoint",
                         std::sqrt(sumsq), step, scale_);
        scale_ = std::max(scale_ * cfg_.backoff, cfg_.min_scale);
        good_ = 0;
        o.skip = true;
      } else if (++good_ >= cfg_.growth_interval) {
        if (scale_ < cfg_.max_scale) scale_ = std::min(scale_ * cfg_.growth, cfg_.max_scale);
        good_ = 0;
      }
      break;
  }
  o.next_scale = scale_;
  o.norm = std::sqrt(sumsq) / o.scale;
  return o;
}

}  // namespace hpct::optim
