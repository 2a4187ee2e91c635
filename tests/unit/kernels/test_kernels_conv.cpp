// The ResNet layers (NCHW): CPU backend vs the reference twins (float), the reference backwards vs central finite
// differences (double), and the SyncBN split (per-rank statistics merged with Chan's formula; per-rank gradient sums
// summed) vs the whole batch on one rank.
// Legend: N images, C/OC input/output channels, H W input size, K kernel, OH OW output size, HW = H*W.
//
// Tolerances (|got - want| <= atol + rtol |want|, atol = atol_rel * max|want|), and why:
//   - exact (0, 0): ReLU, max-pooling (selections and, in the backward, the same adds in the same order);
//   - 2e-5 / 2e-5: conv outputs and dinp are sums of C*KH*KW <= 288 float products (BLAS blocking vs the
//     reference's sequential order): each order errs by ~sqrt(K) 2^-24 of the terms' scale;
//     BatchNorm forward/dinp, avgpool: statistics in double in the backend, in float (sequential) in the reference;
//   - 1e-4 / 1e-4: dweight, dbias, dgamma, dbeta sum over all N*OH*OW positions (up to ~6000) in float in the
//     reference (sequential error up to ~n 2^-24 relative), in double or blocked float in the backend;
//   - gradchecks: central differences, h = 1e-5, as test_kernels_gradcheck.cpp (1e-6 relative);
//   - SyncBN in double: Chan's merge vs the two-pass whole batch differ only by double rounding: 1e-12 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/batchnorm_stats.hpp"
#include "kernels/kernels.hpp"
#include "kernels/reference/reference.hpp"

namespace hpct::kernels {
namespace {

namespace ref = hpct::kernels::reference;
using test::all_close;
using test::random_vector;
using Vec = std::vector<double>;

const ExecContext kCpu{Device::CPU, nullptr};

struct ConvShape {
  int N, C, H, W, OC, K, stride, pad;
};
// 3x3 pad 1 (ResNet body), 3x3 stride 2 pad 1 (downsampling) on odd sizes, 1x1 stride 1 (pointwise fast path),
// 1x1 stride 2 (projection shortcut), 7x7 stride 2 pad 3 (ImageNet stem) on a non-square input, a single image
// (one-thread path), a 2x4 kernel-free case of KH != KW is covered by K x K only (the kernels take KH, KW separately:
// the reference and backend are also compared on a 3x1 kernel below).
const ConvShape kConvShapes[] = {{4, 16, 14, 14, 16, 3, 1, 1}, {3, 8, 15, 13, 12, 3, 2, 1}, {5, 12, 9, 9, 20, 1, 1, 0},
                                 {4, 16, 10, 10, 32, 1, 2, 0}, {2, 3, 21, 17, 8, 7, 2, 3},  {1, 5, 7, 6, 4, 3, 1, 1}};

std::string name(const ConvShape& s) {
  return "N" + std::to_string(s.N) + "C" + std::to_string(s.C) + "H" + std::to_string(s.H) + "W" + std::to_string(s.W) +
         "OC" + std::to_string(s.OC) + "K" + std::to_string(s.K) + "s" + std::to_string(s.stride) + "p" +
         std::to_string(s.pad);
}

void check_conv(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, bool with_bias,
                bool with_dinp) {
  const int OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  const auto inp = random_vector(static_cast<size_t>(N) * C * H * W, 1);
  const auto w = random_vector(static_cast<size_t>(OC) * C * KH * KW, 2, -0.3, 0.3);
  const auto b = random_vector(OC, 3);
  const int64_t wsz = conv2d_workspace_floats(kCpu, N, C, H, W, OC, KH, KW, stride, pad);
  std::vector<float> ws(static_cast<size_t>(wsz), NAN);  // garbage in the workspace must not leak into results
  std::vector<float> out(static_cast<size_t>(N) * OC * OH * OW, NAN), out_ref(out.size());
  conv2d_forward(kCpu, out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, ws.data(), wsz, N, C, H, W, OC,
                 KH, KW, stride, pad);
  ref::conv2d_forward(out_ref.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, C, H, W, OC, KH, KW,
                      stride, pad);
  EXPECT_TRUE(all_close("conv out", out, out_ref, 2e-5, 2e-5));

  const auto dout = random_vector(out.size(), 4);
  std::vector<float> dinp(inp.size(), NAN), dinp_ref(inp.size());
  auto dw = random_vector(w.size(), 5), db = random_vector(OC, 6);  // accumulated: start non-zero
  auto dw_ref = dw, db_ref = db;
  std::fill(ws.begin(), ws.end(), NAN);
  conv2d_backward(kCpu, with_dinp ? dinp.data() : nullptr, dw.data(), with_bias ? db.data() : nullptr, dout.data(),
                  inp.data(), w.data(), ws.data(), wsz, N, C, H, W, OC, KH, KW, stride, pad);
  ref::conv2d_backward(with_dinp ? dinp_ref.data() : nullptr, dw_ref.data(), with_bias ? db_ref.data() : nullptr,
                       dout.data(), inp.data(), w.data(), N, C, H, W, OC, KH, KW, stride, pad);
  if (with_dinp) {
    EXPECT_TRUE(all_close("conv dinp", dinp, dinp_ref, 2e-5, 2e-5));
  }
  EXPECT_TRUE(all_close("conv dweight", dw, dw_ref, 1e-4, 1e-4));
  EXPECT_TRUE(all_close("conv dbias", db, db_ref, 1e-4, 1e-4));
}

TEST(KernelsConv, Conv2dForwardBackward) {
  for (const ConvShape& s : kConvShapes)
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(name(s) + (with_bias ? " bias" : ""));
      check_conv(s.N, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad, with_bias, /*with_dinp=*/true);
    }
  SCOPED_TRACE("3x1 kernel, stride 2, no dinp");
  check_conv(3, 4, 9, 8, 6, 3, 1, 2, 1, true, false);
}

// The CUDA backend's workspace is computed on the host (a plan for CUDA needs no GPU, and this runs without one): the
// 16-bit filter-gradient scratch, then twice the larger of the input and output tensors, at least 32 MiB.
TEST(KernelsConv, CudaWorkspaceIsPlannedWithoutAGpu) {
  const ExecContext cuda{Device::CUDA, nullptr, Precision::FP32};
  // small layers: the 32 MiB floor; fp32 has no scratch, bf16 / fp16 a 256-byte-aligned one (4*3*3*3*2 = 216 -> 256)
  EXPECT_EQ(conv2d_workspace_floats(cuda, 2, 3, 8, 8, 4, 3, 3, 1, 1, DType::F32), (int64_t{32} << 20) / 4);
  EXPECT_EQ(conv2d_workspace_floats(cuda, 2, 3, 8, 8, 4, 3, 3, 1, 1, DType::BF16), ((int64_t{32} << 20) + 256) / 4);
  EXPECT_EQ(conv2d_workspace_floats(cuda, 2, 3, 8, 8, 4, 3, 3, 1, 1, DType::F16), ((int64_t{32} << 20) + 256) / 4);
  // ResNet-50's stem at micro-batch 256 in bf16: the output (256 x 64 x 112 x 112) is the larger tensor; 784 MiB
  const int64_t out_bytes = int64_t{256} * 64 * 112 * 112 * 2, scratch = (64 * 3 * 7 * 7 * 2 + 255) / 256 * 256;
  EXPECT_EQ(conv2d_workspace_floats(cuda, 256, 3, 224, 224, 64, 7, 7, 2, 3, DType::BF16),
            (2 * out_bytes + scratch) / 4);
  // a strided 1x1 layer: the input is the larger tensor
  const int64_t in_bytes = int64_t{256} * 512 * 28 * 28 * 4;
  EXPECT_EQ(conv2d_workspace_floats(cuda, 256, 512, 28, 28, 1024, 1, 1, 2, 0, DType::F32), 2 * in_bytes / 4);
  EXPECT_ANY_THROW(conv2d_workspace_floats(cuda, 0, 3, 8, 8, 4, 3, 3, 1, 1, DType::F32));
  EXPECT_ANY_THROW(conv2d_workspace_floats(cuda, 1, 3, 2, 2, 4, 7, 7, 1, 1, DType::F32));  // kernel > padded input
}

TEST(KernelsConv, Conv2dWorkspaceTooSmallIsAnError) {
  // a workspace below one thread's im2col share (the smallest any path takes) is an error
  std::vector<float> tiny(16), inp(4 * 64, 1.0f), w(4 * 4 * 9, 1.0f), out(4 * 64);
  EXPECT_ANY_THROW(conv2d_forward<float>(kCpu, out.data(), inp.data(), w.data(), nullptr, tiny.data(), 16, 1, 4, 8, 8,
                                         4, 3, 3, 1, 1));
  // a workspace planned for one image is too small for oneDNN's buffers of six: the im2col path runs on one slot
  // and still gives the right result, forward and backward
  const int64_t planned = conv2d_workspace_floats(kCpu, 1, 4, 8, 8, 4, 3, 3, 1, 1);
  const int N = 6;
  const auto x = random_vector(static_cast<size_t>(N) * 4 * 64, 7);
  const auto wt = random_vector(4 * 4 * 9, 8);
  std::vector<float> ws1(static_cast<size_t>(planned)), o1(static_cast<size_t>(N) * 4 * 64), o2(o1.size());
  conv2d_forward<float>(kCpu, o1.data(), x.data(), wt.data(), nullptr, ws1.data(), planned, N, 4, 8, 8, 4, 3, 3, 1, 1);
  ref::conv2d_forward(o2.data(), x.data(), wt.data(), static_cast<const float*>(nullptr), N, 4, 8, 8, 4, 3, 3, 1, 1);
  EXPECT_TRUE(all_close("conv out, one-image workspace", o1, o2, 2e-5, 2e-5));
  const auto dy = random_vector(o1.size(), 9);
  std::vector<float> dx1(x.size()), dx2(x.size()), dw1(wt.size(), 0.5f), dw2(wt.size(), 0.5f);
  conv2d_backward(kCpu, dx1.data(), dw1.data(), nullptr, dy.data(), x.data(), wt.data(), ws1.data(), planned, N, 4, 8,
                  8, 4, 3, 3, 1, 1);
  ref::conv2d_backward(dx2.data(), dw2.data(), static_cast<float*>(nullptr), dy.data(), x.data(), wt.data(), N, 4, 8, 8,
                       4, 3, 3, 1, 1);
  EXPECT_TRUE(all_close("conv dinp, one-image workspace", dx1, dx2, 2e-5, 2e-5));
  EXPECT_TRUE(all_close("conv dweight, one-image workspace", dw1, dw2, 1e-4, 1e-4));
}

// Run to run, the same inputs give bitwise the same outputs at a fixed thread count (the bitwise-restart invariant),
// on the ResNet-20 stage shapes (oneDNN's blocked direct convolutions when built with it, weight-gradient partials
// reduced over the threads).
TEST(KernelsConv, Conv2dIsBitwiseReproducible) {
  const ConvShape shapes[] = {{32, 16, 28, 28, 16, 3, 1, 1},
                              {32, 16, 28, 28, 32, 3, 2, 1},
                              {32, 64, 7, 7, 64, 3, 1, 1},
                              {32, 32, 14, 14, 64, 1, 2, 0}};
  for (const ConvShape& s : shapes) {
    SCOPED_TRACE(name(s));
    const int OH = (s.H + 2 * s.pad - s.K) / s.stride + 1, OW = (s.W + 2 * s.pad - s.K) / s.stride + 1;
    const auto x = random_vector(static_cast<size_t>(s.N) * s.C * s.H * s.W, 11);
    const auto w = random_vector(static_cast<size_t>(s.OC) * s.C * s.K * s.K, 12, -0.3, 0.3);
    const auto dy = random_vector(static_cast<size_t>(s.N) * s.OC * OH * OW, 13);
    const int64_t wsz = conv2d_workspace_floats(kCpu, s.N, s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad);
    std::vector<float> ws(static_cast<size_t>(wsz));
    std::vector<float> out[2], dx[2], dw[2];
    for (int run = 0; run < 2; run++) {
      out[run].assign(dy.size(), NAN);
      dx[run].assign(x.size(), NAN);
      dw[run].assign(w.size(), 0.25f);
      std::fill(ws.begin(), ws.end(), run ? -1.0f : NAN);
      conv2d_forward<float>(kCpu, out[run].data(), x.data(), w.data(), nullptr, ws.data(), wsz, s.N, s.C, s.H, s.W,
                            s.OC, s.K, s.K, s.stride, s.pad);
      conv2d_backward(kCpu, dx[run].data(), dw[run].data(), nullptr, dy.data(), x.data(), w.data(), ws.data(), wsz, s.N,
                      s.C, s.H, s.W, s.OC, s.K, s.K, s.stride, s.pad);
    }
    EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float))) << "conv out";
    EXPECT_EQ(0, std::memcmp(dx[0].data(), dx[1].data(), dx[0].size() * sizeof(float))) << "conv dinp";
    EXPECT_EQ(0, std::memcmp(dw[0].data(), dw[1].data(), dw[0].size() * sizeof(float))) << "conv dweight";
  }
}

// ---- BatchNorm2d ------------------------------------------------------------------------------------------
struct BnShape {
  int N, C, HW;
};
const BnShape kBnShapes[] = {{4, 16, 196}, {3, 5, 49}, {8, 64, 64}, {2, 3, 1}};

TEST(KernelsConv, BatchNormForwardBackward) {
  const float eps = 1e-5f;
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE("N" + std::to_string(s.N) + "C" + std::to_string(s.C) + "HW" + std::to_string(s.HW));
    const int N = s.N, C = s.C, HW = s.HW;
    const size_t n = static_cast<size_t>(N) * C * HW;
    // a large offset: E[x^2] - mean^2 in float would lose the variance (|mean| / std = 100)
    const auto inp = random_vector(n, 10, 99.0, 101.0);
    const auto gamma = random_vector(C, 11, 0.5, 1.5), beta = random_vector(C, 12);
    std::vector<float> out(n, NAN), stats(3 * C), mean(C), rstd(C);
    std::vector<float> out_ref(n), stats_ref(3 * C), mean_ref(C), rstd_ref(C);
    batchnorm2d_forward_train(kCpu, out.data(), stats.data(), mean.data(), rstd.data(), inp.data(), gamma.data(),
                              beta.data(), N, C, HW, eps);
    // the reference in double on the same inputs: the statistics of the backend are double-accurate
    const auto inp_d = test::cast_vector<double>(inp), gamma_d = test::cast_vector<double>(gamma),
               beta_d = test::cast_vector<double>(beta);
    Vec out_d(n), stats_d(3 * C), mean_d(C), rstd_d(C);
    ref::batchnorm2d_forward_train(out_d.data(), stats_d.data(), mean_d.data(), rstd_d.data(), inp_d.data(),
                                   gamma_d.data(), beta_d.data(), N, C, HW, 1e-5);
    EXPECT_TRUE(all_close("bn stats", stats, stats_d, 1e-6, 0));
    EXPECT_TRUE(all_close("bn mean", mean, mean_d, 1e-7, 0));
    EXPECT_TRUE(all_close("bn rstd", rstd, rstd_d, 1e-6, 0));
    EXPECT_TRUE(all_close("bn out", out, out_d, 2e-5, 2e-5));  // x - mean cancels ~7 bits: float out to ~1e-5

    // the SyncBN path at one rank is the same computation, bit for bit
    std::vector<float> local(3 * C), merged(3 * C), out2(n), mean2(C), rstd2(C);
    batchnorm2d_local_stats(kCpu, local.data(), inp.data(), N, C, HW);
    batchnorm2d_merge_stats(kCpu, merged.data(), local.data(), 1, C);
    batchnorm2d_forward_apply(kCpu, out2.data(), mean2.data(), rstd2.data(), inp.data(), gamma.data(), beta.data(),
                              merged.data(), N, C, HW, eps);
    EXPECT_TRUE(all_close("bn out, split path", out2, out, 0, 0));

    // running statistics (torch: unbiased variance)
    if (N * HW > 1) {
      auto rm = random_vector(C, 13), rv = random_vector(C, 14, 0.5, 1.5);
      Vec rm_d = test::cast_vector<double>(rm), rv_d = test::cast_vector<double>(rv);
      batchnorm2d_update_running(kCpu, rm.data(), rv.data(), stats.data(), C, 0.1f);
      ref::batchnorm2d_update_running(rm_d.data(), rv_d.data(), stats_d.data(), C, 0.1);
      EXPECT_TRUE(all_close("running_mean", rm, rm_d, 1e-6, 0));
      EXPECT_TRUE(all_close("running_var", rv, rv_d, 1e-5, 0));
      // eval forward with those running stats
      std::vector<float> oe(n), oe_ref(n);
      batchnorm2d_forward_eval(kCpu, oe.data(), inp.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                               eps);
      ref::batchnorm2d_forward_eval(oe_ref.data(), inp.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C,
                                    HW, eps);
      EXPECT_TRUE(all_close("bn eval out", oe, oe_ref, 2e-5, 2e-5));
    }

    // backward, against the double reference from the same saved statistics
    const auto dout = random_vector(n, 15);
    std::vector<float> dinp(n, NAN);
    auto dg = random_vector(C, 16), dbt = random_vector(C, 17);
    Vec dinp_d(n), dg_d = test::cast_vector<double>(dg), dbt_d = test::cast_vector<double>(dbt);
    batchnorm2d_backward(kCpu, dinp.data(), dg.data(), dbt.data(), dout.data(), inp.data(), mean.data(), rstd.data(),
                         gamma.data(), N, C, HW);
    const auto dout_d = test::cast_vector<double>(dout), mean_f = test::cast_vector<double>(mean),
               rstd_f = test::cast_vector<double>(rstd);
    ref::batchnorm2d_backward(dinp_d.data(), dg_d.data(), dbt_d.data(), dout_d.data(), inp_d.data(), mean_f.data(),
                              rstd_f.data(), gamma_d.data(), N, C, HW);
    EXPECT_TRUE(all_close("bn dinp", dinp, dinp_d, 1e-4, 1e-4));  // dinp of HW = 1, N = 2 is tiny: judged on scale
    EXPECT_TRUE(all_close("bn dgamma", dg, dg_d, 1e-4, 1e-4));
    EXPECT_TRUE(all_close("bn dbeta", dbt, dbt_d, 1e-4, 1e-4));
  }
}

// SyncBN over k simulated ranks, each holding a contiguous block of images: merged statistics equal the whole
// batch's, and the split backward (local sums, summed, then apply) equals the single-rank backward.
TEST(KernelsConv, SyncBatchNormSplitEqualsWholeBatch) {
  const int N = 7, C = 3, HW = 10;
  const size_t n = static_cast<size_t>(N) * C * HW;
  const Vec inp = random_vector<double>(n, 20, 49.0, 51.0), gamma = random_vector<double>(C, 21, 0.5, 1.5),
            beta = random_vector<double>(C, 22), dout = random_vector<double>(n, 23);
  Vec whole(3 * C), out(n), mean(C), rstd(C);
  ref::batchnorm2d_forward_train(out.data(), whole.data(), mean.data(), rstd.data(), inp.data(), gamma.data(),
                                 beta.data(), N, C, HW, 1e-5);
  Vec dinp(n), dg(C, 0.0), dbt(C, 0.0);
  ref::batchnorm2d_backward(dinp.data(), dg.data(), dbt.data(), dout.data(), inp.data(), mean.data(), rstd.data(),
                            gamma.data(), N, C, HW);
  for (const std::vector<int>& blocks : {std::vector<int>{7}, {3, 4}, {1, 2, 4}, {2, 2, 2, 1}, {1, 1, 1, 1, 1, 1, 1}}) {
    const int R = static_cast<int>(blocks.size());
    SCOPED_TRACE("ranks " + std::to_string(R));
    std::vector<int> n0(R + 1, 0);
    for (int r = 0; r < R; r++) n0[r + 1] = n0[r] + blocks[r];
    const size_t img = static_cast<size_t>(C) * HW;
    // forward: local stats, "allgather" (R,C,3), merge
    Vec gathered(3 * static_cast<size_t>(R) * C), merged(3 * C);
    for (int r = 0; r < R; r++)
      ref::batchnorm2d_local_stats(gathered.data() + 3 * r * C, inp.data() + n0[r] * img, blocks[r], C, HW);
    ref::batchnorm2d_merge_stats(merged.data(), gathered.data(), R, C);
    EXPECT_TRUE(all_close("merged stats", merged, whole, 1e-12, 0));
    // apply on each rank with the global stats, backward split: local sums -> "allreduce" -> apply
    Vec out_r(n), dinp_r(n), sums(2 * C, 0.0), dg_r(C, 0.0), dbt_r(C, 0.0), m_r(C), rs_r(C);
    std::vector<Vec> local_sums(R, Vec(2 * C));
    for (int r = 0; r < R; r++) {
      ref::batchnorm2d_forward_apply(out_r.data() + n0[r] * img, m_r.data(), rs_r.data(), inp.data() + n0[r] * img,
                                     gamma.data(), beta.data(), merged.data(), blocks[r], C, HW, 1e-5);
      ref::batchnorm2d_backward_local_sums(local_sums[r].data(), dg_r.data(), dbt_r.data(), dout.data() + n0[r] * img,
                                           inp.data() + n0[r] * img, m_r.data(), rs_r.data(), blocks[r], C, HW);
      for (int i = 0; i < 2 * C; i++) sums[i] += local_sums[r][i];
    }
    for (int r = 0; r < R; r++)
      ref::batchnorm2d_backward_apply(dinp_r.data() + n0[r] * img, dout.data() + n0[r] * img, inp.data() + n0[r] * img,
                                      m_r.data(), rs_r.data(), gamma.data(), sums.data(), static_cast<int64_t>(N) * HW,
                                      blocks[r], C, HW);
    EXPECT_TRUE(all_close("split out", out_r, out, 1e-12, 1e-12));
    EXPECT_TRUE(all_close("split dinp", dinp_r, dinp, 1e-10, 1e-12));
    EXPECT_TRUE(all_close("split dgamma", dg_r, dg, 1e-12, 1e-12));
    EXPECT_TRUE(all_close("split dbeta", dbt_r, dbt, 1e-12, 1e-12));

    // the CPU backend's merge (float stats, merged in double) against its whole-batch stats
    const auto inp_f = test::cast_vector<float>(inp);
    std::vector<float> g_f(gathered.size()), merged_f(3 * C), whole_f(3 * C);
    for (int r = 0; r < R; r++)
      batchnorm2d_local_stats(kCpu, g_f.data() + 3 * r * C, inp_f.data() + n0[r] * img, blocks[r], C, HW);
    batchnorm2d_merge_stats(kCpu, merged_f.data(), g_f.data(), R, C);
    batchnorm2d_local_stats(kCpu, whole_f.data(), inp_f.data(), N, C, HW);
    EXPECT_TRUE(all_close("cpu merged stats", merged_f, whole_f, 1e-6, 0));
  }
}

TEST(KernelsConv, ChanMergeHandlesEmptyAndOffsets) {
  // an empty rank is the identity; a far offset keeps the variance
  const BnStats<double> a{4, 1e6 + 1.5, 5.0}, e{0, 0, 0};
  const auto r1 = batchnorm_merge_stats(a, e), r2 = batchnorm_merge_stats(e, a);
  EXPECT_EQ(r1.count, 4);
  EXPECT_EQ(r2.mean, a.mean);
  // {1e6+1, 1e6+2} and {1e6+3, 1e6+4}: mean 1e6+2.5, M2 = 5
  const auto m = batchnorm_merge_stats(BnStats<double>{2, 1e6 + 1.5, 0.5}, BnStats<double>{2, 1e6 + 3.5, 0.5});
  EXPECT_DOUBLE_EQ(m.mean, 1e6 + 2.5);
  EXPECT_DOUBLE_EQ(m.m2, 5.0);
}

// ---- ReLU, pooling --------------------------------------------------------------------------------------------
TEST(KernelsConv, ReluForwardBackwardInPlace) {
  const int64_t n = 50001;  // above the parallel threshold, odd
  const auto inp = random_vector(n, 30);
  std::vector<float> out(n), out_ref(n);
  relu_forward(kCpu, out.data(), inp.data(), n);
  ref::relu_forward(out_ref.data(), inp.data(), n);
  EXPECT_TRUE(all_close("relu out", out, out_ref, 0, 0));
  auto x = inp;
  relu_forward(kCpu, x.data(), x.data(), n);  // in place
  EXPECT_TRUE(all_close("relu in place", x, out_ref, 0, 0));
  const auto dout = random_vector(n, 31);
  std::vector<float> dinp(n), dinp_ref(n);
  relu_backward(kCpu, dinp.data(), dout.data(), out.data(), n);
  ref::relu_backward(dinp_ref.data(), dout.data(), out_ref.data(), n);
  EXPECT_TRUE(all_close("relu dinp", dinp, dinp_ref, 0, 0));
  auto d = dout;
  relu_backward(kCpu, d.data(), d.data(), out.data(), n);
  EXPECT_TRUE(all_close("relu dinp in place", d, dinp_ref, 0, 0));
}

TEST(KernelsConv, MaxPoolForwardBackward) {
  struct P {
    int N, C, H, W, K, stride, pad;
  };
  for (const P& p :
       {P{2, 3, 16, 16, 3, 2, 1}, P{3, 4, 15, 13, 3, 2, 1}, P{2, 2, 8, 8, 2, 2, 0}, P{1, 3, 7, 9, 3, 1, 1}}) {
    SCOPED_TRACE("H" + std::to_string(p.H) + "W" + std::to_string(p.W) + "K" + std::to_string(p.K));
    const int OH = (p.H + 2 * p.pad - p.K) / p.stride + 1, OW = (p.W + 2 * p.pad - p.K) / p.stride + 1;
    const size_t no = static_cast<size_t>(p.N) * p.C * OH * OW, ni = static_cast<size_t>(p.N) * p.C * p.H * p.W;
    // values on a coarse grid: ties happen, and the first maximum must win in both
    auto inp = random_vector(ni, 40);
    for (auto& v : inp) v = std::round(v * 4) / 4;
    std::vector<float> out(no), out_ref(no);
    std::vector<int32_t> idx(no), idx_ref(no);
    maxpool2d_forward(kCpu, out.data(), idx.data(), inp.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    ref::maxpool2d_forward(out_ref.data(), idx_ref.data(), inp.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    EXPECT_TRUE(all_close("maxpool out", out, out_ref, 0, 0));
    EXPECT_EQ(idx, idx_ref);
    const auto dout = random_vector(no, 41);
    std::vector<float> dinp(ni, NAN), dinp_ref(ni);
    maxpool2d_backward(kCpu, dinp.data(), dout.data(), idx.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    ref::maxpool2d_backward(dinp_ref.data(), dout.data(), idx_ref.data(), p.N, p.C, p.H, p.W, p.K, p.stride, p.pad);
    EXPECT_TRUE(all_close("maxpool dinp", dinp, dinp_ref, 0, 0));
  }
}

TEST(KernelsConv, GlobalAvgPoolForwardBackward) {
  const int N = 5, C = 7, HW = 49;
  const auto inp = random_vector(static_cast<size_t>(N) * C * HW, 50);
  std::vector<float> out(N * C), out_ref(N * C);
  global_avgpool_forward(kCpu, out.data(), inp.data(), N, C, HW);
  ref::global_avgpool_forward(out_ref.data(), inp.data(), N, C, HW);
  EXPECT_TRUE(all_close("avgpool out", out, out_ref, 2e-5, 2e-5));
  const auto dout = random_vector(N * C, 51);
  std::vector<float> dinp(inp.size(), NAN), dinp_ref(inp.size());
  global_avgpool_backward(kCpu, dinp.data(), dout.data(), N, C, HW);
  ref::global_avgpool_backward(dinp_ref.data(), dout.data(), N, C, HW);
  EXPECT_TRUE(all_close("avgpool dinp", dinp, dinp_ref, 1e-6, 0));
}

// ---- gradchecks of the reference backwards, double, tiny shapes ------------------------------------------------
constexpr double kStep = 1e-5;
constexpr double kTol = 1e-6;

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

void expect_matches_fd(const std::string& what, Vec& x, const Vec& analytic, const std::function<double()>& objective) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  Vec fd(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double lp = objective();
    x[i] = saved - kStep;
    const double lm = objective();
    x[i] = saved;
    fd[i] = (lp - lm) / (2 * kStep);
  }
  const double floor = 1e-3 * test::max_abs(fd.data(), fd.size()) + 1e-300;
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double rel = std::fabs(analytic[i] - fd[i]) / std::max(std::fabs(fd[i]), floor);
    if (!(rel <= worst)) {
      worst = rel;
      worst_i = i;
    }
  }
  EXPECT_LT(worst, kTol) << what << ": worst relative error at element " << worst_i << ": backward "
                         << analytic[worst_i] << ", finite difference " << fd[worst_i];
  EXPECT_GT(test::max_abs(fd.data(), fd.size()), 1e-3) << what;
}

TEST(KernelsConvGradcheck, Conv2d) {
  struct G {
    int N, C, H, W, OC, KH, KW, stride, pad;
  };
  for (const G& g : {G{2, 2, 5, 4, 3, 3, 3, 1, 1}, G{1, 2, 6, 5, 2, 3, 2, 2, 1}, G{2, 3, 3, 3, 2, 1, 1, 1, 0}}) {
    const int OH = (g.H + 2 * g.pad - g.KH) / g.stride + 1, OW = (g.W + 2 * g.pad - g.KW) / g.stride + 1;
    Vec inp = random_vector<double>(static_cast<size_t>(g.N) * g.C * g.H * g.W, 60),
        w = random_vector<double>(static_cast<size_t>(g.OC) * g.C * g.KH * g.KW, 61),
        b = random_vector<double>(g.OC, 62);
    const Vec r = random_vector<double>(static_cast<size_t>(g.N) * g.OC * OH * OW, 63);
    Vec out(r.size());
    auto objective = [&] {
      ref::conv2d_forward(out.data(), inp.data(), w.data(), b.data(), g.N, g.C, g.H, g.W, g.OC, g.KH, g.KW, g.stride,
                          g.pad);
      return dot(out, r);
    };
    Vec dinp(inp.size()), dw(w.size(), 0.0), db(g.OC, 0.0);
    ref::conv2d_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), g.N, g.C, g.H, g.W, g.OC,
                         g.KH, g.KW, g.stride, g.pad);
    expect_matches_fd("conv dinp", inp, dinp, objective);
    expect_matches_fd("conv dweight", w, dw, objective);
    expect_matches_fd("conv dbias", b, db, objective);
  }
}

TEST(KernelsConvGradcheck, BatchNormTrain) {
  const int N = 3, C = 2, HW = 4;
  Vec inp = random_vector<double>(N * C * HW, 70, -1.0, 3.0), gamma = random_vector<double>(C, 71, 0.5, 1.5),
      beta = random_vector<double>(C, 72);
  const Vec r = random_vector<double>(N * C * HW, 73);
  Vec out(r.size()), stats(3 * C), mean(C), rstd(C);
  auto objective = [&] {
    ref::batchnorm2d_forward_train(out.data(), stats.data(), mean.data(), rstd.data(), inp.data(), gamma.data(),
                                   beta.data(), N, C, HW, 1e-5);
    return dot(out, r);
  };
  objective();
  Vec dinp(inp.size()), dg(C, 0.0), db(C, 0.0);
  ref::batchnorm2d_backward(dinp.data(), dg.data(), db.data(), r.data(), inp.data(), mean.data(), rstd.data(),
                            gamma.data(), N, C, HW);
  expect_matches_fd("bn dinp", inp, dinp, objective);
  expect_matches_fd("bn dgamma", gamma, dg, objective);
  expect_matches_fd("bn dbeta", beta, db, objective);
}

TEST(KernelsConvGradcheck, ReluPools) {
  const int N = 2, C = 2, H = 5, W = 6;
  // ReLU away from the kink: inputs at least 0.1 from 0
  Vec x = random_vector<double>(N * C * H * W, 80);
  for (auto& v : x) v = v < 0 ? v - 0.1 : v + 0.1;
  const Vec r = random_vector<double>(x.size(), 81);
  Vec out(x.size());
  auto relu_obj = [&] {
    ref::relu_forward(out.data(), x.data(), static_cast<int64_t>(x.size()));
    return dot(out, r);
  };
  relu_obj();
  Vec dx(x.size());
  ref::relu_backward(dx.data(), r.data(), out.data(), static_cast<int64_t>(x.size()));
  expect_matches_fd("relu dinp", x, dx, relu_obj);

  // max-pool 3x3 s2 p1 on distinct values (no ties within h of each other)
  Vec xp(N * C * H * W);
  for (size_t i = 0; i < xp.size(); i++) xp[i] = static_cast<double>((i * 37) % xp.size()) * 0.01;
  const int OH = (H + 2 - 3) / 2 + 1, OW = (W + 2 - 3) / 2 + 1;
  const Vec rp = random_vector<double>(static_cast<size_t>(N) * C * OH * OW, 82);
  Vec op(rp.size());
  std::vector<int32_t> idx(rp.size());
  auto pool_obj = [&] {
    ref::maxpool2d_forward(op.data(), idx.data(), xp.data(), N, C, H, W, 3, 2, 1);
    return dot(op, rp);
  };
  pool_obj();
  Vec dxp(xp.size());
  ref::maxpool2d_backward(dxp.data(), rp.data(), idx.data(), N, C, H, W, 3, 2, 1);
  expect_matches_fd("maxpool dinp", xp, dxp, pool_obj);

  const Vec ra = random_vector<double>(N * C, 83);
  Vec oa(N * C);
  auto avg_obj = [&] {
    ref::global_avgpool_forward(oa.data(), x.data(), N, C, H * W);
    return dot(oa, ra);
  };
  Vec dxa(x.size());
  ref::global_avgpool_backward(dxa.data(), ra.data(), N, C, H * W);
  expect_matches_fd("avgpool dinp", x, dxa, avg_obj);
}

// The classifier head needs no new op: Linear (N, C) -> (N, classes) and the fused cross-entropy with V = Vp = 10.
TEST(KernelsConv, ClassifierHeadFitsExistingOps) {
  const int N = 6, C = 16, K = 10;
  const auto feat = random_vector(N * C, 90), w = random_vector(K * C, 91), b = random_vector(K, 92);
  const auto targets = test::random_ints(N, 93, 0, K);
  std::vector<float> logits(N * K), losses(N), logits_ref(N * K), losses_ref(N);
  matmul_forward(kCpu, logits.data(), feat.data(), w.data(), b.data(), N, C, K);
  ref::matmul_forward(logits_ref.data(), feat.data(), w.data(), b.data(), N, C, K);
  crossentropy_forward_backward(kCpu, losses.data(), logits.data(), targets.data(), 1.0f / N, N, K, K);
  ref::crossentropy_forward_backward(losses_ref.data(), logits_ref.data(), targets.data(), 1.0f / N, N, K, K);
  EXPECT_TRUE(all_close("head losses", losses, losses_ref, 2e-5, 2e-5));
  EXPECT_TRUE(all_close("head dlogits", logits, logits_ref, 2e-5, 2e-5));
}

}  // namespace
}  // namespace hpct::kernels
