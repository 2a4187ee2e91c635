// The CPU backend's bf16 storage type (kernels.hpp, A = bf16): every GPT-side op against its float reference twin
// evaluated on the same, bf16-rounded, inputs (widened exactly), and the float <-> bf16 casts.
// Legend: B batch, T time, C channels, OC output channels, NH heads, V vocabulary, Vp padded vocabulary, N rows.
//
// A bf16 kernel computes in fp32 and rounds each output once, to nearest even: relative error <= 2^-8 (bf16 keeps
// 8 significant bits; kBf16Rounding). Tolerances (|got - want| <= atol + rtol |want|, atol = atol_rel max|want|):
//   - exact: the float operations of the reference in its order, then one rounding: compared with the reference's
//     result rounded to bf16, bitwise (embedding adds, residual); float outputs summed in the reference's order
//     (dwte, dwpe) bitwise;
//   - rtol 2^-8 + the float tolerance of test_kernels_cpu.cpp for the same op (another summation order, exp_simd):
//     one rounding of a float result that differs from the reference's by that much;
//   - float outputs (losses, statistics, parameter gradients): the float tolerances of test_kernels_cpu.cpp, the
//     inputs being the same numbers for the kernel and the reference;
//   - attention: the probabilities are rounded to bf16 before they multiply v and dout, and dS before it multiplies k
//     and q (what a bf16 GEMM engine does); each such product errs by at most 2^-8 sum_j |x_j| |y_j| beyond the
//     output's own rounding, a bound computed below from the reference's own values.
// Run three times by ctest: as is (oneDNN's bf16 GEMMs where the CPU has bf16 instructions), and on the fp32 fallback
// of CPUs without them, forced (HPCT_BF16_GEMM=fp32) and detected (DNNL_MAX_CPU_ISA=AVX512_CORE). Inside an active
// OpenMP region the kernels always take the fallback, which lets MatmulFallbackMatchesNative run both paths in one
// process. (Attention has one path: fp32 tiles on widened operands, cpu_attention.cpp.)
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"
#include "kernels/reference/reference.hpp"

namespace hpct::kernels {
namespace {

namespace ref = hpct::kernels::reference;
using test::all_close;
using test::bitwise_equal;
using test::kBf16Rounding;
using test::random_bf16;
using test::random_ints;
using test::random_vector;
using test::round_to_bf16;
using test::to_bf16_vector;
using test::to_float_vector;

const ExecContext kCpu{Device::CPU, nullptr, Precision::BF16};

constexpr double kFloatSum = 2e-5;   // float sums of a few hundred terms in another order (test_kernels_cpu.cpp)
constexpr double kFloatGrad = 1e-4;  // parameter gradients summed over up to 256 rows in float by the reference

bool gemm_forced_fp32() {
  const char* v = std::getenv("HPCT_BF16_GEMM");
  return v && std::strcmp(v, "fp32") == 0;
}

struct Shape {
  int B, T, C, NH;
};
// tiny; odd T with HS = 16; T across two causal blocks; the GPT step's T = 256, C = 256, NH = 4 with B = 1
const Shape kShapes[] = {{2, 5, 8, 2}, {3, 67, 48, 3}, {2, 130, 64, 4}, {1, 256, 256, 4}};

std::string name(const Shape& s) { return fmt::format("B{}T{}C{}NH{}", s.B, s.T, s.C, s.NH); }

// ---- casts -------------------------------------------------------------------------------------------------
uint16_t bits_of(float f) { return to_bf16(f).bits; }
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(KernelsBf16, CastRoundsToNearestEvenAndKeepsSpecials) {
  // halfway cases tie to the even neighbour; just above halfway rounds up
  EXPECT_EQ(bits_of(1.0f + 0x1p-8f), 0x3f80);          // 1 + half an ulp: tie -> 1.0 (even)
  EXPECT_EQ(bits_of(1.0f + 3 * 0x1p-8f), 0x3f82);      // 1 + 1.5 ulp: tie -> 1 + 2 ulp (even)
  EXPECT_EQ(bits_of(from_bits(0x3f808001u)), 0x3f81);  // above the tie: up
  EXPECT_EQ(bits_of(from_bits(0x3f807fffu)), 0x3f80);  // below the tie: down
  EXPECT_EQ(bits_of(-1.0f - 0x1p-8f), 0xbf80);         // symmetric in the sign
  EXPECT_EQ(bits_of(0.0f), 0x0000);
  EXPECT_EQ(bits_of(-0.0f), 0x8000);
  EXPECT_EQ(bits_of(INFINITY), 0x7f80);
  EXPECT_EQ(bits_of(-INFINITY), 0xff80);
  EXPECT_EQ(bits_of(FLT_MAX), 0x7f80);                    // beyond bf16's largest finite value: overflow to inf
  EXPECT_EQ(bits_of(from_bits(0x7f7f7fffu)), 0x7f7f);     // just below the tie with inf: the largest finite
  EXPECT_EQ(bits_of(from_bits(0x7f7f8000u)), 0x7f80);     // the tie between 0x7f7f (odd) and inf: inf
  EXPECT_EQ(bits_of(from_bits(0x00010000u)), 0x0001);     // the smallest subnormal stays
  EXPECT_EQ(bits_of(from_bits(0x00008000u)), 0x0000);     // half of it: tie -> 0 (even)
  const uint16_t qnan = bits_of(from_bits(0x7f800001u));  // a signalling NaN whose payload is in the dropped bits
  EXPECT_TRUE((qnan & 0x7f80) == 0x7f80 && (qnan & 0x007f) != 0) << std::hex << qnan;  // still a NaN, not inf
  EXPECT_EQ(bits_of(from_bits(0xffc00000u)) & 0x8000, 0x8000);                         // sign of a NaN kept

  // the kernels (vectorised) agree with the scalar conversion on every kind of value, and widen back exactly
  auto x = random_vector(40000, 1, -3.0, 3.0);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 1e30f;   // large, some beyond bf16's range after the multiply
  for (size_t i = 3; i < x.size(); i += 89) x[i] *= 1e-40f;  // subnormal
  for (float special : {INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, 0.0f, -0.0f, from_bits(0x7f800001u)})
    x.push_back(special);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<bf16> b(x.size());
  std::vector<float> back(x.size(), 1.0f);
  cast(kCpu, b.data(), x.data(), n);
  cast(kCpu, back.data(), b.data(), n);
  EXPECT_TRUE(bitwise_equal("cast float -> bf16", b, to_bf16_vector(x)));
  EXPECT_TRUE(bitwise_equal("cast bf16 -> float", back, to_float_vector(b)));
  // round trip of values that are bf16 already: exact
  const auto exact = to_float_vector(random_bf16(1000, 2, -100.0, 100.0));
  std::vector<bf16> eb(exact.size());
  std::vector<float> eback(exact.size());
  cast(kCpu, eb.data(), exact.data(), 1000);
  cast(kCpu, eback.data(), eb.data(), 1000);
  EXPECT_TRUE(bitwise_equal("round trip of bf16 values", eback, exact));
}

// ---- encoder ------------------------------------------------------------------------------------------------------
TEST(KernelsBf16, EncoderForwardBackward) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int Vp = 128, N = s.B * s.T, C = s.C;
    const auto inp = random_ints(N, 1, 0, 13);  // few distinct tokens: rows of dwte are shared
    const auto wte = random_bf16(static_cast<size_t>(Vp) * C, 2), wpe = random_bf16(static_cast<size_t>(s.T) * C, 3);
    std::vector<bf16> out(static_cast<size_t>(N) * C);
    std::vector<float> out_ref(out.size());
    encoder_forward(kCpu, out.data(), inp.data(), wte.data(), wpe.data(), s.B, s.T, C);
    ref::encoder_forward(out_ref.data(), inp.data(), to_float_vector(wte).data(), to_float_vector(wpe).data(), s.B, s.T,
                         C);
    EXPECT_TRUE(bitwise_equal("encoder out", to_float_vector(out), round_to_bf16(out_ref)));  // one add, one rounding

    const auto dout = random_bf16(out.size(), 4);
    auto dwte = random_vector(static_cast<size_t>(Vp) * C, 5), dwpe = random_vector(static_cast<size_t>(s.T) * C, 6);
    auto dwte_ref = dwte, dwpe_ref = dwpe;  // float, accumulated: start from non-zero values
    encoder_backward(kCpu, dwte.data(), dwpe.data(), dout.data(), inp.data(), s.B, s.T, C);
    ref::encoder_backward(dwte_ref.data(), dwpe_ref.data(), to_float_vector(dout).data(), inp.data(), s.B, s.T, C);
    EXPECT_TRUE(bitwise_equal("dwte", dwte, dwte_ref));  // the reference's order of float adds
    EXPECT_TRUE(bitwise_equal("dwpe", dwpe, dwpe_ref));
  }
}

// The vocabulary-parallel encoder over t simulated ranks against the serial bf16 encoder: the allreduced sum of the
// rank outputs (at most two non-zero terms per element) and the concatenated dwte.
TEST(KernelsBf16, EncoderVocabParallelMatchesSerial) {
  const int B = 2, T = 9, C = 24, Vp = 256, V = 250, t = 4, Vl = Vp / t, N = B * T;
  auto inp = random_ints(N, 7, 0, V);
  inp[0] = V - 1;  // the last real token, on the last rank
  const auto wte = random_bf16(static_cast<size_t>(Vp) * C, 8), wpe = random_bf16(static_cast<size_t>(T) * C, 9);
  std::vector<bf16> serial(static_cast<size_t>(N) * C);
  encoder_forward(kCpu, serial.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  std::vector<float> sum(serial.size(), 0.0f);
  const auto dout = random_bf16(serial.size(), 10);
  std::vector<float> dwte_serial(static_cast<size_t>(Vp) * C, 0.0f), dwpe_serial(static_cast<size_t>(T) * C, 0.0f);
  encoder_backward(kCpu, dwte_serial.data(), dwpe_serial.data(), dout.data(), inp.data(), B, T, C);
  std::vector<float> dwte_cat;
  for (int r = 0; r < t; r++) {
    std::vector<bf16> part(serial.size());
    encoder_forward_vocab_parallel(kCpu, part.data(), inp.data(), wte.data() + static_cast<size_t>(r) * Vl * C,
                                   r == 0 ? wpe.data() : nullptr, r * Vl, Vl, B, T, C);
    for (size_t i = 0; i < sum.size(); i++) sum[i] += to_f32(part[i]);
    std::vector<float> dwte_local(static_cast<size_t>(Vl) * C, 0.0f), dwpe(static_cast<size_t>(T) * C, 0.0f);
    encoder_backward_vocab_parallel(kCpu, dwte_local.data(), dwpe.data(), dout.data(), inp.data(), r * Vl, Vl, B, T, C);
    dwte_cat.insert(dwte_cat.end(), dwte_local.begin(), dwte_local.end());
    EXPECT_TRUE(bitwise_equal(fmt::format("dwpe on rank {}", r), dwpe, dwpe_serial));
  }
  // rank 0 holds wte[token] + wpe rounded once when the token is its own; elsewhere the sum has the two terms, each
  // a bf16 value, and their float sum rounded equals the serial result
  EXPECT_TRUE(bitwise_equal("allreduced out", round_to_bf16(sum), to_float_vector(serial)));
  EXPECT_TRUE(bitwise_equal("concatenated dwte", dwte_cat, dwte_serial));
}

// ---- LayerNorm ------------------------------------------------------------------------------------------------------
TEST(KernelsBf16, LayerNormForwardBackward) {
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(fmt::format("{}{}", name(s), with_bias ? " bias" : " no bias"));
      const int N = s.B * s.T, C = s.C;
      const auto inp = random_bf16(static_cast<size_t>(N) * C, 10, -1.5, 2.5);
      const auto w = random_bf16(C, 11, 0.5, 1.5), b = random_bf16(C, 12);
      const auto inp_f = to_float_vector(inp), w_f = to_float_vector(w), b_f = to_float_vector(b);
      std::vector<bf16> out(inp.size());
      std::vector<float> mean(N, NAN), rstd(N, NAN), out_ref(inp.size()), mean_ref(N), rstd_ref(N);
      layernorm_forward(kCpu, out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                        with_bias ? b.data() : nullptr, N, C);
      ref::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), inp_f.data(), w_f.data(),
                             with_bias ? b_f.data() : nullptr, N, C);
      EXPECT_TRUE(all_close("ln out", to_float_vector(out), out_ref, kBf16Rounding + kFloatSum, kFloatSum));
      EXPECT_TRUE(all_close("ln mean", mean, mean_ref, kFloatSum, kFloatSum));  // float statistics
      EXPECT_TRUE(all_close("ln rstd", rstd, rstd_ref, kFloatSum, kFloatSum));

      // dinp (bf16) accumulates: the kernel adds in fp32 to the stored value and rounds once
      const auto dout = random_bf16(inp.size(), 13);
      auto dinp = random_bf16(inp.size(), 14);
      auto dinp_ref = to_float_vector(dinp);
      auto dw = random_vector(C, 15), db = random_vector(C, 16);
      auto dw_ref = dw, db_ref = db;
      layernorm_backward(kCpu, dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(),
                         w.data(), mean_ref.data(), rstd_ref.data(), N, C);
      ref::layernorm_backward(dinp_ref.data(), dw_ref.data(), with_bias ? db_ref.data() : nullptr,
                              to_float_vector(dout).data(), inp_f.data(), w_f.data(), mean_ref.data(), rstd_ref.data(),
                              N, C);
      EXPECT_TRUE(all_close("ln dinp (+=)", to_float_vector(dinp), dinp_ref, kBf16Rounding + kFloatSum, kFloatSum));
      EXPECT_TRUE(all_close("ln dweight", dw, dw_ref, kFloatGrad, kFloatGrad));
      EXPECT_TRUE(all_close("ln dbias", db, db_ref, kFloatGrad, kFloatGrad));  // untouched when null
    }
  }
}

// ---- Linear ------------------------------------------------------------------------------------------------------
// Runs fn on the calling thread, or (in_region) from inside an active OpenMP region of two threads, where the bf16
// kernels take their fp32 fallback instead of oneDNN. Returns false when no active region could be made.
template <typename F>
bool run_maybe_in_region(bool in_region, F&& fn) {
  if (!in_region) {
    fn();
    return true;
  }
  int team = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    {
      team = omp_get_num_threads();
      fn();
    }
  }
  return team >= 2;
}

struct MShape {
  int N, C, OC;
};
// odd sizes, and the GPT's QKV projection with N = 256
const MShape kMatmulShapes[] = {{10, 8, 12}, {97, 48, 130}, {256, 256, 768}};

std::string mname(const MShape& s) { return fmt::format("N{}C{}OC{}", s.N, s.C, s.OC); }

// The products of bf16 values are exact in fp32 (8 x 8 significant bits); the kernel sums them in fp32 in its own
// order (oneDNN's blocking, or OpenBLAS's): the float GEMM tolerance of test_kernels_cpu.cpp, plus the one rounding
// of out and dinp.
TEST(KernelsBf16, MatmulForwardBackward) {
  for (const MShape& s : kMatmulShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(fmt::format("{}{}", mname(s), with_bias ? " bias" : " no bias"));
      const auto inp = random_bf16(static_cast<size_t>(s.N) * s.C, 20);
      const auto w = random_bf16(static_cast<size_t>(s.OC) * s.C, 21), b = random_bf16(s.OC, 22);
      const auto inp_f = to_float_vector(inp), w_f = to_float_vector(w), b_f = to_float_vector(b);
      std::vector<bf16> out(static_cast<size_t>(s.N) * s.OC);
      std::vector<float> out_ref(out.size());
      matmul_forward(kCpu, out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, s.N, s.C, s.OC);
      ref::matmul_forward(out_ref.data(), inp_f.data(), w_f.data(), with_bias ? b_f.data() : nullptr, s.N, s.C, s.OC);
      EXPECT_TRUE(all_close("matmul out", to_float_vector(out), out_ref, kBf16Rounding + kFloatSum, kFloatSum));

      const auto dout = random_bf16(out.size(), 23);
      const auto dout_f = to_float_vector(dout);
      auto dinp = random_bf16(inp.size(), 24);                              // assigned: the seed values must disappear
      auto dw = random_vector(w.size(), 25), db = random_vector(s.OC, 26);  // float, accumulated
      std::vector<float> dinp_ref(inp.size());
      auto dw_ref = dw, db_ref = db;
      matmul_backward(kCpu, dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(), w.data(),
                      s.N, s.C, s.OC);
      ref::matmul_backward(dinp_ref.data(), dw_ref.data(), with_bias ? db_ref.data() : nullptr, dout_f.data(),
                           inp_f.data(), w_f.data(), s.N, s.C, s.OC);
      EXPECT_TRUE(all_close("matmul dinp", to_float_vector(dinp), dinp_ref, kBf16Rounding + kFloatSum, kFloatSum));
      EXPECT_TRUE(all_close("matmul dweight (+=)", dw, dw_ref, kFloatGrad, kFloatGrad));
      EXPECT_TRUE(all_close("matmul dbias (+=)", db, db_ref, kFloatGrad, kFloatGrad));

      // dinp = null: only the parameter gradients, still accumulated
      auto dw2 = random_vector(w.size(), 25);
      matmul_backward(kCpu, static_cast<bf16*>(nullptr), dw2.data(), nullptr, dout.data(), inp.data(), w.data(), s.N,
                      s.C, s.OC);
      EXPECT_TRUE(all_close("matmul dweight (dinp null)", dw2, dw_ref, kFloatGrad, kFloatGrad));
    }
  }
}

// The fp32 fallback (bf16 widened, OpenBLAS) against the path this process takes at top level (oneDNN's bf16 GEMMs
// where the CPU has bf16 instructions). A call from inside an active OpenMP region always takes the fallback (oneDNN
// must not run there), which lets one process run both. Both sum the same exact products in fp32, in another order:
// out and dinp differ by at most one bf16 ulp (2^-7 relative) where the two sums straddle a rounding boundary, dweight
// by float summation noise.
TEST(KernelsBf16, MatmulFallbackMatchesNative) {
  const int N = 256, C = 96, OC = 160;
  const auto inp = random_bf16(static_cast<size_t>(N) * C, 30), w = random_bf16(static_cast<size_t>(OC) * C, 31);
  const auto b = random_bf16(OC, 32), dout = random_bf16(static_cast<size_t>(N) * OC, 33);
  struct Result {
    std::vector<bf16> out, dinp;
    std::vector<float> dw, db;
  };
  auto run = [&] {
    Result r{std::vector<bf16>(static_cast<size_t>(N) * OC), std::vector<bf16>(inp.size()), random_vector(w.size(), 34),
             random_vector(OC, 35)};
    matmul_forward(kCpu, r.out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    matmul_backward(kCpu, r.dinp.data(), r.dw.data(), r.db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    return r;
  };
  const Result top = run();
  Result in_region;
  if (!run_maybe_in_region(true, [&] { in_region = run(); })) GTEST_SKIP() << "no active OpenMP region could be made";
  EXPECT_TRUE(all_close("out: fallback vs top level", to_float_vector(in_region.out), to_float_vector(top.out),
                        2 * kBf16Rounding, kFloatSum));
  EXPECT_TRUE(all_close("dinp: fallback vs top level", to_float_vector(in_region.dinp), to_float_vector(top.dinp),
                        2 * kBf16Rounding, kFloatSum));
  EXPECT_TRUE(all_close("dweight: fallback vs top level", in_region.dw, top.dw, kFloatSum, kFloatSum));
  EXPECT_TRUE(bitwise_equal("dbias: fallback vs top level", in_region.db, top.db));  // the same double sums
}

// The sentence the trainer logs names the path this process takes. HPCT_TEST_EXPECT_BF16_GEMM=fp32 (ctest's run with
// DNNL_MAX_CPU_ISA=AVX512_CORE) says that the fallback must have been chosen.
TEST(KernelsBf16, ArithmeticIsDescribed) {
  const std::string what = cpu_bf16_arithmetic();
  SCOPED_TRACE(what);
  const char* expect = std::getenv("HPCT_TEST_EXPECT_BF16_GEMM");
  if (gemm_forced_fp32()) {
    EXPECT_EQ(what.rfind("fp32 GEMMs", 0), 0u);
    EXPECT_NE(what.find("HPCT_BF16_GEMM=fp32"), std::string::npos);
  } else if (expect && std::strcmp(expect, "fp32") == 0) {
    EXPECT_EQ(what.rfind("fp32 GEMMs", 0), 0u);
  } else {
    EXPECT_TRUE(what.rfind("bf16 GEMMs", 0) == 0 || what.rfind("fp32 GEMMs", 0) == 0);
  }
}

// ---- attention ------------------------------------------------------------------------------------------------
// max over (b, h, i) of sum_j |x[b,h,i,j]| and of sum_i |x[b,h,i,j]| for (B*NH, T, T) matrices
double max_row_col_abs_sum(const std::vector<double>& x, int BH, int T) {
  double worst = 0.0;
  for (int bh = 0; bh < BH; bh++)
    for (int i = 0; i < T; i++) {
      double row = 0.0, col = 0.0;
      for (int j = 0; j < T; j++) {
        row += std::fabs(x[(static_cast<size_t>(bh) * T + i) * T + j]);
        col += std::fabs(x[(static_cast<size_t>(bh) * T + j) * T + i]);
      }
      worst = std::max({worst, row, col});
    }
  return worst;
}

// The flash attention on bf16 storage against the float reference on the same (bf16) inputs. The kernel rounds the
// probabilities P (unnormalised, in the online softmax) to bf16 before they multiply v and dout, dS = P (dP - D) before
// it multiplies k and q, and out and dqkv once; its D = rowsum(dout * out) comes from the rounded out. Each rounding of a
// product's operand errs by at most 2^-8 sum |x_j| |y_j|; the bounds below are computed from the reference's own values.
TEST(KernelsBf16, AttentionForwardBackward) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH, HS = C / NH;
    const auto qkv = random_bf16(static_cast<size_t>(B) * T * 3 * C, 30, -2.0, 2.0);  // peaked softmax rows too
    const auto qkv_f = to_float_vector(qkv);
    const size_t att_n = static_cast<size_t>(B) * NH * T * T, lse_n = static_cast<size_t>(B) * NH * T;
    ASSERT_EQ(attention_stats_bytes(kCpu, B, T, C, NH, DType::BF16), static_cast<int64_t>(lse_n * 4));
    ASSERT_EQ(attention_scratch_bytes(kCpu, B, T, C, NH, DType::BF16), static_cast<int64_t>(lse_n * 4));
    std::vector<float> out_ref(static_cast<size_t>(B) * T * C), att_ref(att_n);
    ref::attention_forward(out_ref.data(), att_ref.data(), qkv_f.data(), B, T, C, NH);
    const auto dout = random_bf16(out_ref.size(), 31);
    const auto dout_f = to_float_vector(dout);
    const double vmax = test::max_abs(qkv_f.data(), qkv_f.size());
    const double dout_max = test::max_abs(dout_f.data(), dout_f.size());
    const double out_scale = test::max_abs(out_ref.data(), out_ref.size());

    std::vector<bf16> out(out_ref.size());
    std::vector<float> lse(lse_n, NAN);
    auto dqkv = random_bf16(qkv.size(), 32);  // assigned: the seed values must disappear
    std::vector<float> scratch(lse_n);        // float scratch: its contents must not matter
    for (size_t i = 0; i < lse_n; i++) scratch[i] = static_cast<float>(i % 7) - 3.0f;
    attention_forward(kCpu, out.data(), lse.data(), qkv.data(), B, T, C, NH);
    attention_backward(kCpu, dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    // L: fp32 scores of bf16 inputs (exact products), the fp32 tolerance
    EXPECT_TRUE(all_close("L", lse, test::attention_log_sum_exp_rows(qkv_f, B, T, C, NH), kFloatSum, kFloatSum));
    // out = P v / l with P rounded: |sum_j (P~ - P) v_j| <= 2^-8 sum_j P_j |v_j| <= 2^-8 max|v| (rows of P sum to 1)
    EXPECT_TRUE(all_close("attention out", to_float_vector(out), out_ref, kBf16Rounding + kFloatSum,
                          kFloatSum + kBf16Rounding * vmax / out_scale));

    // backward against the reference on the exact probabilities. Bounds, in double from the reference's values:
    //   dv = P^T dout with P rounded:          2^-8 max(column sums of P) max|dout|
    //   dq = dS k, dk = dS^T q with dS rounded: 2^-8 max(row, column sums of |dS|) max|q, k|
    //   D from the rounded out, dS = P (dP - D): scale max|D_kernel - D| max(row, column sums of P) max|q, k|
    const auto out_f = to_float_vector(out);
    std::vector<float> dqkv_ref(qkv.size()), datt_ref(att_n);
    ref::attention_backward(dqkv_ref.data(), datt_ref.data(), dout_f.data(), qkv_f.data(), out_ref.data(),
                            att_ref.data(), B, T, C, NH);
    std::vector<double> ds(att_n, 0.0), p(att_n, 0.0);
    double worst_dD = 0.0;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++) {
          const size_t row = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
          std::vector<double> dp(static_cast<size_t>(t) + 1);
          double sum = 0.0, d_kernel = 0.0;
          for (int e = 0; e < HS; e++) {
            const size_t o = (static_cast<size_t>(b) * T + t) * C + h * HS + e;
            d_kernel += static_cast<double>(dout_f[o]) * out_f[o];
          }
          for (int j = 0; j <= t; j++) {
            double d = 0.0;
            for (int e = 0; e < HS; e++)
              d += static_cast<double>(dout_f[(static_cast<size_t>(b) * T + t) * C + h * HS + e]) *
                   qkv_f[(static_cast<size_t>(b) * T + j) * 3 * C + 2 * C + h * HS + e];
            dp[j] = d;
            sum += att_ref[row + j] * d;
          }
          worst_dD = std::max(worst_dD, std::fabs(d_kernel - sum));
          for (int j = 0; j <= t; j++) {
            p[row + j] = att_ref[row + j];
            ds[row + j] = scale * att_ref[row + j] * (dp[j] - sum);
          }
        }
    const double p_sums = max_row_col_abs_sum(p, B * NH, T);
    const double bound = kBf16Rounding * max_row_col_abs_sum(ds, B * NH, T) * vmax + kBf16Rounding * p_sums * dout_max +
                         scale * worst_dD * p_sums * vmax;
    const double dqkv_scale = test::max_abs(dqkv_ref.data(), dqkv_ref.size());
    EXPECT_TRUE(
        all_close("dqkv", to_float_vector(dqkv), dqkv_ref, kBf16Rounding + kFloatSum, kFloatSum + bound / dqkv_scale));
  }
}

// ---- GELU, residual ------------------------------------------------------------------------------------------------
TEST(KernelsBf16, GeluForwardBackward) {
  auto inp_f = random_vector(100003, 40, -8.0, 8.0);
  for (float x : {0.0f, 1e-7f, -1e-7f, 3.0f, -3.0f, 5.0f, -5.0f, 20.0f, -20.0f, 60.0f, -60.0f}) inp_f.push_back(x);
  const auto inp = to_bf16_vector(inp_f);
  inp_f = to_float_vector(inp);
  const int64_t n = static_cast<int64_t>(inp.size());
  std::vector<bf16> out(n);
  std::vector<float> out_ref(n);
  gelu_forward(kCpu, out.data(), inp.data(), n);
  ref::gelu_forward(out_ref.data(), inp_f.data(), n);
  // the float kernel's 1e-6 / 1e-7 (exp_simd vs libm tanh), then one rounding
  EXPECT_TRUE(all_close("gelu out", to_float_vector(out), out_ref, kBf16Rounding + 1e-6, 1e-7));

  const auto dout = random_bf16(n, 41);
  auto dinp = random_bf16(n, 42);  // assigned
  std::vector<float> dinp_ref(n);
  gelu_backward(kCpu, dinp.data(), inp.data(), dout.data(), n);
  ref::gelu_backward(dinp_ref.data(), inp_f.data(), to_float_vector(dout).data(), n);
  EXPECT_TRUE(all_close("gelu dinp", to_float_vector(dinp), dinp_ref, kBf16Rounding + 1e-5, 1e-6));
}

// The MLP's Linear + GELU ops (kernels.hpp matmul_gelu_forward, matmul_dgelu_backward) on the CPU are the two ops
// each, bit for bit, whatever ctx.gelu_epilogue says (the epilogue is a CUDA choice), in bf16 and in fp32.
template <typename A>
void check_gelu_linear_ops_are_the_two_ops(const ExecContext& base) {
  const int N = 37, C = 24, H = 64;
  auto gen = [](size_t n, uint32_t seed) {
    if constexpr (std::is_same_v<A, bf16>) return random_bf16(n, seed);
    else
      return random_vector(n, seed, -1.0, 1.0);
  };
  const auto inp = gen(size_t{N} * C, 61), w_fc = gen(size_t{H} * C, 62), b_fc = gen(H, 63);
  const auto w_proj = gen(size_t{C} * H, 64), dout = gen(size_t{N} * C, 65);
  for (bool flag : {false, true}) {
    ExecContext ctx = base;
    ctx.gelu_epilogue = flag;
    std::vector<A> out(size_t{N} * H), pre(out.size()), dpre(out.size()), dgelu(out.size());
    std::vector<A> out2(out.size()), pre2(out.size()), dpre2(out.size()), dgelu2(out.size());
    std::vector<float> dw(size_t{C} * H, 0.5f), db(C, 0.25f), dw2 = dw, db2 = db;
    matmul_gelu_forward(ctx, out.data(), pre.data(), inp.data(), w_fc.data(), b_fc.data(), N, C, H);
    matmul_dgelu_backward(ctx, dpre.data(), dgelu.data(), dw.data(), db.data(), dout.data(), out.data(), pre.data(),
                          w_proj.data(), N, H, C);
    matmul_forward(ctx, pre2.data(), inp.data(), w_fc.data(), b_fc.data(), N, C, H);
    gelu_forward(ctx, out2.data(), pre2.data(), int64_t{N} * H);
    matmul_backward(ctx, dgelu2.data(), dw2.data(), db2.data(), dout.data(), out2.data(), w_proj.data(), N, H, C);
    gelu_backward(ctx, dpre2.data(), pre2.data(), dgelu2.data(), int64_t{N} * H);
    EXPECT_TRUE(bitwise_equal("pre", pre, pre2));
    EXPECT_TRUE(bitwise_equal("out", out, out2));
    EXPECT_TRUE(bitwise_equal("dpre", dpre, dpre2));
    EXPECT_TRUE(bitwise_equal("dweight", dw, dw2));
    EXPECT_TRUE(bitwise_equal("dbias", db, db2));
  }
}
TEST(KernelsBf16, GeluLinearOpsAreTheTwoOps) {
  check_gelu_linear_ops_are_the_two_ops<bf16>(kCpu);
  check_gelu_linear_ops_are_the_two_ops<float>(ExecContext{Device::CPU, nullptr, Precision::FP32});
}

// residual_relu_forward (a ResNet block's end) is residual_forward then relu_forward, bit for bit, in place too, with
// -0, +-inf and NaN sums, in bf16 and in fp32.
template <typename A>
void check_residual_relu_is_residual_then_relu(const ExecContext& ctx) {
  const int64_t n = 70001;
  std::vector<float> af = random_vector(n, 52), bf = random_vector(n, 53);
  af[0] = 0.0f, bf[0] = -0.0f;   // +0 + -0 = +0
  af[1] = -0.0f, bf[1] = -0.0f;  // -0
  af[2] = INFINITY, af[3] = -INFINITY, af[4] = NAN, af[5] = INFINITY, bf[5] = -INFINITY;
  std::vector<A> a(n), b(n);
  for (int64_t i = 0; i < n; i++) a[i] = from_f32<A>(af[i]), b[i] = from_f32<A>(bf[i]);
  std::vector<A> fused(n), sum(n), composed(n), inplace = a;
  residual_relu_forward(ctx, fused.data(), a.data(), b.data(), n);
  residual_relu_forward(ctx, inplace.data(), inplace.data(), b.data(), n);
  residual_forward(ctx, sum.data(), a.data(), b.data(), n);
  relu_forward(ctx, composed.data(), sum.data(), n);
  EXPECT_TRUE(bitwise_equal("residual_relu", fused, composed));
  EXPECT_TRUE(bitwise_equal("residual_relu in place", inplace, composed));
}
TEST(KernelsBf16, ResidualReluIsResidualThenRelu) {
  check_residual_relu_is_residual_then_relu<bf16>(kCpu);
  check_residual_relu_is_residual_then_relu<float>(ExecContext{Device::CPU, nullptr, Precision::FP32});
}

// residual_relu_backward (a block input's gradient through the previous block's ReLU) is residual_forward then
// relu_backward, bit for bit, in place on either operand too, with -0, +-inf and NaN sums and ReLU outputs of +0, -0
// and NaN.
template <typename A>
void check_residual_relu_backward_is_the_two_ops(const ExecContext& ctx) {
  const int64_t n = 70001;
  std::vector<float> af = random_vector(n, 54), bf = random_vector(n, 55), of = random_vector(n, 56, -1.0, 1.0);
  af[0] = 0.0f, bf[0] = -0.0f;
  af[1] = -0.0f, bf[1] = -0.0f;
  af[2] = INFINITY, af[3] = -INFINITY, af[4] = NAN, af[5] = INFINITY, bf[5] = -INFINITY;
  of[6] = 0.0f, of[7] = -0.0f, of[8] = NAN, of[9] = INFINITY;
  std::vector<A> a(n), b(n), o(n);
  for (int64_t i = 0; i < n; i++) a[i] = from_f32<A>(af[i]), b[i] = from_f32<A>(bf[i]), o[i] = from_f32<A>(of[i]);
  std::vector<A> fused(n), sum(n), composed(n), in_a = a, in_b = b;
  residual_relu_backward(ctx, fused.data(), a.data(), b.data(), o.data(), n);
  residual_relu_backward(ctx, in_a.data(), in_a.data(), b.data(), o.data(), n);
  residual_relu_backward(ctx, in_b.data(), a.data(), in_b.data(), o.data(), n);
  residual_forward(ctx, sum.data(), a.data(), b.data(), n);
  relu_backward(ctx, composed.data(), sum.data(), o.data(), n);
  EXPECT_TRUE(bitwise_equal("residual_relu_backward", fused, composed));
  EXPECT_TRUE(bitwise_equal("residual_relu_backward in place (a)", in_a, composed));
  EXPECT_TRUE(bitwise_equal("residual_relu_backward in place (b)", in_b, composed));
}
TEST(KernelsBf16, ResidualReluBackwardIsTheTwoOps) {
  check_residual_relu_backward_is_the_two_ops<bf16>(kCpu);
  check_residual_relu_backward_is_the_two_ops<float>(ExecContext{Device::CPU, nullptr, Precision::FP32});
}

TEST(KernelsBf16, Residual) {
  const int64_t n = 70001;
  const auto a = random_bf16(n, 50), b = random_bf16(n, 51);
  std::vector<bf16> out(n);
  std::vector<float> out_ref(n);
  residual_forward(kCpu, out.data(), a.data(), b.data(), n);
  ref::residual_forward(out_ref.data(), to_float_vector(a).data(), to_float_vector(b).data(), n);
  EXPECT_TRUE(bitwise_equal("residual", to_float_vector(out), round_to_bf16(out_ref)));  // one add, one rounding
}

// ---- cross-entropy ---------------------------------------------------------------------------------------------
TEST(KernelsBf16, CrossEntropy) {
  struct CShape {
    int N, V, Vp;
  };
  for (const CShape& s : {CShape{7, 5, 128}, CShape{67, 250, 256}, CShape{33, 1000, 1024}}) {
    SCOPED_TRACE(fmt::format("N{}V{}Vp{}", s.N, s.V, s.Vp));
    const auto logits = to_bf16_vector(test::cross_entropy_logits(s.N, s.V, s.Vp, 60));  // padding at 1e4
    const auto logits_f = to_float_vector(logits);
    const auto targets = test::cross_entropy_targets(s.N, s.V, 61);
    std::vector<float> losses(s.N, NAN), losses_ref(s.N);
    crossentropy_forward(kCpu, losses.data(), logits.data(), targets.data(), s.N, s.V, s.Vp);
    ref::crossentropy_forward(losses_ref.data(), logits_f.data(), targets.data(), s.N, s.V, s.Vp);
    EXPECT_TRUE(all_close("ce losses", losses, losses_ref, kFloatSum, kFloatSum));  // float, the same inputs

    const float dloss = 1.0f / 37.0f;
    auto dlogits = logits;
    auto dlogits_ref = logits_f;
    std::vector<float> losses2(s.N, NAN);
    crossentropy_forward_backward(kCpu, losses2.data(), dlogits.data(), targets.data(), dloss, s.N, s.V, s.Vp);
    ref::crossentropy_forward_backward(losses_ref.data(), dlogits_ref.data(), targets.data(), dloss, s.N, s.V, s.Vp);
    EXPECT_TRUE(bitwise_equal("ce fused losses", losses2, losses));  // the same float computation as forward
    EXPECT_TRUE(all_close("ce dlogits", to_float_vector(dlogits), dlogits_ref, kBf16Rounding + kFloatSum, kFloatSum));
    size_t nonzero_pad = 0;
    for (int r = 0; r < s.N; r++)
      for (int v = s.V; v < s.Vp; v++) nonzero_pad += to_f32(dlogits[static_cast<size_t>(r) * s.Vp + v]) != 0.0f;
    EXPECT_EQ(nonzero_pad, 0u) << "padded columns must get exactly zero gradient";
  }
}

TEST(KernelsBf16, CrossEntropySmoothed) {
  const int N = 9, K = 10;
  const auto logits = random_bf16(static_cast<size_t>(N) * K, 81, -4.0, 4.0);
  const auto logits_f = to_float_vector(logits);
  const auto targets = test::cross_entropy_targets(N, K, 82);
  for (const float eps : {0.0f, 0.1f}) {
    SCOPED_TRACE(fmt::format("eps={}", eps));
    std::vector<float> losses(N), losses2(N), losses_ref(N);
    auto dlogits = logits;
    auto dlogits_ref = logits_f;
    crossentropy_smoothed_forward(kCpu, losses.data(), logits.data(), targets.data(), eps, N, K);
    crossentropy_smoothed_forward_backward(kCpu, losses2.data(), dlogits.data(), targets.data(), 0.25f, eps, N, K);
    ref::crossentropy_smoothed_forward_backward(losses_ref.data(), dlogits_ref.data(), targets.data(), 0.25f, eps, N,
                                                K);
    EXPECT_TRUE(all_close("smoothed losses", losses, losses_ref, kFloatSum, kFloatSum));
    EXPECT_TRUE(bitwise_equal("smoothed fused losses", losses2, losses));
    EXPECT_TRUE(
        all_close("smoothed dlogits", to_float_vector(dlogits), dlogits_ref, kBf16Rounding + kFloatSum, kFloatSum));
  }
}

// The three vocab-parallel phases over t simulated ranks (the allreduces done here in float) against the reference
// of the serial loss on the same logits.
TEST(KernelsBf16, CrossEntropyVocabParallel) {
  const int N = 21, V = 250, Vp = 256, t = 4, Vl = Vp / t;
  const auto logits = to_bf16_vector(test::cross_entropy_logits(N, V, Vp, 90));
  const auto targets = test::cross_entropy_targets(N, V, 91);
  const float dloss = 0.125f;
  auto dlogits_ref = to_float_vector(logits);
  std::vector<float> losses_ref(N);
  ref::crossentropy_forward_backward(losses_ref.data(), dlogits_ref.data(), targets.data(), dloss, N, V, Vp);
  // each rank's columns, (N, Vl)
  std::vector<std::vector<bf16>> local(t, std::vector<bf16>(static_cast<size_t>(N) * Vl));
  for (int r = 0; r < t; r++)
    for (int n = 0; n < N; n++)
      for (int j = 0; j < Vl; j++)
        local[r][static_cast<size_t>(n) * Vl + j] = logits[static_cast<size_t>(n) * Vp + r * Vl + j];
  std::vector<float> gmax(N, -INFINITY), gsum(N, 0.0f), gtgt(N, 0.0f), part(N), part2(N);
  for (int r = 0; r < t; r++) {
    crossentropy_vp_local_max(kCpu, part.data(), local[r].data(), r * Vl, Vl, V, N);
    for (int n = 0; n < N; n++) gmax[n] = std::max(gmax[n], part[n]);
  }
  for (int r = 0; r < t; r++) {
    crossentropy_vp_local_sumexp(kCpu, part.data(), part2.data(), local[r].data(), gmax.data(), targets.data(), r * Vl,
                                 Vl, V, N);
    for (int n = 0; n < N; n++) {
      gsum[n] += part[n];
      gtgt[n] += part2[n];
    }
  }
  for (int n = 0; n < N; n++) EXPECT_EQ(gtgt[n], to_f32(logits[static_cast<size_t>(n) * Vp + targets[n]])) << n;
  std::vector<float> dlogits(static_cast<size_t>(N) * Vp);
  for (int r = 0; r < t; r++) {
    std::vector<float> losses(N);
    crossentropy_vp_loss_backward(kCpu, losses.data(), local[r].data(), gmax.data(), gsum.data(), gtgt.data(),
                                  targets.data(), dloss, r * Vl, Vl, V, N);
    EXPECT_TRUE(all_close(fmt::format("vp losses on rank {}", r), losses, losses_ref, kFloatSum, kFloatSum));
    for (int n = 0; n < N; n++)
      for (int j = 0; j < Vl; j++)
        dlogits[static_cast<size_t>(n) * Vp + r * Vl + j] = to_f32(local[r][static_cast<size_t>(n) * Vl + j]);
  }
  EXPECT_TRUE(all_close("vp dlogits", dlogits, dlogits_ref, kBf16Rounding + kFloatSum, kFloatSum));
}

// ---- determinism: the bf16 reductions do not depend on the number of threads ---------------------------------------
TEST(KernelsBf16, ReductionsAreBitwiseIndependentOfThreadCount) {
  const int N = 301, C = 96, Vp = 64;
  const auto inp = random_bf16(static_cast<size_t>(N) * C, 110, -1.0, 2.0);
  const auto dout = random_bf16(inp.size(), 111);
  const auto w = random_bf16(C, 112, 0.5, 1.5);
  const auto tokens = random_ints(N, 113, 0, 7);
  std::vector<bf16> out(inp.size());
  std::vector<float> mean(N), rstd(N);
  layernorm_forward(kCpu, out.data(), mean.data(), rstd.data(), inp.data(), w.data(), static_cast<bf16*>(nullptr), N,
                    C);
  struct Result {
    std::vector<bf16> dinp;
    std::vector<float> dw, db, dwte, dwpe;
  };
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Result r{to_bf16_vector(random_vector(inp.size(), 114)), std::vector<float>(C), std::vector<float>(C),
             std::vector<float>(static_cast<size_t>(Vp) * C), std::vector<float>(static_cast<size_t>(N) * C)};
    layernorm_backward(kCpu, r.dinp.data(), r.dw.data(), r.db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                       rstd.data(), N, C);
    encoder_backward(kCpu, r.dwte.data(), r.dwpe.data(), dout.data(), tokens.data(), 1, N, C);
    omp_set_num_threads(saved);
    return r;
  };
  const Result one = run(1), three = run(3);
  EXPECT_TRUE(bitwise_equal("ln dinp", one.dinp, three.dinp));
  EXPECT_TRUE(bitwise_equal("ln dweight", one.dw, three.dw));
  EXPECT_TRUE(bitwise_equal("ln dbias", one.db, three.db));
  EXPECT_TRUE(bitwise_equal("dwte", one.dwte, three.dwte));
  EXPECT_TRUE(bitwise_equal("dwpe", one.dwpe, three.dwpe));
}

}  // namespace
}  // namespace hpct::kernels
