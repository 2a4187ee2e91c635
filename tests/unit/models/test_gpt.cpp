#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

// bf16 storage (docs/precision.md): the planned sizes are the slabs' (activations halved, a bf16 compute copy of the
// parameters), and one forward + backward stays within bf16 rounding of the fp32 model's. Tolerances: every stored
// value carries a relative rounding error <= 2^-9 ~ 2e-3; through 2 blocks of LayerNorm, GEMMs and softmax these
// compound to ~1e-2 relative on the gradients measured; the loss of a near-uniform softmax (~ln 50) moves by < 1e-3
// relative. Both bounds are 3-10x the measured deviation and far below what a wrong or missing term changes (O(1)).
TEST(GptBf16, PlanMatchesSlabsAndHalvesActivations) {
  const GptConfig c = tiny();
  const MemoryPlan m32 = memory_plan(c, 3), m16 = memory_plan(c, 3, Device::CPU, DType::BF16);
  EXPECT_EQ(m16.param_bytes, m32.param_bytes);  // the fp32 masters
  EXPECT_EQ(m32.compute_param_bytes, 0u);
  EXPECT_GT(m16.compute_param_bytes, m16.param_bytes / 2 - 1);  // bf16, each tensor 64-byte aligned
  EXPECT_LT(m16.compute_param_bytes, m16.param_bytes * 3 / 4);
  EXPECT_LT(m16.activation_bytes, m32.activation_bytes * 0.6);
  EXPECT_LT(m16.activation_grad_bytes, m32.activation_grad_bytes * 0.6);
  Gpt model(c, 3, Device::CPU, DType::BF16);
  EXPECT_EQ(model.activation_dtype(), DType::BF16);
  EXPECT_EQ(model.params().bytes(), m16.param_bytes);
  EXPECT_EQ(model.grads().bytes(), m16.grad_bytes);
  EXPECT_EQ(model.logits().dtype, DType::BF16);
}

// fp16 storage is CUDA-only: a GPT on the CPU refuses f16, naming the fix.
TEST(GptFp16, RefusedOnTheCpu) {
  try {
    Gpt model(tiny(), 3, Device::CPU, DType::F16);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16 storage is CUDA-only"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.precision=fp32 or bf16"), std::string::npos) << e.what();
  }
}

TEST(GptBf16, ForwardBackwardWithinBf16RoundingOfFp32) {
  const GptConfig c = tiny();
  const int B = 2, N = B * c.seq_len;
  const ExecContext ctx32, ctx16{Device::CPU, nullptr, Precision::BF16};
  Gpt m32(c, B, Device::CPU), m16(c, B, Device::CPU, DType::BF16);
  m32.init_parameters(ctx32, 3);
  m16.init_parameters(ctx16, 3);
  m16.refresh_compute_params(ctx16);
  std::vector<int32_t> in(N), tgt(N);
  for (int i = 0; i < N; ++i) {
    in[i] = static_cast<int32_t>(rng::uniform_int(1, 1, i, c.vocab_size));
    tgt[i] = static_cast<int32_t>(rng::uniform_int(1, 2, i, c.vocab_size));
  }
  auto run = [&](Gpt& m, const ExecContext& ctx) {
    m.zero_grad(ctx);
    m.forward(ctx, in.data(), B);
    const float* l = m.loss_and_backward(ctx, tgt.data(), 1.0f / N, B);
    double s = 0;
    for (int i = 0; i < N; ++i) s += l[i];
    return s / N;
  };
  const double l32 = run(m32, ctx32), l16 = run(m16, ctx16);
  EXPECT_NEAR(l16, l32, 1e-3 * l32);
  for (size_t i = 0; i < m32.grads().tensors().size(); ++i) {
    const Tensor& g32 = m32.grads().tensors()[i];
    const Tensor& g16 = m16.grads().tensors()[i];
    double num = 0, den = 0;
    for (int64_t j = 0; j < g32.numel(); ++j) {
      const double d = static_cast<double>(g16.f32()[j]) - g32.f32()[j];
      num += d * d;
      den += static_cast<double>(g32.f32()[j]) * g32.f32()[j];
    }
    if (den == 0) continue;  // e.g. padding rows only
    EXPECT_LT(std::sqrt(num / den), 3e-2) << g32.name;
  }
  // the compute copy follows the masters only when refreshed
  m16.params().get("h.0.mlp.fc.weight").f32()[0] += 1.0f;
  const double stale = run(m16, ctx16);
  m16.refresh_compute_params(ctx16);
  EXPECT_EQ(run(m16, ctx16) == stale, false);
}

// ---- activation recompute and activation sets (models/recompute.hpp) ----------------------------

namespace {
std::vector<int32_t> tokens_of(const GptConfig& c, int n, uint64_t stream) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[i] = static_cast<int32_t>(rng::uniform_int(1, stream, i, c.vocab_size));
  return v;
}
// The bytes of every gradient tensor, for bitwise comparisons.
std::vector<float> grads_of(Gpt& m) {
  std::vector<float> out;
  for (const Tensor& g : m.grads().tensors()) out.insert(out.end(), g.f32(), g.f32() + g.numel());
  return out;
}
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

// Losses and every gradient are bitwise the same whatever the recompute mode (the same kernels on the same inputs in
// the same order), fp32 and bf16, with and without biases, over two accumulated micro-batches; and each mode keeps
// less: full < selective < none, the planned bytes being the slab's.
TEST(GptRecompute, BitwiseEqualGradientsAndLessMemory) {
  for (DType act : {DType::F32, DType::BF16})
    for (bool bias : {true, false}) {
      const GptConfig c = tiny(bias);
      const int B = 2, N = B * c.seq_len;
      const ExecContext ctx{Device::CPU, nullptr, act == DType::BF16 ? Precision::BF16 : Precision::FP32};
      std::vector<float> ref_grads, ref_losses;
      size_t last_bytes = 0;
      for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
        const ActivationPlan kept{r, {1}};
        Gpt m(c, B, Device::CPU, ModelParallel{}, nullptr, act, true, false, kept);
        m.init_parameters(ctx, 3);
        m.refresh_compute_params(ctx);
        m.zero_grad(ctx);
        std::vector<float> losses;
        for (int micro = 0; micro < 2; ++micro) {
          const auto in = tokens_of(c, N, 10 + micro), tgt = tokens_of(c, N, 20 + micro);
          m.forward(ctx, in.data(), B);
          const float* l = m.loss_and_backward(ctx, tgt.data(), 1.0f / N, B);
          losses.insert(losses.end(), l, l + N);
        }
        const size_t bytes = m.memory().activation_bytes;
        EXPECT_EQ(bytes, memory_plan(c, B, Device::CPU, act, kept).activation_bytes) << recompute_name(r);
        if (r == Recompute::None) {
          ref_grads = grads_of(m);
          ref_losses = losses;
        } else {
          EXPECT_TRUE(bitwise_equal(grads_of(m), ref_grads)) << recompute_name(r) << " bias=" << bias;
          EXPECT_TRUE(bitwise_equal(losses, ref_losses)) << recompute_name(r) << " bias=" << bias;
          EXPECT_LT(bytes, last_bytes) << recompute_name(r);
        }
        last_bytes = bytes;
      }
    }
}

// A pipeline stage without the head keeps two micro-batches in flight in two activation sets: F(a) F(b) B(b) B(a)
// gives bitwise the input gradients and parameter gradients of a one-set model running F(b) B(b) F(a) B(a) (the same
// accumulation order), for every recompute mode; a set beyond the plan is an error.
TEST(GptRecompute, ActivationSetsHoldMicroBatchesInFlight) {
  const GptConfig c = tiny();
  const int B = 2, N = B * c.seq_len;
  const int64_t NC = static_cast<int64_t>(N) * c.n_embd;
  const ExecContext ctx;
  const ModelParallel first_stage{1, 0, 2, 0};
  const auto in_a = tokens_of(c, N, 1), in_b = tokens_of(c, N, 2);
  std::vector<float> dout_a(static_cast<size_t>(NC)), dout_b(static_cast<size_t>(NC));
  for (int64_t i = 0; i < NC; ++i) {
    dout_a[i] = static_cast<float>(rng::normal(4, 1, i));
    dout_b[i] = static_cast<float>(rng::normal(4, 2, i));
  }
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    Gpt two(c, B, Device::CPU, first_stage, nullptr, DType::F32, true, false, {r, {2}});
    Gpt one(c, B, Device::CPU, first_stage, nullptr, DType::F32, true, false, {r, {1}});
    for (Gpt* m : {&two, &one}) {
      m->init_parameters(ctx, 5);
      m->zero_grad(ctx);
    }
    two.forward(ctx, in_a.data(), B, nullptr, 0);
    two.forward(ctx, in_b.data(), B, nullptr, 1);
    std::vector<float> out_b(static_cast<const float*>(two.stage_output(1)),
                             static_cast<const float*>(two.stage_output(1)) + NC);
    // the first stage has no input gradient to hand back
    two.backward_stage(ctx, dout_b.data(), nullptr, B, 1);
    two.backward_stage(ctx, dout_a.data(), nullptr, B, 0);
    one.forward(ctx, in_b.data(), B);
    EXPECT_TRUE(bitwise_equal(out_b, std::vector<float>(static_cast<const float*>(one.stage_output()),
                                                        static_cast<const float*>(one.stage_output()) + NC)));
    one.backward_stage(ctx, dout_b.data(), nullptr, B);
    one.forward(ctx, in_a.data(), B);
    one.backward_stage(ctx, dout_a.data(), nullptr, B);
    EXPECT_TRUE(bitwise_equal(grads_of(two), grads_of(one))) << recompute_name(r);
    EXPECT_THROW(two.forward(ctx, in_a.data(), B, nullptr, 2), Error);
  }
}

// A later stage takes its input into the set's copy: two sets in flight, input gradients bitwise as one set's.
TEST(GptRecompute, LaterStageInputGradientsPerSet) {
  const GptConfig c = tiny();
  const int B = 1, N = B * c.seq_len;
  const int64_t NC = static_cast<int64_t>(N) * c.n_embd;
  const ExecContext ctx;
  // pp = 3: stage 1 of 3 has neither the embedding nor the head (2 layers over 3 stages is refused: use 3 layers)
  GptConfig c3 = c;
  c3.n_layer = 3;
  const ModelParallel middle{1, 0, 3, 1};
  std::vector<float> x_a(static_cast<size_t>(NC)), x_b(x_a.size()), d_a(x_a.size()), d_b(x_a.size());
  for (int64_t i = 0; i < NC; ++i) {
    x_a[i] = static_cast<float>(rng::normal(6, 1, i));
    x_b[i] = static_cast<float>(rng::normal(6, 2, i));
    d_a[i] = static_cast<float>(rng::normal(6, 3, i));
    d_b[i] = static_cast<float>(rng::normal(6, 4, i));
  }
  for (Recompute r : {Recompute::None, Recompute::Full}) {
    Gpt two(c3, B, Device::CPU, middle, nullptr, DType::F32, true, false, {r, {2}});
    Gpt one(c3, B, Device::CPU, middle, nullptr, DType::F32, true, false, {r, {1}});
    for (Gpt* m : {&two, &one}) {
      m->init_parameters(ctx, 5);
      m->zero_grad(ctx);
    }
    std::vector<float> din_two_a(x_a.size()), din_two_b(x_a.size()), din_one_a(x_a.size()), din_one_b(x_a.size());
    two.forward(ctx, nullptr, B, x_a.data(), 0);
    two.forward(ctx, nullptr, B, x_b.data(), 1);
    two.backward_stage(ctx, d_a.data(), din_two_a.data(), B, 0);
    two.backward_stage(ctx, d_b.data(), din_two_b.data(), B, 1);
    one.forward(ctx, nullptr, B, x_a.data());
    one.backward_stage(ctx, d_a.data(), din_one_a.data(), B);
    one.forward(ctx, nullptr, B, x_b.data());
    one.backward_stage(ctx, d_b.data(), din_one_b.data(), B);
    EXPECT_TRUE(bitwise_equal(din_two_a, din_one_a)) << recompute_name(r);
    EXPECT_TRUE(bitwise_equal(din_two_b, din_one_b)) << recompute_name(r);
    EXPECT_TRUE(bitwise_equal(grads_of(two), grads_of(one))) << recompute_name(r);
  }
}

// ---- virtual stages (interleaved pipeline): a rank holds several model chunks ---------------------------------------

// The four chunks of p 2 x v 2 over four blocks, run in virtual-stage order in one process (rank 0 chunk 0, rank 1
// chunk 0, rank 0 chunk 1, rank 1 chunk 1 with the head, then backward in reverse, handing activations and their
// gradients over by hand), give the serial model's loss bitwise and every gradient bitwise, wte's as the sum of the
// embedding's (rank 0) and the head's (rank 1), which the embedding group adds in training: summed the other way
// round, within one rounding.
TEST(GptVirtualStages, ChunksInVirtualStageOrderEqualTheSerialModel) {
  GptConfig c = tiny();
  c.n_layer = 4;
  const int B = 2, N = B * c.seq_len;
  const int64_t NC = static_cast<int64_t>(N) * c.n_embd;
  const ExecContext ctx;
  const auto in = tokens_of(c, N, 7), tgt = tokens_of(c, N, 8);
  const float dloss = 1.0f / static_cast<float>(N);
  for (Recompute r : {Recompute::None, Recompute::Full}) {
    Gpt serial(c, B, Device::CPU, ModelParallel{}, nullptr, DType::F32, true, false, {r, {1}});
    Gpt r0(c, B, Device::CPU, ModelParallel{1, 0, 2, 0, false, 2}, nullptr, DType::F32, true, false, {r, {1, 1}});
    Gpt r1(c, B, Device::CPU, ModelParallel{1, 0, 2, 1, false, 2}, nullptr, DType::F32, true, false, {r, {1, 1}});
    ASSERT_EQ(r0.num_chunks(), 2);
    EXPECT_EQ(r0.chunks()[1].first_layer, 2);
    EXPECT_EQ(r1.chunks()[0].first_layer, 1);
    for (Gpt* m : {&serial, &r0, &r1}) {
      m->init_parameters(ctx, 11);
      m->zero_grad(ctx);
    }
    serial.forward(ctx, in.data(), B);
    const float* ls = serial.loss_and_backward(ctx, tgt.data(), dloss, B);
    const std::vector<float> serial_losses(ls, ls + N);

    std::vector<float> x(static_cast<size_t>(NC)), d1(x.size()), d2(x.size()), d3(x.size());
    r0.forward(ctx, in.data(), B, nullptr, 0, 0);
    r1.forward(ctx, nullptr, B, r0.stage_output(0, 0), 0, 0);
    r0.forward(ctx, nullptr, B, r1.stage_output(0, 0), 0, 1);
    std::memcpy(x.data(), r0.stage_output(0, 1), static_cast<size_t>(NC) * sizeof(float));
    r1.forward(ctx, nullptr, B, x.data(), 0, 1);
    const float* lp = r1.loss_and_backward(ctx, tgt.data(), dloss, B, d3.data());
    EXPECT_TRUE(bitwise_equal(serial_losses, std::vector<float>(lp, lp + N))) << "recompute " << static_cast<int>(r);
    r0.backward_stage(ctx, d3.data(), d2.data(), B, 0, 1);
    r1.backward_stage(ctx, d2.data(), d1.data(), B, 0, 0);
    r0.backward_stage(ctx, d1.data(), nullptr, B, 0, 0);

    for (const ParamSpec& p : serial.layout()) {
      const Tensor& want = serial.grads().get(p.name);
      std::vector<float> got(static_cast<size_t>(want.numel()), 0.0f);
      int holders = 0;
      for (Gpt* m : {&r0, &r1}) {
        bool held = false;
        for (const ParamSpec& q : m->layout()) held = held || q.name == p.name;
        if (!held) continue;
        ++holders;
        const Tensor& g = m->grads().get(p.name);
        for (int64_t i = 0; i < g.numel(); ++i) got[static_cast<size_t>(i)] += g.f32()[i];
      }
      EXPECT_EQ(holders, p.name == "wte" ? 2 : 1) << p.name;
      const std::vector<float> w(want.f32(), want.f32() + want.numel());
      if (p.name != "wte") {
        EXPECT_TRUE(bitwise_equal(got, w)) << p.name << " recompute " << static_cast<int>(r);
        continue;
      }
      for (size_t i = 0; i < w.size(); ++i)
        EXPECT_NEAR(got[i], w[i], 1e-6f * (1.0f + std::fabs(w[i]))) << "wte[" << i << "]";
    }
  }
}
