// The CUDA backend's core kernels (lib/kernels/cuda/cuda_core_kernels.cuh) run on the host emulation
// (cuda_emu.hpp), at the launch geometry cuda_core.cu uses, against the CPU backend. Every launch sequence runs under
// three schedules (in-order, shuffled, run-ahead: emulate_schedules) and must give the same bits every time.
//
// Tolerances: those of the GPU test of the same ops (tests/unit/kernels/test_cuda_core.cpp, where they are
// explained): exact for one IEEE operation per element and for the sums the kernels add in the CPU's order (scale,
// residual, ReLU, the embedding forward, dwte, dwpe); rtol 1e-6 for the double-accumulated reductions (sum, LayerNorm
// dweight / dbias: 1e-6 / 1e-7 as there), 1e-12 for sum_squares_accumulate's double; rtol 1e-5, atol_rel 1e-6 for
// pointwise formulas of several operations (GELU, AdamW, SGD) and the LayerNorm rows.
//
// The shapes hit the kernels' edges: sizes that are not multiples of the 256-thread block, one element, n = 0 (the
// reduction still writes 0), unaligned pointers (the reduction's float4 path off), C above the dwte kernel's
// 128-column block, N above the LayerNorm dweight kernel's 16 row groups, C below a warp, a negative token.
#include "cuda_emu.hpp"  // first: the CUDA surface the kernel header compiles against
#include "kernels/cuda/cuda_core_kernels.cuh"
//
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "emu_test_util.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"
#include "kernels/optim_kernels.hpp"

namespace hpct::kernels {
namespace {

namespace cu = cuda;
using test::all_close;
using test::bitwise_equal;
using test::cpu_ctx;
using test::emu_output;
using test::emulate_schedules;
using test::random_ints;
using test::random_vector;
using test::sz;

// ---- reductions --------------------------------------------------------------------------------------------------
TEST(EmuCore, SumAtOddSizesAndAlignments) {
  const auto x = random_vector(100003 + 3, 4, -1.0, 2.0);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{1025}, int64_t{4099}, int64_t{100003}}) {
    for (int off = 0; off < 4; off++) {
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      const float* xp = x.data() + off;
      std::vector<float> got{123.0f};  // assigned, whatever was there
      ASSERT_TRUE(emulate_schedules(
          [&] {
            EMU_LAUNCH(cu::reduce_kernel<false>, cu::reduce_shape(), xp, n, cu::float4_aligned(xp), got.data(),
                       nullptr);
          },
          {emu_output("sum", got)}));
      float want = 0.0f;
      sum(cpu_ctx(), &want, xp, n);
      EXPECT_TRUE(all_close("sum", got.data(), &want, 1, 1e-6, 0.0));
    }
  }
}

TEST(EmuCore, SumSquaresAccumulatesInDouble) {
  const auto x = random_vector(77777, 5, -3.0, 3.0);
  for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{4097}, int64_t{77776}}) {
    for (int off : {0, 1}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      const float* xp = x.data() + off;
      std::vector<double> got{3.25};  // += : the previous value is kept
      ASSERT_TRUE(emulate_schedules(
          [&] {
            for (int k = 0; k < 2; k++)
              EMU_LAUNCH(cu::reduce_kernel<true>, cu::reduce_shape(), xp, n, cu::float4_aligned(xp), nullptr,
                         got.data());
          },
          {emu_output("sum_squares", got)}));
      double want = 3.25;
      sum_squares_accumulate(cpu_ctx(), &want, xp, n);
      sum_squares_accumulate(cpu_ctx(), &want, xp, n);
      EXPECT_TRUE(all_close("sum_squares", got.data(), &want, 1, 1e-12, 0.0));
    }
  }
}

// ---- pointwise -------------------------------------------------------------------------------------------------------
std::vector<float> with_specials(std::vector<float> v) {
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-20f, -1e-20f, 10.0f, -10.0f, 30.0f, -30.0f, -0.75f};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); i++) v[i] = specials[i];
  return v;
}

TEST(EmuCore, ScaleResidualAndReluAreExact) {
  for (int64_t n : {int64_t{1}, int64_t{257}, int64_t{5003}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto a = with_specials(random_vector(sz(n), 7)), b = random_vector(sz(n), 8), g = random_vector(sz(n), 9);
    // scale
    auto x = b;
    ASSERT_TRUE(emulate_schedules([&] { EMU_LAUNCH(cu::scale_kernel, cu::elementwise_shape(n), x.data(), -1.7f, n); },
                                  {emu_output("scale", x)}));
    auto want = b;
    scale(cpu_ctx(), want.data(), -1.7f, n);
    EXPECT_TRUE(bitwise_equal("scale", x, want));
    // residual, out of place and in place
    std::vector<float> out(sz(n), 5.0f), inplace = a;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::residual_kernel, cu::elementwise_shape(n), out.data(), a.data(), b.data(), n);
          EMU_LAUNCH(cu::residual_kernel, cu::elementwise_shape(n), inplace.data(), inplace.data(), b.data(), n);
        },
        {emu_output("residual", out), emu_output("residual in place", inplace)}));
    std::vector<float> want_res(sz(n));
    residual_forward(cpu_ctx(), want_res.data(), a.data(), b.data(), n);
    EXPECT_TRUE(bitwise_equal("residual", out, want_res));
    EXPECT_TRUE(bitwise_equal("residual in place", inplace, want_res));
    // ReLU forward and backward
    std::vector<float> relu(sz(n), 5.0f), drelu(sz(n), 5.0f);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::relu_forward_kernel, cu::elementwise_shape(n), relu.data(), a.data(), n);
          EMU_LAUNCH(cu::relu_backward_kernel, cu::elementwise_shape(n), drelu.data(), g.data(), relu.data(), n);
        },
        {emu_output("relu", relu), emu_output("drelu", drelu)}));
    std::vector<float> want_relu(sz(n)), want_drelu(sz(n));
    relu_forward(cpu_ctx(), want_relu.data(), a.data(), n);
    relu_backward(cpu_ctx(), want_drelu.data(), g.data(), want_relu.data(), n);
    EXPECT_TRUE(bitwise_equal("relu_forward", relu, want_relu));
    EXPECT_TRUE(bitwise_equal("relu_backward", drelu, want_drelu));
  }
}

TEST(EmuCore, GeluForwardBackward) {
  for (int64_t n : {int64_t{1}, int64_t{4009}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = with_specials(random_vector(sz(n), 10, -6.0, 6.0));
    if (n > 3) x[2] = 100.0f, x[3] = -100.0f;  // finite extremes instead of the infinities
    const auto dout = random_vector(sz(n), 11);
    std::vector<float> out(sz(n), 5.0f), dinp(sz(n), 5.0f);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::gelu_forward_kernel, cu::elementwise_shape(n), out.data(), x.data(), n);
          EMU_LAUNCH(cu::gelu_backward_kernel, cu::elementwise_shape(n), dinp.data(), x.data(), dout.data(), n);
        },
        {emu_output("gelu", out), emu_output("dgelu", dinp)}));
    std::vector<float> want_out(sz(n)), want_dinp(sz(n));
    gelu_forward(cpu_ctx(), want_out.data(), x.data(), n);
    gelu_backward(cpu_ctx(), want_dinp.data(), x.data(), dout.data(), n);
    EXPECT_TRUE(all_close("gelu_forward", out, want_out, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("gelu_backward", dinp, want_dinp, 1e-5, 1e-6));
  }
}

// ---- optimizers ---------------------------------------------------------------------------------------------------
TEST(EmuCore, AdamwOverSeveralSteps) {
  const int64_t n = 3011;
  auto p = random_vector(sz(n), 12), m = random_vector(sz(n), 13, -0.1, 0.1), v = random_vector(sz(n), 14, 0.0, 0.01);
  auto ep = p, em = m, ev = v;
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
  for (int t = 1; t <= 3; t++) {
    SCOPED_TRACE("t=" + std::to_string(t));
    const auto g = random_vector(sz(n), 20 + t);
    const cu::AdamwScalars k = cu::adamw_scalars(lr, b1, b2, wd, t);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::adamw_kernel, cu::elementwise_shape(n), ep.data(), g.data(), em.data(), ev.data(), n, b1, b2,
                     eps, gs, k.decay, k.step_size, k.bc2_sqrt, k.one_minus_b1, k.one_minus_b2);
        },
        {emu_output("params", ep), emu_output("m", em), emu_output("v", ev)}));
    adamw_update(cpu_ctx(), p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, gs, t);
    EXPECT_TRUE(all_close("adamw params", ep, p, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("adamw m", em, m, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("adamw v", ev, v, 1e-5, 1e-6));
  }
}

TEST(EmuCore, SgdInEveryMode) {
  const int64_t n = 2011;
  struct Mode {
    float momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Mode md : {Mode{0.0f, 0.0f, 5e-4f, false}, Mode{0.9f, 0.0f, 5e-4f, false}, Mode{0.9f, 0.1f, 0.0f, false},
                        Mode{0.9f, 0.0f, 1e-4f, true}}) {
    SCOPED_TRACE("momentum=" + std::to_string(md.momentum) + " nesterov=" + std::to_string(md.nesterov));
    auto p = random_vector(sz(n), 30), ep = p;
    // garbage before the first step: it must be assigned, never read
    std::vector<float> buf(sz(n), std::numeric_limits<float>::quiet_NaN()), ebuf = buf;
    float* buf_ptr = md.momentum == 0.0f ? nullptr : buf.data();
    float* ebuf_ptr = md.momentum == 0.0f ? nullptr : ebuf.data();
    for (int step = 0; step < 3; step++) {
      const auto g = random_vector(sz(n), 40 + step);
      const cu::SgdMode mode = cu::sgd_mode(md.momentum, step == 0);
      const float lr = 0.05f, take = 1.0f - md.dampening, gs = 0.8f;
      ASSERT_TRUE(emulate_schedules(
          [&] {
            EMU_LAUNCH(cu::sgd_kernel, cu::elementwise_shape(n), ep.data(), g.data(), ebuf_ptr, n, lr, md.momentum,
                       take, md.weight_decay, md.nesterov, gs, mode);
          },
          {emu_output("params", ep), emu_output("buf", ebuf)}));
      sgd_update(cpu_ctx(), p.data(), g.data(), buf_ptr, n, lr, md.momentum, md.dampening, md.weight_decay, md.nesterov,
                 gs, step == 0);
      EXPECT_TRUE(all_close("sgd params step " + std::to_string(step), ep, p, 1e-5, 1e-6));
      if (buf_ptr) {
        EXPECT_TRUE(all_close("sgd buf step " + std::to_string(step), ebuf, buf, 1e-5, 1e-6));
      }
    }
  }
}

// ---- embedding ----------------------------------------------------------------------------------------------------
// cuda_core.cu's launch_encoder_forward / launch_encoder_backward, emulated
void emu_encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int64_t v0, int64_t Vl,
                         int B, int T, int C) {
  const int64_t N = int64_t{B} * T;
  EMU_LAUNCH(cu::encoder_forward_kernel, cu::elementwise_shape(N * C), out, inp, wte, wpe, v0, Vl, N, T, C);
}
void emu_encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int64_t v0, int64_t Vl,
                          int B, int T, int C) {
  const int64_t N = int64_t{B} * T;
  EMU_LAUNCH(cu::encoder_backward_wte_kernel, cu::encoder_wte_shape(C), dwte, dout, inp, v0, Vl, N, C);
  if (dwpe) EMU_LAUNCH(cu::encoder_backward_wpe_kernel, cu::elementwise_shape(int64_t{T} * C), dwpe, dout, B, T, C);
}

TEST(EmuCore, EncoderForwardBackwardEqualCpuBitForBit) {
  constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  for (int C : {37, 133}) {  // 133: two column blocks of the dwte kernel, the second partly idle
    SCOPED_TRACE("C=" + std::to_string(C));
    const int B = 3, T = 29, Vp = 53;
    const size_t N = sz(int64_t{B} * T);
    const auto inp = random_ints(N, 50, 0, 9);  // repeated tokens: several positions add into one dwte row
    const auto wte = random_vector(sz(int64_t{Vp} * C), 51), wpe = random_vector(sz(int64_t{T} * C), 52);
    const auto dout = random_vector(N * C, 53);
    auto dwte = random_vector(sz(int64_t{Vp} * C), 54), dwpe = random_vector(sz(int64_t{T} * C), 55);
    auto e_dwte = dwte, e_dwpe = dwpe;
    std::vector<float> out(N * C, 5.0f);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), 0, kUnbounded, B, T, C);
          emu_encoder_backward(e_dwte.data(), e_dwpe.data(), dout.data(), inp.data(), 0, kUnbounded, B, T, C);
        },
        {emu_output("out", out), emu_output("dwte", e_dwte), emu_output("dwpe", e_dwpe)}));
    std::vector<float> want(N * C);
    encoder_forward(cpu_ctx(), want.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    encoder_backward(cpu_ctx(), dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
    EXPECT_TRUE(bitwise_equal("encoder_forward", out, want));
    EXPECT_TRUE(bitwise_equal("encoder_backward dwte", e_dwte, dwte));
    EXPECT_TRUE(bitwise_equal("encoder_backward dwpe", e_dwpe, dwpe));
  }
}

TEST(EmuCore, EncoderVocabParallelEqualsCpuBitForBit) {
  const int B = 2, T = 41, C = 45, Vp = 64, Vl = 16;
  const size_t N = sz(int64_t{B} * T);
  const auto inp = random_ints(N, 60, 0, Vp);
  const auto dout = random_vector(N * C, 61);
  const auto wpe = random_vector(sz(int64_t{T} * C), 62);
  for (int v0 : {0, 16, 48}) {
    const auto wte_local = random_vector(sz(int64_t{Vl} * C), 63 + v0);
    for (bool with_wpe : {true, false}) {
      SCOPED_TRACE("v0=" + std::to_string(v0) + (with_wpe ? " wpe" : " no wpe"));
      std::vector<float> out(N * C, 5.0f);
      auto dwte = random_vector(sz(int64_t{Vl} * C), 70), dwpe = random_vector(sz(int64_t{T} * C), 71);
      auto e_dwte = dwte, e_dwpe = dwpe;
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_encoder_forward(out.data(), inp.data(), wte_local.data(), with_wpe ? wpe.data() : nullptr, v0, Vl, B, T,
                                C);
            emu_encoder_backward(e_dwte.data(), with_wpe ? e_dwpe.data() : nullptr, dout.data(), inp.data(), v0, Vl, B,
                                 T, C);
          },
          {emu_output("out", out), emu_output("dwte", e_dwte), emu_output("dwpe", e_dwpe)}));
      std::vector<float> want(N * C);
      encoder_forward_vocab_parallel(cpu_ctx(), want.data(), inp.data(), wte_local.data(),
                                     with_wpe ? wpe.data() : nullptr, v0, Vl, B, T, C);
      encoder_backward_vocab_parallel(cpu_ctx(), dwte.data(), with_wpe ? dwpe.data() : nullptr, dout.data(), inp.data(),
                                      v0, Vl, B, T, C);
      EXPECT_TRUE(bitwise_equal("forward", out, want));
      EXPECT_TRUE(bitwise_equal("dwte", e_dwte, dwte));
      EXPECT_TRUE(bitwise_equal("dwpe (untouched without wpe)", e_dwpe, dwpe));
    }
  }
}

// A negative token: the CPU backend throws; the kernel writes NaN into its row (forward) and skips it (backward).
TEST(EmuCore, EncoderMarksANegativeTokenWithNaN) {
  const int B = 1, T = 3, C = 5, Vp = 4;
  const std::vector<int32_t> inp{1, -1, 2};
  const auto wte = random_vector(sz(int64_t{Vp} * C), 80), wpe = random_vector(sz(int64_t{T} * C), 81);
  const auto dout = random_vector(sz(int64_t{T} * C), 82);
  std::vector<float> out(sz(int64_t{T} * C)), dwte(sz(int64_t{Vp} * C), 0.0f), dwpe(sz(int64_t{T} * C), 0.0f);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        emu_encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), 0, Vp, B, T, C);
        emu_encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), 0, Vp, B, T, C);
      },
      {emu_output("out", out), emu_output("dwte", dwte), emu_output("dwpe", dwpe)}));
  for (int c = 0; c < C; c++) {
    EXPECT_EQ(out[sz(c)], wte[sz(C + c)] + wpe[sz(c)]);
    EXPECT_TRUE(std::isnan(out[sz(C + c)]));
    EXPECT_EQ(out[sz(2 * C + c)], wte[sz(2 * C + c)] + wpe[sz(2 * C + c)]);
    EXPECT_EQ(dwte[sz(C + c)], dout[sz(c)]);  // token 1 at position 0 only
    EXPECT_EQ(dwte[sz(2 * C + c)], dout[sz(2 * C + c)]);
    EXPECT_EQ(dwte[sz(c)], 0.0f);
    EXPECT_EQ(dwte[sz(3 * C + c)], 0.0f);
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------------------------------
struct LnShape {
  int N, C;
};

TEST(EmuCore, LayernormForward) {
  // C = 3 below a warp (lanes idle), 77 not a multiple of 32, 1031 one row; N = 13 leaves the last block's warps idle
  for (const LnShape s : {LnShape{13, 77}, LnShape{5, 768}, LnShape{37, 3}, LnShape{1, 1031}}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + (with_bias ? "" : " no bias"));
      const size_t NC = sz(int64_t{s.N} * s.C);
      const auto inp = random_vector(NC, 90, -2.0, 3.0);
      const auto w = random_vector(sz(s.C), 91), b = random_vector(sz(s.C), 92);
      std::vector<float> out(NC, 5.0f), mean(sz(s.N), 5.0f), rstd(sz(s.N), 5.0f);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            EMU_LAUNCH(cu::layernorm_forward_kernel, cu::layernorm_rows_shape(s.N), out.data(), mean.data(),
                       rstd.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, s.N, s.C);
          },
          {emu_output("out", out), emu_output("mean", mean), emu_output("rstd", rstd)}));
      std::vector<float> want(NC), want_mean(sz(s.N)), want_rstd(sz(s.N));
      layernorm_forward(cpu_ctx(), want.data(), want_mean.data(), want_rstd.data(), inp.data(), w.data(),
                        with_bias ? b.data() : nullptr, s.N, s.C);
      EXPECT_TRUE(all_close("out", out, want, 1e-5, 1e-6));
      EXPECT_TRUE(all_close("mean", mean, want_mean, 1e-5, 1e-6));
      EXPECT_TRUE(all_close("rstd", rstd, want_rstd, 1e-5, 1e-6));
    }
  }
}

TEST(EmuCore, LayernormBackwardAccumulates) {
  // N = 1037 > the dweight kernel's 16 row groups; C = 77 and 800 not multiples of its 32-column tile
  for (const LnShape s : {LnShape{13, 77}, LnShape{1037, 77}, LnShape{67, 800}, LnShape{3, 5}}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + (with_bias ? "" : " no dbias"));
      const size_t NC = sz(int64_t{s.N} * s.C), C = sz(s.C);
      const auto inp = random_vector(NC, 100, -2.0, 3.0), dout = random_vector(NC, 101);
      const auto w = random_vector(C, 102), b = random_vector(C, 103);
      std::vector<float> fwd(NC), mean(sz(s.N)), rstd(sz(s.N));
      layernorm_forward(cpu_ctx(), fwd.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), s.N, s.C);
      auto dinp = random_vector(NC, 104), dw = random_vector(C, 105), db = random_vector(C, 106);  // +=
      auto e_dinp = dinp, e_dw = dw, e_db = db;
      ASSERT_TRUE(emulate_schedules(
          [&] {
            EMU_LAUNCH(cu::layernorm_backward_dinp_kernel, cu::layernorm_rows_shape(s.N), e_dinp.data(), dout.data(),
                       inp.data(), w.data(), mean.data(), rstd.data(), s.N, s.C);
            EMU_LAUNCH(cu::layernorm_backward_dweight_kernel, cu::layernorm_params_shape(s.C), e_dw.data(),
                       with_bias ? e_db.data() : nullptr, dout.data(), inp.data(), mean.data(), rstd.data(), s.N, s.C);
          },
          {emu_output("dinp", e_dinp), emu_output("dweight", e_dw), emu_output("dbias", e_db)}));
      layernorm_backward(cpu_ctx(), dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(),
                         w.data(), mean.data(), rstd.data(), s.N, s.C);
      EXPECT_TRUE(all_close("dinp", e_dinp, dinp, 1e-5, 1e-6));
      EXPECT_TRUE(all_close("dweight", e_dw, dw, 1e-6, 1e-7));
      EXPECT_TRUE(all_close("dbias (untouched without it)", e_db, db, 1e-6, 1e-7));
    }
  }
}

}  // namespace
}  // namespace hpct::kernels
