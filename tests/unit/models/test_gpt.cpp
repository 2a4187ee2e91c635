#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.hpp"
#include "kernels/kernels.hpp"
#include "models/gpt/gpt.hpp"

using namespace hpct;
using namespace hpct::gpt;

namespace {
GptConfig tiny(bool bias = true) {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.seq_len = 8;
  c.vocab_size = 50;
  c.padded_vocab = 128;
  c.bias = bias;
  return c;
}
}  // namespace

TEST(GptLayout, Gpt2SmallParameterCount) {
  GptConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.seq_len = 1024;
  c.vocab_size = 50257;
  c.padded_vocab = 50304;
  const MemoryPlan m = memory_plan(c, 1);
  EXPECT_EQ(m.num_params, 124475904);  // llm.c's count for GPT-2 small with the padded vocabulary
  // PaLM N: without wpe (1024*768) and without the 47 padding rows of wte
  EXPECT_EQ(m.num_params_no_wpe, 124475904 - 1024 * 768 - 47 * 768);
  EXPECT_EQ(m.optim_bytes, 2 * m.param_bytes);
}

TEST(GptLayout, QkvIsLogical3NhHsC) {
  const auto layout = parameter_layout(tiny());
  bool found = false;
  for (const auto& p : layout)
    if (p.name == "h.1.attn.qkv.weight") {
      found = true;
      EXPECT_EQ(p.shape, (std::vector<int64_t>{3, 2, 8, 16}));
      EXPECT_TRUE(p.decay);
    }
  EXPECT_TRUE(found);
  for (const auto& p : layout)
    if (p.name.find("ln") != std::string::npos || p.name.find("bias") != std::string::npos) {
      EXPECT_FALSE(p.decay) << p.name;
    }
}

TEST(GptMemory, PlanMatchesSlabs) {
  for (bool bias : {true, false}) {
    const GptConfig c = tiny(bias);
    Gpt model(c, 3, Device::CPU);
    const MemoryPlan m = memory_plan(c, 3);
    EXPECT_EQ(model.params().bytes(), m.param_bytes);
    EXPECT_EQ(model.grads().bytes(), m.grad_bytes);
  }
}

TEST(GptInit, DeterministicAndKeyedByName) {
  const ExecContext ctx;
  Gpt a(tiny(), 1, Device::CPU), b(tiny(), 2, Device::CPU);
  a.init_parameters(ctx, 7);
  b.init_parameters(ctx, 7);
  for (size_t i = 0; i < a.params().tensors().size(); ++i) {
    const auto& ta = a.params().tensors()[i];
    const auto& tb = b.params().tensors()[i];
    ASSERT_EQ(ta.numel(), tb.numel());
    for (int64_t j = 0; j < ta.numel(); ++j) ASSERT_EQ(ta.f32()[j], tb.f32()[j]) << ta.name;
  }
  // the value of element j of a tensor is rng::normal(seed, stream(name), j) * std
  const auto& w = a.params().get("h.0.mlp.fc.weight");
  EXPECT_FLOAT_EQ(w.f32()[5], static_cast<float>(0.02 * rng::normal(7, rng::stream_of("h.0.mlp.fc.weight"), 5)));
  // padding rows of wte are zero
  const auto& wte = a.params().get("wte");
  for (int64_t j = 50 * 16; j < wte.numel(); ++j) ASSERT_EQ(wte.f32()[j], 0.0f);
}

// Directional derivative of the mean loss vs the model's gradients (fp32 model, so the tolerance is loose:
// a central difference with h = 1e-3 in float carries ~1e-4 relative noise; 2e-2 still catches any wrong
// or missing gradient term, which changes the result by O(1)).
TEST(GptGradient, DirectionalDerivativeMatchesFiniteDifference) {
  for (bool bias : {true, false}) {
    const GptConfig c = tiny(bias);
    const int B = 2, T = c.seq_len, N = B * T;
    const ExecContext ctx;
    Gpt model(c, B, Device::CPU);
    model.init_parameters(ctx, 3);
    // make LayerNorm weights and biases non-trivial so their gradients are tested too
    for (auto& t : model.params().tensors())
      if (t.name.find("ln") != std::string::npos)
        for (int64_t j = 0; j < t.numel(); ++j)
          t.f32()[j] += 0.1f * static_cast<float>(rng::normal(11, rng::stream_of(t.name), j));
    std::vector<int32_t> in(N), tgt(N);
    for (int i = 0; i < N; ++i) {
      in[i] = static_cast<int32_t>(rng::uniform_int(1, 1, i, c.vocab_size));
      tgt[i] = static_cast<int32_t>(rng::uniform_int(1, 2, i, c.vocab_size));
    }
    auto mean_loss = [&]() {
      model.forward(ctx, in.data(), B);
      const float* l = model.loss(ctx, tgt.data(), B);
      double s = 0;
      for (int i = 0; i < N; ++i) s += l[i];
      return s / N;
    };
    model.zero_grad(ctx);
    model.forward(ctx, in.data(), B);
    model.loss_and_backward(ctx, tgt.data(), 1.0f / N, B);
    // random direction d over every parameter (zero on wte padding rows, which have no gradient)
    std::vector<std::vector<float>> dir;
    double analytic = 0;
    for (size_t i = 0; i < model.params().tensors().size(); ++i) {
      auto& p = model.params().tensors()[i];
      auto& g = model.grads().tensors()[i];
      std::vector<float> d(static_cast<size_t>(p.numel()));
      for (int64_t j = 0; j < p.numel(); ++j) d[j] = static_cast<float>(rng::normal(5, rng::stream_of(p.name), j));
      if (p.name == "wte")
        for (int64_t j = 50 * 16; j < p.numel(); ++j) d[j] = 0;
      for (int64_t j = 0; j < p.numel(); ++j) analytic += static_cast<double>(g.f32()[j]) * d[j];
      dir.push_back(std::move(d));
    }
    auto shift = [&](float h) {
      for (size_t i = 0; i < dir.size(); ++i) {
        auto& p = model.params().tensors()[i];
        for (int64_t j = 0; j < p.numel(); ++j) p.f32()[j] += h * dir[i][j];
      }
    };
    const float h = 1e-3f;
    shift(h);
    const double lp = mean_loss();
    shift(-2 * h);
    const double lm = mean_loss();
    shift(h);
    const double numeric = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(numeric, analytic, 2e-2 * std::abs(analytic)) << "bias=" << bias;
    EXPECT_GT(std::abs(analytic), 1e-3);
  }
}
