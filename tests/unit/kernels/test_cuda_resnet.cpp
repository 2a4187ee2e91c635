// Backend-vs-CPU tests of lib/kernels/cuda/cuda_resnet.cu: Conv2d (cuDNN), BatchNorm2d (train, the SyncBN pieces,
// eval, backward), MaxPool2d and global average pooling. Each op runs through kernels.hpp's dispatch on Device::CUDA and
// on Device::CPU with the same random inputs. Outputs the CUDA op assigns start as NaN on the device (a value it fails to
// write shows up); outputs it accumulates (+=) start as random values on both sides. Every test skips without a GPU.
// Legend: N images, C/OC input/output channels, H W input size, K kernel, HW = H*W.
//
// Tolerances (|got - want| <= atol + rtol |want|, atol = atol_rel * max|want|), and why:
//   - exact (0, 0): max-pooling (a selection; the backward's gather adds the same floats in the CPU scatter's order),
//     global-average-pool backward (one float division), count columns;
//   - 1e-4 / 1e-4: convolution out, dinp, dweight: fp32 sums of up to C*KH*KW (out, dinp) or N*OH*OW (dweight) products
//     in a different order (cuDNN's implicit GEMM, Winograd or FFT vs oneDNN / OpenBLAS), each erring by ~sqrt(terms)
//     2^-24 of the terms' scale, Winograd/FFT transforms a little more; a wrong index errs by O(1);
//   - 1e-5 / 1e-6 (the fp32 default): everything computed in double on both sides and rounded once to float (BatchNorm
//     statistics, gradient sums, dbias, avg-pool forward) and the pointwise float formulas that follow from them
//     (normalisation, dinp), which may differ by an FMA contraction;
//   - bf16 storage (the Bf16* tests, A = bf16 against the CPU's bf16 ops on the same bf16 inputs): the float tolerance
//     above plus one bf16 ulp (kBf16Ulp, at most 2^-7 of the value) on every bf16 output, which each side rounds once
//     from float values that differ in their last bits; see the convolution test for dweight.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "cuda_test_util.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

using test::all_close;
using test::cpu_ctx;
using test::DeviceBuffer;
using test::gpu_ctx;
using test::random_ints;
using test::random_vector;
using Vec = std::vector<float>;

Vec nan_vector(size_t n) { return Vec(n, NAN); }
using B16 = std::vector<bf16>;
using test::random_bf16;
constexpr double kBf16Ulp = 1.0 / 128.0;

// column k of rows of `stride` floats (stats (C,3), sums (C,2))
Vec column(const Vec& v, int stride, int k) {
  Vec r;
  for (size_t i = static_cast<size_t>(k); i < v.size(); i += static_cast<size_t>(stride)) r.push_back(v[i]);
  return r;
}

bool all_nan(const Vec& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
}

// ---- Conv2d ------------------------------------------------------------------------------------------------
struct ConvShape {
  int N, C, H, W, OC, KH, KW, stride, pad;
  int OH() const { return (H + 2 * pad - KH) / stride + 1; }
  int OW() const { return (W + 2 * pad - KW) / stride + 1; }
  size_t in_size() const { return static_cast<size_t>(N) * C * H * W; }
  size_t out_size() const { return static_cast<size_t>(N) * OC * OH() * OW(); }
  size_t w_size() const { return static_cast<size_t>(OC) * C * KH * KW; }
  std::string name() const {
    return fmt::format("N{} C{} H{} W{} OC{} {}x{} s{} p{}", N, C, H, W, OC, KH, KW, stride, pad);
  }
};

// ResNet's layer kinds on odd sizes: 3x3 pad 1, 3x3 stride 2 (downsampling), 1x1 (pointwise), 1x1 stride 2
// (projection shortcut), 7x7 stride 2 pad 3 (ImageNet stem) on a non-square input, KH != KW on a single image, and
// channel counts that are not multiples of 32 with a longer reduction.
const ConvShape kConvShapes[] = {{3, 5, 11, 9, 7, 3, 3, 1, 1},   {2, 6, 13, 10, 9, 3, 3, 2, 1},
                                 {4, 6, 7, 7, 5, 1, 1, 1, 0},    {3, 8, 9, 9, 12, 1, 1, 2, 0},
                                 {2, 3, 23, 19, 8, 7, 7, 2, 3},  {1, 4, 6, 8, 3, 3, 1, 1, 0},
                                 {2, 37, 10, 10, 33, 3, 3, 1, 1}};

struct ConvCpu {
  Vec out, dinp, dw, db;
};

// The CPU backend's forward and backward on the given inputs (dw0, db0: the accumulators' starting values).
ConvCpu conv_cpu(const ConvShape& s, const Vec& inp, const Vec& w, const Vec* bias, const Vec& dout, const Vec& dw0,
                 const Vec& db0, bool with_dinp) {
  const int64_t wsf = conv2d_workspace_floats(cpu_ctx(), s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
  Vec ws(static_cast<size_t>(std::max<int64_t>(wsf, 1)));
  ConvCpu r{Vec(s.out_size()), Vec(s.in_size()), dw0, db0};
  conv2d_forward(cpu_ctx(), r.out.data(), inp.data(), w.data(), bias ? bias->data() : nullptr, ws.data(), wsf, s.N, s.C,
                 s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
  conv2d_backward(cpu_ctx(), with_dinp ? r.dinp.data() : nullptr, r.dw.data(), bias ? r.db.data() : nullptr,
                  dout.data(), inp.data(), w.data(), ws.data(), wsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride,
                  s.pad);
  return r;
}

void check_conv(const ConvShape& s, bool with_bias, bool with_dinp) {
  SCOPED_TRACE(fmt::format("{}{}{}", s.name(), with_bias ? " bias" : " no bias", with_dinp ? " dinp" : " no dinp"));
  const Vec inp = random_vector(s.in_size(), 11), w = random_vector(s.w_size(), 12, -0.3, 0.3);
  const Vec b = random_vector(static_cast<size_t>(s.OC), 13), dout = random_vector(s.out_size(), 14);
  const Vec dw0 = random_vector(s.w_size(), 15), db0 = random_vector(static_cast<size_t>(s.OC), 16);
  const ConvCpu want = conv_cpu(s, inp, w, with_bias ? &b : nullptr, dout, dw0, db0, with_dinp);

  const int64_t wsf = conv2d_workspace_floats(gpu_ctx(), s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
  ASSERT_GE(wsf, 0);
  const size_t ws_n = static_cast<size_t>(std::max<int64_t>(wsf, 1));
  DeviceBuffer<float> d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_dw(dw0), d_db(db0);
  DeviceBuffer<float> d_out(nan_vector(s.out_size())), d_dinp(nan_vector(s.in_size())), d_ws(nan_vector(ws_n));
  conv2d_forward(gpu_ctx(), d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, d_ws.get(), wsf, s.N,
                 s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
  EXPECT_TRUE(all_close("conv out", d_out.download(), want.out, 1e-4, 1e-4));

  d_ws.upload(nan_vector(ws_n));  // garbage left in the workspace must not leak into the backward either
  conv2d_backward(gpu_ctx(), with_dinp ? d_dinp.get() : nullptr, d_dw.get(), with_bias ? d_db.get() : nullptr,
                  d_dout.get(), d_inp.get(), d_w.get(), d_ws.get(), wsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride,
                  s.pad);
  if (with_dinp) EXPECT_TRUE(all_close("conv dinp", d_dinp.download(), want.dinp, 1e-4, 1e-4));
  else
    EXPECT_TRUE(all_nan(d_dinp.download())) << "dinp = null must leave the buffer alone";
  EXPECT_TRUE(all_close("conv dweight (+=)", d_dw.download(), want.dw, 1e-4, 1e-4));
  if (with_bias) EXPECT_TRUE(all_close("conv dbias (+=)", d_db.download(), want.db, 1e-5, 1e-6));
  else
    EXPECT_EQ(d_db.download(), db0) << "dbias = null must leave the buffer alone";
}

TEST(CudaResnet, Conv2dForwardBackward) {
  HPCT_REQUIRE_GPU();
  for (const ConvShape& s : kConvShapes) {
    check_conv(s, /*with_bias=*/true, /*with_dinp=*/true);
    check_conv(s, /*with_bias=*/false, /*with_dinp=*/false);
  }
}

// train.precision tf32 / bf16 / fp16 on Conv2d: cuDNN tensor ops on fp32 data (TF32 for tf32 and bf16, fp16 conversion
// for fp16; cuda_resnet.cu). The forward output lies within the rounding bound of each output's inner product over
// (C, KH, KW) (cuda_test_util.hpp product_bound, with u = 2^-11 for all three: bf16 runs TF32 convolutions) around
// the exact value, with a deterministic algorithm; the backward's reduced precision is covered end to end by
// check_cuda_run.py's bf16 losses.
TEST(CudaResnet, Conv2dReducedPrecisionWithinRoundingBounds) {
  HPCT_REQUIRE_GPU();
  const ConvShape shapes[] = {
      {3, 5, 11, 9, 7, 3, 3, 1, 1}, {2, 16, 14, 14, 32, 3, 3, 2, 1}, {2, 64, 7, 7, 48, 1, 1, 1, 0}};
  for (const Precision p : {Precision::TF32, Precision::BF16, Precision::FP16}) {
    const ExecContext ctx{Device::CUDA, nullptr, p};
    for (const ConvShape& s : shapes) {
      SCOPED_TRACE(s.name() + " " + precision_name(p));
      const Vec inp = random_vector(s.in_size(), 41), w = random_vector(s.w_size(), 42, -0.3, 0.3);
      const Vec b = random_vector(static_cast<size_t>(s.OC), 43);
      std::vector<double> exact(s.out_size()), bound(s.out_size());
      const int OH = s.OH(), OW = s.OW();
      for (int n = 0; n < s.N; n++)
        for (int o = 0; o < s.OC; o++)
          for (int y = 0; y < OH; y++)
            for (int x = 0; x < OW; x++) {
              double acc = 0, ap = 0, ai = 0;
              for (int c = 0; c < s.C; c++)
                for (int ky = 0; ky < s.KH; ky++)
                  for (int kx = 0; kx < s.KW; kx++) {
                    const int iy = y * s.stride - s.pad + ky, ix = x * s.stride - s.pad + kx;
                    if (iy < 0 || iy >= s.H || ix < 0 || ix >= s.W) continue;
                    const double a = inp[((static_cast<size_t>(n) * s.C + c) * s.H + iy) * s.W + ix];
                    const double k = w[((static_cast<size_t>(o) * s.C + c) * s.KH + ky) * s.KW + kx];
                    acc += a * k, ap += std::fabs(a * k), ai += std::fabs(a) + std::fabs(k);
                  }
              const size_t i = ((static_cast<size_t>(n) * s.OC + o) * OH + y) * OW + x;
              exact[i] = acc + b[static_cast<size_t>(o)];
              bound[i] = test::product_bound(0x1p-11, int64_t{s.C} * s.KH * s.KW, ap, ai,
                                             std::fabs(b[static_cast<size_t>(o)]));
            }
      const int64_t wsf = conv2d_workspace_floats(ctx, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
      DeviceBuffer<float> d_ws(static_cast<size_t>(std::max<int64_t>(wsf, 1))), d_inp(inp), d_w(w), d_b(b);
      DeviceBuffer<float> d_out(nan_vector(s.out_size()));
      conv2d_forward(ctx, d_out.get(), d_inp.get(), d_w.get(), d_b.get(), d_ws.get(), wsf, s.N, s.C, s.H, s.W, s.OC,
                     s.KH, s.KW, s.stride, s.pad);
      const Vec first = d_out.download();
      EXPECT_TRUE(test::within_bounds("conv out", first, exact, bound));
      conv2d_forward(ctx, d_out.get(), d_inp.get(), d_w.get(), d_b.get(), d_ws.get(), wsf, s.N, s.C, s.H, s.W, s.OC,
                     s.KH, s.KW, s.stride, s.pad);
      EXPECT_EQ(d_out.download(), first) << "reduced-precision conv differs between two identical runs";
    }
  }
}

// One workspace, sized for the larger of two layers, serves both in turn; the backward reproduces itself bit for bit.
TEST(CudaResnet, Conv2dSharedWorkspaceDeterministic) {
  HPCT_REQUIRE_GPU();
  const ConvShape a{4, 16, 14, 14, 16, 3, 3, 1, 1}, b{4, 16, 14, 14, 32, 1, 1, 2, 0};
  const int64_t wsf = std::max(
      conv2d_workspace_floats(gpu_ctx(), a.N, a.C, a.H, a.W, a.OC, a.KH, a.KW, a.stride, a.pad),
      conv2d_workspace_floats(gpu_ctx(), b.N, b.C, b.H, b.W, b.OC, b.KH, b.KW, b.stride, b.pad));
  DeviceBuffer<float> d_ws(nan_vector(static_cast<size_t>(std::max<int64_t>(wsf, 1))));
  for (const ConvShape& s : {a, b}) {
    SCOPED_TRACE(s.name());
    const Vec inp = random_vector(s.in_size(), 21), w = random_vector(s.w_size(), 22, -0.3, 0.3);
    const Vec dout = random_vector(s.out_size(), 23), dw0 = random_vector(s.w_size(), 24);
    const Vec db0 = random_vector(static_cast<size_t>(s.OC), 25);
    const ConvCpu want = conv_cpu(s, inp, w, nullptr, dout, dw0, db0, true);
    DeviceBuffer<float> d_inp(inp), d_w(w), d_dout(dout), d_out(nan_vector(s.out_size()));
    conv2d_forward(gpu_ctx(), d_out.get(), d_inp.get(), d_w.get(), static_cast<const float*>(nullptr), d_ws.get(), wsf,
                   s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    EXPECT_TRUE(all_close("conv out", d_out.download(), want.out, 1e-4, 1e-4));
    Vec first_dinp, first_dw, first_db;
    for (int run = 0; run < 2; run++) {
      DeviceBuffer<float> d_dinp(nan_vector(s.in_size())), d_dw(dw0), d_db(db0);
      conv2d_backward(gpu_ctx(), d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(), d_ws.get(),
                      wsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
      const Vec dinp = d_dinp.download(), dw = d_dw.download(), db = d_db.download();
      if (run == 0) {
        EXPECT_TRUE(all_close("conv dinp", dinp, want.dinp, 1e-4, 1e-4));
        EXPECT_TRUE(all_close("conv dweight (+=)", dw, want.dw, 1e-4, 1e-4));
        first_dinp = dinp;
        first_dw = dw;
        first_db = db;
      } else {
        EXPECT_EQ(dinp, first_dinp) << "conv dinp differs between two identical runs";
        EXPECT_EQ(dw, first_dw) << "conv dweight differs between two identical runs";
        EXPECT_EQ(db, first_db) << "conv dbias differs between two identical runs";
      }
    }
  }
}

// No workspace at all: each phase either runs a workspace-free algorithm (and is still right) or fails with an error
// naming the sizes and conv2d_workspace_floats; never a crash or a silent wrong result.
TEST(CudaResnet, Conv2dWithoutWorkspace) {
  HPCT_REQUIRE_GPU();
  const ConvShape s{3, 5, 11, 9, 7, 3, 3, 1, 1};
  const Vec inp = random_vector(s.in_size(), 31), w = random_vector(s.w_size(), 32, -0.3, 0.3);
  const Vec b = random_vector(static_cast<size_t>(s.OC), 33), dout = random_vector(s.out_size(), 34);
  const Vec dw0 = random_vector(s.w_size(), 35), db0 = random_vector(static_cast<size_t>(s.OC), 36);
  const ConvCpu want = conv_cpu(s, inp, w, &b, dout, dw0, db0, true);
  DeviceBuffer<float> d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_dw(dw0), d_db(db0);
  DeviceBuffer<float> d_out(nan_vector(s.out_size())), d_dinp(nan_vector(s.in_size()));
  auto expect_sized_error = [](const hpct::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("conv2d_workspace_floats"), std::string::npos) << what;
    EXPECT_NE(what.find("floats"), std::string::npos) << what;
  };
  try {
    conv2d_forward(gpu_ctx(), d_out.get(), d_inp.get(), d_w.get(), d_b.get(), nullptr, 0, s.N, s.C, s.H, s.W, s.OC,
                   s.KH, s.KW, s.stride, s.pad);
    EXPECT_TRUE(all_close("conv out (no workspace)", d_out.download(), want.out, 1e-4, 1e-4));
  } catch (const hpct::Error& e) {
    expect_sized_error(e);
  }
  try {
    conv2d_backward(gpu_ctx(), d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(), nullptr, 0,
                    s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    EXPECT_TRUE(all_close("conv dinp (no workspace)", d_dinp.download(), want.dinp, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("conv dweight (no workspace)", d_dw.download(), want.dw, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("conv dbias (no workspace)", d_db.download(), want.db, 1e-5, 1e-6));
  } catch (const hpct::Error& e) {
    expect_sized_error(e);
  }
}

// ---- BatchNorm2d -------------------------------------------------------------------------------------------
struct BnShape {
  int N, C, HW;
  size_t size() const { return static_cast<size_t>(N) * C * HW; }
  std::string name() const { return fmt::format("N{} C{} HW{}", N, C, HW); }
};
// a plane longer than the reduction block (1031 > 512 threads), planes shorter than a warp (HW = 1, 9), a channel's
// N*HW above the block size made of short planes (16 x 49), and a channel count (70) that is not a multiple of 32
const BnShape kBnShapes[] = {{3, 5, 37}, {2, 3, 1031}, {5, 4, 1}, {16, 3, 49}, {1, 70, 9}};

TEST(CudaResnet, BatchNormForwardTrainAndEval) {
  HPCT_REQUIRE_GPU();
  int k = 0;
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(s.name());
    const double offset = (k++ % 2) ? 50.0 : 0.0;  // |mean| >> std on every other shape: no cancellation allowed
    const Vec inp = random_vector(s.size(), 41, offset - 1.0, offset + 1.0);
    const Vec gamma = random_vector(static_cast<size_t>(s.C), 42, 0.5, 1.5), beta = random_vector(s.C, 43);
    const float eps = 1e-5f;
    Vec out(s.size()), stats(3 * static_cast<size_t>(s.C)), mean(s.C), rstd(s.C);
    batchnorm2d_forward_train(cpu_ctx(), out.data(), stats.data(), mean.data(), rstd.data(), inp.data(), gamma.data(),
                              beta.data(), s.N, s.C, s.HW, eps);
    DeviceBuffer<float> d_inp(inp), d_gamma(gamma), d_beta(beta), d_out(nan_vector(s.size()));
    DeviceBuffer<float> d_stats(nan_vector(stats.size())), d_mean(nan_vector(s.C)), d_rstd(nan_vector(s.C));
    batchnorm2d_forward_train(gpu_ctx(), d_out.get(), d_stats.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                              d_gamma.get(), d_beta.get(), s.N, s.C, s.HW, eps);
    const Vec g_stats = d_stats.download();
    EXPECT_TRUE(all_close("bn stats count", column(g_stats, 3, 0), column(stats, 3, 0), 0.0, 0.0));
    EXPECT_TRUE(all_close("bn stats mean", column(g_stats, 3, 1), column(stats, 3, 1), 1e-5, 1e-6));
    EXPECT_TRUE(all_close("bn stats M2", column(g_stats, 3, 2), column(stats, 3, 2), 1e-5, 1e-6));
    EXPECT_TRUE(all_close("bn save_mean", d_mean.download(), mean, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("bn save_rstd", d_rstd.download(), rstd, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("bn out", d_out.download(), out, 1e-5, 1e-6));

    // running statistics (+ the unbiased variance), then evaluation with them (skipped at one value per channel:
    // the unbiased variance needs two)
    if (static_cast<int64_t>(s.N) * s.HW > 1) {
      Vec rm = random_vector(s.C, 44), rv = random_vector(s.C, 45, 0.5, 1.5);
      DeviceBuffer<float> d_rm(rm), d_rv(rv);
      batchnorm2d_update_running(cpu_ctx(), rm.data(), rv.data(), stats.data(), s.C, 0.1f);
      batchnorm2d_update_running(gpu_ctx(), d_rm.get(), d_rv.get(), d_stats.get(), s.C, 0.1f);
      EXPECT_TRUE(all_close("bn running_mean", d_rm.download(), rm, 1e-5, 1e-6));
      EXPECT_TRUE(all_close("bn running_var", d_rv.download(), rv, 1e-5, 1e-6));
    }
    const Vec rm = random_vector(s.C, 46, offset - 0.5, offset + 0.5), rv = random_vector(s.C, 47, 0.2, 2.0);
    Vec oe(s.size());
    batchnorm2d_forward_eval(cpu_ctx(), oe.data(), inp.data(), gamma.data(), beta.data(), rm.data(), rv.data(), s.N,
                             s.C, s.HW, eps);
    DeviceBuffer<float> d_rm(rm), d_rv(rv), d_oe(nan_vector(s.size()));
    batchnorm2d_forward_eval(gpu_ctx(), d_oe.get(), d_inp.get(), d_gamma.get(), d_beta.get(), d_rm.get(), d_rv.get(),
                             s.N, s.C, s.HW, eps);
    EXPECT_TRUE(all_close("bn eval out", d_oe.download(), oe, 1e-5, 1e-6));
  }
}

// SyncBN forward over three simulated ranks of different batch sizes: local stats into the rank rows of `gathered`,
// Chan's merge, apply on one rank's images, running statistics from the merged ones.
TEST(CudaResnet, BatchNormSyncForward) {
  HPCT_REQUIRE_GPU();
  const int C = 37, HW = 50, R = 3;
  const int Ns[R] = {2, 3, 1};
  const float eps = 1e-5f;
  std::vector<Vec> inps;
  for (int r = 0; r < R; r++)
    inps.push_back(random_vector(static_cast<size_t>(Ns[r]) * C * HW, 51 + static_cast<uint32_t>(r), 19.0 + r, 21.0));
  Vec gathered(static_cast<size_t>(R) * C * 3), merged(static_cast<size_t>(C) * 3);
  DeviceBuffer<float> d_gathered(nan_vector(gathered.size())), d_merged(nan_vector(merged.size()));
  std::vector<std::unique_ptr<DeviceBuffer<float>>> d_inps;
  for (int r = 0; r < R; r++) {
    batchnorm2d_local_stats(cpu_ctx(), gathered.data() + static_cast<size_t>(r) * C * 3, inps[r].data(), Ns[r], C, HW);
    d_inps.push_back(std::make_unique<DeviceBuffer<float>>(inps[r]));
    batchnorm2d_local_stats(gpu_ctx(), d_gathered.get() + static_cast<size_t>(r) * C * 3, d_inps[r]->get(), Ns[r], C,
                            HW);
  }
  const Vec g_gathered = d_gathered.download();
  EXPECT_TRUE(all_close("local stats count", column(g_gathered, 3, 0), column(gathered, 3, 0), 0.0, 0.0));
  EXPECT_TRUE(all_close("local stats mean", column(g_gathered, 3, 1), column(gathered, 3, 1), 1e-5, 1e-6));
  EXPECT_TRUE(all_close("local stats M2", column(g_gathered, 3, 2), column(gathered, 3, 2), 1e-5, 1e-6));

  // merge the CPU's gathered rows on both backends, so the merge itself is compared on identical inputs
  d_gathered.upload(gathered);
  batchnorm2d_merge_stats(cpu_ctx(), merged.data(), gathered.data(), R, C);
  batchnorm2d_merge_stats(gpu_ctx(), d_merged.get(), d_gathered.get(), R, C);
  const Vec g_merged = d_merged.download();
  EXPECT_TRUE(all_close("merged count", column(g_merged, 3, 0), column(merged, 3, 0), 0.0, 0.0));
  EXPECT_TRUE(all_close("merged mean", column(g_merged, 3, 1), column(merged, 3, 1), 1e-5, 1e-6));
  EXPECT_TRUE(all_close("merged M2", column(g_merged, 3, 2), column(merged, 3, 2), 1e-5, 1e-6));

  // apply on rank 1's images with the (CPU's) merged stats
  const int N = Ns[1];
  const Vec gamma = random_vector(C, 55, 0.5, 1.5), beta = random_vector(C, 56);
  Vec out(inps[1].size()), mean(C), rstd(C);
  batchnorm2d_forward_apply(cpu_ctx(), out.data(), mean.data(), rstd.data(), inps[1].data(), gamma.data(), beta.data(),
                            merged.data(), N, C, HW, eps);
  d_merged.upload(merged);
  DeviceBuffer<float> d_gamma(gamma), d_beta(beta), d_out(nan_vector(out.size())), d_mean(nan_vector(C)),
      d_rstd(nan_vector(C));
  batchnorm2d_forward_apply(gpu_ctx(), d_out.get(), d_mean.get(), d_rstd.get(), d_inps[1]->get(), d_gamma.get(),
                            d_beta.get(), d_merged.get(), N, C, HW, eps);
  EXPECT_TRUE(all_close("apply save_mean", d_mean.download(), mean, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("apply save_rstd", d_rstd.download(), rstd, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("apply out", d_out.download(), out, 1e-5, 1e-6));

  Vec rm = random_vector(C, 57, 19.0, 21.0), rv = random_vector(C, 58, 0.5, 1.5);
  DeviceBuffer<float> d_rm(rm), d_rv(rv);
  batchnorm2d_update_running(cpu_ctx(), rm.data(), rv.data(), merged.data(), C, 0.1f);
  batchnorm2d_update_running(gpu_ctx(), d_rm.get(), d_rv.get(), d_merged.get(), C, 0.1f);
  EXPECT_TRUE(all_close("sync running_mean", d_rm.download(), rm, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("sync running_var", d_rv.download(), rv, 1e-5, 1e-6));
}

// The CPU forward's save_mean / save_rstd feed both backends' backward (the same inputs on both sides).
struct BnSaved {
  Vec inp, gamma, mean, rstd, dout;
};
BnSaved bn_saved(const BnShape& s, uint32_t seed) {
  BnSaved b{random_vector(s.size(), seed, -2.0, 3.0), random_vector(s.C, seed + 1, 0.5, 1.5), Vec(s.C), Vec(s.C),
            random_vector(s.size(), seed + 2)};
  const Vec beta = random_vector(s.C, seed + 3);
  Vec out(s.size()), stats(3 * static_cast<size_t>(s.C));
  batchnorm2d_forward_train(cpu_ctx(), out.data(), stats.data(), b.mean.data(), b.rstd.data(), b.inp.data(),
                            b.gamma.data(), beta.data(), s.N, s.C, s.HW, 1e-5f);
  return b;
}

TEST(CudaResnet, BatchNormBackward) {
  HPCT_REQUIRE_GPU();
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(s.name());
    const BnSaved b = bn_saved(s, 61);
    const Vec dg0 = random_vector(s.C, 65), db0 = random_vector(s.C, 66);
    Vec dinp(s.size()), dg = dg0, db = db0;
    batchnorm2d_backward(cpu_ctx(), dinp.data(), dg.data(), db.data(), b.dout.data(), b.inp.data(), b.mean.data(),
                         b.rstd.data(), b.gamma.data(), s.N, s.C, s.HW);
    DeviceBuffer<float> d_inp(b.inp), d_gamma(b.gamma), d_mean(b.mean), d_rstd(b.rstd), d_dout(b.dout);
    Vec first;
    for (int run = 0; run < 2; run++) {
      DeviceBuffer<float> d_dinp(nan_vector(s.size())), d_dg(dg0), d_db(db0);
      batchnorm2d_backward(gpu_ctx(), d_dinp.get(), d_dg.get(), d_db.get(), d_dout.get(), d_inp.get(), d_mean.get(),
                           d_rstd.get(), d_gamma.get(), s.N, s.C, s.HW);
      const Vec g_dinp = d_dinp.download();
      if (run == 0) {
        EXPECT_TRUE(all_close("bn dinp", g_dinp, dinp, 1e-5, 1e-6));
        EXPECT_TRUE(all_close("bn dgamma (+=)", d_dg.download(), dg, 1e-5, 1e-6));
        EXPECT_TRUE(all_close("bn dbeta (+=)", d_db.download(), db, 1e-5, 1e-6));
        first = g_dinp;
      } else {
        EXPECT_EQ(g_dinp, first) << "bn dinp differs between two identical runs";
      }
    }
  }
}

// SyncBN backward: local sums (assigned) + local dgamma/dbeta (+=), then dinp from "allreduced" sums and a global count
// larger than this rank's.
TEST(CudaResnet, BatchNormSyncBackward) {
  HPCT_REQUIRE_GPU();
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(s.name());
    const BnSaved b = bn_saved(s, 71);
    const Vec dg0 = random_vector(s.C, 75), db0 = random_vector(s.C, 76);
    Vec sums(2 * static_cast<size_t>(s.C)), dg = dg0, db = db0;
    batchnorm2d_backward_local_sums(cpu_ctx(), sums.data(), dg.data(), db.data(), b.dout.data(), b.inp.data(),
                                    b.mean.data(), b.rstd.data(), s.N, s.C, s.HW);
    DeviceBuffer<float> d_inp(b.inp), d_gamma(b.gamma), d_mean(b.mean), d_rstd(b.rstd), d_dout(b.dout);
    DeviceBuffer<float> d_sums(nan_vector(sums.size())), d_dg(dg0), d_db(db0);
    batchnorm2d_backward_local_sums(gpu_ctx(), d_sums.get(), d_dg.get(), d_db.get(), d_dout.get(), d_inp.get(),
                                    d_mean.get(), d_rstd.get(), s.N, s.C, s.HW);
    const Vec g_sums = d_sums.download();
    EXPECT_TRUE(all_close("sum dout", column(g_sums, 2, 0), column(sums, 2, 0), 1e-5, 1e-6));
    EXPECT_TRUE(all_close("sum dout*xhat", column(g_sums, 2, 1), column(sums, 2, 1), 1e-5, 1e-6));
    EXPECT_TRUE(all_close("local dgamma (+=)", d_dg.download(), dg, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("local dbeta (+=)", d_db.download(), db, 1e-5, 1e-6));

    const Vec global_sums = random_vector(2 * static_cast<size_t>(s.C), 77, -5.0, 5.0);
    const int64_t global_count = 3 * static_cast<int64_t>(s.N) * s.HW;
    Vec dinp(s.size());
    batchnorm2d_backward_apply(cpu_ctx(), dinp.data(), b.dout.data(), b.inp.data(), b.mean.data(), b.rstd.data(),
                               b.gamma.data(), global_sums.data(), global_count, s.N, s.C, s.HW);
    DeviceBuffer<float> d_gs(global_sums), d_dinp(nan_vector(s.size()));
    batchnorm2d_backward_apply(gpu_ctx(), d_dinp.get(), d_dout.get(), d_inp.get(), d_mean.get(), d_rstd.get(),
                               d_gamma.get(), d_gs.get(), global_count, s.N, s.C, s.HW);
    EXPECT_TRUE(all_close("sync dinp", d_dinp.download(), dinp, 1e-5, 1e-6));
  }
}

// ---- MaxPool2d ---------------------------------------------------------------------------------------------
struct PoolShape {
  int N, C, H, W, K, stride, pad;
  int OH() const { return (H + 2 * pad - K) / stride + 1; }
  int OW() const { return (W + 2 * pad - K) / stride + 1; }
  std::string name() const { return fmt::format("N{} C{} H{} W{} K{} s{} p{}", N, C, H, W, K, stride, pad); }
};
// the ResNet stem's 3x3 stride 2 pad 1 on odd and on ImageNet-like sizes, 2x2 stride 2, 3x3 stride 1 pad 1 (windows
// overlapping 9-fold), 3x3 stride 2 unpadded (floor mode drops the last row/column)
const PoolShape kPoolShapes[] = {{2, 3, 11, 13, 3, 2, 1},
                                 {2, 4, 56, 56, 3, 2, 1},
                                 {2, 3, 8, 8, 2, 2, 0},
                                 {1, 4, 9, 7, 3, 1, 1},
                                 {3, 2, 10, 10, 3, 2, 0}};

TEST(CudaResnet, MaxPool) {
  HPCT_REQUIRE_GPU();
  for (const PoolShape& s : kPoolShapes) {
    for (int ties = 0; ties < 2; ties++) {
      SCOPED_TRACE(fmt::format("{}{}", s.name(), ties ? " (many ties)" : ""));
      const size_t n_in = static_cast<size_t>(s.N) * s.C * s.H * s.W;
      const size_t n_out = static_cast<size_t>(s.N) * s.C * s.OH() * s.OW();
      // small integers make equal maxima in a window common: the first in row-major order must win on both
      const Vec inp = ties ? test::cast_vector<float>(random_ints(n_in, 81, -3, 4)) : random_vector(n_in, 82);
      Vec out(n_out);
      std::vector<int32_t> idx(n_out);
      maxpool2d_forward(cpu_ctx(), out.data(), idx.data(), inp.data(), s.N, s.C, s.H, s.W, s.K, s.stride, s.pad);
      DeviceBuffer<float> d_inp(inp), d_out(nan_vector(n_out));
      DeviceBuffer<int32_t> d_idx(std::vector<int32_t>(n_out, -7));
      maxpool2d_forward(gpu_ctx(), d_out.get(), d_idx.get(), d_inp.get(), s.N, s.C, s.H, s.W, s.K, s.stride, s.pad);
      EXPECT_TRUE(all_close("maxpool out", d_out.download(), out, 0.0, 0.0));
      EXPECT_EQ(d_idx.download(), idx) << "maxpool argmax indices differ";

      const Vec dout = random_vector(n_out, 83);
      Vec dinp(n_in);
      maxpool2d_backward(cpu_ctx(), dinp.data(), dout.data(), idx.data(), s.N, s.C, s.H, s.W, s.K, s.stride, s.pad);
      DeviceBuffer<float> d_dout(dout), d_dinp(nan_vector(n_in));
      d_idx.upload(idx);
      maxpool2d_backward(gpu_ctx(), d_dinp.get(), d_dout.get(), d_idx.get(), s.N, s.C, s.H, s.W, s.K, s.stride, s.pad);
      EXPECT_TRUE(all_close("maxpool dinp (assigned)", d_dinp.download(), dinp, 0.0, 0.0));
    }
  }
}

// ---- global average pooling ------------------------------------------------------------------------------------
TEST(CudaResnet, GlobalAvgPool) {
  HPCT_REQUIRE_GPU();
  const BnShape shapes[] = {{3, 5, 49}, {2, 7, 1}, {2, 3, 3136}, {1, 33, 17}, {64, 40, 16}};
  for (const BnShape& s : shapes) {
    SCOPED_TRACE(s.name());
    const size_t planes = static_cast<size_t>(s.N) * s.C;
    const Vec inp = random_vector(s.size(), 91, -1.0, 2.0);
    Vec out(planes);
    global_avgpool_forward(cpu_ctx(), out.data(), inp.data(), s.N, s.C, s.HW);
    DeviceBuffer<float> d_inp(inp), d_out(nan_vector(planes));
    global_avgpool_forward(gpu_ctx(), d_out.get(), d_inp.get(), s.N, s.C, s.HW);
    EXPECT_TRUE(all_close("avgpool out", d_out.download(), out, 1e-5, 1e-6));

    const Vec dout = random_vector(planes, 92);
    Vec dinp(s.size());
    global_avgpool_backward(cpu_ctx(), dinp.data(), dout.data(), s.N, s.C, s.HW);
    DeviceBuffer<float> d_dout(dout), d_dinp(nan_vector(s.size()));
    global_avgpool_backward(gpu_ctx(), d_dinp.get(), d_dout.get(), s.N, s.C, s.HW);
    EXPECT_TRUE(all_close("avgpool dinp (assigned)", d_dinp.download(), dinp, 0.0, 0.0));
  }
}

// ---- bf16 storage ------------------------------------------------------------------------------------------------
// Conv2d on bf16 tensors (cuDNN CUDNN_DATA_BFLOAT16, fp32 compute) against the CPU's bf16 convolution: out and dinp are
// fp32 sums of exact bf16 products rounded once to bf16 (the float convolution tolerance plus one bf16 ulp); dweight
// is the fp32 master gradient, onto which the GPU adds cuDNN's bf16 filter gradient of the call (rounded once, 2^-9 of
// it, cuda_resnet.cu) while the CPU adds its fp32 one: one bf16 ulp of the gradient's scale on top of the float
// tolerance; dbias float sums in double (the float default). The workspace of DType::BF16 holds the filter-gradient
// scratch too; a workspace too small for it is an error naming the size to plan.
TEST(CudaResnet, Bf16Conv2dMatchesCpu) {
  HPCT_REQUIRE_GPU();
  for (const ConvShape& s : {kConvShapes[0], kConvShapes[1], kConvShapes[3], kConvShapes[4], kConvShapes[6]}) {
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(s.name() + (with_bias ? " bias" : " no bias"));
      const B16 inp = random_bf16(s.in_size(), 31), w = random_bf16(s.w_size(), 32, -0.3, 0.3);
      const B16 b = random_bf16(static_cast<size_t>(s.OC), 33), dout = random_bf16(s.out_size(), 34);
      const Vec dw0 = random_vector(s.w_size(), 35), db0 = random_vector(static_cast<size_t>(s.OC), 36);
      const int64_t cwsf = conv2d_workspace_floats(cpu_ctx(), s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad,
                                                   DType::BF16);
      Vec cws(static_cast<size_t>(std::max<int64_t>(cwsf, 1)));
      B16 out(s.out_size()), dinp(s.in_size());
      Vec dw = dw0, db = db0;
      conv2d_forward(cpu_ctx(), out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, cws.data(), cwsf, s.N,
                     s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
      conv2d_backward(cpu_ctx(), dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(),
                      w.data(), cws.data(), cwsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);

      const int64_t wsf = conv2d_workspace_floats(gpu_ctx(), s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad,
                                                  DType::BF16);
      EXPECT_GE(wsf, static_cast<int64_t>(s.w_size()) / 2) << "the bf16 filter-gradient scratch is part of it";
      DeviceBuffer<bf16> d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_out(s.out_size()), d_dinp(s.in_size());
      DeviceBuffer<float> d_dw(dw0), d_db(db0), d_ws(nan_vector(static_cast<size_t>(wsf)));
      conv2d_forward(gpu_ctx(), d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, d_ws.get(), wsf,
                     s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
      conv2d_backward(gpu_ctx(), d_dinp.get(), d_dw.get(), with_bias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(),
                      d_w.get(), d_ws.get(), wsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
      EXPECT_TRUE(all_close("bf16 conv out", d_out.download(), out, 1e-4 + kBf16Ulp, 1e-4));
      EXPECT_TRUE(all_close("bf16 conv dinp", d_dinp.download(), dinp, 1e-4 + kBf16Ulp, 1e-4));
      EXPECT_TRUE(all_close("bf16 conv dweight (+=)", d_dw.download(), dw, 1e-4 + kBf16Ulp, kBf16Ulp));
      if (with_bias) EXPECT_TRUE(all_close("bf16 conv dbias (+=)", d_db.download(), db, 1e-5, 1e-6));
    }
  }
  const ConvShape& s = kConvShapes[0];
  DeviceBuffer<bf16> d_x(s.in_size()), d_w(s.w_size()), d_y(s.out_size());
  DeviceBuffer<float> d_dw(s.w_size()), d_ws(4);
  EXPECT_THROW(conv2d_backward(gpu_ctx(), static_cast<bf16*>(nullptr), d_dw.get(), nullptr, d_y.get(), d_x.get(),
                               d_w.get(), d_ws.get(), 4, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad),
               hpct::Error);
}

// BatchNorm2d (single process) and pooling on bf16 tensors against the CPU's bf16 ops.
TEST(CudaResnet, Bf16BatchNormAndPoolingMatchCpu) {
  HPCT_REQUIRE_GPU();
  const int N = 4, C = 6, H = 13, W = 11, HW = H * W;
  const size_t n = static_cast<size_t>(N) * C * HW;
  const B16 inp = random_bf16(n, 41, -1.0, 3.0), dout = random_bf16(n, 42);
  const B16 gamma = random_bf16(static_cast<size_t>(C), 43, 0.5, 1.5), beta = random_bf16(static_cast<size_t>(C), 44);
  const Vec dg0 = random_vector(static_cast<size_t>(C), 45), db0 = random_vector(static_cast<size_t>(C), 46);
  B16 out(n), dinp(n);
  Vec stats(3 * static_cast<size_t>(C)), mean(static_cast<size_t>(C)), rstd(static_cast<size_t>(C)), dg = dg0, db = db0;
  batchnorm2d_forward_train(cpu_ctx(), out.data(), stats.data(), mean.data(), rstd.data(), inp.data(), gamma.data(),
                            beta.data(), N, C, HW, 1e-5f);
  batchnorm2d_backward(cpu_ctx(), dinp.data(), dg.data(), db.data(), dout.data(), inp.data(), mean.data(), rstd.data(),
                       gamma.data(), N, C, HW);
  DeviceBuffer<bf16> d_inp(inp), d_dout(dout), d_gamma(gamma), d_beta(beta), d_out(n), d_dinp(n);
  DeviceBuffer<float> d_stats(stats.size()), d_mean(mean.size()), d_rstd(rstd.size()), d_dg(dg0), d_db(db0);
  batchnorm2d_forward_train(gpu_ctx(), d_out.get(), d_stats.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                            d_gamma.get(), d_beta.get(), N, C, HW, 1e-5f);
  batchnorm2d_backward(gpu_ctx(), d_dinp.get(), d_dg.get(), d_db.get(), d_dout.get(), d_inp.get(), d_mean.get(),
                       d_rstd.get(), d_gamma.get(), N, C, HW);
  EXPECT_TRUE(all_close("bf16 bn stats", d_stats.download(), stats, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("bf16 bn out", d_out.download(), out, 1e-5 + kBf16Ulp, 1e-6));
  EXPECT_TRUE(all_close("bf16 bn dinp", d_dinp.download(), dinp, 1e-5 + kBf16Ulp, 1e-6));
  EXPECT_TRUE(all_close("bf16 bn dgamma", d_dg.download(), dg, 1e-5, 1e-6));
  EXPECT_TRUE(all_close("bf16 bn dbeta", d_db.download(), db, 1e-5, 1e-6));
  // max-pooling 3x3 stride 2 pad 1: a selection and gathers of the same floats (exact); global average pooling
  const int K = 3, stride = 2, pad = 1, OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const size_t n_out = static_cast<size_t>(N) * C * OH * OW;
  const B16 pdout = random_bf16(n_out, 47);
  B16 pout(n_out), pdinp(n), avg(static_cast<size_t>(N) * C);
  std::vector<int32_t> idx(n_out);
  maxpool2d_forward(cpu_ctx(), pout.data(), idx.data(), inp.data(), N, C, H, W, K, stride, pad);
  maxpool2d_backward(cpu_ctx(), pdinp.data(), pdout.data(), idx.data(), N, C, H, W, K, stride, pad);
  global_avgpool_forward(cpu_ctx(), avg.data(), inp.data(), N, C, HW);
  DeviceBuffer<bf16> d_pout(n_out), d_pdout(pdout), d_pdinp(n), d_avg(avg.size());
  DeviceBuffer<int32_t> d_idx(n_out);
  maxpool2d_forward(gpu_ctx(), d_pout.get(), d_idx.get(), d_inp.get(), N, C, H, W, K, stride, pad);
  maxpool2d_backward(gpu_ctx(), d_pdinp.get(), d_pdout.get(), d_idx.get(), N, C, H, W, K, stride, pad);
  global_avgpool_forward(gpu_ctx(), d_avg.get(), d_inp.get(), N, C, HW);
  EXPECT_TRUE(test::bitwise_equal("bf16 maxpool out", d_pout.download(), pout));
  EXPECT_EQ(d_idx.download(), idx) << "maxpool argmax indices differ";
  EXPECT_TRUE(test::bitwise_equal("bf16 maxpool dinp", d_pdinp.download(), pdinp));
  EXPECT_TRUE(all_close("bf16 avgpool out", d_avg.download(), avg, 1e-5 + kBf16Ulp, 1e-6));
}

// ---- channels-last (ExecContext::channels_last) ------------------------------------------------------------------
// The same ops on (N,H,W,C) activations against the NCHW ops of this backend on the same values transposed: cuDNN's
// NHWC convolutions (the filter reordered to (OC,KH,KW,C) in the workspace for a spatial kernel, its gradient reordered
// back) within the convolution tolerance of two algorithms (plus one storage ulp for bf16); BatchNorm (with and without
// the fused ReLU) within the double-sum tolerance; the pools and the images' entry bitwise.
template <typename T>
std::vector<T> to_nhwc(const std::vector<T>& v, int N, int C, int HW) {
  std::vector<T> r(v.size());
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < HW; i++)
        r[(static_cast<size_t>(n) * HW + i) * C + c] = v[(static_cast<size_t>(n) * C + c) * HW + i];
  return r;
}
const ExecContext& gpu_nhwc() {
  static const ExecContext ctx = [] {
    ExecContext c = gpu_ctx();
    c.channels_last = true;
    return c;
  }();
  return ctx;
}

template <typename A>
void check_channels_last_conv(const ConvShape& s, bool with_bias) {
  SCOPED_TRACE(s.name() + (with_bias ? " bias" : " no bias"));
  const double ulp = std::is_same_v<A, float> ? 0.0 : kBf16Ulp;
  const DType act = std::is_same_v<A, float> ? DType::F32 : DType::BF16;
  const auto make = [](const Vec& v) { return test::to_storage_vector<A>(v); };
  const std::vector<A> inp = make(random_vector(s.in_size(), 51)), w = make(random_vector(s.w_size(), 52, -0.3, 0.3));
  const std::vector<A> b = make(random_vector(static_cast<size_t>(s.OC), 53)),
                       dout = make(random_vector(s.out_size(), 54));
  const Vec dw0 = random_vector(s.w_size(), 55), db0 = random_vector(static_cast<size_t>(s.OC), 56);
  const int HW = s.H * s.W, OHW = s.OH() * s.OW();
  const auto run = [&](const ExecContext& ctx, const std::vector<A>& x, const std::vector<A>& dy) {
    const int64_t wsf = conv2d_workspace_floats(ctx, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad, act);
    DeviceBuffer<A> d_inp(x), d_w(w), d_b(b), d_dout(dy), d_out(s.out_size()), d_dinp(s.in_size());
    DeviceBuffer<float> d_dw(dw0), d_db(db0), d_ws(nan_vector(static_cast<size_t>(wsf)));
    conv2d_forward(ctx, d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, d_ws.get(), wsf, s.N, s.C,
                   s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    d_ws.upload(nan_vector(static_cast<size_t>(wsf)));
    conv2d_backward(ctx, d_dinp.get(), d_dw.get(), with_bias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(),
                    d_w.get(), d_ws.get(), wsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    return std::make_tuple(d_out.download(), d_dinp.download(), d_dw.download(), d_db.download());
  };
  const auto [out, dinp, dw, db] = run(gpu_ctx(), inp, dout);
  const auto [out_l, dinp_l, dw_l, db_l] = run(gpu_nhwc(), to_nhwc(inp, s.N, s.C, HW), to_nhwc(dout, s.N, s.OC, OHW));
  EXPECT_TRUE(all_close("nhwc conv out", out_l, to_nhwc(out, s.N, s.OC, OHW), 1e-4 + ulp, 1e-4));
  EXPECT_TRUE(all_close("nhwc conv dinp", dinp_l, to_nhwc(dinp, s.N, s.C, HW), 1e-4 + ulp, 1e-4));
  EXPECT_TRUE(all_close("nhwc conv dweight (+=)", dw_l, dw, 1e-4 + ulp, 1e-4 + ulp));
  if (with_bias) EXPECT_TRUE(all_close("nhwc conv dbias (+=)", db_l, db, 1e-5, 1e-6));
}
TEST(CudaResnet, ChannelsLastConv2dMatchesNchw) {
  HPCT_REQUIRE_GPU();
  for (const ConvShape& s : kConvShapes) {
    check_channels_last_conv<float>(s, true);
    check_channels_last_conv<bf16>(s, false);
  }
}

template <typename A>
void check_channels_last_bn_and_pools() {
  const double ulp = std::is_same_v<A, float> ? 0.0 : kBf16Ulp;
  const auto make = [](const Vec& v) { return test::to_storage_vector<A>(v); };
  const int N = 3, C = 40, H = 9, W = 7, HW = H * W;
  const size_t n = static_cast<size_t>(N) * C * HW;
  const std::vector<A> inp = make(random_vector(n, 61, -1.0, 3.0)), dout = make(random_vector(n, 62));
  const std::vector<A> gamma = make(random_vector(static_cast<size_t>(C), 63, 0.5, 1.5)),
                       beta = make(random_vector(static_cast<size_t>(C), 64));
  const Vec dg0 = random_vector(static_cast<size_t>(C), 65), db0 = random_vector(static_cast<size_t>(C), 66);
  for (const bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "with the ReLU" : "BatchNorm alone");
    const auto run = [&](const ExecContext& ctx, const std::vector<A>& x, const std::vector<A>& dy) {
      DeviceBuffer<A> d_inp(x), d_dout(dy), d_gamma(gamma), d_beta(beta), d_out(n), d_dinp(n);
      DeviceBuffer<float> d_stats(3 * static_cast<size_t>(C)), d_mean(static_cast<size_t>(C)),
          d_rstd(static_cast<size_t>(C)), d_dg(dg0), d_db(db0);
      if (relu) {
        batchnorm2d_relu_forward_train(ctx, d_out.get(), d_stats.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                                       d_gamma.get(), d_beta.get(), N, C, HW, 1e-5f);
        batchnorm2d_relu_backward(ctx, d_dinp.get(), d_dg.get(), d_db.get(), d_dout.get(), d_out.get(), d_inp.get(),
                                  d_mean.get(), d_rstd.get(), d_gamma.get(), N, C, HW);
      } else {
        batchnorm2d_forward_train(ctx, d_out.get(), d_stats.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                                  d_gamma.get(), d_beta.get(), N, C, HW, 1e-5f);
        batchnorm2d_backward(ctx, d_dinp.get(), d_dg.get(), d_db.get(), d_dout.get(), d_inp.get(), d_mean.get(),
                             d_rstd.get(), d_gamma.get(), N, C, HW);
      }
      return std::make_tuple(d_out.download(), d_dinp.download(), d_stats.download(), d_dg.download(), d_db.download());
    };
    const auto [out, dinp, stats, dg, db] = run(gpu_ctx(), inp, dout);
    const auto [out_l, dinp_l, stats_l, dg_l, db_l] = run(gpu_nhwc(), to_nhwc(inp, N, C, HW), to_nhwc(dout, N, C, HW));
    EXPECT_TRUE(all_close("nhwc bn stats", stats_l, stats, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("nhwc bn out", out_l, to_nhwc(out, N, C, HW), 1e-5 + ulp, 1e-6));
    EXPECT_TRUE(all_close("nhwc bn dinp", dinp_l, to_nhwc(dinp, N, C, HW), 1e-5 + ulp, 1e-6));
    EXPECT_TRUE(all_close("nhwc bn dgamma", dg_l, dg, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("nhwc bn dbeta", db_l, db, 1e-5, 1e-6));
  }
  // pools (max 3x3 stride 2 pad 1, global average) and the images' entry
  const int K = 3, stride = 2, pad = 1, OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const size_t n_out = static_cast<size_t>(N) * C * OH * OW;
  const std::vector<A> pdout = make(random_vector(n_out, 67));
  const Vec images = random_vector(n, 68, -2.0, 2.0);
  const auto pools = [&](const ExecContext& ctx, const std::vector<A>& x, const std::vector<A>& dy) {
    DeviceBuffer<A> d_inp(x), d_pdout(dy), d_pout(n_out), d_pdinp(n), d_avg(static_cast<size_t>(N) * C), d_img(n);
    DeviceBuffer<int32_t> d_idx(n_out);
    DeviceBuffer<float> d_images(images);
    maxpool2d_forward(ctx, d_pout.get(), d_idx.get(), d_inp.get(), N, C, H, W, K, stride, pad);
    maxpool2d_backward(ctx, d_pdinp.get(), d_pdout.get(), d_idx.get(), N, C, H, W, K, stride, pad);
    global_avgpool_forward(ctx, d_avg.get(), d_inp.get(), N, C, HW);
    if (ctx.channels_last) images_to_channels_last(ctx, d_img.get(), d_images.get(), N, C, HW);
    return std::make_tuple(d_pout.download(), d_idx.download(), d_pdinp.download(), d_avg.download(), d_img.download());
  };
  const auto [pout, idx, pdinp, avg, unused] = pools(gpu_ctx(), inp, pdout);
  const auto [pout_l, idx_l, pdinp_l, avg_l, img_l] = pools(gpu_nhwc(), to_nhwc(inp, N, C, HW),
                                                            to_nhwc(pdout, N, C, OH * OW));
  EXPECT_TRUE(test::bitwise_equal("nhwc maxpool out", pout_l, to_nhwc(pout, N, C, OH * OW)));
  EXPECT_EQ(idx_l, to_nhwc(idx, N, C, OH * OW)) << "maxpool argmax indices differ";
  EXPECT_TRUE(test::bitwise_equal("nhwc maxpool dinp", pdinp_l, to_nhwc(pdinp, N, C, HW)));
  EXPECT_TRUE(all_close("nhwc avgpool out", avg_l, avg, 1e-5 + ulp, 1e-6));
  EXPECT_TRUE(test::bitwise_equal("nhwc images", img_l, to_nhwc(make(images), N, C, HW)));
}
TEST(CudaResnet, ChannelsLastBatchNormAndPoolsMatchNchw) {
  HPCT_REQUIRE_GPU();
  check_channels_last_bn_and_pools<float>();
  check_channels_last_bn_and_pools<bf16>();
}

// ---- the convolution algorithm table (kernels/conv_algorithms.hpp) ------------------------------------------------
// conv2d_time_algorithms times at least one candidate of each phase; a table choosing any timed candidate runs it
// (results within the tolerance of two algorithms of the run without a table, the same bits twice); a table naming an
// algorithm that is no candidate runs cuDNN's order (the same bits as no table).
template <typename A>
void check_conv_algorithm_table(const ExecContext& base, const ConvShape& s) {
  SCOPED_TRACE(s.name() + (base.channels_last ? " channels-last " : " NCHW ") +
               (std::is_same_v<A, float> ? "f32" : "bf16"));
  const double ulp = std::is_same_v<A, float> ? 0.0 : kBf16Ulp;
  const DType act = std::is_same_v<A, float> ? DType::F32 : DType::BF16;
  const auto make = [](const Vec& v) { return test::to_storage_vector<A>(v); };
  const std::vector<A> inp = make(random_vector(s.in_size(), 61)), w = make(random_vector(s.w_size(), 62, -0.3, 0.3));
  const std::vector<A> dout = make(random_vector(s.out_size(), 63));
  const Vec dw0 = random_vector(s.w_size(), 64);
  const int64_t wsf = conv2d_workspace_floats(base, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad, act);
  DeviceBuffer<float> d_ws(nan_vector(static_cast<size_t>(wsf)));
  const auto run = [&](const ConvAlgorithms* table) {
    ExecContext ctx = base;
    ctx.conv_algorithms = table;
    DeviceBuffer<A> d_inp(inp), d_w(w), d_dout(dout), d_out(s.out_size()), d_dinp(s.in_size());
    DeviceBuffer<float> d_dw(dw0);
    conv2d_forward(ctx, d_out.get(), d_inp.get(), d_w.get(), static_cast<const A*>(nullptr), d_ws.get(), wsf, s.N, s.C,
                   s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    conv2d_backward(ctx, d_dinp.get(), d_dw.get(), nullptr, d_dout.get(), d_inp.get(), d_w.get(), d_ws.get(), wsf, s.N,
                    s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    return std::make_tuple(d_out.download(), d_dinp.download(), d_dw.download());
  };
  const auto [out0, dinp0, dw0_run] = run(nullptr);

  DeviceBuffer<A> d_x(s.in_size()), d_w(w), d_y(s.out_size()), d_dx(s.in_size());
  DeviceBuffer<float> d_dw(s.w_size());
  const ConvTiming t = conv2d_time_algorithms(base, d_x.get(), d_w.get(), d_y.get(), d_dx.get(), d_dw.get(), d_ws.get(),
                                              wsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad, 2);
  const ConvAlgoKey key = conv_algo_key(base, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad, act);
  EXPECT_TRUE(t.key == key) << t.key.describe() << " vs " << key.describe();
  for (int p = 0; p < kConvPhases; p++) {
    const auto& list = t.phases[static_cast<size_t>(p)];
    const bool timed = std::any_of(list.begin(), list.end(), [](const AlgoTime& a) { return a.ms >= 0.0; });
    EXPECT_TRUE(timed) << conv_phase_name(static_cast<ConvPhase>(p)) << ": no candidate timed";
    for (const AlgoTime& a : list) {
      if (a.ms < 0.0) continue;
      SCOPED_TRACE(
          fmt::format("{} algorithm {} ({:.4f} ms)", conv_phase_name(static_cast<ConvPhase>(p)), a.algo, a.ms));
      EXPECT_TRUE(std::isfinite(a.ms));
      ConvAlgorithms table("test", 0);
      ConvAlgorithms::Choice choice{-1, -1, -1};
      choice[static_cast<size_t>(p)] = a.algo;
      table.set(key, choice);
      const auto [out, dinp, dw] = run(&table);
      EXPECT_TRUE(all_close("out", out, out0, 1e-4 + ulp, 1e-4));
      EXPECT_TRUE(all_close("dinp", dinp, dinp0, 1e-4 + ulp, 1e-4));
      EXPECT_TRUE(all_close("dweight (+=)", dw, dw0_run, 1e-4 + ulp, 1e-4 + ulp));
      const auto [out2, dinp2, dw2] = run(&table);
      EXPECT_TRUE(test::bitwise_equal("out, the same table again", out2, out));
      EXPECT_TRUE(test::bitwise_equal("dinp, the same table again", dinp2, dinp));
      EXPECT_TRUE(test::bitwise_equal("dweight, the same table again", dw2, dw));
    }
  }
  ConvAlgorithms foreign("test", 0);
  foreign.set(key, {999, 999, 999});
  const auto [out_f, dinp_f, dw_f] = run(&foreign);
  EXPECT_TRUE(test::bitwise_equal("out, a table of no candidate", out_f, out0));
  EXPECT_TRUE(test::bitwise_equal("dinp, a table of no candidate", dinp_f, dinp0));
  EXPECT_TRUE(test::bitwise_equal("dweight, a table of no candidate", dw_f, dw0_run));
}
TEST(CudaResnet, ConvAlgorithmTableRunsEachTimedCandidate) {
  HPCT_REQUIRE_GPU();
  const ConvShape spatial{4, 16, 14, 14, 16, 3, 3, 1, 1}, pointwise{4, 16, 14, 14, 32, 1, 1, 2, 0};
  for (const ConvShape& s : {spatial, pointwise}) {
    check_conv_algorithm_table<float>(gpu_ctx(), s);
    check_conv_algorithm_table<float>(gpu_nhwc(), s);
    check_conv_algorithm_table<bf16>(gpu_nhwc(), s);
  }
}

}  // namespace
}  // namespace hpct::kernels
