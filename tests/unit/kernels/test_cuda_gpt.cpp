// The CUDA backend's GPT group (lib/kernels/cuda/cuda_gpt.cu) against the CPU backend: every op runs through the
// kernels.hpp dispatch on Device::CUDA and on Device::CPU with the same random inputs (fixed seeds), and the outputs
// are compared with all_close (|got - want| <= atol + rtol |want|, atol = atol_rel * max|want|). Every test skips
// without a usable device (HPCT_REQUIRE_GPU).
// Legend: N rows, C input, OC output channels, B batch, T time, NH heads, HS = C/NH, V vocabulary, Vp padded
// vocabulary, K classes; vocab-parallel: this rank holds the columns [v0, v0+Vl) of Vp.
//
// Coverage: odd sizes (not multiples of 32, of the CE block or of the CPU's causal block of 64), accumulate-vs-assign
// (+= outputs pre-filled with random values that must be added to; assigned outputs pre-filled with garbage that
// must be overwritten), null optional pointers (bias, dinp, dbias), padded vocabulary columns (masked in the forward,
// exactly 0 in dlogits), a vocab-parallel slice with padding and one with padding only, bitwise run-to-run
// reproducibility, and the device's answer to an out-of-range target (a NaN loss; the CPU throws).
//
// Tolerances, and why:
//   - exact: a max, a copy, a masked zero (padded dlogits, the vocab-parallel max and target logit), read-only
//     inputs left untouched, and a GPU run against itself (determinism);
//   - 1e-5 / 1e-5 (kFlash*): flash attention's out and dqkv against the CPU's flash attention (see kFlashRtol);
//   - 2e-5 / 2e-5 (kGemm*): GEMM outputs (Linear). cuBLAS and OpenBLAS sum the K products in
//     different orders (tiles, split-K), each with a rounding error of ~sqrt(K) 2^-24 of the scale of the terms;
//     results that cancel to ~0 are judged against the tensor's scale. The same bound as the CPU backend's own tests
//     (test_kernels_cpu.cpp) against the reference. A transposed or misplaced operand is an O(1) error;
//   - 1e-5 / 1e-6 (kSoftmax*): softmax probabilities and cross-entropy losses/dlogits. The device sums exp over a
//     row in a tree of per-thread partial sums, the CPU over 8 SIMD lanes; expf (device, <= 2 ulp) vs exp_simd
//     (CPU, <= 1.5 ulp); both give ~1e-7 relative. Padded and masked entries are checked exactly on top;
//   - 1e-6 / 1e-7 (kDouble*): dbias, summed over the rows in double on both sides, only the order differs, then
//     rounded to float: at most an ulp apart; the vocab-parallel loss from identical statistics (logf vs log).
//
// bf16 storage (the Bf16* tests: A = bf16 against the CPU backend's bf16 ops on the same bf16 inputs, or against exact
// values computed in double from them): see the comment above each test; every bf16 output is rounded once, so one
// bf16 ulp (kBf16Ulp, at most 2^-7 of the value) separates two sides that round float results differing in their last
// bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda_test_util.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

using test::all_close;
using test::bitwise_equal;
using test::cpu_ctx;
using test::cross_entropy_logits;
using test::cross_entropy_targets;
using test::DeviceBuffer;
using test::gpu_ctx;
using test::random_ints;
using test::random_vector;
using test::sz;

constexpr double kGemmRtol = 2e-5, kGemmAtolRel = 2e-5;
constexpr double kSoftmaxRtol = 1e-5, kSoftmaxAtolRel = 1e-6;
constexpr double kDoubleRtol = 1e-6, kDoubleAtolRel = 1e-7;
constexpr double kBf16Ulp = 1.0 / 128.0;
using test::random_bf16;
using test::to_float_vector;

// ==============================================================================================================
// Linear
// ==============================================================================================================
struct LinearShape {
  int N, C, OC;
};
// tiny; odd sizes (nothing a multiple of 32); rows/columns across several dbias blocks of 32 columns and 16 row
// lanes; a GPT-like shape (C = 256 -> 3C) with an odd N
const LinearShape kLinearShapes[] = {{1, 1, 1}, {7, 5, 3}, {37, 45, 29}, {131, 200, 257}, {253, 256, 768}};

std::string name(const LinearShape& s) {
  return "N" + std::to_string(s.N) + "C" + std::to_string(s.C) + "OC" + std::to_string(s.OC);
}

TEST(CudaGpt, MatmulForward) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 100;
  for (const LinearShape& s : kLinearShapes) {
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(name(s) + (with_bias ? " bias" : " no bias"));
      const int N = s.N, C = s.C, OC = s.OC;
      const auto inp = random_vector(sz(int64_t{N} * C), seed++);
      const auto weight = random_vector(sz(int64_t{OC} * C), seed++);
      const auto bias = random_vector(sz(OC), seed++);
      std::vector<float> want(sz(int64_t{N} * OC));
      matmul_forward(cpu_ctx(), want.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);

      DeviceBuffer<float> d_inp(inp), d_weight(weight), d_bias(bias);
      DeviceBuffer<float> d_out(random_vector(want.size(), seed++, 1e3, 2e3));  // assigned: garbage must go
      matmul_forward(gpu_ctx(), d_out.get(), d_inp.get(), d_weight.get(), with_bias ? d_bias.get() : nullptr, N, C, OC);
      EXPECT_TRUE(all_close("matmul_forward out", d_out.download(), want, kGemmRtol, kGemmAtolRel));
    }
  }
}

TEST(CudaGpt, MatmulBackward) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 200;
  for (const LinearShape& s : kLinearShapes) {
    // all outputs; dinp null (first layer); dbias null (bias-free Linear); both null
    for (const int variant : {0, 1, 2, 3}) {
      const bool with_dinp = variant == 0 || variant == 2, with_dbias = variant == 0 || variant == 1;
      SCOPED_TRACE(name(s) + (with_dinp ? " dinp" : " dinp=null") + (with_dbias ? " dbias" : " dbias=null"));
      const int N = s.N, C = s.C, OC = s.OC;
      const auto dout = random_vector(sz(int64_t{N} * OC), seed++);
      const auto inp = random_vector(sz(int64_t{N} * C), seed++);
      const auto weight = random_vector(sz(int64_t{OC} * C), seed++);
      const auto dweight0 = random_vector(sz(int64_t{OC} * C), seed++);  // += : pre-filled, must be added to
      const auto dbias0 = random_vector(sz(OC), seed++);
      const auto dinp0 = random_vector(sz(int64_t{N} * C), seed++, 1e3, 2e3);  // = : garbage, must be overwritten

      std::vector<float> dinp = dinp0, dweight = dweight0, dbias = dbias0;
      matmul_backward(cpu_ctx(), with_dinp ? dinp.data() : nullptr, dweight.data(), with_dbias ? dbias.data() : nullptr,
                      dout.data(), inp.data(), weight.data(), N, C, OC);

      DeviceBuffer<float> d_dout(dout), d_inp(inp), d_weight(weight), d_dweight(dweight0), d_dbias(dbias0),
          d_dinp(dinp0);
      matmul_backward(gpu_ctx(), with_dinp ? d_dinp.get() : nullptr, d_dweight.get(),
                      with_dbias ? d_dbias.get() : nullptr, d_dout.get(), d_inp.get(), d_weight.get(), N, C, OC);
      if (with_dinp) {
        EXPECT_TRUE(all_close("matmul_backward dinp", d_dinp.download(), dinp, kGemmRtol, kGemmAtolRel));
      } else {
        EXPECT_TRUE(bitwise_equal("matmul_backward dinp untouched", d_dinp.download(), dinp0));
      }
      EXPECT_TRUE(all_close("matmul_backward dweight", d_dweight.download(), dweight, kGemmRtol, kGemmAtolRel));
      if (with_dbias) {
        EXPECT_TRUE(all_close("matmul_backward dbias", d_dbias.download(), dbias, kDoubleRtol, kDoubleAtolRel));
      } else {
        EXPECT_TRUE(bitwise_equal("matmul_backward dbias untouched", d_dbias.download(), dbias0));
      }
    }
  }
}

// Accumulation over micro-batches: two backward calls add both contributions (dweight, dbias +=), as the trainer
// relies on; and N = 0 rows is a no-op.
// train.precision tf32 / bf16 / fp16 (exec_context.hpp): cuBLAS rounds the fp32 inputs for the tensor cores and
// accumulates in fp32. Every element of out, dinp and dweight lies within the rigorous rounding bound of its inner
// product (cuda_test_util.hpp product_bound) around the exact (double) value; the outputs keep fp32 storage. Whether
// cuBLAS actually took a tensor-core path (the compute types *allow* it) is printed, not asserted.
TEST(CudaGpt, MatmulReducedPrecisionWithinRoundingBounds) {
  HPCT_REQUIRE_GPU();
  const LinearShape shapes[] = {{37, 45, 29}, {131, 200, 257}, {253, 256, 768}};
  uint32_t seed = 700;
  for (const Precision p : {Precision::TF32, Precision::BF16, Precision::FP16}) {
    const ExecContext ctx{Device::CUDA, nullptr, p};
    const double u = test::unit_roundoff(p);
    for (const LinearShape& sh : shapes) {
      SCOPED_TRACE(name(sh) + " " + precision_name(p));
      const int N = sh.N, C = sh.C, OC = sh.OC;
      const auto inp = random_vector(sz(int64_t{N} * C), seed++);
      const auto weight = random_vector(sz(int64_t{OC} * C), seed++);
      const auto bias = random_vector(sz(OC), seed++);
      const auto dout = random_vector(sz(int64_t{N} * OC), seed++);
      const auto dweight0 = random_vector(sz(int64_t{OC} * C), seed++);
      // exact values and bounds in double: out = inp W^T + b, dinp = dout W, dweight = dweight0 + dout^T inp
      std::vector<double> out_x(sz(int64_t{N} * OC)), out_b(out_x.size());
      for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
          double acc = 0, ap = 0, ai = 0;
          for (int c = 0; c < C; c++) {
            const double a = inp[sz(int64_t{n} * C + c)], b = weight[sz(int64_t{o} * C + c)];
            acc += a * b, ap += std::fabs(a * b), ai += std::fabs(a) + std::fabs(b);
          }
          out_x[sz(int64_t{n} * OC + o)] = acc + bias[sz(o)];
          out_b[sz(int64_t{n} * OC + o)] = test::product_bound(u, C, ap, ai, std::fabs(bias[sz(o)]));
        }
      std::vector<double> dinp_x(sz(int64_t{N} * C)), dinp_b(dinp_x.size());
      for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
          double acc = 0, ap = 0, ai = 0;
          for (int o = 0; o < OC; o++) {
            const double a = dout[sz(int64_t{n} * OC + o)], b = weight[sz(int64_t{o} * C + c)];
            acc += a * b, ap += std::fabs(a * b), ai += std::fabs(a) + std::fabs(b);
          }
          dinp_x[sz(int64_t{n} * C + c)] = acc;
          dinp_b[sz(int64_t{n} * C + c)] = test::product_bound(u, OC, ap, ai, 0.0);
        }
      std::vector<double> dw_x(sz(int64_t{OC} * C)), dw_b(dw_x.size());
      for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
          double acc = 0, ap = 0, ai = 0;
          for (int n = 0; n < N; n++) {
            const double a = dout[sz(int64_t{n} * OC + o)], b = inp[sz(int64_t{n} * C + c)];
            acc += a * b, ap += std::fabs(a * b), ai += std::fabs(a) + std::fabs(b);
          }
          const double w0 = dweight0[sz(int64_t{o} * C + c)];
          dw_x[sz(int64_t{o} * C + c)] = acc + w0;
          dw_b[sz(int64_t{o} * C + c)] = test::product_bound(u, N, ap, ai, std::fabs(w0));
        }

      DeviceBuffer<float> d_inp(inp), d_weight(weight), d_bias(bias), d_dout(dout), d_dw(dweight0);
      DeviceBuffer<float> d_out(out_x.size()), d_dinp(dinp_x.size()), d_out32(out_x.size());
      matmul_forward(ctx, d_out.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C, OC);
      matmul_backward(ctx, d_dinp.get(), d_dw.get(), nullptr, d_dout.get(), d_inp.get(), d_weight.get(), N, C, OC);
      const std::vector<float> out = d_out.download();
      EXPECT_TRUE(test::within_bounds("matmul_forward out", out, out_x, out_b));
      EXPECT_TRUE(test::within_bounds("matmul_backward dinp", d_dinp.download(), dinp_x, dinp_b));
      EXPECT_TRUE(test::within_bounds("matmul_backward dweight (+=)", d_dw.download(), dw_x, dw_b));
      matmul_forward(gpu_ctx(), d_out32.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C, OC);
      std::printf("  [%s %s] forward %s the fp32 GEMM's bits\n", precision_name(p), name(sh).c_str(),
                  bitwise_equal("", out, d_out32.download()) ? "equals (no tensor-core rounding chosen)"
                                                             : "differs from");
    }
  }
}

TEST(CudaGpt, MatmulBackwardAccumulatesAcrossCallsAndEmptyIsNoop) {
  HPCT_REQUIRE_GPU();
  const int N = 19, C = 33, OC = 41;
  const auto dout1 = random_vector(sz(N * OC), 301), dout2 = random_vector(sz(N * OC), 302);
  const auto inp = random_vector(sz(N * C), 303), weight = random_vector(sz(OC * C), 304);
  const auto dweight0 = random_vector(sz(OC * C), 305), dbias0 = random_vector(sz(OC), 306);
  std::vector<float> dweight = dweight0, dbias = dbias0;
  matmul_backward(cpu_ctx(), static_cast<float*>(nullptr), dweight.data(), dbias.data(), dout1.data(), inp.data(),
                  weight.data(), N, C, OC);
  matmul_backward(cpu_ctx(), static_cast<float*>(nullptr), dweight.data(), dbias.data(), dout2.data(), inp.data(),
                  weight.data(), N, C, OC);

  DeviceBuffer<float> d_dout1(dout1), d_dout2(dout2), d_inp(inp), d_weight(weight), d_dweight(dweight0),
      d_dbias(dbias0);
  matmul_backward(gpu_ctx(), static_cast<float*>(nullptr), d_dweight.get(), d_dbias.get(), d_dout1.get(), d_inp.get(),
                  d_weight.get(), N, C, OC);
  matmul_backward(gpu_ctx(), static_cast<float*>(nullptr), d_dweight.get(), d_dbias.get(), d_dout2.get(), d_inp.get(),
                  d_weight.get(), N, C, OC);
  EXPECT_TRUE(all_close("dweight after two calls", d_dweight.download(), dweight, kGemmRtol, kGemmAtolRel));
  EXPECT_TRUE(all_close("dbias after two calls", d_dbias.download(), dbias, kDoubleRtol, kDoubleAtolRel));

  const auto before_w = d_dweight.download(), before_b = d_dbias.download();
  matmul_backward(gpu_ctx(), static_cast<float*>(nullptr), d_dweight.get(), d_dbias.get(), d_dout1.get(), d_inp.get(),
                  d_weight.get(), 0, C, OC);
  EXPECT_TRUE(bitwise_equal("dweight after N = 0", d_dweight.download(), before_w));
  EXPECT_TRUE(bitwise_equal("dbias after N = 0", d_dbias.download(), before_b));
}

// ==============================================================================================================
// Attention (flash on both backends: each keeps the log-sum-exp L (B,NH,T) and uses D (B,NH,T) as scratch)
// ==============================================================================================================
struct AttnShape {
  int B, T, C, NH;
};
// T: 1, 5, 70, 129, 200 (not multiples of the kernels' tile of 32, one row past a tile boundary at 33 and 129) and 64
// (two whole tiles); head sizes 4, 8, 12, 32, 64 (GPT-2), 96 and 128 (3 and 4 register slots per lane; the backward's
// shared memory passes the default 48 KiB from HS = 96 on, the forward's at 128); B and NH > 1 for most; the GPT
// step's T = 256, C = 256, NH = 4.
const AttnShape kAttnShapes[] = {{2, 1, 8, 2},    {3, 5, 24, 3},    {2, 70, 48, 4},   {1, 129, 64, 2}, {2, 64, 128, 2},
                                 {2, 33, 192, 2}, {1, 200, 128, 1}, {2, 256, 256, 4}, {1, 40, 16, 2}};

std::string name(const AttnShape& s) {
  return "B" + std::to_string(s.B) + "T" + std::to_string(s.T) + "C" + std::to_string(s.C) + "NH" +
         std::to_string(s.NH);
}

// Tolerances of the flash kernels against the CPU backend (1e-5 relative, atol 1e-5 of the tensor's largest |value|):
// the same algorithm in other tiles. Both sum the online softmax tile by tile (rescaling by exp(m_old - m_new)) and
// normalise once at the end, and recompute P = exp(s - L) in backward with D = rowsum(dout * out); the tiles differ
// (32 or 64 keys on the device, 256 keys forward and 64 backward on the CPU, whose products are OpenBLAS GEMMs), so do
// the sums' orders. Each is a sum of at most T products in fp32, with expf (<= 2 ulp) vs exp_simd (<= 1.5 ulp): about
// sqrt(T) 2^-24 of the scale, a few 1e-7 at T = 256. Run as host code (tests/cuda_emu/test_emu_flash_attention.cpp), the
// same kernels stay within a tenth of this bound. A wrong index, mask or rescale is an O(1) error.
constexpr double kFlashRtol = 1e-5, kFlashAtolRel = 1e-5;
// L against the double reference: log of a sum of exps plus the max, ~1e-7 absolute for |L| of a few units.
constexpr double kLseRtol = 1e-6, kLseAtolRel = 1e-6;

// The planned attention buffers of float storage in floats (kernels.hpp sizes them in bytes).
int64_t attention_stats_floats(const ExecContext& ctx, int B, int T, int C, int NH) {
  return attention_stats_bytes(ctx, B, T, C, NH, DType::F32) / int64_t{sizeof(float)};
}
int64_t attention_scratch_floats(const ExecContext& ctx, int B, int T, int C, int NH) {
  return attention_scratch_bytes(ctx, B, T, C, NH, DType::F32) / int64_t{sizeof(float)};
}

// The buffer sizes the model plans with (pure host arithmetic: no device needed).
TEST(CudaGpt, AttentionBufferSizes) {
  for (const AttnShape& s : kAttnShapes) {
    SCOPED_TRACE(name(s));
    EXPECT_EQ(attention_stats_floats(gpu_ctx(), s.B, s.T, s.C, s.NH), int64_t{s.B} * s.NH * s.T);
    EXPECT_EQ(attention_scratch_floats(gpu_ctx(), s.B, s.T, s.C, s.NH), int64_t{s.B} * s.NH * s.T);
  }
  // GPT-2 small at T = 1024, B = 8: 98k floats on either backend (the T x T probabilities would be 100M)
  EXPECT_EQ(attention_stats_floats(gpu_ctx(), 8, 1024, 768, 12), int64_t{8} * 12 * 1024);
  EXPECT_EQ(attention_stats_floats(cpu_ctx(), 8, 1024, 768, 12), int64_t{8} * 12 * 1024);
  EXPECT_THROW(attention_stats_floats(gpu_ctx(), 1, 8, 129, 1), hpct::Error);   // HS = 129 > 128
  EXPECT_THROW(attention_scratch_floats(gpu_ctx(), 1, 8, 10, 3), hpct::Error);  // C not a multiple of NH
}

TEST(CudaGpt, AttentionForward) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 400;
  for (const AttnShape& s : kAttnShapes) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C),
                 n_att = sz(attention_stats_floats(cpu_ctx(), B, T, C, NH)),
                 n_lse = sz(attention_stats_floats(gpu_ctx(), B, T, C, NH));
    const auto qkv = random_vector(n_qkv, seed++, -2.0, 2.0);  // a spread of scores: non-uniform softmax
    std::vector<float> out(n_out), att(n_att);
    attention_forward(cpu_ctx(), out.data(), att.data(), qkv.data(), B, T, C, NH);
    const auto lse_want = test::attention_log_sum_exp_rows(qkv, B, T, C, NH);
    EXPECT_TRUE(all_close("CPU attention L", att, lse_want, kLseRtol, kLseAtolRel));  // the CPU's stats are L too

    DeviceBuffer<float> d_qkv(qkv);
    DeviceBuffer<float> d_out(random_vector(n_out, seed++, 1e3, 2e3)), d_lse(random_vector(n_lse, seed++, 1e3, 2e3));
    attention_forward(gpu_ctx(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
    EXPECT_TRUE(all_close("attention out", d_out.download(), out, kFlashRtol, kFlashAtolRel));
    EXPECT_TRUE(all_close("attention L", d_lse.download(), lse_want, kLseRtol, kLseAtolRel));
    // each side within kLse* of the double reference: twice that of each other
    EXPECT_TRUE(all_close("attention L vs CPU", d_lse.download(), att, 2 * kLseRtol, 2 * kLseAtolRel));
    EXPECT_TRUE(bitwise_equal("attention qkv (read only)", d_qkv.download(), qkv));
  }
}

// Each side runs its own forward and backward (the device's backward needs its L and its out), as the model does.
TEST(CudaGpt, AttentionBackward) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 500;
  for (const AttnShape& s : kAttnShapes) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C),
                 n_att = sz(attention_stats_floats(cpu_ctx(), B, T, C, NH)),
                 n_lse = sz(attention_stats_floats(gpu_ctx(), B, T, C, NH)),
                 n_scratch = sz(attention_scratch_floats(gpu_ctx(), B, T, C, NH));
    const auto qkv = random_vector(n_qkv, seed++, -2.0, 2.0);
    const auto dout = random_vector(n_out, seed++);
    std::vector<float> out(n_out), att(n_att), dqkv(n_qkv), datt(n_att);
    attention_forward(cpu_ctx(), out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(cpu_ctx(), dqkv.data(), datt.data(), dout.data(), qkv.data(), out.data(), att.data(), B, T, C,
                       NH);

    DeviceBuffer<float> d_qkv(qkv), d_dout(dout), d_out(n_out), d_lse(n_lse);
    attention_forward(gpu_ctx(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
    const auto out_dev = d_out.download(), lse_dev = d_lse.download();
    DeviceBuffer<float> d_dqkv(random_vector(n_qkv, seed++, 1e3, 2e3));         // assigned: garbage must go
    DeviceBuffer<float> d_scratch(random_vector(n_scratch, seed++, 1e3, 2e3));  // scratch: contents must not matter
    attention_backward(gpu_ctx(), d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B,
                       T, C, NH);
    const auto got = d_dqkv.download();
    EXPECT_TRUE(all_close("attention dqkv", got, dqkv, kFlashRtol, kFlashAtolRel));
    // dq, dk, dv separately (a swapped pair would pass the combined check only by accident; this names the part),
    // judged against the scale of the whole dqkv: at T = 1 dk is exactly 0 in exact arithmetic (one probability, 1,
    // has no gradient) and the CPU gives 0, while the kernels give dS = P (dP - D) with dP and D the same dot product
    // summed in two orders (sequential over d, and rowdot's warp tree): a few 1e-8 of rounding noise, which a floor
    // of atol_rel * max|dk| = 0 would reject (the host emulation of the kernels, test_emu_flash_attention, showed it).
    const double atol = kFlashAtolRel * test::max_abs(dqkv.data(), dqkv.size());
    for (int part = 0; part < 3; part++) {
      const char* what[] = {"attention dq", "attention dk", "attention dv"};
      int bad = 0;
      for (int64_t r = 0; r < int64_t{B} * T; r++)
        for (int c = 0; c < C; c++) {
          const double g = got[sz(r * 3 * C + part * C + c)], w = dqkv[sz(r * 3 * C + part * C + c)];
          if (!(std::fabs(g - w) <= atol + kFlashRtol * std::fabs(w)) && bad++ < 3)
            ADD_FAILURE() << what[part] << " row " << r << " column " << c << ": got " << g << ", want " << w;
        }
      EXPECT_EQ(bad, 0) << what[part] << ": elements beyond the tolerance";
    }
    EXPECT_TRUE(bitwise_equal("attention out (read only)", d_out.download(), out_dev));
    EXPECT_TRUE(bitwise_equal("attention L (read only)", d_lse.download(), lse_dev));
    EXPECT_TRUE(bitwise_equal("attention qkv (read only)", d_qkv.download(), qkv));
    EXPECT_TRUE(bitwise_equal("attention dout (read only)", d_dout.download(), dout));
  }
}

// A micro-batch smaller than the one the buffers were planned for (the model's last, partial micro-batch) uses the
// leading part of the same buffers and gives the same rows as a run at that batch size.
TEST(CudaGpt, AttentionSmallerBatchInPlannedBuffers) {
  HPCT_REQUIRE_GPU();
  const int Bplan = 3, B = 2, T = 45, C = 64, NH = 2;
  const auto qkv = random_vector(sz(int64_t{B} * T * 3 * C), 550, -2.0, 2.0);
  const auto dout = random_vector(sz(int64_t{B} * T * C), 551);
  std::vector<float> out(sz(int64_t{B} * T * C)), dqkv(qkv.size());
  {
    DeviceBuffer<float> d_qkv(qkv), d_dout(dout), d_out(out.size()), d_dqkv(qkv.size()),
        d_lse(sz(attention_stats_floats(gpu_ctx(), B, T, C, NH))),
        d_scratch(sz(attention_scratch_floats(gpu_ctx(), B, T, C, NH)));
    attention_forward(gpu_ctx(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
    attention_backward(gpu_ctx(), d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B,
                       T, C, NH);
    out = d_out.download();
    dqkv = d_dqkv.download();
  }
  DeviceBuffer<float> d_qkv(qkv), d_dout(dout), d_out(out.size()), d_dqkv(qkv.size()),
      d_lse(random_vector(sz(attention_stats_floats(gpu_ctx(), Bplan, T, C, NH)), 552, 1e3, 2e3)),
      d_scratch(random_vector(sz(attention_scratch_floats(gpu_ctx(), Bplan, T, C, NH)), 553, 1e3, 2e3));
  attention_forward(gpu_ctx(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
  attention_backward(gpu_ctx(), d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B,
                     T, C, NH);
  EXPECT_TRUE(bitwise_equal("out", d_out.download(), out));
  EXPECT_TRUE(bitwise_equal("dqkv", d_dqkv.download(), dqkv));
}

// A run reproduces itself bit for bit: forward, backward, Linear backward and fused cross-entropy twice on the same
// inputs (no atomics, fixed reduction orders, deterministic cuBLAS).
TEST(CudaGpt, BitwiseReproducible) {
  HPCT_REQUIRE_GPU();
  const int B = 2, T = 70, C = 48, NH = 4, N = B * T, OC = 3 * C, V = 1000, Vp = 1024;
  const auto qkv = random_vector(sz(int64_t{N} * 3 * C), 601, -2.0, 2.0);
  const auto dout = random_vector(sz(int64_t{N} * C), 602);
  const auto lin_inp = random_vector(sz(int64_t{N} * C), 603), lin_w = random_vector(sz(int64_t{OC} * C), 604);
  const auto lin_dout = random_vector(sz(int64_t{N} * OC), 605);
  const auto logits = random_vector(sz(int64_t{N} * Vp), 606, -4.0, 4.0);
  const auto targets = random_ints(sz(N), 607, 0, V);
  // flash attention at a GPT-2 head size too (HS = 64, T across several tiles)
  const int B2 = 2, T2 = 300, C2 = 256, NH2 = 4;
  const auto qkv2 = random_vector(sz(int64_t{B2} * T2 * 3 * C2), 608, -2.0, 2.0);
  const auto dout2 = random_vector(sz(int64_t{B2} * T2 * C2), 609);
  std::vector<std::vector<float>> runs[2];
  for (auto& run : runs) {
    DeviceBuffer<float> d_qkv(qkv), d_dout(dout), d_out(sz(int64_t{N} * C)),
        d_lse(sz(attention_stats_floats(gpu_ctx(), B, T, C, NH))), d_dqkv(qkv.size()),
        d_scratch(sz(attention_scratch_floats(gpu_ctx(), B, T, C, NH)));
    attention_forward(gpu_ctx(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
    attention_backward(gpu_ctx(), d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B,
                       T, C, NH);
    DeviceBuffer<float> d_qkv2(qkv2), d_dout2(dout2), d_out2(dout2.size()),
        d_lse2(sz(attention_stats_floats(gpu_ctx(), B2, T2, C2, NH2))), d_dqkv2(qkv2.size()),
        d_scratch2(sz(attention_scratch_floats(gpu_ctx(), B2, T2, C2, NH2)));
    attention_forward(gpu_ctx(), d_out2.get(), d_lse2.get(), d_qkv2.get(), B2, T2, C2, NH2);
    attention_backward(gpu_ctx(), d_dqkv2.get(), d_scratch2.get(), d_dout2.get(), d_qkv2.get(), d_out2.get(),
                       d_lse2.get(), B2, T2, C2, NH2);
    DeviceBuffer<float> d_inp(lin_inp), d_w(lin_w), d_ldout(lin_dout), d_dinp(lin_inp.size()), d_dw(lin_w.size()),
        d_db(sz(OC));
    matmul_backward(gpu_ctx(), d_dinp.get(), d_dw.get(), d_db.get(), d_ldout.get(), d_inp.get(), d_w.get(), N, C, OC);
    DeviceBuffer<float> d_logits(logits), d_losses(sz(N));
    DeviceBuffer<int32_t> d_targets(targets);
    crossentropy_forward_backward(gpu_ctx(), d_losses.get(), d_logits.get(), d_targets.get(), 1.0f / N, N, V, Vp);
    run = {d_out.download(),  d_lse.download(),    d_dqkv.download(),  d_out2.download(),
           d_lse2.download(), d_dqkv2.download(),  d_dinp.download(),  d_dw.download(),
           d_db.download(),   d_losses.download(), d_logits.download()};
  }
  const char* what[] = {"out",  "L",       "dqkv",  "out (HS 64)", "L (HS 64)", "dqkv (HS 64)",
                        "dinp", "dweight", "dbias", "losses",      "dlogits"};
  for (size_t i = 0; i < runs[0].size(); i++) EXPECT_TRUE(bitwise_equal(what[i], runs[1][i], runs[0][i]));
}

// ==============================================================================================================
// Cross-entropies
// ==============================================================================================================

struct VocabShape {
  int N, V, Vp;
};
// one row; a tiny vocabulary below one warp; odd V with padding in the last warp; V across several per-thread
// strides of the 512-thread block; the GPT-2 vocabulary (50257 padded to 50304)
const VocabShape kVocabShapes[] = {{1, 3, 128}, {5, 17, 128}, {37, 1000, 1024}, {9, 3001, 3072}, {3, 50257, 50304}};

std::string name(const VocabShape& s) {
  return "N" + std::to_string(s.N) + "V" + std::to_string(s.V) + "Vp" + std::to_string(s.Vp);
}

TEST(CudaGpt, CrossentropyForward) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 700;
  for (const VocabShape& s : kVocabShapes) {
    SCOPED_TRACE(name(s));
    const auto logits = cross_entropy_logits(s.N, s.V, s.Vp, seed++);
    const auto targets = cross_entropy_targets(s.N, s.V, seed++);
    std::vector<float> losses(sz(s.N));
    crossentropy_forward(cpu_ctx(), losses.data(), logits.data(), targets.data(), s.N, s.V, s.Vp);

    DeviceBuffer<float> d_logits(logits), d_losses(random_vector(sz(s.N), seed++, 1e3, 2e3));
    DeviceBuffer<int32_t> d_targets(targets);
    crossentropy_forward(gpu_ctx(), d_losses.get(), d_logits.get(), d_targets.get(), s.N, s.V, s.Vp);
    EXPECT_TRUE(all_close("crossentropy_forward losses", d_losses.download(), losses, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_TRUE(bitwise_equal("crossentropy_forward logits (read only)", d_logits.download(), logits));
  }
}

TEST(CudaGpt, CrossentropyForwardBackward) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 800;
  for (const VocabShape& s : kVocabShapes) {
    SCOPED_TRACE(name(s));
    const auto logits = cross_entropy_logits(s.N, s.V, s.Vp, seed++);
    const auto targets = cross_entropy_targets(s.N, s.V, seed++);
    const float dloss = 1.0f / static_cast<float>(s.N);
    std::vector<float> losses(sz(s.N)), dlogits = logits;
    crossentropy_forward_backward(cpu_ctx(), losses.data(), dlogits.data(), targets.data(), dloss, s.N, s.V, s.Vp);

    DeviceBuffer<float> d_logits(logits), d_losses(random_vector(sz(s.N), seed++, 1e3, 2e3));
    DeviceBuffer<int32_t> d_targets(targets);
    crossentropy_forward_backward(gpu_ctx(), d_losses.get(), d_logits.get(), d_targets.get(), dloss, s.N, s.V, s.Vp);
    const auto got = d_logits.download();
    EXPECT_TRUE(
        all_close("crossentropy_forward_backward losses", d_losses.download(), losses, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_TRUE(all_close("crossentropy_forward_backward dlogits", got, dlogits, kSoftmaxRtol, kSoftmaxAtolRel));
    for (int n = 0; n < s.N; n++)
      for (int v = s.V; v < s.Vp; v++)
        ASSERT_EQ(got[sz(int64_t{n} * s.Vp + v)], 0.0f) << "padded dlogit row " << n << " column " << v;
  }
}

// The device cannot throw on a bad target (it would have to read the targets back): the row's loss is NaN instead,
// and the other rows are unaffected.
TEST(CudaGpt, CrossentropyBadTargetGivesNaN) {
  HPCT_REQUIRE_GPU();
  const int N = 4, V = 100, Vp = 128;
  const auto logits = cross_entropy_logits(N, V, Vp, 901);
  std::vector<int32_t> targets = {3, V, -1, V - 1};  // rows 1 and 2 out of range (a padding column; negative)
  DeviceBuffer<float> d_logits(logits), d_losses(sz(N));
  DeviceBuffer<int32_t> d_targets(targets);
  crossentropy_forward(gpu_ctx(), d_losses.get(), d_logits.get(), d_targets.get(), N, V, Vp);
  const auto losses = d_losses.download();
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
  EXPECT_TRUE(std::isnan(losses[2]));
  EXPECT_TRUE(std::isfinite(losses[3]));
}

TEST(CudaGpt, CrossentropySmoothed) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 1000;
  const int kN[] = {1, 33, 130};
  const int kK[] = {2, 10, 100, 1000, 1001};
  for (const int N : kN) {
    for (const int K : kK) {
      for (const float eps : {0.0f, 0.1f}) {
        SCOPED_TRACE("N" + std::to_string(N) + "K" + std::to_string(K) + " eps " + std::to_string(eps));
        auto logits = random_vector(sz(int64_t{N} * K), seed++, -4.0, 4.0);
        for (int k = 0; k < K; k++) logits[sz(k)] += 80.0f;  // row 0: overflows without the max subtraction
        const auto targets = cross_entropy_targets(N, K, seed++);
        const float dloss = 0.25f;
        std::vector<float> losses(sz(N)), losses_fused(sz(N)), dlogits = logits;
        crossentropy_smoothed_forward(cpu_ctx(), losses.data(), logits.data(), targets.data(), eps, N, K);
        crossentropy_smoothed_forward_backward(cpu_ctx(), losses_fused.data(), dlogits.data(), targets.data(), dloss,
                                               eps, N, K);

        DeviceBuffer<float> d_logits(logits), d_losses(random_vector(sz(N), seed++, 1e3, 2e3));
        DeviceBuffer<float> d_dlogits(logits), d_losses_fused(random_vector(sz(N), seed++, 1e3, 2e3));
        DeviceBuffer<int32_t> d_targets(targets);
        crossentropy_smoothed_forward(gpu_ctx(), d_losses.get(), d_logits.get(), d_targets.get(), eps, N, K);
        crossentropy_smoothed_forward_backward(gpu_ctx(), d_losses_fused.get(), d_dlogits.get(), d_targets.get(), dloss,
                                               eps, N, K);
        EXPECT_TRUE(all_close("smoothed losses", d_losses.download(), losses, kSoftmaxRtol, kSoftmaxAtolRel));
        EXPECT_TRUE(
            all_close("smoothed fused losses", d_losses_fused.download(), losses_fused, kSoftmaxRtol, kSoftmaxAtolRel));
        EXPECT_TRUE(all_close("smoothed dlogits", d_dlogits.download(), dlogits, kSoftmaxRtol, kSoftmaxAtolRel));
        EXPECT_TRUE(bitwise_equal("smoothed forward logits (read only)", d_logits.download(), logits));
      }
    }
  }
}

// ---- vocabulary-parallel pieces: every rank's slice, each phase on its own with identical inputs on both sides ----
// The reduced statistics (the model's allreduces) are computed on the host from the CPU backend's per-rank outputs;
// each device phase is then compared with the CPU phase on the same inputs. V = 700 of Vp = 1024 over t = 4 ranks
// (Vl = 256): ranks 0, 1 all real, rank 2 partly padding (188 real columns), rank 3 padding only; t = 3 on Vp = 768
// (Vl = 256, not a power of two of ranks) and t = 1 (the serial case).
struct VpCase {
  int N, V, Vp, t;
};
const VpCase kVpCases[] = {{37, 700, 1024, 4}, {5, 700, 768, 3}, {9, 1000, 1024, 1}};

TEST(CudaGpt, CrossentropyVocabParallel) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 1100;
  for (const VpCase& c : kVpCases) {
    const int N = c.N, V = c.V, Vp = c.Vp, t = c.t, Vl = Vp / t;
    SCOPED_TRACE("N" + std::to_string(N) + "V" + std::to_string(V) + "Vp" + std::to_string(Vp) + "t" +
                 std::to_string(t));
    const auto logits = cross_entropy_logits(N, V, Vp, seed++);
    const auto targets = cross_entropy_targets(N, V, seed++);
    const float dloss = 1.0f / static_cast<float>(N);
    // the per-rank slices
    std::vector<std::vector<float>> slices(sz(t));
    for (int r = 0; r < t; r++) {
      slices[sz(r)].resize(sz(int64_t{N} * Vl));
      for (int n = 0; n < N; n++)
        std::memcpy(&slices[sz(r)][sz(int64_t{n} * Vl)], &logits[sz(int64_t{n} * Vp + int64_t{r} * Vl)],
                    sizeof(float) * sz(Vl));
    }
    DeviceBuffer<int32_t> d_targets(targets);

    // phase a: local max, allreduce(MAX) on the host
    std::vector<float> global_max(sz(N), -INFINITY);
    for (int r = 0; r < t; r++) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const int v0 = r * Vl;
      std::vector<float> mx(sz(N));
      crossentropy_vp_local_max(cpu_ctx(), mx.data(), slices[sz(r)].data(), v0, Vl, V, N);
      DeviceBuffer<float> d_slice(slices[sz(r)]), d_mx(random_vector(sz(N), seed++, 1e3, 2e3));
      crossentropy_vp_local_max(gpu_ctx(), d_mx.get(), d_slice.get(), v0, Vl, V, N);
      EXPECT_TRUE(bitwise_equal("vp local max", d_mx.download(), mx));  // a max is exact; -inf for padding only
      for (int n = 0; n < N; n++) global_max[sz(n)] = std::max(global_max[sz(n)], mx[sz(n)]);
    }

    // phase b: local sum of exp and target logit, allreduce(SUM) on the host in rank order
    std::vector<float> global_sumexp(sz(N), 0.0f), global_tl(sz(N), 0.0f);
    DeviceBuffer<float> d_gmax(global_max);
    for (int r = 0; r < t; r++) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const int v0 = r * Vl;
      std::vector<float> se(sz(N)), tl(sz(N));
      crossentropy_vp_local_sumexp(cpu_ctx(), se.data(), tl.data(), slices[sz(r)].data(), global_max.data(),
                                   targets.data(), v0, Vl, V, N);
      DeviceBuffer<float> d_slice(slices[sz(r)]), d_se(random_vector(sz(N), seed++, 1e3, 2e3)),
          d_tl(random_vector(sz(N), seed++, 1e3, 2e3));
      crossentropy_vp_local_sumexp(gpu_ctx(), d_se.get(), d_tl.get(), d_slice.get(), d_gmax.get(), d_targets.get(), v0,
                                   Vl, V, N);
      // a rank of padding only: exactly 0 on both sides; all_close's atol floor is then 0, hence the exact check
      if (v0 >= V) {
        EXPECT_TRUE(bitwise_equal("vp local sumexp (padding only)", d_se.download(), se));
      } else {
        EXPECT_TRUE(all_close("vp local sumexp", d_se.download(), se, kSoftmaxRtol, kSoftmaxAtolRel));
      }
      EXPECT_TRUE(bitwise_equal("vp local target logit", d_tl.download(), tl));  // a copy or 0
      for (int n = 0; n < N; n++) {
        global_sumexp[sz(n)] += se[sz(n)];
        global_tl[sz(n)] += tl[sz(n)];
      }
    }

    // phase c: losses and dlogits in place (training), losses only (evaluation)
    DeviceBuffer<float> d_gse(global_sumexp), d_gtl(global_tl);
    for (int r = 0; r < t; r++) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const int v0 = r * Vl;
      std::vector<float> losses(sz(N)), dl = slices[sz(r)];
      crossentropy_vp_loss_backward(cpu_ctx(), losses.data(), dl.data(), global_max.data(), global_sumexp.data(),
                                    global_tl.data(), targets.data(), dloss, v0, Vl, V, N);
      DeviceBuffer<float> d_dl(slices[sz(r)]), d_losses(random_vector(sz(N), seed++, 1e3, 2e3));
      crossentropy_vp_loss_backward(gpu_ctx(), d_losses.get(), d_dl.get(), d_gmax.get(), d_gse.get(), d_gtl.get(),
                                    d_targets.get(), dloss, v0, Vl, V, N);
      EXPECT_TRUE(all_close("vp losses", d_losses.download(), losses, kDoubleRtol, kDoubleAtolRel));
      const auto got = d_dl.download();
      if (v0 >= V) {
        EXPECT_TRUE(bitwise_equal("vp dlogits (padding only)", got, dl));  // all exactly 0
      } else {
        EXPECT_TRUE(all_close("vp dlogits", got, dl, kSoftmaxRtol, kSoftmaxAtolRel));
      }
      for (int n = 0; n < N; n++)
        for (int j = std::max(0, V - v0); j < Vl; j++)
          ASSERT_EQ(got[sz(int64_t{n} * Vl + j)], 0.0f) << "padded dlogit row " << n << " local column " << j;
    }
    std::vector<float> losses(sz(N));
    crossentropy_vp_loss(cpu_ctx(), losses.data(), global_max.data(), global_sumexp.data(), global_tl.data(), N);
    DeviceBuffer<float> d_losses(random_vector(sz(N), seed++, 1e3, 2e3));
    crossentropy_vp_loss(gpu_ctx(), d_losses.get(), d_gmax.get(), d_gse.get(), d_gtl.get(), N);
    EXPECT_TRUE(all_close("vp_loss", d_losses.download(), losses, kDoubleRtol, kDoubleAtolRel));
  }
}

// The composed device phases (allreduces on the host) against the device's serial fused cross-entropy: the only
// difference is the split of the sum of exponentials (t partial sums then t - 1 adds): ~1e-7 relative.
TEST(CudaGpt, CrossentropyVocabParallelMatchesSerial) {
  HPCT_REQUIRE_GPU();
  const int N = 23, V = 700, Vp = 1024, t = 4, Vl = Vp / t;
  const auto logits = cross_entropy_logits(N, V, Vp, 1201);
  const auto targets = cross_entropy_targets(N, V, 1202);
  const float dloss = 1.0f / N;
  DeviceBuffer<float> d_full(logits), d_losses(sz(N));
  DeviceBuffer<int32_t> d_targets(targets);
  crossentropy_forward_backward(gpu_ctx(), d_losses.get(), d_full.get(), d_targets.get(), dloss, N, V, Vp);
  const auto serial_losses = d_losses.download(), serial_dlogits = d_full.download();

  std::vector<float> gmax(sz(N), -INFINITY), gse(sz(N), 0.0f), gtl(sz(N), 0.0f);
  std::vector<std::vector<float>> host_slices(sz(t), std::vector<float>(sz(int64_t{N} * Vl)));
  for (int r = 0; r < t; r++)
    for (int n = 0; n < N; n++)
      std::memcpy(&host_slices[sz(r)][sz(int64_t{n} * Vl)], &logits[sz(int64_t{n} * Vp + int64_t{r} * Vl)],
                  sizeof(float) * sz(Vl));
  DeviceBuffer<float> d_m(sz(N)), d_se(sz(N)), d_tl(sz(N));
  for (int r = 0; r < t; r++) {
    DeviceBuffer<float> d_slice(host_slices[sz(r)]);
    crossentropy_vp_local_max(gpu_ctx(), d_m.get(), d_slice.get(), r * Vl, Vl, V, N);
    const auto m = d_m.download();
    for (int n = 0; n < N; n++) gmax[sz(n)] = std::max(gmax[sz(n)], m[sz(n)]);
  }
  DeviceBuffer<float> d_gmax(gmax);
  for (int r = 0; r < t; r++) {
    DeviceBuffer<float> d_slice(host_slices[sz(r)]);
    crossentropy_vp_local_sumexp(gpu_ctx(), d_se.get(), d_tl.get(), d_slice.get(), d_gmax.get(), d_targets.get(),
                                 r * Vl, Vl, V, N);
    const auto se = d_se.download(), tl = d_tl.download();
    for (int n = 0; n < N; n++) {
      gse[sz(n)] += se[sz(n)];
      gtl[sz(n)] += tl[sz(n)];
    }
  }
  DeviceBuffer<float> d_gse(gse), d_gtl(gtl);
  std::vector<float> dlogits(logits.size());
  for (int r = 0; r < t; r++) {
    DeviceBuffer<float> d_slice(host_slices[sz(r)]), d_l(sz(N));
    crossentropy_vp_loss_backward(gpu_ctx(), d_l.get(), d_slice.get(), d_gmax.get(), d_gse.get(), d_gtl.get(),
                                  d_targets.get(), dloss, r * Vl, Vl, V, N);
    EXPECT_TRUE(
        all_close("vp losses vs serial (rank " + std::to_string(r) + ")", d_l.download(), serial_losses, 2e-6, 1e-6));
    const auto s = d_slice.download();
    for (int n = 0; n < N; n++)
      std::memcpy(&dlogits[sz(int64_t{n} * Vp + int64_t{r} * Vl)], &s[sz(int64_t{n} * Vl)], sizeof(float) * sz(Vl));
  }
  EXPECT_TRUE(all_close("vp dlogits vs serial", dlogits, serial_dlogits, 2e-6, 1e-6));
}

// ==============================================================================================================
// bf16 storage
// ==============================================================================================================

// Linear in 16-bit storage A (bf16, fp16) through cuBLASLt, against exact values computed in double from the same
// 16-bit values. The 16-bit products are exact in fp32 (8 + 8 or 11 + 11 significant bits <= 24); what remains is the
// fp32 accumulation of K products (tensor cores add groups of products with one alignment, which may truncate: up to 2
// fp32 ulps per addition, (2K + 4) 2^-24 sum |a b| with a margin), and for the 16-bit outputs (out with its bias, dinp)
// one rounding to nearest, u = 2^-8 (bf16) or 2^-11 (fp16) of the value. out gets a second: cuBLASLt's bias epilogue
// rounds the product (acc) to the storage type before it adds the bias (seen on an H100 with cuBLAS 13, 12x the
// one-rounding bound where the bias cancels the product; cuda_gpt.cu says why it is kept), so its bound adds u |acc|.
// dweight accumulates in fp32 onto its old value (2^-23 of it). One case starts the input one element (2 bytes) into
// its buffer: cuBLASLt's heuristics must choose an algorithm for that alignment (lt_plan tells them the real one). The
// values are within [-1, 1): no fp16 overflow.
template <typename A>
void check_matmul_through_cublaslt_within_rounding_bounds() {
  using R = test::CpuStorage<A>;
  const double u = std::is_same_v<A, fp16> ? 0x1p-11 : 0x1p-8;  // the unit roundoff of A
  struct Case {
    int N, C, OC, off;
  };
  uint32_t seed = 900;
  for (const Case& k : {Case{37, 45, 29, 0}, Case{131, 200, 257, 0}, Case{253, 256, 768, 0}, Case{64, 64, 96, 1}}) {
    const int N = k.N, C = k.C, OC = k.OC, off = k.off;
    SCOPED_TRACE(name(LinearShape{N, C, OC}) + (off ? " inp unaligned" : ""));
    const auto inp_buf = test::random_storage<A>(sz(int64_t{N} * C + off), seed++);
    const auto weight = test::random_storage<A>(sz(int64_t{OC} * C), seed++),
               bias = test::random_storage<A>(sz(OC), seed++);
    const auto dout = test::random_storage<A>(sz(int64_t{N} * OC), seed++);
    const auto dweight0 = random_vector(sz(int64_t{OC} * C), seed++), dbias0 = random_vector(sz(OC), seed++);
    const auto in32 = to_float_vector(inp_buf), w32 = to_float_vector(weight), b32 = to_float_vector(bias),
               g32 = to_float_vector(dout);
    const float* in = in32.data() + off;
    auto acc_bound = [](int64_t K, double abs_products) { return 1.01 * (2.0 * K + 4.0) * 0x1p-24 * abs_products; };
    std::vector<double> out_x(sz(int64_t{N} * OC)), out_b(out_x.size());
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) {
        double acc = 0, ap = 0;
        for (int c = 0; c < C; c++) {
          const double a = in[int64_t{n} * C + c], b = w32[sz(int64_t{o} * C + c)];
          acc += a * b, ap += std::fabs(a * b);
        }
        const double x = acc + b32[sz(o)], e = acc_bound(C, ap) + 0x1p-23 * std::fabs(b32[sz(o)]);
        out_x[sz(int64_t{n} * OC + o)] = x;
        out_b[sz(int64_t{n} * OC + o)] = e * (1 + u) * (1 + u) + u * (1 + u) * std::fabs(acc) + u * std::fabs(x);
      }
    std::vector<double> dinp_x(sz(int64_t{N} * C)), dinp_b(dinp_x.size());
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        double acc = 0, ap = 0;
        for (int o = 0; o < OC; o++) {
          const double a = g32[sz(int64_t{n} * OC + o)], b = w32[sz(int64_t{o} * C + c)];
          acc += a * b, ap += std::fabs(a * b);
        }
        dinp_x[sz(int64_t{n} * C + c)] = acc;
        dinp_b[sz(int64_t{n} * C + c)] = acc_bound(OC, ap) * (1 + u) + u * std::fabs(acc);
      }
    std::vector<double> dw_x(sz(int64_t{OC} * C)), dw_b(dw_x.size());
    for (int o = 0; o < OC; o++)
      for (int c = 0; c < C; c++) {
        double acc = 0, ap = 0;
        for (int n = 0; n < N; n++) {
          const double a = g32[sz(int64_t{n} * OC + o)], b = in[int64_t{n} * C + c];
          acc += a * b, ap += std::fabs(a * b);
        }
        const double w0 = dweight0[sz(int64_t{o} * C + c)];
        dw_x[sz(int64_t{o} * C + c)] = acc + w0;
        dw_b[sz(int64_t{o} * C + c)] = acc_bound(N, ap) + 0x1p-23 * std::fabs(w0);
      }

    DeviceBuffer<A> d_inp(inp_buf), d_weight(weight), d_bias(bias), d_dout(dout);
    DeviceBuffer<A> d_out(out_x.size()), d_dinp(dinp_x.size());
    DeviceBuffer<float> d_dw(dweight0), d_db(dbias0);
    matmul_forward(gpu_ctx(), d_out.get(), d_inp.get() + off, d_weight.get(), d_bias.get(), N, C, OC);
    matmul_backward(gpu_ctx(), d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get() + off, d_weight.get(), N,
                    C, OC);
    EXPECT_TRUE(test::within_bounds("16-bit matmul_forward out", to_float_vector(d_out.download()), out_x, out_b));
    EXPECT_TRUE(test::within_bounds("16-bit matmul_backward dinp", to_float_vector(d_dinp.download()), dinp_x, dinp_b));
    EXPECT_TRUE(test::within_bounds("16-bit matmul_backward dweight (+=)", d_dw.download(), dw_x, dw_b));
    // dbias: the CPU's, float sums in double of the same 16-bit values (fp16: the CPU's fp32 op on the widened values)
    std::vector<float> db = dbias0, dw_cpu = dweight0;
    const auto rdout = test::cpu_in(dout), rinp = test::cpu_in(inp_buf), rweight = test::cpu_in(weight);
    matmul_backward(cpu_ctx(), static_cast<R*>(nullptr), dw_cpu.data(), db.data(), rdout.data(), rinp.data() + off,
                    rweight.data(), N, C, OC);
    EXPECT_TRUE(all_close("16-bit matmul_backward dbias (+=)", d_db.download(), db, kDoubleRtol, kDoubleAtolRel));
  }
}
TEST(CudaGpt, Bf16MatmulThroughCublasLtWithinRoundingBounds) {
  HPCT_REQUIRE_GPU();
  check_matmul_through_cublaslt_within_rounding_bounds<bf16>();
}
TEST(CudaGpt, Fp16MatmulThroughCublasLtWithinRoundingBounds) {
  HPCT_REQUIRE_GPU();
  check_matmul_through_cublaslt_within_rounding_bounds<fp16>();
}

// train.gelu_epilogue: matmul_gelu_forward and matmul_dgelu_backward in bf16 with cuBLASLt's GELU_AUX_BIAS and DGELU
// epilogues against the same ops without them (matmul_forward + gelu_forward, matmul_backward + gelu_backward, which
// the ops are bit for bit with the flag off). The epilogue rounds the GELU input once from the fp32 accumulator with
// the bias (the BIAS epilogue rounds the product first): pre within 2 bf16 ulps of the value and one of the tensor's
// scale; cuBLASLt's GELU is its own tanh form: out within 2 ulps and 1e-3 of the scale; dpre from the fp32 product in
// one rounding where the composed ops round the product and then the GELU gradient: 2 ulps and 1e-3 of the scale.
// The proj Linear's weight and bias gradients are the same calls either way: given the same out, bitwise equal. Each
// chain computes its dweight = dout^T out from its own out, though, so there they differ by sum_n dout (out_fused -
// out_composed), bounded per element from the two outs (plus the fp32 accumulation's rounding, 1e-5 of
// sum_n |dout out|). (An H200 run of the first version of this test, which expected the chains' dweights bitwise equal,
// found -27.376825 against -27.385157: within this bound.)
TEST(CudaGpt, Bf16GeluEpilogueWithinRoundingOfTheComposedOps) {
  HPCT_REQUIRE_GPU();
  const int N = 96, C = 64, H = 256;  // rows, the Linear's input and its output (the GELU's width: a multiple of 8)
  const auto inp = random_bf16(static_cast<size_t>(N) * C, 1201), w_fc = random_bf16(static_cast<size_t>(H) * C, 1202);
  const auto b_fc = random_bf16(H, 1203), w_proj = random_bf16(static_cast<size_t>(C) * H, 1204);
  const auto dout = random_bf16(static_cast<size_t>(N) * C, 1205);
  DeviceBuffer<bf16> d_inp(inp), d_wfc(w_fc), d_bfc(b_fc), d_wproj(w_proj), d_dout(dout);
  struct Forward {
    std::vector<bf16> out, pre;
  };
  struct Backward {
    std::vector<bf16> dpre;
    std::vector<float> dweight, dbias;
  };
  auto forward = [&](bool epilogue) {
    ExecContext ctx = gpu_ctx();
    ctx.gelu_epilogue = epilogue;
    DeviceBuffer<bf16> out(static_cast<size_t>(N) * H), pre(static_cast<size_t>(N) * H);
    matmul_gelu_forward(ctx, out.get(), pre.get(), d_inp.get(), d_wfc.get(), d_bfc.get(), N, C, H);
    return Forward{out.download(), pre.download()};
  };
  auto backward = [&](bool epilogue, const Forward& f) {
    ExecContext ctx = gpu_ctx();
    ctx.gelu_epilogue = epilogue;
    DeviceBuffer<bf16> out(f.out), pre(f.pre);
    DeviceBuffer<bf16> dpre(static_cast<size_t>(N) * H), dgelu(static_cast<size_t>(N) * H);
    DeviceBuffer<float> dweight(static_cast<size_t>(C) * H), dbias(C);  // zeroed
    matmul_dgelu_backward(ctx, dpre.get(), dgelu.get(), dweight.get(), dbias.get(), d_dout.get(), out.get(), pre.get(),
                          d_wproj.get(), N, H, C);
    return Backward{dpre.download(), dweight.download(), dbias.download()};
  };
  const Forward fused_fwd = forward(true), composed_fwd = forward(false);
  // the flag off is the two ops, bit for bit
  DeviceBuffer<bf16> out2(static_cast<size_t>(N) * H), pre2(static_cast<size_t>(N) * H);
  matmul_forward(gpu_ctx(), pre2.get(), d_inp.get(), d_wfc.get(), d_bfc.get(), N, C, H);
  gelu_forward(gpu_ctx(), out2.get(), pre2.get(), static_cast<int64_t>(N) * H);
  EXPECT_TRUE(bitwise_equal("pre (flag off)", to_float_vector(composed_fwd.pre), to_float_vector(pre2.download())));
  EXPECT_TRUE(bitwise_equal("out (flag off)", to_float_vector(composed_fwd.out), to_float_vector(out2.download())));
  EXPECT_TRUE(
      all_close("pre", to_float_vector(fused_fwd.pre), to_float_vector(composed_fwd.pre), 2 * kBf16Ulp, kBf16Ulp));
  EXPECT_TRUE(all_close("out", to_float_vector(fused_fwd.out), to_float_vector(composed_fwd.out), 2 * kBf16Ulp, 1e-3));

  // the backward on the same forward: dpre within rounding, the parameter gradients bitwise
  const Backward fused_same = backward(true, composed_fwd), composed = backward(false, composed_fwd);
  EXPECT_TRUE(all_close("dpre", to_float_vector(fused_same.dpre), to_float_vector(composed.dpre), 2 * kBf16Ulp, 1e-3));
  EXPECT_TRUE(bitwise_equal("dweight (same out)", fused_same.dweight, composed.dweight));
  EXPECT_TRUE(bitwise_equal("dbias", fused_same.dbias, composed.dbias));

  // the whole chains: dweight[c, h] moves by at most sum_n |dout[n, c]| |out_fused[n, h] - out_composed[n, h]|
  const Backward fused = backward(true, fused_fwd);
  EXPECT_TRUE(bitwise_equal("dbias (chains)", fused.dbias, composed.dbias));
  const auto g = to_float_vector(dout), of = to_float_vector(fused_fwd.out), oc = to_float_vector(composed_fwd.out);
  int outside = 0;
  for (int c = 0; c < C; c++)
    for (int h = 0; h < H; h++) {
      double moved = 0.0, size = 0.0;
      for (int n = 0; n < N; n++) {
        moved += std::fabs(g[sz(n * C + c)]) * std::fabs(of[sz(n * H + h)] - oc[sz(n * H + h)]);
        size += std::fabs(g[sz(n * C + c)] * oc[sz(n * H + h)]);
      }
      const size_t i = sz(c * H + h);
      const double diff = std::fabs(static_cast<double>(fused.dweight[i]) - composed.dweight[i]);
      if (diff > moved + 1e-5 * size && outside++ < 5)
        ADD_FAILURE() << "dweight[" << c << ", " << h << "]: " << fused.dweight[i] << " vs " << composed.dweight[i]
                      << ", more apart than the outs' difference allows (" << moved << " + " << 1e-5 * size << ")";
    }
  EXPECT_EQ(outside, 0);
}

// Random bf16 qkv (in [-2, 2]) and dout of shape s from seeds `seed` and `seed + 1` (seed advances by 2), and the
// CPU's bf16 attention of them: the reference of the bf16 attention tests below.
struct Bf16AttentionOnCpu {
  std::vector<bf16> qkv, dout, out, dqkv;
};
Bf16AttentionOnCpu bf16_attention_on_cpu(const AttnShape& s, uint32_t& seed) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH;
  const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C);
  Bf16AttentionOnCpu r{random_bf16(n_qkv, seed, -2.0, 2.0), random_bf16(n_out, seed + 1), std::vector<bf16>(n_out),
                       std::vector<bf16>(n_qkv)};
  seed += 2;
  std::vector<unsigned char> att(sz(attention_stats_bytes(cpu_ctx(), B, T, C, NH, DType::BF16))),
      datt(sz(attention_scratch_bytes(cpu_ctx(), B, T, C, NH, DType::BF16)));
  attention_forward(cpu_ctx(), r.out.data(), att.data(), r.qkv.data(), B, T, C, NH);
  attention_backward(cpu_ctx(), r.dqkv.data(), datt.data(), r.dout.data(), r.qkv.data(), r.out.data(), att.data(), B, T,
                     C, NH);
  return r;
}

// Attention in bf16 against the CPU's bf16 attention: the CPU rounds the unnormalised probabilities p (and dS) to bf16
// before their products, as the tensor-core kernels do, while the CUDA-core kernels keep them in float, so an output
// moves by up to 2^-9 of the largest |v| (or dout . v term) from either side's rounding of p and by one ulp from each
// side's final rounding: 2 bf16 ulps of the
// value and of the tensor's scale (test_emu_flash_attention.cpp, where the same kernels also equal the float kernels
// rounded once, bit for bit). L is float: the float tolerance against the double reference on the bf16 inputs.
// The shapes run both implementations (cuda_gpt.cu, attention_on_tensor_cores): HS 12 the CUDA-core kernels, HS 32 and
// 128 the tensor-core kernels (cuda_flash_attention_tc.cuh), whose rounding of the unnormalised P and of dS as mma
// inputs stays within the same 2 ulps (test_emu_flash_attention.cpp, kTcCpuTol, has the reasoning).
TEST(CudaGpt, Bf16AttentionMatchesCpu) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 950;
  for (const AttnShape& s : {AttnShape{2, 70, 48, 4}, AttnShape{1, 129, 64, 2}, AttnShape{2, 64, 256, 2}}) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C);
    const Bf16AttentionOnCpu cpu = bf16_attention_on_cpu(s, seed);
    const std::vector<bf16>&qkv = cpu.qkv, &dout = cpu.dout, &out = cpu.out, &dqkv = cpu.dqkv;
    const int64_t stats_bytes = attention_stats_bytes(gpu_ctx(), B, T, C, NH, DType::BF16);
    EXPECT_EQ(stats_bytes, int64_t{B} * NH * T * 4);  // L stays float
    DeviceBuffer<bf16> d_qkv(qkv), d_dout(dout), d_out(n_out), d_dqkv(n_qkv);
    DeviceBuffer<float> d_lse(sz(stats_bytes / 4)),
        d_scratch(sz(attention_scratch_bytes(gpu_ctx(), B, T, C, NH, DType::BF16) / 4));
    attention_forward(gpu_ctx(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
    attention_backward(gpu_ctx(), d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B,
                       T, C, NH);
    EXPECT_TRUE(all_close("bf16 attention out", d_out.download(), out, 2 * kBf16Ulp, 2 * kBf16Ulp));
    EXPECT_TRUE(all_close("bf16 attention dqkv", d_dqkv.download(), dqkv, 2 * kBf16Ulp, 2 * kBf16Ulp));
    EXPECT_TRUE(all_close("bf16 attention L", d_lse.download(),
                          test::attention_log_sum_exp_rows(to_float_vector(qkv), B, T, C, NH), kLseRtol, kLseAtolRel));
  }
}

// train.attention = cudnn: cuDNN's fused attention (ExecContext::attention = Cudnn, cuda_attention_cudnn.cpp) against
// the CPU's bf16 attention on the same inputs. cuDNN rounds P and dS to bf16 as mma inputs too but blocks and orders
// its sums its own way: 4 bf16 ulps of the value and of the tensor's scale (twice the own kernels' bound). Its stats
// are its own (only its backward reads them): not compared. A rerun is bitwise (the deterministic backward); a
// smaller micro-batch runs in the buffers planned for the larger (its graph is built for its own shape); the
// backward's planned scratch is the bound of kernels.hpp. Head sizes 64 (GPT-2) and 128, T across several tiles.
TEST(CudaGpt, CudnnAttentionMatchesCpuAndRerunsBitwise) {
  HPCT_REQUIRE_GPU();
  if (!cudnn_attention_built()) GTEST_SKIP() << "built without the cuDNN frontend (scripts/setup.sh installs it)";
  ExecContext ctx = gpu_ctx();
  ctx.attention = AttentionImpl::Cudnn;
  uint32_t seed = 1700;
  for (const AttnShape& s : {AttnShape{2, 256, 768, 12}, AttnShape{1, 200, 256, 2}, AttnShape{3, 130, 128, 2}}) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C);
    const Bf16AttentionOnCpu cpu = bf16_attention_on_cpu(s, seed);
    const std::vector<bf16>&qkv = cpu.qkv, &dout = cpu.dout, &out = cpu.out, &dqkv = cpu.dqkv;
    EXPECT_EQ(attention_stats_bytes(ctx, B, T, C, NH, DType::BF16), int64_t{B} * NH * T * 4);
    const int64_t scratch_bytes = attention_scratch_bytes(ctx, B, T, C, NH, DType::BF16);
    EXPECT_EQ(scratch_bytes, cudnn_attention_scratch_bytes(B, T, NH, C / NH));
    DeviceBuffer<bf16> d_qkv(qkv), d_dout(dout);
    auto run = [&](int b) {
      DeviceBuffer<bf16> d_out(n_out), d_dqkv(n_qkv);
      DeviceBuffer<float> d_stats(sz(int64_t{B} * NH * T));
      DeviceBuffer<unsigned char> d_scratch(sz(scratch_bytes));
      attention_forward(ctx, d_out.get(), d_stats.get(), d_qkv.get(), b, T, C, NH);
      attention_backward(ctx, d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_stats.get(), b,
                         T, C, NH);
      return std::pair{to_float_vector(d_out.download()), to_float_vector(d_dqkv.download())};
    };
    const auto [got_out, got_dqkv] = run(B);
    EXPECT_TRUE(all_close("cudnn attention out", got_out, to_float_vector(out), 4 * kBf16Ulp, 4 * kBf16Ulp));
    EXPECT_TRUE(all_close("cudnn attention dqkv", got_dqkv, to_float_vector(dqkv), 4 * kBf16Ulp, 4 * kBf16Ulp));
    const auto [again_out, again_dqkv] = run(B);
    EXPECT_TRUE(bitwise_equal("cudnn attention out (rerun)", again_out, got_out));
    EXPECT_TRUE(bitwise_equal("cudnn attention dqkv (rerun)", again_dqkv, got_dqkv));
    if (B > 1) {  // the first sequence alone, in the buffers planned for B: its rows as in the batch of B
      const auto [one_out, one_dqkv] = run(1);
      const size_t rows_out = sz(int64_t{T} * C), rows_qkv = sz(int64_t{T} * 3 * C);
      EXPECT_TRUE(all_close("cudnn attention out (b = 1)", one_out.data(), got_out.data(), rows_out, 4 * kBf16Ulp,
                            4 * kBf16Ulp));
      EXPECT_TRUE(all_close("cudnn attention dqkv (b = 1)", one_dqkv.data(), got_dqkv.data(), rows_qkv, 4 * kBf16Ulp,
                            4 * kBf16Ulp));
    }
    EXPECT_TRUE(bitwise_equal("attention qkv (read only)", to_float_vector(d_qkv.download()), to_float_vector(qkv)));
  }
}

// The tensor-core kernels at GPT-2's head size (HS 64) over several 64-row tiles, against the CPU's bf16 attention
// (2 ulps, as above); bitwise reproducible run to run (fixed tiles and k-step order, no atomics); and the same op on
// tensors one element (2 bytes) off 16-byte alignment, which the dispatch sends to the CUDA-core kernels (the
// tensor-core ones move 16-byte vectors): within the same 2 ulps of the CPU.
TEST(CudaGpt, Bf16AttentionOnTensorCores) {
  HPCT_REQUIRE_GPU();
  const int B = 2, T = 300, C = 256, NH = 4;
  const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C);
  const auto qkv = random_bf16(n_qkv, 970, -2.0, 2.0), dout = random_bf16(n_out, 971);
  std::vector<unsigned char> att(sz(attention_stats_bytes(cpu_ctx(), B, T, C, NH, DType::BF16))),
      datt(sz(attention_scratch_bytes(cpu_ctx(), B, T, C, NH, DType::BF16)));
  std::vector<bf16> out(n_out), dqkv(n_qkv);
  attention_forward(cpu_ctx(), out.data(), att.data(), qkv.data(), B, T, C, NH);
  attention_backward(cpu_ctx(), dqkv.data(), datt.data(), dout.data(), qkv.data(), out.data(), att.data(), B, T, C, NH);
  // off = 0: aligned (tensor cores); off = 1: every 16-bit tensor starts 2 bytes into its buffer (CUDA cores)
  auto run = [&](size_t off, std::vector<bf16>& got_out, std::vector<bf16>& got_dqkv) {
    auto shifted = [off](const std::vector<bf16>& v) {
      std::vector<bf16> r(v.size() + off, bf16{0x7fc0});
      std::copy(v.begin(), v.end(), r.begin() + static_cast<std::ptrdiff_t>(off));
      return r;
    };
    DeviceBuffer<bf16> d_qkv(shifted(qkv)), d_dout(shifted(dout)), d_out(n_out + off), d_dqkv(n_qkv + off);
    DeviceBuffer<float> d_lse(sz(int64_t{B} * NH * T)), d_scratch(sz(int64_t{B} * NH * T));
    attention_forward(gpu_ctx(), d_out.get() + off, d_lse.get(), d_qkv.get() + off, B, T, C, NH);
    attention_backward(gpu_ctx(), d_dqkv.get() + off, d_scratch.get(), d_dout.get() + off, d_qkv.get() + off,
                       d_out.get() + off, d_lse.get(), B, T, C, NH);
    const auto o = d_out.download(), g = d_dqkv.download();
    got_out.assign(o.begin() + static_cast<std::ptrdiff_t>(off), o.end());
    got_dqkv.assign(g.begin() + static_cast<std::ptrdiff_t>(off), g.end());
  };
  std::vector<bf16> tc_out, tc_dqkv, again_out, again_dqkv, core_out, core_dqkv;
  run(0, tc_out, tc_dqkv);
  run(0, again_out, again_dqkv);
  run(1, core_out, core_dqkv);
  EXPECT_TRUE(all_close("tensor-core out", tc_out, out, 2 * kBf16Ulp, 2 * kBf16Ulp));
  EXPECT_TRUE(all_close("tensor-core dqkv", tc_dqkv, dqkv, 2 * kBf16Ulp, 2 * kBf16Ulp));
  EXPECT_TRUE(bitwise_equal("tensor-core out, run to run", again_out, tc_out));
  EXPECT_TRUE(bitwise_equal("tensor-core dqkv, run to run", again_dqkv, tc_dqkv));
  EXPECT_TRUE(all_close("CUDA-core out (unaligned)", core_out, out, 2 * kBf16Ulp, 2 * kBf16Ulp));
  EXPECT_TRUE(all_close("CUDA-core dqkv (unaligned)", core_dqkv, dqkv, 2 * kBf16Ulp, 2 * kBf16Ulp));
}

// Cross-entropy on bf16 logits: losses float (the float tolerance: both sides widen the same values), dlogits rounded
// once (plus one bf16 ulp); the padded dlogits exactly +0.
TEST(CudaGpt, Bf16CrossentropyMatchesCpu) {
  HPCT_REQUIRE_GPU();
  uint32_t seed = 980;
  for (const VocabShape& s : {VocabShape{5, 17, 128}, VocabShape{9, 3001, 3072}, VocabShape{3, 50257, 50304}}) {
    SCOPED_TRACE(name(s));
    const int N = s.N, V = s.V, Vp = s.Vp;
    const float dloss = 1.0f / static_cast<float>(N);
    const auto logits = test::to_bf16_vector(cross_entropy_logits(N, V, Vp, seed++));
    const auto targets = cross_entropy_targets(N, V, seed++);
    std::vector<float> losses(sz(N)), fused(sz(N));
    auto dlogits = logits;
    crossentropy_forward(cpu_ctx(), losses.data(), logits.data(), targets.data(), N, V, Vp);
    crossentropy_forward_backward(cpu_ctx(), fused.data(), dlogits.data(), targets.data(), dloss, N, V, Vp);
    DeviceBuffer<bf16> d_logits(logits), d_dlogits(logits);
    DeviceBuffer<int32_t> d_targets(targets);
    DeviceBuffer<float> d_losses(sz(N)), d_fused(sz(N));
    crossentropy_forward(gpu_ctx(), d_losses.get(), d_logits.get(), d_targets.get(), N, V, Vp);
    crossentropy_forward_backward(gpu_ctx(), d_fused.get(), d_dlogits.get(), d_targets.get(), dloss, N, V, Vp);
    EXPECT_TRUE(all_close("bf16 losses", d_losses.download(), losses, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_TRUE(all_close("bf16 fused losses", d_fused.download(), fused, kSoftmaxRtol, kSoftmaxAtolRel));
    const auto got = d_dlogits.download();
    EXPECT_TRUE(all_close("bf16 dlogits", got, dlogits, kSoftmaxRtol + kBf16Ulp, kSoftmaxAtolRel));
    int64_t padded_nonzero = 0;
    for (int n = 0; n < N; n++)
      for (int v = V; v < Vp; v++) padded_nonzero += got[sz(int64_t{n} * Vp + v)].bits != 0;
    EXPECT_EQ(padded_nonzero, 0) << "padded dlogits must be exactly +0";
  }
}

}  // namespace
}  // namespace hpct::kernels
