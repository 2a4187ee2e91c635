#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.hpp"

#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/sgd.hpp"

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

// keep_compute_copy: with every tensor whole, each step also leaves the bf16 copy equal to the masters cast (the bits
// kernels::cast gives), and the masters equal those of an optimizer that keeps no copy; a share of a tensor (ZeRO),
// a copy of another layout, or an f32 copy are refused and the copy is left alone.
TEST(AdamW, KeepsTheComputeCopyWhereItUpdatesEveryElement) {
  auto make = [](Slab& params, Slab& grads, Slab& copy) {
    params.add("w", {2, 3});
    params.add("b", {3});
    grads.add("w", {2, 3});
    grads.add("b", {3});
    copy.add("w", {2, 3}, DType::BF16);
    copy.add("b", {3}, DType::BF16);
    params.allocate();
    grads.allocate();
    copy.allocate();
    for (int i = 0; i < 6; ++i) params.tensors()[0].f32()[i] = 0.1f * static_cast<float>(i) - 0.3f;
    for (int i = 0; i < 3; ++i) params.tensors()[1].f32()[i] = 0.2f * static_cast<float>(i) + 0.05f;
  };
  Slab params("p", Device::CPU), grads("g", Device::CPU), copy("c", Device::CPU);
  Slab ref_params("rp", Device::CPU), ref_grads("rg", Device::CPU), unused("u", Device::CPU);
  make(params, grads, copy);
  make(ref_params, ref_grads, unused);
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  AdamW opt(params, grads, {true, false}, cfg), ref(ref_params, ref_grads, {true, false}, cfg);
  const ExecContext ctx;
  ASSERT_TRUE(opt.keep_compute_copy(ctx, copy));
  for (int t = 1; t <= 3; ++t) {
    for (Slab* g : {&grads, &ref_grads})
      for (Tensor& x : g->tensors())
        for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::sin(0.9f * static_cast<float>(i) + t);
    opt.step(ctx, 0.01f, 0.5f);
    ref.step(ctx, 0.01f, 0.5f);
    for (size_t k = 0; k < 2; ++k)
      for (int64_t i = 0; i < params.tensors()[k].numel(); ++i) {
        const float p = params.tensors()[k].f32()[i];
        EXPECT_EQ(p, ref_params.tensors()[k].f32()[i]) << "t " << t << " tensor " << k << " element " << i;
        EXPECT_EQ(copy.tensors()[k].as<bf16>()[i].bits, to_bf16(p).bits) << "t " << t << " tensor " << k;
      }
  }
  // refused: a share of a tensor (this rank's ZeRO segments), a copy laid out otherwise, an f32 copy
  std::vector<float> shard(9);
  AdamW share(ref_params, std::vector<Segment>{{0, 0, 6, shard.data(), 0}, {1, 1, 3, shard.data() + 6, 0}},
              {true, false}, cfg);
  EXPECT_FALSE(share.keep_compute_copy(ctx, copy));
  Slab other("o", Device::CPU), f32_copy("f", Device::CPU);
  other.add("w", {6}, DType::BF16);
  other.allocate();
  f32_copy.add("w", {2, 3});
  f32_copy.add("b", {3});
  f32_copy.allocate();
  EXPECT_FALSE(ref.keep_compute_copy(ctx, other));
  EXPECT_FALSE(ref.keep_compute_copy(ctx, f32_copy));
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

TEST(LrSchedule, StepMultipliesByGammaAfterEachMilestone) {
  LrSchedule s;
  s.lr = 0.1;
  s.kind = LrSchedule::Kind::Step;
  s.milestones = {30, 60, 80};
  s.gamma = 0.1;
  // MultiStepLR stepped once per optimizer step: the lr of step s is decayed by the milestones m < s
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(30), 0.1);
  EXPECT_NEAR(s.at(31), 0.01, 1e-15);
  EXPECT_NEAR(s.at(60), 0.01, 1e-15);
  EXPECT_NEAR(s.at(61), 0.001, 1e-16);
  EXPECT_NEAR(s.at(81), 1e-4, 1e-17);
  EXPECT_NEAR(s.at(100000), 1e-4, 1e-17);  // flat after the last milestone, decay_steps unused
  // the same linear warm-up as the cosine schedule, then the step values
  s.warmup_steps = 5;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(s.at(1), 0.02);
  EXPECT_DOUBLE_EQ(s.at(5), 0.1);
  EXPECT_DOUBLE_EQ(s.at(6), 0.1);
  EXPECT_DOUBLE_EQ(s.at(31), 0.05);
  EXPECT_DOUBLE_EQ(s.at(70), 0.025);
  // the default kind is still the cosine one
  EXPECT_EQ(LrSchedule{}.kind, LrSchedule::Kind::Cosine);
}

namespace {

// Two tensors, w (2,3) with decay and b (3) without (as a BatchNorm parameter or a bias), 9 values in all.
struct SgdFixture {
  Slab params{"p", Device::CPU}, grads{"g", Device::CPU};
  SgdFixture() {
    params.add("w", {2, 3});
    params.add("b", {3});
    grads.add("w", {2, 3});
    grads.add("b", {3});
    params.allocate();
    grads.allocate();
    for (int i = 0; i < 9; ++i) param(i) = static_cast<float>(0.1 * (i + 1) - 0.4);
  }
  float& param(int i) { return i < 6 ? params.tensors()[0].f32()[i] : params.tensors()[1].f32()[i - 6]; }
  float& grad(int i) { return i < 6 ? grads.tensors()[0].f32()[i] : grads.tensors()[1].f32()[i - 6]; }
};

// torch.optim.SGD + clip_grad_norm_ written out in double, 4 steps with a changing lr; gradients of norm ~2 so
// that clipping to 1 is active.
void check_sgd_against_double(const SgdConfig& cfg) {
  SgdFixture f;
  Sgd opt(f.params, f.grads, {true, false}, cfg);
  const ExecContext ctx;
  double p[9], buf[9] = {0};
  for (int i = 0; i < 9; ++i) p[i] = f.param(i);
  for (int t = 1; t <= 4; ++t) {
    double g[9], sq = 0;
    for (int i = 0; i < 9; ++i) {
      g[i] = std::sin(1.3 * i + t);
      sq += g[i] * g[i];
      f.grad(i) = static_cast<float>(g[i]);
    }
    const double norm = opt.grad_norm(ctx);
    EXPECT_NEAR(norm, std::sqrt(sq), 1e-6);
    const float scale = opt.clip_scale(norm);
    if (cfg.grad_clip > 0) {
      EXPECT_LT(scale, 1.0f);
      EXPECT_NEAR(scale, cfg.grad_clip / (std::sqrt(sq) + 1e-6), 1e-6);
    } else {
      EXPECT_EQ(scale, 1.0f);
    }
    const double lr = 0.05 * t;
    opt.step(ctx, static_cast<float>(lr), scale);
    for (int i = 0; i < 9; ++i) {
      const double wd = i < 6 ? cfg.weight_decay : 0.0;
      double d = g[i] * scale + wd * p[i];
      if (cfg.momentum != 0.0f) {
        buf[i] = t == 1 ? d : cfg.momentum * buf[i] + (1.0 - cfg.dampening) * d;
        d = cfg.nesterov ? d + cfg.momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
  EXPECT_EQ(opt.step_count(), 4);
  // a few float roundings per step on values of size ~1: within ~1e-6 of double
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(f.param(i), p[i], 2e-6) << i;
  if (cfg.momentum != 0.0f) {
    ASSERT_TRUE(opt.has_momentum());
    EXPECT_EQ(opt.state_numel(), 9);
    EXPECT_EQ(opt.state_bytes(), 9 * sizeof(float));
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(opt.momentum(0)[i], buf[i], 2e-6) << i;
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(opt.momentum(1)[i], buf[6 + i], 2e-6) << i;
  } else {
    EXPECT_FALSE(opt.has_momentum());
    EXPECT_EQ(opt.state_numel(), 0);
    EXPECT_EQ(opt.momentum(0), nullptr);
  }
}

}  // namespace

TEST(Sgd, MomentumWithDecayFlagsAndClippingMatchesDouble) {
  SgdConfig cfg;
  cfg.momentum = 0.9f;
  cfg.weight_decay = 0.1f;
  cfg.grad_clip = 1.0f;
  check_sgd_against_double(cfg);
}

TEST(Sgd, NesterovMatchesDouble) {
  SgdConfig cfg;
  cfg.momentum = 0.9f;
  cfg.nesterov = true;
  cfg.weight_decay = 5e-2f;
  cfg.grad_clip = 1.0f;
  check_sgd_against_double(cfg);
}

TEST(Sgd, DampeningWithoutClippingMatchesDouble) {
  SgdConfig cfg;
  cfg.momentum = 0.5f;
  cfg.dampening = 0.3f;
  cfg.weight_decay = 0.2f;
  cfg.grad_clip = 0.0f;
  check_sgd_against_double(cfg);
}

TEST(Sgd, PlainSgdKeepsNoState) {
  SgdConfig cfg;
  cfg.momentum = 0.0f;
  cfg.weight_decay = 0.1f;
  cfg.grad_clip = 1.0f;
  check_sgd_against_double(cfg);
}

TEST(Sgd, NesterovWithoutMomentumIsRejected) {
  SgdFixture f;
  SgdConfig cfg;
  cfg.momentum = 0.0f;
  cfg.nesterov = true;
  EXPECT_THROW(Sgd(f.params, f.grads, {true, false}, cfg), hpct::Error);
  EXPECT_THROW(Sgd(f.params, f.grads, {true}, SgdConfig{}), hpct::Error);  // one decay flag per tensor
}

// The ZeRO-1 shape: segments that cut tensors (and come in another order), with gradients in a separate flat buffer,
// update exactly as the whole-tensor optimizer, and their momentum buffers are the matching pieces of its buffers.
TEST(Sgd, SplitSegmentsMatchWholeTensors) {
  SgdFixture whole, split;
  SgdConfig cfg;
  cfg.momentum = 0.9f;
  cfg.nesterov = true;
  cfg.weight_decay = 0.1f;
  cfg.grad_clip = 1.0f;
  Sgd a(whole.params, whole.grads, {true, false}, cfg);
  // the "shard": w[4,6) b[0,3) w[0,4): 9 gradient values back to back
  std::vector<float> shard(9);
  std::vector<Segment> segs = {
      {0, 4, 6, shard.data(), 0}, {1, 0, 3, shard.data() + 2, 0}, {0, 0, 4, shard.data() + 5, 0}};
  Sgd b(split.params, segs, {true, false}, cfg);
  ASSERT_EQ(b.state_numel(), 9);
  EXPECT_EQ(b.segments()[1].state_offset, 2);
  EXPECT_EQ(b.segments()[2].state_offset, 5);
  const ExecContext ctx;
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < 9; ++i) whole.grad(i) = static_cast<float>(std::cos(0.7 * i - t));
    const float* gw = whole.grads.tensors()[0].f32();
    const float* gb = whole.grads.tensors()[1].f32();
    std::memcpy(shard.data(), gw + 4, 2 * sizeof(float));
    std::memcpy(shard.data() + 2, gb, 3 * sizeof(float));
    std::memcpy(shard.data() + 5, gw, 4 * sizeof(float));
    const double sa = a.grad_sumsq(ctx), sb = b.grad_sumsq(ctx);
    EXPECT_NEAR(sa, sb, 1e-12);
    const std::vector<bool> only_w = {true, false};
    EXPECT_NEAR(a.grad_sumsq(ctx, &only_w), b.grad_sumsq(ctx, &only_w), 1e-12);
    EXPECT_LT(a.grad_sumsq(ctx, &only_w), sa);
    const float scale = a.clip_scale(std::sqrt(sa));
    a.step(ctx, 0.1f, scale);
    b.step(ctx, 0.1f, scale);
  }
  EXPECT_EQ(b.step_count(), 3);
  // element-wise update, same kernel: bitwise equal
  for (int i = 0; i < 9; ++i) EXPECT_EQ(whole.param(i), split.param(i)) << i;
  for (int i = 0; i < 9; ++i) EXPECT_NE(whole.param(i), static_cast<float>(0.1 * (i + 1) - 0.4)) << i;
  for (int j = 0; j < 2; ++j) EXPECT_EQ(b.momentum(0)[j], a.momentum(0)[4 + j]) << j;
  for (int j = 0; j < 3; ++j) EXPECT_EQ(b.momentum(1)[j], a.momentum(1)[j]) << j;
  for (int j = 0; j < 4; ++j) EXPECT_EQ(b.momentum(2)[j], a.momentum(0)[j]) << j;
}

// Resuming: a second optimizer given the step count and the momentum buffers of the first continues identically
// (the first-step initialisation of the buffers must not run again).
TEST(Sgd, ResumeFromStepCountAndBuffersContinuesExactly) {
  SgdFixture f1, f2;
  SgdConfig cfg;
  cfg.momentum = 0.9f;
  cfg.weight_decay = 0.1f;
  Sgd a(f1.params, f1.grads, {true, false}, cfg);
  const ExecContext ctx;
  auto set_grads = [](SgdFixture& f, int t) {
    for (int i = 0; i < 9; ++i) f.grad(i) = static_cast<float>(std::sin(0.9 * i + 2 * t));
  };
  for (int t = 1; t <= 2; ++t) {
    set_grads(f1, t);
    a.step(ctx, 0.1f, 1.0f);
  }
  Sgd b(f2.params, f2.grads, {true, false}, cfg);
  for (int i = 0; i < 9; ++i) f2.param(i) = f1.param(i);
  std::memcpy(b.momentum(0), a.momentum(0), 6 * sizeof(float));
  std::memcpy(b.momentum(1), a.momentum(1), 3 * sizeof(float));
  b.set_step_count(a.step_count());
  for (int t = 3; t <= 4; ++t) {
    set_grads(f1, t);
    set_grads(f2, t);
    a.step(ctx, 0.1f, 1.0f);
    b.step(ctx, 0.1f, 1.0f);
  }
  for (int i = 0; i < 9; ++i) EXPECT_EQ(f1.param(i), f2.param(i)) << i;
}
