// The ResNet layers with bf16 storage (kernels.hpp, A = bf16): the CPU backend against the reference twins evaluated in
// double on exactly the bf16 inputs (widened), so that the only differences are the backend's fp32 arithmetic and the
// one rounding of each stored bf16 output. Also: oneDNN's bf16 convolutions against the im2col fallback, parameter
// gradients accumulating (+=) in fp32, and run-to-run bitwise reproducibility.
// Legend: N images, C/OC input/output channels, H W input size, K kernel, OH OW output size, HW = H*W.
//
// Tolerances (|got - want| <= atol + rtol |want|, atol = atol_rel * max|want|), and why:
//   - kRound = 2^-8 relative: one rounding to nearest of a stored bf16 value (8-bit significand: half an ulp is at
//     most 2^-8 of the value), taken on every bf16 output (out, dinp); on top of it
//   - 2e-5 / 2e-5 for sums of up to C*KH*KW <= 576 fp32 products (conv out, dinp: oneDNN's or BLAS's order) and the
//     BatchNorm / pooling fp32 expressions, as in test_kernels_conv.cpp;
//   - 1e-4 / 1e-4 for the fp32 parameter gradients (dweight, dbias, dgamma, dbeta): sums over all N*OH*OW positions,
//     as in test_kernels_conv.cpp (the bf16 x bf16 products themselves are exact in fp32);
//   - exact: ReLU and max-pooling select stored values; max-pool's backward adds in output order in fp32 and rounds
//     once, as the float reference does when its sum is rounded;
//   - im2col vs oneDNN: each is within one rounding of the true value, so within two of each other.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/cpu_conv_dnnl.hpp"
#include "kernels/kernels.hpp"
#include "kernels/reference/reference.hpp"

namespace hpct::kernels {
namespace {

namespace ref = hpct::kernels::reference;
namespace dnnl_conv = hpct::kernels::cpu::dnnl_conv;
using test::all_close;
using test::random_bf16;
using test::random_vector;
using Vec = std::vector<double>;
using B16 = std::vector<bf16>;

const ExecContext kCpu{Device::CPU, nullptr};
constexpr double kRound = test::kBf16Rounding;

Vec to_double(const B16& v) { return test::cast_vector<double>(test::to_float_vector(v)); }
// NaN in every element: an output must be written, not read
B16 nan_bf16(size_t n) { return B16(n, to_bf16(std::numeric_limits<float>::quiet_NaN())); }

struct ConvShape {
  int N, C, H, W, OC, K, stride, pad;
};
// test_kernels_conv.cpp's shapes (3x3 pad 1; 3x3 stride 2 on odd sizes; 1x1; 1x1 stride 2; 7x7 stride 2 pad 3; one
// image) and the ResNet-20 layer kinds at a small batch, whose channel counts (16, 32, 64) the AMX kernels take: the
// stem (1 channel), a stage body, a downsampling 3x3 and a 1x1 projection.
const ConvShape kConvShapes[] = {{4, 16, 14, 14, 16, 3, 1, 1}, {3, 8, 15, 13, 12, 3, 2, 1},
                                 {5, 12, 9, 9, 20, 1, 1, 0},   {4, 16, 10, 10, 32, 1, 2, 0},
                                 {2, 3, 21, 17, 8, 7, 2, 3},   {1, 5, 7, 6, 4, 3, 1, 1},
                                 {6, 1, 12, 12, 16, 3, 1, 1},  {6, 32, 8, 8, 32, 3, 1, 1},
                                 {6, 32, 10, 10, 64, 3, 2, 1}, {6, 16, 12, 12, 32, 1, 2, 0}};

// printf into a string (chains of std::string + trip GCC 12's -Wrestrict false positive)
template <typename... Args>
std::string str(const char* fmt, Args... args) {
  char buf[160];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}
std::string name(const ConvShape& s) {
  return str("N%dC%dH%dW%dOC%dK%ds%dp%d", s.N, s.C, s.H, s.W, s.OC, s.K, s.stride, s.pad);
}
int out_size(int in, int k, int stride, int pad) { return (in + 2 * pad - k) / stride + 1; }

// One shape's random bf16 tensors and their double reference results (forward and backward, dweight/dbias from
// non-zero starting values: accumulated).
struct ConvCase {
  ConvShape s;
  int OH, OW;
  B16 x, w, b, dy;
  std::vector<float> dw0, db0;
  Vec out, dx, dw, db;  // reference
  explicit ConvCase(const ConvShape& sh, uint32_t seed = 1) : s(sh) {
    OH = out_size(s.H, s.K, s.stride, s.pad);
    OW = out_size(s.W, s.K, s.stride, s.pad);
    x = random_bf16(static_cast<size_t>(s.N) * s.C * s.H * s.W, seed);
    w = random_bf16(static_cast<size_t>(s.OC) * s.C * s.K * s.K, seed + 1, -0.3, 0.3);
    b = random_bf16(s.OC, seed + 2);
    dy = random_bf16(static_cast<size_t>(s.N) * s.OC * OH * OW, seed + 3);
    dw0 = random_vector(w.size(), seed + 4);
    db0 = random_vector(s.OC, seed + 5);
    const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
    out.assign(dy.size(), 0.0);
    dx.assign(x.size(), 0.0);
    dw = test::cast_vector<double>(dw0);
    db = test::cast_vector<double>(db0);
    ref::conv2d_forward(out.data(), xd.data(), wd.data(), bd.data(), s.N, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride,
                        s.pad);
    ref::conv2d_backward(dx.data(), dw.data(), db.data(), dyd.data(), xd.data(), wd.data(), s.N, s.C, s.H, s.W, s.OC,
                         s.K, s.K, s.stride, s.pad);
  }
  // the reference forward without bias: out - bias
  Vec out_no_bias() const {
    Vec o = out;
    const int64_t OHW = static_cast<int64_t>(OH) * OW;
    for (size_t i = 0; i < o.size(); i++) o[i] -= to_f32(b[(i / OHW) % s.OC]);
    return o;
  }
};

// The backend's results for a case: forward (with or without bias) and backward with the given workspace.
struct ConvRun {
  B16 out, dx;
  std::vector<float> dw, db;
};
ConvRun run_conv(const ConvCase& c, bool with_bias, bool with_dinp, int64_t ws_floats) {
  const ConvShape& s = c.s;
  std::vector<float> ws(static_cast<size_t>(ws_floats), NAN);  // garbage in the workspace must not leak
  ConvRun r{nan_bf16(c.dy.size()), nan_bf16(c.x.size()), c.dw0, c.db0};
  conv2d_forward(kCpu, r.out.data(), c.x.data(), c.w.data(), with_bias ? c.b.data() : nullptr, ws.data(), ws_floats,
                 s.N, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad);
  std::fill(ws.begin(), ws.end(), NAN);
  conv2d_backward(kCpu, with_dinp ? r.dx.data() : nullptr, r.dw.data(), with_bias ? r.db.data() : nullptr, c.dy.data(),
                  c.x.data(), c.w.data(), ws.data(), ws_floats, s.N, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad);
  return r;
}

int64_t planned_floats(const ConvShape& s) {
  return conv2d_workspace_floats(kCpu, s.N, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad, DType::BF16);
}
dnnl_conv::Shape dnnl_shape(const ConvShape& s) { return {s.N, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad}; }

void expect_conv_matches_reference(const ConvCase& c, const ConvRun& r, bool with_bias, bool with_dinp) {
  EXPECT_TRUE(all_close("conv out", r.out, with_bias ? c.out : c.out_no_bias(), kRound + 2e-5, 2e-5));
  if (with_dinp) {
    EXPECT_TRUE(all_close("conv dinp", r.dx, c.dx, kRound + 2e-5, 2e-5));
  }
  EXPECT_TRUE(all_close("conv dweight", r.dw, c.dw, 1e-4, 1e-4));
  if (with_bias) {
    EXPECT_TRUE(all_close("conv dbias", r.db, c.db, 1e-4, 1e-4));
  } else {
    EXPECT_TRUE(test::bitwise_equal("conv dbias untouched", r.db, c.db0));
  }
}

// ---- Conv2d ------------------------------------------------------------------------------------------------
TEST(KernelsConvBf16, Conv2dForwardBackward) {
  for (const ConvShape& s : kConvShapes)
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(name(s) + (with_bias ? " bias" : "") + ": " + dnnl_conv::describe(dnnl_shape(s), DType::BF16));
      const ConvCase c(s);
      expect_conv_matches_reference(c, run_conv(c, with_bias, /*with_dinp=*/true, planned_floats(s)), with_bias, true);
    }
  SCOPED_TRACE("3x1 kernel, stride 2, no dinp");
  // KH != KW: run directly (ConvCase is square)
  const int N = 3, C = 4, H = 9, W = 8, OC = 6, KH = 3, KW = 1, st = 2, pad = 1;
  const int OH = out_size(H, KH, st, pad), OW = out_size(W, KW, st, pad);
  const B16 x = random_bf16(static_cast<size_t>(N) * C * H * W, 20), w = random_bf16(OC * C * KH * KW, 21),
            dy = random_bf16(static_cast<size_t>(N) * OC * OH * OW, 22);
  const int64_t wsz = conv2d_workspace_floats(kCpu, N, C, H, W, OC, KH, KW, st, pad, DType::BF16);
  std::vector<float> ws(static_cast<size_t>(wsz));
  B16 out = nan_bf16(dy.size());
  std::vector<float> dw(w.size(), 0.5f);
  conv2d_forward(kCpu, out.data(), x.data(), w.data(), static_cast<const bf16*>(nullptr), ws.data(), wsz, N, C, H, W,
                 OC, KH, KW, st, pad);
  conv2d_backward(kCpu, static_cast<bf16*>(nullptr), dw.data(), nullptr, dy.data(), x.data(), w.data(), ws.data(), wsz,
                  N, C, H, W, OC, KH, KW, st, pad);
  const Vec xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
  Vec out_ref(dy.size()), dw_ref(w.size(), 0.5);
  ref::conv2d_forward(out_ref.data(), xd.data(), wd.data(), static_cast<const double*>(nullptr), N, C, H, W, OC, KH, KW,
                      st, pad);
  ref::conv2d_backward(static_cast<double*>(nullptr), dw_ref.data(), static_cast<double*>(nullptr), dyd.data(),
                       xd.data(), wd.data(), N, C, H, W, OC, KH, KW, st, pad);
  EXPECT_TRUE(all_close("conv out 3x1", out, out_ref, kRound + 2e-5, 2e-5));
  EXPECT_TRUE(all_close("conv dweight 3x1", dw, dw_ref, 1e-4, 1e-4));
}

// The im2col fallback (the path of CPUs without bf16 instructions, of builds without oneDNN, and of HPCT_CONV=im2col)
// against oneDNN's bf16 primitives on the same inputs: a workspace planned for one image is smaller than oneDNN's
// buffers for eight, so the same call runs im2col on one slot.
TEST(KernelsConvBf16, Im2colFallbackMatchesOneDnn) {
  for (const ConvShape& s : {ConvShape{8, 16, 14, 14, 32, 3, 1, 1}, ConvShape{8, 32, 9, 9, 64, 3, 2, 1},
                             ConvShape{8, 16, 12, 12, 32, 1, 2, 0}}) {
    SCOPED_TRACE(name(s));
    const int64_t dnnl_floats = dnnl_conv::workspace_floats(dnnl_shape(s), DType::BF16);
    if (dnnl_floats < 0) GTEST_SKIP() << "no oneDNN path here: " << dnnl_conv::describe(dnnl_shape(s), DType::BF16);
    const int64_t one_image = conv2d_workspace_floats(kCpu, 1, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad,
                                                      DType::BF16);
    ASSERT_LT(one_image, dnnl_floats) << "the small workspace would still take the oneDNN path";
    const ConvCase c(s, 30);
    const ConvRun onednn = run_conv(c, true, true, planned_floats(s)), im2col = run_conv(c, true, true, one_image);
    expect_conv_matches_reference(c, onednn, true, true);
    expect_conv_matches_reference(c, im2col, true, true);
    EXPECT_TRUE(all_close("out im2col vs oneDNN", im2col.out, onednn.out, 2 * kRound + 4e-5, 4e-5));
    EXPECT_TRUE(all_close("dinp im2col vs oneDNN", im2col.dx, onednn.dx, 2 * kRound + 4e-5, 4e-5));
    EXPECT_TRUE(all_close("dweight im2col vs oneDNN", im2col.dw, onednn.dw, 1e-4, 1e-4));
  }
}

// Parameter gradients accumulate in fp32 (+=): two backward calls add twice the gradient to what was there, on the
// oneDNN path (a reorder with a sum post-op) and on the im2col path (per-thread partials added in).
TEST(KernelsConvBf16, ParameterGradientsAccumulate) {
  const ConvShape s{6, 16, 10, 10, 32, 3, 1, 1};
  const ConvCase c(s, 40);
  const int64_t one_image = conv2d_workspace_floats(kCpu, 1, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad,
                                                    DType::BF16);
  const int64_t dnnl_floats = dnnl_conv::workspace_floats(dnnl_shape(s), DType::BF16);
  if (dnnl_floats >= 0) {
    ASSERT_LT(one_image, dnnl_floats) << "the small workspace would still take the oneDNN path";
  }
  for (const int64_t wsz : {planned_floats(s), one_image}) {
    SCOPED_TRACE(wsz == one_image ? "one-image workspace" : "planned workspace");
    std::vector<float> ws(static_cast<size_t>(wsz));
    std::vector<float> dw = c.dw0, db = c.db0;
    B16 dx = nan_bf16(c.x.size());
    for (int call = 0; call < 2; call++)
      conv2d_backward(kCpu, dx.data(), dw.data(), db.data(), c.dy.data(), c.x.data(), c.w.data(), ws.data(), wsz, s.N,
                      s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad);
    Vec dw2(dw.size()), db2(db.size());  // dw0 + 2 (dw_ref - dw0)
    for (size_t i = 0; i < dw.size(); i++) dw2[i] = 2 * c.dw[i] - c.dw0[i];
    for (size_t i = 0; i < db.size(); i++) db2[i] = 2 * c.db[i] - c.db0[i];
    EXPECT_TRUE(all_close("dweight after two calls", dw, dw2, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("dbias after two calls", db, db2, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("dinp after two calls (assigned)", dx, c.dx, kRound + 2e-5, 2e-5));
  }
}

// Run to run, bitwise the same outputs at a fixed thread count, on ResNet-20 stage shapes.
TEST(KernelsConvBf16, Conv2dIsBitwiseReproducible) {
  for (const ConvShape& s : {ConvShape{16, 16, 28, 28, 16, 3, 1, 1}, ConvShape{16, 16, 28, 28, 32, 3, 2, 1},
                             ConvShape{16, 64, 7, 7, 64, 3, 1, 1}, ConvShape{16, 32, 14, 14, 64, 1, 2, 0}}) {
    SCOPED_TRACE(name(s));
    const ConvCase c(s, 50);
    const ConvRun a = run_conv(c, false, true, planned_floats(s)), b = run_conv(c, false, true, planned_floats(s));
    EXPECT_TRUE(test::bitwise_equal("conv out", a.out, b.out));
    EXPECT_TRUE(test::bitwise_equal("conv dinp", a.dx, b.dx));
    EXPECT_TRUE(test::bitwise_equal("conv dweight", a.dw, b.dw));
  }
}

// The implementation the conv path takes, when the test's registration names one (HPCT_TEST_EXPECT_CONV: a prefix of
// dnnl_conv::describe(), e.g. "im2col" under HPCT_CONV=im2col, "fp32 compute" under HPCT_CONV=fp32 and under
// DNNL_MAX_CPU_ISA=AVX512_CORE, whose bf16 kernels oneDNN only emulates): the environment must really have switched the
// path the other tests ran.
TEST(KernelsConvBf16, ConvPathIsTheExpectedOne) {
  const char* expect = std::getenv("HPCT_TEST_EXPECT_CONV");
  const ConvShape s{8, 16, 14, 14, 32, 3, 1, 1};
  const std::string path = dnnl_conv::describe(dnnl_shape(s), DType::BF16);
  if (!expect) GTEST_SKIP() << "no expectation set (HPCT_TEST_EXPECT_CONV); this machine: " << path;
  if (path.rfind("im2col (built without oneDNN)", 0) == 0) GTEST_SKIP() << path;
  EXPECT_EQ(path.rfind(expect, 0), 0u) << "conv path: " << path << "; expected it to start with '" << expect << "'";
}

// ---- BatchNorm2d ------------------------------------------------------------------------------------------
struct BnShape {
  int N, C, HW;
  double lo, hi;  // input range
};
// the fp32 test's shapes; the offset case keeps mean / std ~ 100 (bf16 spacing 0.5 there: a few distinct values); the
// last one's channels (512 KB each) are blocked two at a time by the CPU backend, over threads with 2 and 3 channels
const BnShape kBnShapes[] = {
    {4, 16, 196, -3, 5}, {3, 5, 49, 99, 101}, {8, 64, 64, -1, 1}, {2, 3, 1, -2, 2}, {64, 5, 4096, -2, 2}};

TEST(KernelsConvBf16, BatchNormForwardBackward) {
  const float eps = 1e-5f;
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(str("N%dC%dHW%d", s.N, s.C, s.HW));
    const int N = s.N, C = s.C, HW = s.HW;
    const size_t n = static_cast<size_t>(N) * C * HW;
    const B16 inp = random_bf16(n, 10, s.lo, s.hi), gamma = random_bf16(C, 11, 0.5, 1.5), beta = random_bf16(C, 12);
    B16 out = nan_bf16(n);
    std::vector<float> stats(3 * C), mean(C), rstd(C);
    batchnorm2d_forward_train(kCpu, out.data(), stats.data(), mean.data(), rstd.data(), inp.data(), gamma.data(),
                              beta.data(), N, C, HW, eps);
    const Vec inp_d = to_double(inp), gamma_d = to_double(gamma), beta_d = to_double(beta);
    Vec out_d(n), stats_d(3 * C), mean_d(C), rstd_d(C);
    ref::batchnorm2d_forward_train(out_d.data(), stats_d.data(), mean_d.data(), rstd_d.data(), inp_d.data(),
                                   gamma_d.data(), beta_d.data(), N, C, HW, 1e-5);
    // statistics in double from exact inputs: as accurate as in fp32
    EXPECT_TRUE(all_close("bn stats", stats, stats_d, 1e-6, 0));
    EXPECT_TRUE(all_close("bn mean", mean, mean_d, 1e-7, 0));
    EXPECT_TRUE(all_close("bn rstd", rstd, rstd_d, 1e-6, 0));
    EXPECT_TRUE(all_close("bn out", out, out_d, kRound + 2e-5, 2e-5));

    // the SyncBN path at one rank is the same computation, bit for bit
    std::vector<float> local(3 * C), merged(3 * C), mean2(C), rstd2(C);
    B16 out2 = nan_bf16(n);
    batchnorm2d_local_stats(kCpu, local.data(), inp.data(), N, C, HW);
    batchnorm2d_merge_stats(kCpu, merged.data(), local.data(), 1, C);
    batchnorm2d_forward_apply(kCpu, out2.data(), mean2.data(), rstd2.data(), inp.data(), gamma.data(), beta.data(),
                              merged.data(), N, C, HW, eps);
    EXPECT_TRUE(test::bitwise_equal("bn out, split path", out2, out));

    // eval forward with running statistics
    const auto rm = random_vector(C, 13), rv = random_vector(C, 14, 0.5, 1.5);
    B16 oe = nan_bf16(n);
    batchnorm2d_forward_eval(kCpu, oe.data(), inp.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                             eps);
    Vec oe_d(n);
    const Vec rm_d = test::cast_vector<double>(rm), rv_d = test::cast_vector<double>(rv);
    ref::batchnorm2d_forward_eval(oe_d.data(), inp_d.data(), gamma_d.data(), beta_d.data(), rm_d.data(), rv_d.data(), N,
                                  C, HW, 1e-5);
    EXPECT_TRUE(all_close("bn eval out", oe, oe_d, kRound + 2e-5, 2e-5));

    // backward from the saved statistics, against the double reference
    const B16 dout = random_bf16(n, 15);
    B16 dinp = nan_bf16(n);
    auto dg = random_vector(C, 16), dbt = random_vector(C, 17);
    Vec dinp_d(n), dg_d = test::cast_vector<double>(dg), dbt_d = test::cast_vector<double>(dbt);
    batchnorm2d_backward(kCpu, dinp.data(), dg.data(), dbt.data(), dout.data(), inp.data(), mean.data(), rstd.data(),
                         gamma.data(), N, C, HW);
    const Vec dout_d = to_double(dout), mean_f = test::cast_vector<double>(mean),
              rstd_f = test::cast_vector<double>(rstd);
    ref::batchnorm2d_backward(dinp_d.data(), dg_d.data(), dbt_d.data(), dout_d.data(), inp_d.data(), mean_f.data(),
                              rstd_f.data(), gamma_d.data(), N, C, HW);
    EXPECT_TRUE(all_close("bn dinp", dinp, dinp_d, kRound + 1e-4, 1e-4));
    EXPECT_TRUE(all_close("bn dgamma", dg, dg_d, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("bn dbeta", dbt, dbt_d, 1e-4, 1e-4));

    // the SyncBN backward at one rank: local sums (float), then apply with the whole count
    std::vector<float> sums(2 * C), dg2(C, 0.0f), dbt2(C, 0.0f);
    B16 dinp2 = nan_bf16(n);
    batchnorm2d_backward_local_sums(kCpu, sums.data(), dg2.data(), dbt2.data(), dout.data(), inp.data(), mean.data(),
                                    rstd.data(), N, C, HW);
    batchnorm2d_backward_apply(kCpu, dinp2.data(), dout.data(), inp.data(), mean.data(), rstd.data(), gamma.data(),
                               sums.data(), static_cast<int64_t>(N) * HW, N, C, HW);
    EXPECT_TRUE(all_close("bn dinp, split path", dinp2, dinp_d, kRound + 1e-4, 1e-4));
    Vec sums_d(2 * C), dg2_d(C, 0.0), dbt2_d(C, 0.0);
    ref::batchnorm2d_backward_local_sums(sums_d.data(), dg2_d.data(), dbt2_d.data(), dout_d.data(), inp_d.data(),
                                         mean_f.data(), rstd_f.data(), N, C, HW);
    EXPECT_TRUE(all_close("bn local sums", sums, sums_d, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("bn dgamma, split path", dg2, dg2_d, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("bn dbeta, split path", dbt2, dbt2_d, 1e-4, 1e-4));
  }
}

// ---- ReLU, pooling --------------------------------------------------------------------------------------------
TEST(KernelsConvBf16, ReluForwardBackwardInPlace) {
  const int64_t n = 50001;  // above the parallel threshold, odd
  B16 inp = random_bf16(n, 30);
  // the edges of `x > 0`: signed zeros, infinities, NaNs of both signs, the smallest subnormals
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f, -0.0f, inf, -inf, nan, -nan, 1e-40f, -1e-40f};
  for (size_t i = 0; i < std::size(specials); i++) inp[i * 997] = to_bf16(specials[i]);
  const B16 dout = random_bf16(n, 31);
  // the float reference on the same values, its outputs stored as bf16 (exact: they are inputs)
  const auto inp_f = test::to_float_vector(inp), dout_f = test::to_float_vector(dout);
  std::vector<float> out_ref(n), dinp_ref(n);
  ref::relu_forward(out_ref.data(), inp_f.data(), n);
  ref::relu_backward(dinp_ref.data(), dout_f.data(), out_ref.data(), n);
  B16 out = nan_bf16(n);
  relu_forward(kCpu, out.data(), inp.data(), n);
  EXPECT_TRUE(test::bitwise_equal("relu out", out, test::to_bf16_vector(out_ref)));
  B16 x = inp;
  relu_forward(kCpu, x.data(), x.data(), n);  // in place
  EXPECT_TRUE(test::bitwise_equal("relu in place", x, out));
  B16 dinp = nan_bf16(n);
  relu_backward(kCpu, dinp.data(), dout.data(), out.data(), n);
  EXPECT_TRUE(test::bitwise_equal("relu dinp", dinp, test::to_bf16_vector(dinp_ref)));
  B16 d = dout;
  relu_backward(kCpu, d.data(), d.data(), out.data(), n);
  EXPECT_TRUE(test::bitwise_equal("relu dinp in place", d, dinp));
}

TEST(KernelsConvBf16, MaxPoolForwardBackward) {
  struct P {
    int N, C, H, W, K, stride, pad;
  };
  for (const P& p :
       {P{2, 3, 16, 16, 3, 2, 1}, P{3, 4, 15, 13, 3, 2, 1}, P{2, 2, 8, 8, 2, 2, 0}, P{1, 3, 7, 9, 3, 1, 1}}) {
    SCOPED_TRACE(str("H%dW%dK%d", p.H, p.W, p.K));
    const int OH = out_size(p.H, p.K, p.stride, p.pad), OW = out_size(p.W, p.K, p.stride, p.pad);
    const size_t no = static_cast<size_t>(p.N) * p.C * OH * OW, ni = static_cast<size_t>(p.N) * p.C * p.H * p.W;
    // values on a coarse grid: ties happen, and the first maximum must win in both
    auto grid = random_vector(ni, 40);
    for (auto& v : grid) v = std::round(v * 4) / 4;
    const B16 inp = test::to_bf16_vector(grid);
    // dout with a full bf16 significand: sums of overlapping windows (stride 1) must be rounded once, not per add
    const B16 dout = random_bf16(no, 41);
    B16 out = nan_bf16(no), dinp = nan_bf16(ni);
    std::vector<int32_t> idx(no), idx_ref(no);
    maxpool2d_forward(kCpu, out.data(), idx.data(), inp.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    maxpool2d_backward(kCpu, dinp.data(), dout.data(), idx.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    const auto inp_f = test::to_float_vector(inp), dout_f = test::to_float_vector(dout);
    std::vector<float> out_ref(no), dinp_ref(ni);
    ref::maxpool2d_forward(out_ref.data(), idx_ref.data(), inp_f.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    ref::maxpool2d_backward(dinp_ref.data(), dout_f.data(), idx_ref.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    EXPECT_TRUE(test::bitwise_equal("maxpool out", out, test::to_bf16_vector(out_ref)));
    EXPECT_EQ(idx, idx_ref);
    EXPECT_TRUE(test::bitwise_equal("maxpool dinp", dinp, test::to_bf16_vector(dinp_ref)));
  }
}

TEST(KernelsConvBf16, GlobalAvgPoolForwardBackward) {
  const int N = 5, C = 7, HW = 49;
  const B16 inp = random_bf16(static_cast<size_t>(N) * C * HW, 50), dout = random_bf16(N * C, 51);
  B16 out = nan_bf16(N * C), dinp = nan_bf16(inp.size());
  global_avgpool_forward(kCpu, out.data(), inp.data(), N, C, HW);
  global_avgpool_backward(kCpu, dinp.data(), dout.data(), N, C, HW);
  const Vec inp_d = to_double(inp), dout_d = to_double(dout);
  Vec out_d(N * C), dinp_d(inp.size());
  ref::global_avgpool_forward(out_d.data(), inp_d.data(), N, C, HW);
  ref::global_avgpool_backward(dinp_d.data(), dout_d.data(), N, C, HW);
  EXPECT_TRUE(all_close("avgpool out", out, out_d, kRound + 2e-5, 2e-5));
  EXPECT_TRUE(all_close("avgpool dinp", dinp, dinp_d, kRound + 1e-6, 0));
}

}  // namespace
}  // namespace hpct::kernels
