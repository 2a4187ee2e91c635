#include <gtest/gtest.h>

#include <cmath>

#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"

using namespace hpct;
using namespace hpct::optim;

TEST(LrSchedule, WarmupCosineFloor) {
  LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.1 + 0.5 * 0.9, 1e-12);  // halfway through the decay
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);
  for (int64_t t = 11; t < 110; ++t) EXPECT_LT(s.at(t + 1), s.at(t));
  LrSchedule no_warmup{2.0, 0.0, 0, 100};
  EXPECT_NEAR(no_warmup.at(1), 2.0 * 0.5 * (1 + std::cos(M_PI / 100)), 1e-12);
}

TEST(AdamW, MatchesDoubleReferenceWithDecayFlagsAndClipping) {
  Slab params("p", Device::CPU), grads("g", Device::CPU);
  auto& w = params.add("w", {2, 3});
  auto& b = params.add("b", {3});
  grads.add("w", {2, 3});
  grads.add("b", {3});
  params.allocate();
  grads.allocate();
  AdamWConfig cfg;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.95f;
  cfg.eps = 1e-8f;
  cfg.weight_decay = 0.1f;
  cfg.grad_clip = 1.0f;
  AdamW opt(params, grads, {true, false}, cfg);
  const ExecContext ctx;
  double p[9], m[9] = {0}, v[9] = {0};
  for (int i = 0; i < 9; ++i) p[i] = 0.1 * (i + 1) - 0.4;
  for (int i = 0; i < 6; ++i) w.f32()[i] = static_cast<float>(p[i]);
  for (int i = 0; i < 3; ++i) b.f32()[i] = static_cast<float>(p[6 + i]);
  for (int t = 1; t <= 3; ++t) {
    double g[9], sq = 0;
    for (int i = 0; i < 9; ++i) {
      g[i] = std::sin(1.3 * i + t);  // norm ~2: clipping is active
      sq += g[i] * g[i];
    }
    for (int i = 0; i < 6; ++i) grads.tensors()[0].f32()[i] = static_cast<float>(g[i]);
    for (int i = 0; i < 3; ++i) grads.tensors()[1].f32()[i] = static_cast<float>(g[6 + i]);
    const double norm = opt.grad_norm(ctx);
    EXPECT_NEAR(norm, std::sqrt(sq), 1e-6);
    const float scale = opt.clip_scale(norm);
    EXPECT_NEAR(scale, 1.0 / (std::sqrt(sq) + 1e-6), 1e-6);
    const double lr = 0.01 * t;
    opt.step(ctx, static_cast<float>(lr), scale);
    for (int i = 0; i < 9; ++i) {
      const double gi = g[i] * scale, wd = i < 6 ? 0.1 : 0.0;
      p[i] -= lr * wd * p[i];
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.95 * v[i] + 0.05 * gi * gi;
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.95, t));
      p[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  EXPECT_EQ(opt.step_count(), 3);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(w.f32()[i], p[i], 1e-6) << i;
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(b.f32()[i], p[6 + i], 1e-6) << i;
}

TEST(AdamW, NoClipBelowThresholdOrWhenOff) {
  Slab params("p", Device::CPU), grads("g", Device::CPU);
  params.add("w", {1});
  grads.add("w", {1});
  params.allocate();
  grads.allocate();
  AdamWConfig cfg;
  cfg.grad_clip = 1.0f;
  AdamW a(params, grads, {true}, cfg);
  EXPECT_EQ(a.clip_scale(0.5), 1.0f);
  cfg.grad_clip = 0.0f;
  AdamW off(params, grads, {true}, cfg);
  EXPECT_EQ(off.clip_scale(100.0), 1.0f);
}
