// CPU backend (through the kernels.hpp dispatch) vs the reference twins in float, on random data with fixed seeds.
// Legend: B batch, T time, C channels, OC output channels, NH heads, V vocabulary, Vp padded vocabulary.
//
// Tolerances (|got - want| <= atol + rtol |want|, atol = atol_rel * max|want|), and why:
//   - exact (0, 0): the same float operations in the same order (embedding adds, residual, scale, padded zeros);
//   - 1e-6 / 1e-7 (GELU forward), 1e-5 / 1e-6 (GELU backward): the backend's exp_simd is within 1.5 ulp of libm
//     and its tanh within ~1e-7 absolute; the derivative sums terms of opposite sign (it crosses 0 near x = -0.75),
//     so its float rounding is larger relative to the result there;
//   - 2e-5 / 2e-5: sums of up to a few hundred float products (LayerNorm statistics, GEMMs, attention, softmax
//     normalisers) in another order (SIMD lanes, BLAS blocking): each order has a rounding error of about
//     sqrt(K) * 2^-24 of the scale of the terms, i.e. a few 1e-6 at K = 256, with margin for the tail;
//   - 1e-4 / 1e-4: parameter gradients summed over all N rows (up to 256 rows here) in float by the reference,
//     whose sequential sum errs by up to ~N * 2^-24 relative to the scale (the backend sums those in double).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cpu/cpu_math.hpp"
#include "kernels/kernels.hpp"
#ifdef HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_probe.hpp"
#endif
#include "kernels/reference/reference.hpp"

namespace hpct::kernels {
namespace {

namespace ref = hpct::kernels::reference;
using test::all_close;
using test::random_ints;
using test::random_vector;

const ExecContext kCpu{Device::CPU, nullptr};

struct Shape {
  int B, T, C, NH;
};
// tiny; odd T (not a multiple of 8) with C = 48, NH = 3 (HS = 16); T across two causal blocks of 64;
// the GPT step's T = 256, C = 256, NH = 4 with B = 1
const Shape kShapes[] = {{2, 5, 8, 2}, {3, 67, 48, 3}, {2, 130, 64, 4}, {1, 256, 256, 4}};

std::string name(const Shape& s) {
  return "B" + std::to_string(s.B) + "T" + std::to_string(s.T) + "C" + std::to_string(s.C) + "NH" +
         std::to_string(s.NH);
}

// ---- encoder ----------------------------------------------------------------------------------------
TEST(KernelsCpu, EncoderForwardBackward) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int Vp = 128, N = s.B * s.T, C = s.C;
    // few distinct tokens, so that positions share rows of dwte (the scatter-add must accumulate them)
    const auto inp = random_ints(N, 1, 0, 13);
    const auto wte = random_vector(static_cast<size_t>(Vp) * C, 2);
    const auto wpe = random_vector(static_cast<size_t>(s.T) * C, 3);
    std::vector<float> out(static_cast<size_t>(N) * C, NAN), out_ref(out.size());
    encoder_forward(kCpu, out.data(), inp.data(), wte.data(), wpe.data(), s.B, s.T, C);
    ref::encoder_forward(out_ref.data(), inp.data(), wte.data(), wpe.data(), s.B, s.T, C);
    EXPECT_TRUE(all_close("encoder out", out, out_ref, 0, 0));  // one add: exact

    const auto dout = random_vector(out.size(), 4);
    // parameter grads accumulate: start from non-zero values
    auto dwte = random_vector(wte.size(), 5), dwpe = random_vector(wpe.size(), 6);
    auto dwte_ref = dwte, dwpe_ref = dwpe;
    encoder_backward(kCpu, dwte.data(), dwpe.data(), dout.data(), inp.data(), s.B, s.T, C);
    ref::encoder_backward(dwte_ref.data(), dwpe_ref.data(), dout.data(), inp.data(), s.B, s.T, C);
    // the backend adds the rows in the reference's order (positions ascending): exact
    EXPECT_TRUE(all_close("dwte", dwte, dwte_ref, 0, 0));
    EXPECT_TRUE(all_close("dwpe", dwpe, dwpe_ref, 0, 0));
  }
}

// ---- LayerNorm --------------------------------------------------------------------------------------------
TEST(KernelsCpu, LayerNormForwardBackward) {
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(name(s) + (with_bias ? " bias" : " no bias"));
      const int N = s.B * s.T, C = s.C;
      // an offset and a spread, as the residual stream has: the variance is not the mean square
      const auto inp = random_vector(static_cast<size_t>(N) * C, 10, -1.5, 2.5);
      const auto w = random_vector(C, 11, 0.5, 1.5), b = random_vector(C, 12);
      const float* bias = with_bias ? b.data() : nullptr;
      std::vector<float> out(inp.size(), NAN), mean(N, NAN), rstd(N, NAN);
      std::vector<float> out_ref(inp.size()), mean_ref(N), rstd_ref(N);
      layernorm_forward(kCpu, out.data(), mean.data(), rstd.data(), inp.data(), w.data(), bias, N, C);
      ref::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), inp.data(), w.data(), bias, N, C);
      EXPECT_TRUE(all_close("ln out", out, out_ref, 2e-5, 2e-5));
      EXPECT_TRUE(all_close("ln mean", mean, mean_ref, 2e-5, 2e-5));
      EXPECT_TRUE(all_close("ln rstd", rstd, rstd_ref, 2e-5, 2e-5));

      const auto dout = random_vector(inp.size(), 13);
      // dinp, dweight, dbias all accumulate
      auto dinp = random_vector(inp.size(), 14), dw = random_vector(C, 15), db = random_vector(C, 16);
      auto dinp_ref = dinp, dw_ref = dw, db_ref = db;
      layernorm_backward(kCpu, dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(),
                         w.data(), mean_ref.data(), rstd_ref.data(), N, C);
      ref::layernorm_backward(dinp_ref.data(), dw_ref.data(), with_bias ? db_ref.data() : nullptr, dout.data(),
                              inp.data(), w.data(), mean_ref.data(), rstd_ref.data(), N, C);
      EXPECT_TRUE(all_close("ln dinp", dinp, dinp_ref, 2e-5, 2e-5));
      EXPECT_TRUE(all_close("ln dweight", dw, dw_ref, 1e-4, 1e-4));
      EXPECT_TRUE(all_close("ln dbias", db, db_ref, 1e-4, 1e-4));  // untouched when null: equal to the seed
    }
  }
}

// ---- Linear -----------------------------------------------------------------------------------------------
TEST(KernelsCpu, MatmulForwardBackward) {
  struct MShape {
    int N, C, OC;
  };
  // odd sizes, and the GPT's QKV projection with N = 256
  for (const MShape& s : {MShape{10, 8, 12}, MShape{97, 48, 130}, MShape{256, 256, 768}}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("N" + std::to_string(s.N) + "C" + std::to_string(s.C) + "OC" + std::to_string(s.OC) +
                   (with_bias ? " bias" : " no bias"));
      const auto inp = random_vector(static_cast<size_t>(s.N) * s.C, 20);
      const auto w = random_vector(static_cast<size_t>(s.OC) * s.C, 21), b = random_vector(s.OC, 22);
      const float* bias = with_bias ? b.data() : nullptr;
      std::vector<float> out(static_cast<size_t>(s.N) * s.OC, NAN), out_ref(out.size());
      matmul_forward(kCpu, out.data(), inp.data(), w.data(), bias, s.N, s.C, s.OC);
      ref::matmul_forward(out_ref.data(), inp.data(), w.data(), bias, s.N, s.C, s.OC);
      EXPECT_TRUE(all_close("matmul out", out, out_ref, 2e-5, 2e-5));

      const auto dout = random_vector(out.size(), 23);
      auto dinp = random_vector(inp.size(), 24);  // assigned: the seed values must disappear
      auto dw = random_vector(w.size(), 25), db = random_vector(b.size(), 26);  // accumulated
      std::vector<float> dinp_ref(inp.size());
      auto dw_ref = dw, db_ref = db;
      matmul_backward(kCpu, dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(), w.data(),
                      s.N, s.C, s.OC);
      ref::matmul_backward(dinp_ref.data(), dw_ref.data(), with_bias ? db_ref.data() : nullptr, dout.data(), inp.data(),
                           w.data(), s.N, s.C, s.OC);
      EXPECT_TRUE(all_close("matmul dinp", dinp, dinp_ref, 2e-5, 2e-5));
      EXPECT_TRUE(all_close("matmul dweight", dw, dw_ref, 1e-4, 1e-4));
      EXPECT_TRUE(all_close("matmul dbias", db, db_ref, 1e-4, 1e-4));

      // dinp = null skips the input gradient and still accumulates the parameter gradients
      auto dw2 = random_vector(w.size(), 25);
      matmul_backward<float>(kCpu, nullptr, dw2.data(), nullptr, dout.data(), inp.data(), w.data(), s.N, s.C, s.OC);
      EXPECT_TRUE(all_close("matmul dweight (dinp null)", dw2, dw_ref, 1e-4, 1e-4));
    }
  }
}

// ---- attention ---------------------------------------------------------------------------------------------
// The CPU's flash attention keeps L (B,NH,T), the log-sum-exp of each row's scaled scores, and needs D (B,NH,T) as
// scratch; the reference keeps the probabilities. out and dqkv against the reference, L against the double row LSE
// computed independently (kernel_test_util.hpp). dqkv is assigned and the scratch's contents must not matter: both
// start as random values.
void check_attention(int B, int T, int C, int NH, uint32_t seed, double tol) {
  const int64_t lse_n = int64_t{B} * NH * T;
  // spread of +-2 gives peaked softmax rows (scores up to ~|q||k|/sqrt(HS)), not only near-uniform ones
  const auto qkv = random_vector(static_cast<size_t>(B) * T * 3 * C, seed, -2.0, 2.0);
  std::vector<float> out(static_cast<size_t>(B) * T * C, NAN), lse(static_cast<size_t>(lse_n), NAN);
  std::vector<float> out_ref(out.size()), att_ref(static_cast<size_t>(lse_n) * T);
  attention_forward(kCpu, out.data(), lse.data(), qkv.data(), B, T, C, NH);
  ref::attention_forward(out_ref.data(), att_ref.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(all_close("attention out", out, out_ref, tol, tol));
  // L = m + log l: a few float ulps of |L| (the sum l is rounded relative 1e-7 at most per term; log halves nothing)
  EXPECT_TRUE(all_close("attention L", lse, test::attention_log_sum_exp_rows(qkv, B, T, C, NH), 1e-6, 1e-6));

  const auto dout = random_vector(out.size(), seed + 1);
  auto dqkv = random_vector(qkv.size(), seed + 2);                     // assigned: the seed values must disappear
  auto scratch = random_vector(static_cast<size_t>(lse_n), seed + 3);  // scratch: its contents must not matter
  std::vector<float> dqkv_ref(qkv.size()), datt_ref(att_ref.size());
  attention_backward(kCpu, dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  ref::attention_backward(dqkv_ref.data(), datt_ref.data(), dout.data(), qkv.data(), out_ref.data(), att_ref.data(), B,
                          T, C, NH);
  EXPECT_TRUE(all_close("dqkv", dqkv, dqkv_ref, tol, tol));
}

TEST(KernelsCpu, AttentionForwardBackward) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    check_attention(s.B, s.T, s.C, s.NH, 30, 1e-5);
  }
}

// Shapes that do not fall on the tiles (64 x 64 in cpu_attention.cpp): T = 1, T one short of and one past a tile,
// T across several tiles with a ragged last one, head sizes that are not a multiple of 16 (or of 8: 5, 13), and B*NH
// not a multiple of the thread count (2 threads in ctest: 1, 3, 7 tasks).
TEST(KernelsCpu, AttentionOddShapes) {
  const Shape shapes[] = {{1, 1, 8, 1},    {3, 1, 24, 2}, {1, 63, 13, 1},  {1, 65, 40, 2},
                          {1, 129, 15, 3}, {7, 17, 5, 1}, {1, 200, 80, 4}, {1, 320, 24, 1}};
  uint32_t seed = 300;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(name(s));
    check_attention(s.B, s.T, s.C, s.NH, seed += 10, 1e-5);
  }
}

// A micro-batch b < B runs in the buffers planned for B (kernels.hpp), which hold stale values of an earlier call:
// the results equal those of buffers sized for b.
TEST(KernelsCpu, AttentionSmallerBatchInPlannedBuffers) {
  const int Bplan = 3, B = 2, T = 70, C = 48, NH = 3;
  const size_t lse_plan = static_cast<size_t>(attention_stats_bytes(kCpu, Bplan, T, C, NH) / 4),
               lse_n = static_cast<size_t>(attention_stats_bytes(kCpu, B, T, C, NH) / 4);
  const auto qkv = random_vector(static_cast<size_t>(B) * T * 3 * C, 41, -2.0, 2.0);
  const auto dout = random_vector(static_cast<size_t>(B) * T * C, 42);
  std::vector<float> out(dout.size()), dqkv(qkv.size()), out_plan(dout.size()), dqkv_plan(qkv.size());
  std::vector<float> lse(lse_n), scratch(lse_n);
  attention_forward(kCpu, out.data(), lse.data(), qkv.data(), B, T, C, NH);
  attention_backward(kCpu, dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  auto lse_big = random_vector(lse_plan, 43, 1e3, 2e3), scratch_big = random_vector(lse_plan, 44, 1e3, 2e3);
  attention_forward(kCpu, out_plan.data(), lse_big.data(), qkv.data(), B, T, C, NH);
  attention_backward(kCpu, dqkv_plan.data(), scratch_big.data(), dout.data(), qkv.data(), out_plan.data(),
                     lse_big.data(), B, T, C, NH);
  EXPECT_TRUE(all_close("out", out_plan, out, 0.0, 0.0));
  EXPECT_TRUE(all_close("dqkv", dqkv_plan, dqkv, 0.0, 0.0));
  EXPECT_TRUE(all_close("L", std::vector<float>(lse_big.begin(), lse_big.begin() + static_cast<int64_t>(lse_n)), lse,
                        0.0, 0.0));
}

// The CPU backend's attention is flash attention, as on CUDA: stats are one float L per (batch, head, row) and the
// scratch one float D per row, whatever the storage type (the model sizes its buffers with these two queries).
TEST(KernelsCpu, AttentionBufferSizes) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int64_t n = int64_t{s.B} * s.NH * s.T;
    EXPECT_EQ(attention_stats_bytes(kCpu, s.B, s.T, s.C, s.NH), 4 * n);  // act defaults to F32
    EXPECT_EQ(attention_scratch_bytes(kCpu, s.B, s.T, s.C, s.NH), 4 * n);
    EXPECT_EQ(attention_stats_bytes(kCpu, s.B, s.T, s.C, s.NH, DType::BF16), 4 * n);  // L is float for bf16 too
    EXPECT_EQ(attention_scratch_bytes(kCpu, s.B, s.T, s.C, s.NH, DType::BF16), 4 * n);
  }
  EXPECT_EQ(attention_stats_bytes(kCpu, 8, 1024, 768, 12), int64_t{8} * 12 * 1024 * 4);
  EXPECT_THROW(attention_stats_bytes(kCpu, 1, 4, 10, 3), hpct::Error);  // C not a multiple of NH
}

// ---- the backend's vectorizable exp (cpu/cpu_math.hpp), on which softmax, cross-entropy and GELU rest ----------
TEST(KernelsCpu, ExpSimdWithinTwoUlp) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (float x = -87.0f; x <= 88.0f; x += 0.000731f) {  // ~240k points over the whole clamped range
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::fabs(cpu::exp_simd(x) - want) / want;
    if (rel > worst) {
      worst = rel;
      worst_x = x;
    }
  }
  // 2 ulp of float = 2 * 2^-23 relative at the top of a binade; measured 1.4 ulp
  EXPECT_LT(worst, 2.0 * 1.1920929e-7) << "worst at x = " << worst_x;
  EXPECT_EQ(cpu::exp_simd(0.0f), 1.0f);
  EXPECT_GT(cpu::exp_simd(-1000.0f), 0.0f);  // clamped, never 0 or NaN
  EXPECT_TRUE(std::isfinite(cpu::exp_simd(1000.0f)));
}

// ---- GELU, residual -----------------------------------------------------------------------------------------
TEST(KernelsCpu, GeluForwardBackward) {
  // [-8, 8] covers both saturated tails, where tanh -> +-1 and gelu(x) -> 0 or x; plus hand-picked points
  auto inp = random_vector(100003, 40, -8.0, 8.0);
  for (float x : {0.0f, 1e-7f, -1e-7f, 3.0f, -3.0f, 5.0f, -5.0f, 20.0f, -20.0f, 60.0f, -60.0f}) inp.push_back(x);
  const int64_t n = static_cast<int64_t>(inp.size());
  std::vector<float> out(n, NAN), out_ref(n);
  gelu_forward(kCpu, out.data(), inp.data(), n);
  ref::gelu_forward(out_ref.data(), inp.data(), n);
  // ~1e-7 absolute error of tanh near 0 becomes ~1e-7 relative on gelu; 1e-6 leaves room for the float rounding
  EXPECT_TRUE(all_close("gelu out", out, out_ref, 1e-6, 1e-7));

  const auto dout = random_vector(n, 41);
  auto dinp = random_vector(n, 42);  // assigned
  std::vector<float> dinp_ref(n);
  gelu_backward(kCpu, dinp.data(), inp.data(), dout.data(), n);
  ref::gelu_backward(dinp_ref.data(), inp.data(), dout.data(), n);
  EXPECT_TRUE(all_close("gelu dinp", dinp, dinp_ref, 1e-5, 1e-6));
}

TEST(KernelsCpu, Residual) {
  const int64_t n = 70001;
  const auto a = random_vector(n, 50), b = random_vector(n, 51);
  std::vector<float> out(n, NAN), out_ref(n);
  residual_forward(kCpu, out.data(), a.data(), b.data(), n);
  ref::residual_forward(out_ref.data(), a.data(), b.data(), n);
  EXPECT_TRUE(all_close("residual", out, out_ref, 0, 0));
}

// ---- cross-entropy ---------------------------------------------------------------------------------------------
// -log softmax(x[:V])[target] computed in double, directly from the definition (log-sum-exp, max-subtracted)
double lse_loss(const float* x, int V, int target) {
  double m = x[0];
  for (int v = 1; v < V; v++) m = std::max(m, static_cast<double>(x[v]));
  double s = 0.0;
  for (int v = 0; v < V; v++) s += std::exp(static_cast<double>(x[v]) - m);
  return m + std::log(s) - x[target];
}

TEST(KernelsCpu, CrossEntropy) {
  struct CShape {
    int N, V, Vp;
  };
  for (const CShape& s : {CShape{7, 5, 128}, CShape{67, 250, 256}, CShape{64, 256, 256}, CShape{33, 1000, 1024}}) {
    SCOPED_TRACE("N" + std::to_string(s.N) + "V" + std::to_string(s.V) + "Vp" + std::to_string(s.Vp));
    auto logits = test::cross_entropy_logits(s.N, s.V, s.Vp, 60);  // row 0 offset by 80, padding at 1e4
    const auto targets = random_ints(s.N, 61, 0, s.V);

    std::vector<float> losses(s.N, NAN), losses_ref(s.N);
    crossentropy_forward(kCpu, losses.data(), logits.data(), targets.data(), s.N, s.V, s.Vp);
    ref::crossentropy_forward(losses_ref.data(), logits.data(), targets.data(), s.N, s.V, s.Vp);
    EXPECT_TRUE(all_close("ce losses vs reference", losses, losses_ref, 2e-5, 2e-5));
    std::vector<double> lse(s.N);
    for (int r = 0; r < s.N; r++) lse[r] = lse_loss(logits.data() + static_cast<size_t>(r) * s.Vp, s.V, targets[r]);
    // float log-sum-exp vs double: the loss (~log V) is a difference of terms up to ~85, so ~85 * 2^-24 absolute
    EXPECT_TRUE(all_close("ce losses vs double lse", losses.data(), lse.data(), s.N, 1e-5, 2e-6));

    const float dloss = 1.0f / 37.0f;
    auto dlogits = logits, dlogits_ref = logits;
    std::vector<float> losses2(s.N, NAN);
    crossentropy_forward_backward(kCpu, losses2.data(), dlogits.data(), targets.data(), dloss, s.N, s.V, s.Vp);
    ref::crossentropy_forward_backward(losses_ref.data(), dlogits_ref.data(), targets.data(), dloss, s.N, s.V, s.Vp);
    EXPECT_TRUE(all_close("ce fused losses", losses2, losses, 0, 0));  // the same computation as forward
    EXPECT_TRUE(all_close("ce dlogits", dlogits, dlogits_ref, 2e-5, 2e-5));
    size_t nonzero_pad = 0;
    for (int r = 0; r < s.N; r++) {
      double row_sum = 0.0;
      for (int v = 0; v < s.Vp; v++) {
        const float g = dlogits[static_cast<size_t>(r) * s.Vp + v];
        if (v >= s.V && g != 0.0f) nonzero_pad++;
        row_sum += g;
      }
      // softmax - one-hot sums to zero over a row
      EXPECT_NEAR(row_sum, 0.0, 1e-6) << "row " << r;
    }
    EXPECT_EQ(nonzero_pad, 0u) << "padded columns must get exactly zero gradient";
  }
}

// Label smoothing (classifier head of train_resnet): the fused kernel against the definition -sum_k q_k log p_k
// (reference, double), eps = 0 against the plain kernel, rows of dlogits summing to 0, and the backward against
// central differences of the reference loss.
TEST(KernelsCpu, CrossEntropySmoothedMatchesDefinitionAndGradient) {
  const int N = 7, K = 10;
  const auto logits = random_vector(static_cast<size_t>(N) * K, 81, -4.0, 4.0);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; n++) targets[n] = (3 * n + 1) % K;
  for (const float eps : {0.0f, 0.1f, 0.3f}) {
    SCOPED_TRACE("eps=" + std::to_string(eps));
    std::vector<float> losses(N), losses_fused(N), dlogits = logits;
    crossentropy_smoothed_forward(kCpu, losses.data(), logits.data(), targets.data(), eps, N, K);
    crossentropy_smoothed_forward_backward(kCpu, losses_fused.data(), dlogits.data(), targets.data(), 0.25f, eps, N, K);
    std::vector<double> ld(logits.begin(), logits.end()), loss_ref(N), dref = ld;
    ref::crossentropy_smoothed_forward_backward(loss_ref.data(), dref.data(), targets.data(), 0.25, double(eps), N, K);
    for (int n = 0; n < N; n++) {
      EXPECT_NEAR(losses[n], loss_ref[n], 2e-6 * std::max(1.0, std::fabs(loss_ref[n]))) << n;
      EXPECT_EQ(losses_fused[n], losses[n]) << n;  // the same float operations
      double row = 0.0;
      for (int k = 0; k < K; k++) {
        const size_t i = static_cast<size_t>(n) * K + k;
        EXPECT_NEAR(dlogits[i], dref[i], 1e-6) << n << "," << k;
        row += dlogits[i];
      }
      EXPECT_NEAR(row, 0.0, 1e-6);  // softmax - q sums to zero
    }
    if (eps == 0.0f) {  // the plain kernel
      std::vector<float> plain(N);
      crossentropy_forward(kCpu, plain.data(), logits.data(), targets.data(), N, K, K);
      for (int n = 0; n < N; n++) EXPECT_NEAR(losses[n], plain[n], 1e-6) << n;
    }
    // d(0.25 * sum_n loss_n) / d z[n,k] by central differences in double
    for (int n = 0; n < N; n += 3)
      for (int k = 0; k < K; k += 4) {
        const size_t i = static_cast<size_t>(n) * K + k;
        auto total = [&](double dz) {
          std::vector<double> z = ld, l(N), g = ld;
          z[i] += dz;
          ref::crossentropy_smoothed_forward(l.data(), z.data(), targets.data(), double(eps), N, K);
          double t = 0.0;
          for (double v : l) t += 0.25 * v;
          return t;
        };
        const double h = 1e-5, fd = (total(h) - total(-h)) / (2 * h);
        EXPECT_NEAR(dref[i], fd, 1e-7) << n << "," << k;
      }
  }
}

TEST(KernelsCpu, CrossEntropyRejectsBadTargets) {
  std::vector<float> logits(2 * 128, 0.5f), losses(2);
  const std::vector<int32_t> targets = {3, 100};  // 100 >= V = 50: a padded column
  EXPECT_THROW(crossentropy_forward(kCpu, losses.data(), logits.data(), targets.data(), 2, 50, 128), hpct::Error);
}

// ---- reductions, scale ------------------------------------------------------------------------------------------
TEST(KernelsCpu, SumAndSumSquares) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1000003}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = random_vector(n, 70, -0.5, 1.5);  // a non-zero mean: the sum grows with n
    double want_sum = 0.0, want_sq = 0.0;
    for (float v : x) {
      want_sum += v;
      want_sq += static_cast<double>(v) * v;
    }
    float s = NAN;
    sum(kCpu, &s, x.data(), n);
    // accumulated in double, rounded once to float
    EXPECT_NEAR(s, want_sum, std::fabs(want_sum) * 1e-7 + 1e-7);
    double acc = 0.25;  // accumulates
    sum_squares_accumulate(kCpu, &acc, x.data(), n);
    EXPECT_NEAR(acc, 0.25 + want_sq, (0.25 + want_sq) * 1e-11);  // double sums in another order
    float s_ref = NAN;
    ref::sum(&s_ref, x.data(), n);
    EXPECT_NEAR(s, s_ref, std::fabs(want_sum) * 1e-7 + 1e-7);
  }
}

TEST(KernelsCpu, Scale) {
  const int64_t n = 50001;
  auto x = random_vector(n, 80), x_ref = x;
  scale(kCpu, x.data(), 0.37f, n);
  ref::scale(x_ref.data(), 0.37f, n);
  EXPECT_TRUE(all_close("scale", x, x_ref, 0, 0));
}

// ---- AdamW: 3 steps against a hand-written double computation -------------------------------------------------------
TEST(KernelsCpu, AdamWThreeStepsMatchDouble) {
  const int64_t n = 4099;
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.5f;
  auto p = random_vector(n, 90);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  auto p_ref = p, m_ref = m, v_ref = v;
  std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  for (int t = 1; t <= 3; t++) {
    const auto g = random_vector(n, 100 + t);
    adamw_update(kCpu, p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, gscale, t);
    ref::adamw_update(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, lr, b1, b2, eps, wd, gscale, t);
    for (int64_t i = 0; i < n; i++) {  // torch.optim.AdamW, written out in double
      const double gi = static_cast<double>(g[i]) * gscale;
      pd[i] *= 1.0 - static_cast<double>(lr) * wd;
      md[i] = static_cast<double>(b1) * md[i] + (1.0 - b1) * gi;
      vd[i] = static_cast<double>(b2) * vd[i] + (1.0 - b2) * gi * gi;
      const double m_hat = md[i] / (1.0 - std::pow(static_cast<double>(b1), t));
      const double v_hat = vd[i] / (1.0 - std::pow(static_cast<double>(b2), t));
      pd[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  // each step moves p by ~lr = 3e-3 and rounds a few float operations: after 3 steps p (|p| <= 1) is within a few
  // float ulps (~1e-7) of the double result; m and v within ~1e-6 relative
  EXPECT_TRUE(all_close("adamw p vs double", p.data(), pd.data(), n, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("adamw m vs double", m.data(), md.data(), n, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("adamw v vs double", v.data(), vd.data(), n, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("adamw p vs reference", p, p_ref, 1e-6, 1e-6));
}

// ---- determinism: reductions do not depend on the number of threads -------------------------------------------------
TEST(KernelsCpu, ReductionsAreBitwiseIndependentOfThreadCount) {
  const int N = 301, C = 96, Vp = 64;
  const auto inp = random_vector(static_cast<size_t>(N) * C, 110, -1.0, 2.0);
  const auto dout = random_vector(inp.size(), 111);
  const auto w = random_vector(C, 112, 0.5, 1.5);
  const auto tokens = random_ints(N, 113, 0, 7);
  std::vector<float> out(inp.size()), mean(N), rstd(N);
  layernorm_forward<float>(kCpu, out.data(), mean.data(), rstd.data(), inp.data(), w.data(), nullptr, N, C);

  struct Result {
    std::vector<float> dinp, dw, db, dwte, dwpe;
    float s;
    double sq;
  };
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Result r{std::vector<float>(inp.size()),
             std::vector<float>(C),
             std::vector<float>(C),
             std::vector<float>(static_cast<size_t>(Vp) * C),
             std::vector<float>(static_cast<size_t>(N) * C),
             0.0f,
             0.0};
    layernorm_backward(kCpu, r.dinp.data(), r.dw.data(), r.db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                       rstd.data(), N, C);
    encoder_backward(kCpu, r.dwte.data(), r.dwpe.data(), dout.data(), tokens.data(), 1, N, C);
    sum(kCpu, &r.s, inp.data(), static_cast<int64_t>(inp.size()));
    sum_squares_accumulate(kCpu, &r.sq, inp.data(), static_cast<int64_t>(inp.size()));
    omp_set_num_threads(saved);
    return r;
  };
  const Result one = run(1), three = run(3);
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same_bits(one.dinp, three.dinp));
  EXPECT_TRUE(same_bits(one.dw, three.dw));
  EXPECT_TRUE(same_bits(one.db, three.db));
  EXPECT_TRUE(same_bits(one.dwte, three.dwte));
  EXPECT_TRUE(same_bits(one.dwpe, three.dwpe));
  EXPECT_EQ(std::memcmp(&one.s, &three.s, sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(&one.sq, &three.sq, sizeof(double)), 0);
}

// ---- memory helpers and dispatch ----------------------------------------------------------------------------------
TEST(KernelsCpu, MemoryHelpers) {
  const auto src = random_vector(1000, 120);
  std::vector<float> dst(1000, NAN), back(1000, NAN);
  copy_from_host(kCpu, dst.data(), src.data(), 1000 * sizeof(float));
  copy_to_host(kCpu, back.data(), dst.data(), 1000 * sizeof(float));
  EXPECT_TRUE(all_close("copies", back, src, 0, 0));
  std::vector<float> twin(1000, NAN);
  copy_device(kCpu, twin.data() + 1, dst.data() + 1, 998 * sizeof(float));  // a sub-range: the ends stay NaN
  EXPECT_TRUE(std::isnan(twin[0]) && std::isnan(twin[999]));
  EXPECT_TRUE(all_close("copy_device", std::vector<float>(twin.begin() + 1, twin.end() - 1),
                        std::vector<float>(src.begin() + 1, src.end() - 1), 0, 0));
  fill_zero(kCpu, dst.data(), 1000 * sizeof(float));
  EXPECT_EQ(test::max_abs(dst.data(), dst.size()), 0.0);
  synchronize(kCpu);
}

// Device::CUDA without a usable device (this machine, CI): an hpct::Error naming the op, never a crash. Built without
// the CUDA backend, the error says so and names the fix. With a device the backend-vs-CPU tests (test_cuda_*) cover it.
TEST(KernelsDispatch, CudaContextWithoutADeviceFailsWithAClearMessage) {
#ifdef HPCT_HAVE_CUDA
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: test_cuda_* compare the backend with the CPU";
#endif
  const ExecContext cuda{Device::CUDA, nullptr};
  std::vector<float> x(16, 1.0f);
  try {
    gelu_forward(cuda, x.data(), x.data(), 16);
    FAIL() << "expected hpct::Error";
  } catch (const hpct::Error& e) {
    const std::string msg = e.cause();
    EXPECT_NE(msg.find("gelu_forward"), std::string::npos) << msg;
#ifndef HPCT_HAVE_CUDA
    EXPECT_NE(msg.find("no CUDA backend"), std::string::npos) << msg;
    EXPECT_NE(msg.find("train.device=cpu"), std::string::npos) << msg;
#endif
  }
  EXPECT_THROW(synchronize(cuda), hpct::Error);
}

}  // namespace
}  // namespace hpct::kernels
