// optim/loss_scaler: the deck value's parsing and the dynamic scaler's state machine (torch GradScaler semantics, apex's
// growth cap), as pure host logic. The trainers' use of it (skipped steps, checkpointed state, layouts, bitwise equality
// of a power-of-two scale in fp32) runs in tests/integration/check_loss_scale.py.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "optim/loss_scaler.hpp"

namespace hpct::optim {
namespace {

using Mode = LossScaleConfig::Mode;
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

LossScaleConfig parse(const std::string& v, Precision p = Precision::FP32, double init = 65536, int64_t window = 2000,
                      double min = 1) {
  return parse_loss_scale(v, p, init, window, min, "deck d.toml");
}

std::string usage_cause(const std::string& v, Precision p = Precision::FP32, double init = 65536, int64_t window = 2000,
                        double min = 1) {
  try {
    parse(v, p, init, window, min);
  } catch (const UsageError& e) {
    return e.cause();
  }
  return "";
}

TEST(ParseLossScale, AutoIsDynamicForFp16AndNoneOtherwise) {
  EXPECT_EQ(parse("auto", Precision::FP16).mode, Mode::Dynamic);
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16}) EXPECT_EQ(parse("auto", p).mode, Mode::None);
  EXPECT_EQ(parse("none").mode, Mode::None);
  const LossScaleConfig d = parse("dynamic", Precision::BF16, 1024, 50, 2);
  EXPECT_EQ(d.mode, Mode::Dynamic);
  EXPECT_EQ(d.init, 1024);
  EXPECT_EQ(d.growth_interval, 50);
  EXPECT_EQ(d.min_scale, 2);
  const LossScaleConfig f = parse("1024");
  EXPECT_EQ(f.mode, Mode::Fixed);
  EXPECT_EQ(f.init, 1024);
  EXPECT_EQ(parse("0.5").init, 0.5);
}

TEST(ParseLossScale, BadValuesNameTheKeyAndTheFix) {
  for (const char* bad : {"", "-4", "0", "inf", "nan", "12abc", "Dynamic", "1e999"}) {
    const std::string c = usage_cause(bad);
    EXPECT_NE(c.find("train.loss_scale = \"" + std::string(bad) + "\""), std::string::npos) << bad << ": " << c;
    EXPECT_NE(c.find("deck d.toml"), std::string::npos) << c;
  }
  EXPECT_NE(usage_cause("none", Precision::FP16).find("fp16"), std::string::npos);
  EXPECT_EQ(usage_cause("1024", Precision::FP16), "");  // a fixed scale is a legitimate fp16 choice
  EXPECT_NE(usage_cause("dynamic", Precision::FP32, 4, 2000, 8).find("train.loss_scale_min"), std::string::npos);
  EXPECT_NE(usage_cause("dynamic", Precision::FP32, 65536, 0).find("train.loss_scale_window"), std::string::npos);
  // the dynamic-only keys are not checked for other modes
  EXPECT_EQ(usage_cause("none", Precision::FP32, 4, 0, 8), "");
}

TEST(LossScaler, NoneIsScaleOneAndStopsOnANonFiniteNorm) {
  LossScaler s(parse("none"));
  EXPECT_FALSE(s.active());
  EXPECT_EQ(s.scale(), 1.0);
  const LossScaler::Outcome o = s.update(16.0, 1);
  EXPECT_FALSE(o.skip);
  EXPECT_EQ(o.norm, 4.0);
  EXPECT_EQ(LossScaler::grad_scale(0.75f, o), 0.75f);
  for (double bad : {kInf, kNaN}) {
    try {
      s.update(bad, 7);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.cause()).find("at step 7"), std::string::npos) << e.cause();
      EXPECT_NE(std::string(e.cause()).find("optim.lr"), std::string::npos) << e.cause();
    }
  }
}

TEST(LossScaler, FixedUnscalesExactlyAndStopsOnOverflow) {
  LossScaler s(parse("1024"));
  EXPECT_TRUE(s.active());
  // gradients 1024 x g: sumsq 1024^2 x 9 -> norm 3, grad_scale clip / 1024, exactly
  const LossScaler::Outcome o = s.update(1024.0 * 1024.0 * 9.0, 1);
  EXPECT_EQ(o.norm, 3.0);
  EXPECT_EQ(o.scale, 1024.0);
  EXPECT_EQ(o.next_scale, 1024.0);
  EXPECT_EQ(LossScaler::grad_scale(0.3f, o), 0.3f / 1024.0f);
  EXPECT_THROW(s.update(kInf, 2), UsageError);
  for (int i = 0; i < 5000; ++i) s.update(1.0, 3 + i);  // never grows
  EXPECT_EQ(s.scale(), 1024.0);
}

TEST(LossScaler, DynamicBacksOffSkipsAndGrowsAfterTheWindow) {
  LossScaler s(parse("dynamic", Precision::FP16, 65536, 3, 1));
  EXPECT_EQ(s.scale(), 65536.0);
  LossScaler::Outcome o = s.update(kInf, 1);
  EXPECT_TRUE(o.skip);
  EXPECT_EQ(o.scale, 65536.0);
  EXPECT_EQ(o.next_scale, 32768.0);
  o = s.update(kNaN, 2);
  EXPECT_TRUE(o.skip);
  EXPECT_EQ(s.scale(), 16384.0);
  // three finite steps: the third doubles
  for (int i = 0; i < 2; ++i) {
    o = s.update(1.0, 3 + i);
    EXPECT_FALSE(o.skip);
    EXPECT_EQ(o.next_scale, 16384.0);
    EXPECT_EQ(s.good_steps(), i + 1);
  }
  o = s.update(16384.0 * 16384.0 * 4.0, 5);
  EXPECT_FALSE(o.skip);
  EXPECT_EQ(o.norm, 2.0);  // unscaled with the scale of this step, not the grown one
  EXPECT_EQ(o.scale, 16384.0);
  EXPECT_EQ(o.next_scale, 32768.0);
  EXPECT_EQ(s.good_steps(), 0);
  // an overflow resets the count of finite steps
  s.update(1.0, 6);
  s.update(kInf, 7);
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScaler, DynamicGrowthStopsAtTwoToThe24) {
  LossScaler s(parse("dynamic", Precision::FP16, 1 << 22, 1, 1));
  for (int i = 0; i < 10; ++i) s.update(1.0, i + 1);
  EXPECT_EQ(s.scale(), 16777216.0);
  // an init above the cap is kept (no growth), and backs off normally
  LossScaler big(parse("dynamic", Precision::FP16, std::ldexp(1.0, 40), 1, 1));
  big.update(1.0, 1);
  EXPECT_EQ(big.scale(), std::ldexp(1.0, 40));
  big.update(kInf, 2);
  EXPECT_EQ(big.scale(), std::ldexp(1.0, 39));
}

TEST(LossScaler, DynamicStopsWhenNonFiniteAtTheMinimum) {
  LossScaler s(parse("dynamic", Precision::FP16, 4, 2000, 1));
  EXPECT_TRUE(s.update(kInf, 1).skip);  // 4 -> 2
  EXPECT_TRUE(s.update(kInf, 2).skip);  // 2 -> 1
  EXPECT_EQ(s.scale(), 1.0);
  try {
    s.update(kInf, 3);
    ADD_FAILURE() << "no error at the minimum scale";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.cause()).find("minimum loss scale 1"), std::string::npos) << e.cause();
    EXPECT_NE(std::string(e.cause()).find("step 3"), std::string::npos) << e.cause();
  }
  // a backoff below the minimum is clamped to it
  LossScaler c(parse("dynamic", Precision::FP16, 3, 2000, 2));
  c.update(kInf, 1);
  EXPECT_EQ(c.scale(), 2.0);
}

TEST(LossScaler, RestoreContinuesADynamicScaleOnly) {
  LossScaler s(parse("dynamic", Precision::FP16, 65536, 5, 1));
  s.restore(512.0, 3);
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.good_steps(), 3);
  s.update(1.0, 10);
  s.update(1.0, 11);  // the fifth finite step since the change
  EXPECT_EQ(s.scale(), 1024.0);
  // a window shortened since the checkpoint: the count wraps instead of exceeding it
  LossScaler w(parse("dynamic", Precision::FP16, 65536, 2, 1));
  w.restore(64.0, 7);
  EXPECT_EQ(w.good_steps(), 1);
  EXPECT_THROW(w.restore(0.5, 0), Error);  // below the minimum
  EXPECT_THROW(w.restore(kNaN, 0), Error);
  LossScaler f(parse("1024"));
  f.restore(8.0, 1);  // fixed: the deck's scale stays
  EXPECT_EQ(f.scale(), 1024.0);
}

}  // namespace
}  // namespace hpct::optim
