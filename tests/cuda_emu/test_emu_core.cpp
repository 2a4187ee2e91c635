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
// reduction still writes 0), unaligned pointers (the reduction's float4 path off, the pointwise kernels' 16-byte packs
// off), C above the dwte kernel's 128-column block, LayerNorm backward over many row groups, over few groups of
// many rows (a small partials buffer), and at a width whose block needs the shared-memory opt-in, C below a warp, a
// negative token.
//
// bf16 storage (the kernels' __nv_bfloat16 instantiations, cuda_device_common.cuh): the same kernels against the CPU
// backend's bf16 ops on the same bf16 inputs, and against the float kernels run on those inputs widened, then
// rounded. Exact (bitwise) where both compute the same float values: the pointwise kernels against the rounded float
// kernel (same expression, one rounding: this checks that every output is rounded once, to nearest even, as the
// hardware's __float2bfloat16_rn does, which the emulation reproduces: test_cuda_emu), the casts, residual, ReLU and
// the embedding against the CPU; elsewhere the float tolerance plus one bf16 ulp (kBf16Ulp, emu_test_util.hpp): the
// two sides round float results that differ in their last bits, now and then on either side of a bf16 boundary.
// Parameter gradients (dwte, dwpe, LayerNorm dweight / dbias) and the statistics (mean, rstd) are float: the float
// tolerances.
// fp16 storage (the __half instantiations) runs the same checks, written once over the 16-bit type A: the CPU backend
// has no fp16 storage, so its reference is the CPU's fp32 op on the fp16 inputs widened exactly, each output rounded
// once to fp16 (CpuStorage, kernel_test_util.hpp), the same computation as an fp16 kernel's; where bf16 adds one bf16
// ulp (2^-7) to a tolerance, fp16 adds one fp16 ulp (kFp16Ulp = 2^-10: 11 significant bits). The inputs stay within
// a few units (|x| <= 100 for GELU), far inside fp16's range (65504).
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
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

namespace cu = cuda;
using test::all_close;
using test::bitwise_equal;
using test::cpu_ctx;
using test::cpu_in;
using test::cpu_out;
using test::CpuStorage;
using test::emu_output;
using test::emu_ptr;
using test::emulate_schedules;
using test::EmuStorage;
using test::kStorageUlp;
using test::random_ints;
using test::random_storage;
using test::random_vector;
using test::sz;
using test::to_float_vector;
using test::to_storage_vector;

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

// The global gradient norm's two stages over a chunk table: ranges longer than a chunk, empty, one element, unaligned
// (the scalar path) and aligned (float4s); the result against the CPU backend's op on the same table, and against the
// ranges' sums one by one.
TEST(EmuCore, SumSquaresRangesOverAChunkTable) {
  const auto x = random_vector(2 * kTableChunk + 9000, 11, -2.0, 2.0);
  const std::vector<SquaresRange> ranges = {{x.data(), kTableChunk + 4097},  // two chunks, the second short
                                            {x.data() + 5, 0},               // nothing
                                            {x.data() + kTableChunk + 4097, 1},
                                            {x.data() + kTableChunk + 4099, 3001},  // not 16-byte aligned
                                            {x.data() + 2 * kTableChunk, 9000}};
  const std::vector<SquaresChunk> table = squares_table(ranges);
  ASSERT_EQ(table.size(), 5u);
  EXPECT_EQ(table[0].n, kTableChunk);
  EXPECT_EQ(table[1].n, 4097);
  const auto chunks = static_cast<int64_t>(table.size());
  std::vector<double> got{0.5}, partials(table.size(), NAN);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH(cu::squares_chunk_kernel, cu::table_chunks_shape(chunks), table.data(), partials.data());
        EMU_LAUNCH(cu::partials_sum_kernel, cu::reduce_shape(), partials.data(), chunks, got.data());
      },
      {emu_output("sum_squares_ranges", got)}));
  double want = 0.5, one_by_one = 0.5;
  std::vector<double> cpu_partials(table.size());
  sum_squares_ranges(cpu_ctx(), &want, table.data(), chunks, cpu_partials.data());
  for (const SquaresRange& r : ranges) sum_squares_accumulate(cpu_ctx(), &one_by_one, r.x, r.n);
  EXPECT_TRUE(all_close("sum_squares_ranges", got.data(), &want, 1, 1e-12, 0.0));
  EXPECT_TRUE(all_close("sum_squares_ranges vs per range", got.data(), &one_by_one, 1, 1e-12, 0.0));
  EXPECT_TRUE(all_close("partials", partials.data(), cpu_partials.data(), chunks, 1e-12, 0.0));
}

// ---- pointwise ------------------------------------------------------------------------------------------------------
std::vector<float> with_specials(std::vector<float> v) {
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-20f, -1e-20f, 10.0f, -10.0f, 30.0f, -30.0f, -0.75f};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); i++) v[i] = specials[i];
  return v;
}

// cuda_core.cu's pointwise launches, emulated (the same packs decision and geometry)
template <typename S>
void emu_residual(S* out, const S* a, const S* b, int64_t n) {
  const int64_t packs = cu::pointwise_packs<S>(n, {out, a, b});
  EMU_LAUNCH(cu::residual_kernel, cu::pointwise_shape<S>(n, packs), out, a, b, n, packs);
}
template <typename S>
void emu_relu_forward(S* out, const S* inp, int64_t n) {
  const int64_t packs = cu::pointwise_packs<S>(n, {out, inp});
  EMU_LAUNCH(cu::relu_forward_kernel, cu::pointwise_shape<S>(n, packs), out, inp, n, packs);
}
template <typename S>
void emu_residual_relu(S* out, const S* a, const S* b, int64_t n) {
  const int64_t packs = cu::pointwise_packs<S>(n, {out, a, b});
  EMU_LAUNCH((cu::residual_kernel<S, true>), cu::pointwise_shape<S>(n, packs), out, a, b, n, packs);
}
template <typename S>
void emu_residual_relu_backward(S* dinp, const S* a, const S* b, const S* out, int64_t n) {
  const int64_t packs = cu::pointwise_packs<S>(n, {dinp, a, b, out});
  EMU_LAUNCH(cu::residual_relu_backward_kernel, cu::pointwise_shape<S>(n, packs), dinp, a, b, out, n, packs);
}
template <typename S>
void emu_relu_backward(S* dinp, const S* dout, const S* out, int64_t n) {
  const int64_t packs = cu::pointwise_packs<S>(n, {dinp, dout, out});
  EMU_LAUNCH(cu::relu_backward_kernel, cu::pointwise_shape<S>(n, packs), dinp, dout, out, n, packs);
}
template <typename S>
void emu_gelu_forward(S* out, const S* inp, int64_t n) {
  const int64_t packs = cu::pointwise_packs<S>(n, {out, inp});
  EMU_LAUNCH(cu::gelu_forward_kernel, cu::pointwise_shape<S>(n, packs), out, inp, n, packs);
}
template <typename S>
void emu_gelu_backward(S* dinp, const S* inp, const S* dout, int64_t n) {
  const int64_t packs = cu::pointwise_packs<S>(n, {dinp, inp, dout});
  EMU_LAUNCH(cu::gelu_backward_kernel, cu::pointwise_shape<S>(n, packs), dinp, inp, dout, n, packs);
}

TEST(EmuCore, ScaleResidualAndReluAreExact) {
  // 5003: packs and a tail; off = 1 shifts every buffer off 16-byte alignment (element by element)
  for (int64_t n : {int64_t{1}, int64_t{257}, int64_t{5003}}) {
    for (int off : {0, 1}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      const auto a = with_specials(random_vector(sz(n + off), 7)), b = random_vector(sz(n + off), 8);
      const auto g = random_vector(sz(n + off), 9);
      const float *ap = a.data() + off, *bp = b.data() + off, *gp = g.data() + off;
      // scale
      auto x = b;
      ASSERT_TRUE(
          emulate_schedules([&] { EMU_LAUNCH(cu::scale_kernel, cu::elementwise_shape(n), x.data() + off, -1.7f, n); },
                            {emu_output("scale", x)}));
      auto want = b;
      scale(cpu_ctx(), want.data() + off, -1.7f, n);
      EXPECT_TRUE(bitwise_equal("scale", x, want));
      // residual, out of place and in place
      std::vector<float> out(sz(n + off), 5.0f), inplace = a;
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_residual(out.data() + off, ap, bp, n);
            emu_residual(inplace.data() + off, inplace.data() + off, bp, n);
          },
          {emu_output("residual", out), emu_output("residual in place", inplace)}));
      std::vector<float> want_res(sz(n + off), 5.0f), want_inplace = a;
      residual_forward(cpu_ctx(), want_res.data() + off, ap, bp, n);
      residual_forward(cpu_ctx(), want_inplace.data() + off, want_inplace.data() + off, bp, n);
      EXPECT_TRUE(bitwise_equal("residual", out, want_res));
      EXPECT_TRUE(bitwise_equal("residual in place", inplace, want_inplace));
      // ReLU forward and backward
      std::vector<float> relu(sz(n + off), 5.0f), drelu(sz(n + off), 5.0f);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_relu_forward(relu.data() + off, ap, n);
            emu_relu_backward(drelu.data() + off, gp, relu.data() + off, n);
          },
          {emu_output("relu", relu), emu_output("drelu", drelu)}));
      std::vector<float> want_relu(sz(n + off), 5.0f), want_drelu(sz(n + off), 5.0f);
      relu_forward(cpu_ctx(), want_relu.data() + off, ap, n);
      relu_backward(cpu_ctx(), want_drelu.data() + off, gp, want_relu.data() + off, n);
      EXPECT_TRUE(bitwise_equal("relu_forward", relu, want_relu));
      EXPECT_TRUE(bitwise_equal("relu_backward", drelu, want_drelu));
    }
  }
}

// residual_kernel<S, true> (a ResNet block's end) is residual_kernel then relu_forward_kernel, bit for bit, in every
// storage type, out of place and in place (out == a), packed and off 16-byte alignment, with -0, +-inf and NaN sums;
// and the CPU backend's residual_relu_forward (float, bf16) gives the same bits.
template <typename A>
void check_residual_relu_is_residual_then_relu() {
  for (int64_t n : {int64_t{1}, int64_t{4011}}) {
    for (int off : {0, 3}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      auto af = with_specials(random_vector(sz(n + off), 320, -6.0, 6.0));
      if (n + off > 12) af[12] = NAN;
      std::vector<A> a, b;
      if constexpr (std::is_same_v<A, float>) {
        a = af, b = random_vector(sz(n + off), 321);
      } else {
        a = to_storage_vector<A>(af), b = random_storage<A>(sz(n + off), 321);
      }
      std::vector<A> fused(a.size(), a[0]), inplace = a, sum(a.size(), a[0]), composed(a.size(), a[0]);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_residual_relu(emu_ptr(fused) + off, emu_ptr(a) + off, emu_ptr(b) + off, n);
            emu_residual_relu(emu_ptr(inplace) + off, emu_ptr(inplace) + off, emu_ptr(b) + off, n);
            emu_residual(emu_ptr(sum) + off, emu_ptr(a) + off, emu_ptr(b) + off, n);
            emu_relu_forward(emu_ptr(composed) + off, emu_ptr(sum) + off, n);
          },
          {emu_output("fused", fused), emu_output("in place", inplace), emu_output("sum", sum),
           emu_output("composed", composed)}));
      EXPECT_TRUE(bitwise_equal("residual_relu", std::vector<A>(fused.begin() + off, fused.end()),
                                std::vector<A>(composed.begin() + off, composed.end())));
      EXPECT_TRUE(bitwise_equal("residual_relu in place", std::vector<A>(inplace.begin() + off, inplace.end()),
                                std::vector<A>(composed.begin() + off, composed.end())));
      if constexpr (!std::is_same_v<A, fp16>) {  // the CPU backend's storage types
        std::vector<A> cpu(a.size(), a[0]);
        residual_relu_forward(cpu_ctx(), cpu.data() + off, a.data() + off, b.data() + off, n);
        EXPECT_TRUE(bitwise_equal("CPU residual_relu_forward", std::vector<A>(cpu.begin() + off, cpu.end()),
                                  std::vector<A>(composed.begin() + off, composed.end())));
      }
    }
  }
}
TEST(EmuCore, ResidualReluIsResidualThenRelu) {
  check_residual_relu_is_residual_then_relu<float>();
  check_residual_relu_is_residual_then_relu<bf16>();
  check_residual_relu_is_residual_then_relu<fp16>();
}

// residual_relu_backward_kernel is residual_kernel then relu_backward_kernel, bit for bit, in every storage type, out of
// place and in place (dinp == a), packed and off 16-byte alignment, with special sums and ReLU outputs; and the CPU
// backend's residual_relu_backward (float, bf16) gives the same bits.
template <typename A>
void check_residual_relu_backward() {
  for (int64_t n : {int64_t{1}, int64_t{4011}}) {
    for (int off : {0, 3}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      auto af = with_specials(random_vector(sz(n + off), 330, -6.0, 6.0));
      auto of = with_specials(random_vector(sz(n + off), 332, -1.0, 1.0));
      std::vector<A> a, b, o;
      if constexpr (std::is_same_v<A, float>) {
        a = af, b = random_vector(sz(n + off), 331), o = of;
      } else {
        a = to_storage_vector<A>(af), b = random_storage<A>(sz(n + off), 331), o = to_storage_vector<A>(of);
      }
      std::vector<A> fused(a.size(), a[0]), inplace = a, sum(a.size(), a[0]), composed(a.size(), a[0]);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_residual_relu_backward(emu_ptr(fused) + off, emu_ptr(a) + off, emu_ptr(b) + off, emu_ptr(o) + off, n);
            emu_residual_relu_backward(emu_ptr(inplace) + off, emu_ptr(inplace) + off, emu_ptr(b) + off,
                                       emu_ptr(o) + off, n);
            emu_residual(emu_ptr(sum) + off, emu_ptr(a) + off, emu_ptr(b) + off, n);
            emu_relu_backward(emu_ptr(composed) + off, emu_ptr(sum) + off, emu_ptr(o) + off, n);
          },
          {emu_output("fused", fused), emu_output("in place", inplace), emu_output("sum", sum),
           emu_output("composed", composed)}));
      const std::vector<A> want(composed.begin() + off, composed.end());
      EXPECT_TRUE(bitwise_equal("residual_relu_backward", std::vector<A>(fused.begin() + off, fused.end()), want));
      EXPECT_TRUE(bitwise_equal("in place", std::vector<A>(inplace.begin() + off, inplace.end()), want));
      if constexpr (!std::is_same_v<A, fp16>) {  // the CPU backend's storage types
        std::vector<A> cpu(a.size(), a[0]);
        residual_relu_backward(cpu_ctx(), cpu.data() + off, a.data() + off, b.data() + off, o.data() + off, n);
        EXPECT_TRUE(bitwise_equal("CPU residual_relu_backward", std::vector<A>(cpu.begin() + off, cpu.end()), want));
      }
    }
  }
}
TEST(EmuCore, ResidualReluBackwardIsTheTwoKernels) {
  check_residual_relu_backward<float>();
  check_residual_relu_backward<bf16>();
  check_residual_relu_backward<fp16>();
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
          emu_gelu_forward(out.data(), x.data(), n);
          emu_gelu_backward(dinp.data(), x.data(), dout.data(), n);
        },
        {emu_output("gelu", out), emu_output("dgelu", dinp)}));
    std::vector<float> want_out(sz(n)), want_dinp(sz(n));
    gelu_forward(cpu_ctx(), want_out.data(), x.data(), n);
    gelu_backward(cpu_ctx(), want_dinp.data(), x.data(), dout.data(), n);
    EXPECT_TRUE(all_close("gelu_forward", out, want_out, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("gelu_backward", dinp, want_dinp, 1e-5, 1e-6));
  }
}

// ---- 16-bit storage (bf16, fp16): pointwise -----------------------------------------------------------------------
// Each output of a 16-bit pointwise kernel is the float kernel's result on the widened inputs, rounded once: bitwise.
template <typename A>
void check_pointwise_are_the_float_kernels_rounded_once() {
  for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{4011}}) {  // 4011: 501 packs of 8 and a tail of 3
    for (int off : {0, 3}) {                                    // 3 elements = 6 bytes: the packs off
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      auto xf = with_specials(random_vector(sz(n + off), 300, -6.0, 6.0));
      if (n + off > 3) xf[2] = 100.0f, xf[3] = -100.0f;
      const auto x = to_storage_vector<A>(xf), y = random_storage<A>(sz(n + off), 301),
                 g = random_storage<A>(sz(n + off), 302);
      const auto x32 = to_float_vector(x), y32 = to_float_vector(y), g32 = to_float_vector(g);
      std::vector<A> res(sz(n + off), from_f32<A>(2.0f)), gelu = res, dgelu = res, relu = res, drelu = res;
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_residual(emu_ptr(res) + off, emu_ptr(x) + off, emu_ptr(y) + off, n);
            emu_gelu_forward(emu_ptr(gelu) + off, emu_ptr(x) + off, n);
            emu_gelu_backward(emu_ptr(dgelu) + off, emu_ptr(x) + off, emu_ptr(g) + off, n);
            emu_relu_forward(emu_ptr(relu) + off, emu_ptr(x) + off, n);
            emu_relu_backward(emu_ptr(drelu) + off, emu_ptr(g) + off, emu_ptr(relu) + off, n);
          },
          {emu_output("residual", res), emu_output("gelu", gelu), emu_output("dgelu", dgelu), emu_output("relu", relu),
           emu_output("drelu", drelu)}));
      // the float kernels on the widened inputs (drelu on the float relu: the same signs as the 16-bit one's)
      std::vector<float> fres(sz(n + off), 2.0f), fgelu = fres, fdgelu = fres, frelu = fres, fdrelu = fres;
      emu_residual(fres.data() + off, x32.data() + off, y32.data() + off, n);
      emu_gelu_forward(fgelu.data() + off, x32.data() + off, n);
      emu_gelu_backward(fdgelu.data() + off, x32.data() + off, g32.data() + off, n);
      emu_relu_forward(frelu.data() + off, x32.data() + off, n);
      emu_relu_backward(fdrelu.data() + off, g32.data() + off, frelu.data() + off, n);
      EXPECT_TRUE(bitwise_equal("residual", res, to_storage_vector<A>(fres)));
      EXPECT_TRUE(bitwise_equal("gelu_forward", gelu, to_storage_vector<A>(fgelu)));
      EXPECT_TRUE(bitwise_equal("gelu_backward", dgelu, to_storage_vector<A>(fdgelu)));
      EXPECT_TRUE(bitwise_equal("relu_forward", relu, to_storage_vector<A>(frelu)));
      EXPECT_TRUE(bitwise_equal("relu_backward", drelu, to_storage_vector<A>(fdrelu)));
    }
  }
}
TEST(EmuCore, Bf16PointwiseAreTheFloatKernelsRoundedOnce) {
  check_pointwise_are_the_float_kernels_rounded_once<bf16>();
}
TEST(EmuCore, Fp16PointwiseAreTheFloatKernelsRoundedOnce) {
  check_pointwise_are_the_float_kernels_rounded_once<fp16>();
}

// Against the CPU backend on the same inputs (bf16: its bf16 ops; fp16: its fp32 ops on the widened inputs, rounded
// once: CpuStorage, kernel_test_util.hpp): residual and ReLU compute identical float values (exact); GELU's exp
// differs in its last bits (float tolerance, plus one ulp of A: kStorageUlp).
template <typename A>
void check_pointwise_match_cpu_backend() {
  const int64_t n = 2053;
  const auto x = to_storage_vector<A>(with_specials(random_vector(sz(n), 310, -6.0, 6.0)));
  auto xg_f = random_vector(sz(n), 313, -6.0, 6.0);
  xg_f[0] = 100.0f, xg_f[1] = -100.0f, xg_f[2] = 0.0f;  // finite extremes (the CPU's GELU of -inf is NaN, like ours)
  const auto xg = to_storage_vector<A>(xg_f), y = random_storage<A>(sz(n), 311), g = random_storage<A>(sz(n), 312);
  std::vector<A> res(sz(n)), relu(sz(n)), drelu(sz(n)), gelu(sz(n)), dgelu(sz(n));
  ASSERT_TRUE(emulate_schedules(
      [&] {
        emu_residual(emu_ptr(res), emu_ptr(x), emu_ptr(y), n);
        emu_relu_forward(emu_ptr(relu), emu_ptr(x), n);
        emu_relu_backward(emu_ptr(drelu), emu_ptr(g), emu_ptr(relu), n);
        emu_gelu_forward(emu_ptr(gelu), emu_ptr(xg), n);
        emu_gelu_backward(emu_ptr(dgelu), emu_ptr(xg), emu_ptr(g), n);
      },
      {emu_output("residual", res), emu_output("relu", relu), emu_output("drelu", drelu), emu_output("gelu", gelu),
       emu_output("dgelu", dgelu)}));
  using R = CpuStorage<A>;
  const auto rx = cpu_in(x), rxg = cpu_in(xg), ry = cpu_in(y), rg = cpu_in(g);
  std::vector<R> w_res(sz(n)), w_relu(sz(n)), w_drelu(sz(n)), w_gelu(sz(n)), w_dgelu(sz(n));
  residual_forward(cpu_ctx(), w_res.data(), rx.data(), ry.data(), n);
  relu_forward(cpu_ctx(), w_relu.data(), rx.data(), n);
  relu_backward(cpu_ctx(), w_drelu.data(), rg.data(), w_relu.data(), n);
  gelu_forward(cpu_ctx(), w_gelu.data(), rxg.data(), n);
  gelu_backward(cpu_ctx(), w_dgelu.data(), rxg.data(), rg.data(), n);
  EXPECT_TRUE(bitwise_equal("residual", res, cpu_out<A>(w_res)));
  EXPECT_TRUE(bitwise_equal("relu_forward", relu, cpu_out<A>(w_relu)));
  EXPECT_TRUE(bitwise_equal("relu_backward", drelu, cpu_out<A>(w_drelu)));
  EXPECT_TRUE(all_close("gelu_forward", gelu, cpu_out<A>(w_gelu), 1e-5 + kStorageUlp<A>, 1e-6));
  EXPECT_TRUE(all_close("gelu_backward", dgelu, cpu_out<A>(w_dgelu), 1e-5 + kStorageUlp<A>, 1e-6));
}
TEST(EmuCore, Bf16PointwiseMatchCpuBackend) { check_pointwise_match_cpu_backend<bf16>(); }
TEST(EmuCore, Fp16PointwiseMatchCpuBackend) { check_pointwise_match_cpu_backend<fp16>(); }

// cast: float -> bf16 rounds to nearest even (ties included), keeps the infinities, signed zeros and subnormals and
// overflows to infinity, exactly as the CPU backend (bitwise; NaN stays NaN, its payload being the hardware's
// canonical one on the GPU); bf16 -> float is exact.
TEST(EmuCore, CastBothWaysEqualCpuBitForBit) {
  for (int64_t n : {int64_t{1}, int64_t{29}, int64_t{1027}}) {
    for (int off : {0, 1}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      auto src = random_vector(sz(n + off), 320, -3.0, 3.0);
      const float specials[] = {0.0f,
                                -0.0f,
                                INFINITY,
                                -INFINITY,
                                1.0f + 0x1p-8f,   // a tie: to even (1.0)
                                1.0f + 0x3p-8f,   // a tie: to even (up)
                                0x1p-130f,        // a subnormal
                                3.4e38f,          // beyond bf16's largest finite value: to infinity
                                -1.0f - 0x1p-9f,  // below half an ulp: down
                                0x1.ff8p127f};
      for (size_t i = 0; i < std::size(specials) && i + off < src.size(); i++) src[i + off] = specials[i];
      std::vector<bf16> low(sz(n + off), bf16{0x1234});
      std::vector<float> back(sz(n + off), 7.0f);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            const int64_t p1 = cu::cast_packs(n, emu_ptr(low) + off, src.data() + off);
            EMU_LAUNCH((cu::cast_kernel<__nv_bfloat16, float>), cu::cast_shape(n, p1), emu_ptr(low) + off,
                       src.data() + off, n, p1);
            const int64_t p2 = cu::cast_packs(n, back.data() + off, emu_ptr(low) + off);
            EMU_LAUNCH((cu::cast_kernel<float, __nv_bfloat16>), cu::cast_shape(n, p2), back.data() + off,
                       emu_ptr(low) + off, n, p2);
          },
          {emu_output("bf16", low), emu_output("float", back)}));
      std::vector<bf16> want_low(sz(n + off), bf16{0x1234});
      std::vector<float> want_back(sz(n + off), 7.0f);
      cast(cpu_ctx(), want_low.data() + off, src.data() + off, n);
      cast(cpu_ctx(), want_back.data() + off, want_low.data() + off, n);
      EXPECT_TRUE(bitwise_equal("cast float -> bf16", low, want_low));
      EXPECT_TRUE(bitwise_equal("cast bf16 -> float", back, want_back));
    }
  }
  // NaN: a NaN either way (the hardware writes the canonical 0x7fff, the CPU keeps the sign and payload, quieted)
  std::vector<float> nan{std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::signaling_NaN()};
  std::vector<bf16> low(2);
  std::vector<float> back(2);
  EMU_LAUNCH((cu::cast_kernel<__nv_bfloat16, float>), cu::cast_shape(2, 0), emu_ptr(low), nan.data(), 2, 0);
  EMU_LAUNCH((cu::cast_kernel<float, __nv_bfloat16>), cu::cast_shape(2, 0), back.data(), emu_ptr(low), 2, 0);
  EXPECT_EQ(low[0].bits, 0x7fff);
  EXPECT_EQ(low[1].bits, 0x7fff);
  EXPECT_TRUE(std::isnan(back[0]) && std::isnan(back[1]));
}

// cast to and from fp16 (cuda_core.cu's cast_kernel<__half, float> and back): the CPU backend has no fp16, so the
// reference is the host conversion hpct::to_fp16 (tensor/fp16.hpp, itself tested on its edge cases in
// tests/unit/kernels/test_kernels_fp16.cpp): round to nearest even with ties, subnormals kept, overflow to infinity,
// bitwise; fp16 -> float exact.
TEST(EmuCore, Fp16CastBothWaysEqualTheHostConversionBitForBit) {
  for (int64_t n : {int64_t{1}, int64_t{29}, int64_t{1027}}) {
    for (int off : {0, 1}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " off=" + std::to_string(off));
      auto src = random_vector(sz(n + off), 321, -3.0, 3.0);
      const float specials[] = {0.0f,
                                -0.0f,
                                INFINITY,
                                -INFINITY,
                                1.0f + 0x1p-11f,  // a tie: to even (1.0)
                                1.0f + 0x3p-11f,  // a tie: to even (up)
                                0x1p-20f,         // a subnormal of fp16
                                0x1p-25f,         // half the smallest subnormal: a tie, to even (0)
                                65504.0f,         // the largest finite fp16
                                65520.0f,         // the tie above it: to infinity
                                -1e6f};           // beyond the range: -infinity
      for (size_t i = 0; i < std::size(specials) && i + off < src.size(); i++) src[i + off] = specials[i];
      std::vector<fp16> low(sz(n + off), fp16{0x1234});
      std::vector<float> back(sz(n + off), 7.0f);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            const int64_t p1 = cu::cast_packs(n, emu_ptr(low) + off, src.data() + off);
            EMU_LAUNCH((cu::cast_kernel<__half, float>), cu::cast_shape(n, p1), emu_ptr(low) + off, src.data() + off, n,
                       p1);
            const int64_t p2 = cu::cast_packs(n, back.data() + off, emu_ptr(low) + off);
            EMU_LAUNCH((cu::cast_kernel<float, __half>), cu::cast_shape(n, p2), back.data() + off, emu_ptr(low) + off,
                       n, p2);
          },
          {emu_output("fp16", low), emu_output("float", back)}));
      std::vector<fp16> want_low(sz(n + off), fp16{0x1234});
      std::vector<float> want_back(sz(n + off), 7.0f);
      for (int64_t i = 0; i < n; i++) {
        want_low[sz(i + off)] = to_fp16(src[sz(i + off)]);
        want_back[sz(i + off)] = to_f32(want_low[sz(i + off)]);
      }
      EXPECT_TRUE(bitwise_equal("cast float -> fp16", low, want_low));
      EXPECT_TRUE(bitwise_equal("cast fp16 -> float", back, want_back));
    }
  }
}

// ---- optimizers ---------------------------------------------------------------------------------------------------
// adamw_update_chunks over a table of three tensors (one longer than a chunk, one without weight decay, one of three
// elements): the chunk kernel equals the per-tensor kernel bit for bit (the same arithmetic per element), and the CPU
// backend's op within float rounding. Both keep a bf16 compute copy (the table's copy pointers): exactly the updated
// parameters rounded once, what cast() gives.
TEST(EmuCore, AdamwChunksEqualAdamwPerTensor) {
  const int64_t sizes[] = {kTableChunk + 1234, 777, 3};
  const bool decays[] = {true, false, true};
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
  std::vector<std::vector<float>> p, m, v, g, tp, tm, tv, cp, cm, cv;  // chunk kernel / per-tensor kernel / CPU
  for (int i = 0; i < 3; i++) {
    p.push_back(random_vector(sz(sizes[i]), 50 + i));
    m.push_back(random_vector(sz(sizes[i]), 60 + i, -0.1, 0.1));
    v.push_back(random_vector(sz(sizes[i]), 70 + i, 0.0, 0.01));
    g.push_back(random_vector(sz(sizes[i]), 80 + i));
  }
  tp = cp = p;
  tm = cm = m;
  tv = cv = v;
  std::vector<std::vector<bf16>> copy, cpu_copy;
  for (int i = 0; i < 3; i++) {
    copy.emplace_back(sz(sizes[i]), from_f32<bf16>(7.0f));
    cpu_copy.emplace_back(sz(sizes[i]), from_f32<bf16>(7.0f));
  }
  std::vector<AdamwRange> ranges, cpu_ranges;
  for (int i = 0; i < 3; i++) {
    ranges.push_back({p[i].data(), g[i].data(), m[i].data(), v[i].data(), sizes[i], decays[i], copy[i].data()});
    cpu_ranges.push_back(
        {cp[i].data(), g[i].data(), cm[i].data(), cv[i].data(), sizes[i], decays[i], cpu_copy[i].data()});
  }
  const std::vector<AdamwChunk> table = adamw_table(ranges, DType::BF16),
                                cpu_table = adamw_table(cpu_ranges, DType::BF16);
  ASSERT_EQ(table.size(), 4u);
  const auto chunks = static_cast<int64_t>(table.size());
  for (int t = 1; t <= 2; t++) {
    SCOPED_TRACE("t=" + std::to_string(t));
    const cu::AdamwScalars k = cu::adamw_scalars(lr, b1, b2, wd, t);
    const float no_decay = cu::adamw_scalars(lr, b1, b2, 0.0f, t).decay;
    std::vector<test::EmuOutput> outs;
    for (int i = 0; i < 3; i++) {
      outs.push_back(emu_output("params " + std::to_string(i), p[i]));
      outs.push_back(emu_output("m " + std::to_string(i), m[i]));
      outs.push_back(emu_output("v " + std::to_string(i), v[i]));
      outs.push_back(emu_output("copy " + std::to_string(i), copy[i]));
    }
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::adamw_chunks_kernel<__nv_bfloat16>, cu::table_chunks_shape(chunks), table.data(), b1, b2, eps,
                     gs, k.decay, no_decay, k.step_size, k.bc2_sqrt, k.one_minus_b1, k.one_minus_b2);
        },
        outs));
    for (int i = 0; i < 3; i++) {
      const cu::AdamwScalars ki = cu::adamw_scalars(lr, b1, b2, decays[i] ? wd : 0.0f, t);
      const int64_t n = sizes[i];
      EMU_LAUNCH(cu::adamw_kernel, cu::elementwise_shape(n), tp[i].data(), g[i].data(), tm[i].data(), tv[i].data(), n,
                 b1, b2, eps, gs, ki.decay, ki.step_size, ki.bc2_sqrt, ki.one_minus_b1, ki.one_minus_b2);
    }
    adamw_update_chunks(cpu_ctx(), cpu_table.data(), chunks, lr, b1, b2, eps, wd, gs, t, DType::BF16);
    for (int i = 0; i < 3; i++) {
      EXPECT_TRUE(bitwise_equal("chunks vs per tensor, params " + std::to_string(i), p[i], tp[i]));
      EXPECT_TRUE(bitwise_equal("chunks: the copy is the params cast", copy[i], to_storage_vector<bf16>(p[i])));
      EXPECT_TRUE(bitwise_equal("CPU: the copy is the params cast", cpu_copy[i], to_storage_vector<bf16>(cp[i])));
      EXPECT_TRUE(bitwise_equal("chunks vs per tensor, v " + std::to_string(i), v[i], tv[i]));
      EXPECT_TRUE(all_close("chunks vs CPU, params " + std::to_string(i), p[i], cp[i], 1e-5, 1e-6));
      EXPECT_TRUE(all_close("chunks vs CPU, m " + std::to_string(i), m[i], cm[i], 1e-5, 1e-6));
    }
  }
}

// The fp16 compute copy (CUDA's fp16 storage): the same parameters as without a copy, the copy their rounding.
TEST(EmuCore, AdamwChunksKeepAnFp16Copy) {
  const int64_t n = 1000;
  auto p = random_vector(sz(n), 90), m = random_vector(sz(n), 91, -0.1, 0.1), v = random_vector(sz(n), 92, 0.0, 0.01);
  const auto g = random_vector(sz(n), 93);
  auto p0 = p, m0 = m, v0 = v;
  std::vector<fp16> copy(sz(n), from_f32<fp16>(7.0f));
  const std::vector<AdamwChunk> table = adamw_table({{p.data(), g.data(), m.data(), v.data(), n, true, copy.data()}},
                                                    DType::F16),
                                plain = adamw_table({{p0.data(), g.data(), m0.data(), v0.data(), n, true}});
  const cu::AdamwScalars k = cu::adamw_scalars(3e-3f, 0.9f, 0.95f, 0.1f, 1);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH(cu::adamw_chunks_kernel<__half>, cu::table_chunks_shape(1), table.data(), 0.9f, 0.95f, 1e-8f, 1.0f,
                   k.decay, 1.0f, k.step_size, k.bc2_sqrt, k.one_minus_b1, k.one_minus_b2);
        EMU_LAUNCH(cu::adamw_chunks_kernel<void>, cu::table_chunks_shape(1), plain.data(), 0.9f, 0.95f, 1e-8f, 1.0f,
                   k.decay, 1.0f, k.step_size, k.bc2_sqrt, k.one_minus_b1, k.one_minus_b2);
      },
      {emu_output("params", p), emu_output("m", m), emu_output("v", v), emu_output("copy", copy),
       emu_output("plain params", p0), emu_output("plain m", m0), emu_output("plain v", v0)}));
  EXPECT_TRUE(bitwise_equal("params with and without the copy", p, p0));
  EXPECT_TRUE(bitwise_equal("the copy is the params cast", copy, to_storage_vector<fp16>(p)));
}

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
template <typename S>
void emu_encoder_forward(S* out, const int32_t* inp, const S* wte, const S* wpe, int64_t v0, int64_t Vl, int B, int T,
                         int C) {
  const int64_t N = int64_t{B} * T;
  EMU_LAUNCH(cu::encoder_forward_kernel, cu::elementwise_shape(N * C), out, inp, wte, wpe, v0, Vl, N, T, C);
}
template <typename S>
void emu_encoder_backward(float* dwte, float* dwpe, const S* dout, const int32_t* inp, int64_t v0, int64_t Vl, int B,
                          int T, int C) {
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
          emu_encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), int64_t{0}, kUnbounded, B, T, C);
          emu_encoder_backward(e_dwte.data(), e_dwpe.data(), dout.data(), inp.data(), int64_t{0}, kUnbounded, B, T, C);
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
            emu_encoder_forward(out.data(), inp.data(), wte_local.data(), with_wpe ? wpe.data() : nullptr, int64_t{v0},
                                int64_t{Vl}, B, T, C);
            emu_encoder_backward(e_dwte.data(), with_wpe ? e_dwpe.data() : nullptr, dout.data(), inp.data(),
                                 int64_t{v0}, int64_t{Vl}, B, T, C);
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
        emu_encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), int64_t{0}, int64_t{Vp}, B, T, C);
        emu_encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), int64_t{0}, int64_t{Vp}, B, T, C);
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

// layernorm_backward as cuda_core.cu launches it (layernorm_backward_kernel<S, P> at layernorm_backward_launch, then
// column_partials_kernel), the rows cut as a partials buffer of partials_bytes allows; the partials it uses start NaN
// (a partial the first kernel does not write poisons dweight) and end where the groups do (AddressSanitizer: a write
// beyond them fails).
template <typename S>
void emu_layernorm_backward(S* dinp, float* dweight, float* dbias, const S* dout, const S* inp, const S* weight,
                            const float* mean, const float* rstd, int N, int C, int P, int64_t partials_bytes) {
  const cu::LayernormBackwardLaunch launch = cu::layernorm_backward_launch(N, C, partials_bytes);
  std::vector<double> partials(sz(launch.rows.groups * 2 * C), std::numeric_limits<double>::quiet_NaN());
  cu::with_row_pack<S>(P, [&](auto pack) {
    constexpr int kP = decltype(pack)::value;
    EMU_LAUNCH((cu::layernorm_backward_kernel<S, kP>), launch.shape, dinp, partials.data(), dout, inp, weight, mean,
               rstd, int64_t{N}, C, launch.rows.rows_per_group);
  });
  EMU_LAUNCH(cu::column_partials_kernel, cu::column_partials_shape(2 * C, launch.rows.groups), dweight, dbias,
             partials.data(), launch.rows.groups, 2 * C, C);
}

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
            EMU_LAUNCH((cu::layernorm_forward_kernel<float, 1>), cu::layernorm_rows_shape(s.N), out.data(), mean.data(),
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

// The launch of the one-pass LayerNorm backward: the warps that fit 48 KiB, one warp with the opt-in beyond, and the
// rows cut into groups the partials buffer holds.
TEST(EmuCore, LayernormBackwardLaunch) {
  const cu::LayernormBackwardLaunch gpt2 = cu::layernorm_backward_launch(32 * 1024, 768, kCudaReducePartialsBytes);
  EXPECT_EQ(gpt2.shape.block.x, 128u);
  EXPECT_EQ(gpt2.shape.shared_bytes, 4 * 2 * 768 * 8);
  EXPECT_FALSE(gpt2.shape.shared_opt_in);
  EXPECT_EQ(gpt2.rows.groups, cu::kPartialMaxGroups);
  EXPECT_EQ(gpt2.rows.rows_per_group, 64);
  const cu::LayernormBackwardLaunch wide = cu::layernorm_backward_launch(5, 3200, kCudaReducePartialsBytes);
  EXPECT_EQ(wide.shape.block.x, 32u);
  EXPECT_TRUE(wide.shape.shared_opt_in);
  EXPECT_EQ(wide.rows.groups, 2);  // at least kLnRowsPerWarp rows per warp
  const cu::LayernormBackwardLaunch small = cu::layernorm_backward_launch(1037, 77, 3 * 2 * 77 * 8);
  EXPECT_EQ(small.rows.groups, 3);
  EXPECT_EQ(small.rows.rows_per_group, 346);
  EXPECT_EQ(cu::layernorm_backward_launch(0, 77, kCudaReducePartialsBytes).rows.groups, 0);
  for (const auto& l : {gpt2, wide, small}) EXPECT_EQ(cu::launch_problem(l.shape, cu::kH100Limits), "");
}

TEST(EmuCore, LayernormBackwardAccumulates) {
  // N = 1037 over 33 row groups, and over 3 groups of 346 rows (a buffer of three groups); C = 77 and 800 not
  // multiples of a warp's 32 columns (400: seven warps per block). (A width that needs the shared-memory opt-in, one
  // warp per block, is left to LayernormBackwardLaunch: its 2 C blocks of column_partials_kernel would take ~20 s
  // here, every thread a fiber.)
  struct Case {
    int N, C;
    int64_t partials_bytes;
  };
  for (const Case s : {Case{13, 77, kCudaReducePartialsBytes}, Case{1037, 77, kCudaReducePartialsBytes},
                       Case{1037, 77, 3 * 2 * 77 * 8}, Case{67, 400, kCudaReducePartialsBytes},
                       Case{3, 5, kCudaReducePartialsBytes}}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " partials " +
                   std::to_string(s.partials_bytes) + (with_bias ? "" : " no dbias"));
      const size_t NC = sz(int64_t{s.N} * s.C), C = sz(s.C);
      const auto inp = random_vector(NC, 100, -2.0, 3.0), dout = random_vector(NC, 101);
      const auto w = random_vector(C, 102), b = random_vector(C, 103);
      std::vector<float> fwd(NC), mean(sz(s.N)), rstd(sz(s.N));
      layernorm_forward(cpu_ctx(), fwd.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), s.N, s.C);
      auto dinp = random_vector(NC, 104), dw = random_vector(C, 105), db = random_vector(C, 106);  // +=
      auto e_dinp = dinp, e_dw = dw, e_db = db;
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_layernorm_backward(e_dinp.data(), e_dw.data(), with_bias ? e_db.data() : nullptr, dout.data(),
                                   inp.data(), w.data(), mean.data(), rstd.data(), s.N, s.C, 1, s.partials_bytes);
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

// ---- 16-bit storage (bf16, fp16): embedding and LayerNorm ---------------------------------------------------------
// The embedding's forward is one float addition rounded once (or a copy), its backward float sums of widened 16-bit
// values in the CPU's order: bitwise equal to the CPU backend (CpuStorage: its bf16 ops, or for fp16 its fp32 ops on
// the widened inputs, the output rounded once).
template <typename A>
void check_encoder_equals_cpu_bit_for_bit() {
  using S = EmuStorage<A>;
  using R = CpuStorage<A>;
  const int B = 3, T = 29, C = 133, Vp = 53;
  const size_t N = sz(int64_t{B} * T);
  const auto inp = random_ints(N, 330, 0, 9);
  const auto wte = random_storage<A>(sz(int64_t{Vp} * C), 331), wpe = random_storage<A>(sz(int64_t{T} * C), 332);
  const auto dout = random_storage<A>(N * C, 333);
  auto dwte = random_vector(sz(int64_t{Vp} * C), 334), dwpe = random_vector(sz(int64_t{T} * C), 335);
  auto e_dwte = dwte, e_dwpe = dwpe;
  std::vector<A> out(N * C, from_f32<A>(2.0f));
  constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  ASSERT_TRUE(emulate_schedules(
      [&] {
        emu_encoder_forward(emu_ptr(out), inp.data(), emu_ptr(wte), emu_ptr(wpe), int64_t{0}, kUnbounded, B, T, C);
        emu_encoder_backward(e_dwte.data(), e_dwpe.data(), emu_ptr(dout), inp.data(), int64_t{0}, kUnbounded, B, T, C);
      },
      {emu_output("out", out), emu_output("dwte", e_dwte), emu_output("dwpe", e_dwpe)}));
  std::vector<R> want(N * C);
  const auto rwte = cpu_in(wte), rwpe = cpu_in(wpe), rdout = cpu_in(dout);
  encoder_forward(cpu_ctx(), want.data(), inp.data(), rwte.data(), rwpe.data(), B, T, C);
  encoder_backward(cpu_ctx(), dwte.data(), dwpe.data(), rdout.data(), inp.data(), B, T, C);
  EXPECT_TRUE(bitwise_equal("encoder_forward", out, cpu_out<A>(want)));
  EXPECT_TRUE(bitwise_equal("encoder_backward dwte", e_dwte, dwte));
  EXPECT_TRUE(bitwise_equal("encoder_backward dwpe", e_dwpe, dwpe));
  // the vocabulary-parallel slice [16, 32) without wpe (tp_rank > 0)
  const int v0 = 16, Vl = 16;
  const auto wte_local = random_storage<A>(sz(int64_t{Vl} * C), 336);
  const auto inp_vp = random_ints(N, 337, 0, 48);
  std::vector<A> out_vp(N * C);
  std::vector<R> want_vp(N * C);
  std::vector<float> dwte_vp(sz(int64_t{Vl} * C), 0.5f), want_dwte_vp = dwte_vp;
  ASSERT_TRUE(emulate_schedules(
      [&] {
        emu_encoder_forward(emu_ptr(out_vp), inp_vp.data(), emu_ptr(wte_local), static_cast<const S*>(nullptr),
                            int64_t{v0}, int64_t{Vl}, B, T, C);
        emu_encoder_backward(dwte_vp.data(), nullptr, emu_ptr(dout), inp_vp.data(), int64_t{v0}, int64_t{Vl}, B, T, C);
      },
      {emu_output("out", out_vp), emu_output("dwte", dwte_vp)}));
  const auto rwte_local = cpu_in(wte_local);
  encoder_forward_vocab_parallel(cpu_ctx(), want_vp.data(), inp_vp.data(), rwte_local.data(),
                                 static_cast<const R*>(nullptr), v0, Vl, B, T, C);
  encoder_backward_vocab_parallel(cpu_ctx(), want_dwte_vp.data(), nullptr, rdout.data(), inp_vp.data(), v0, Vl, B, T,
                                  C);
  EXPECT_TRUE(bitwise_equal("encoder_forward_vocab_parallel", out_vp, cpu_out<A>(want_vp)));
  EXPECT_TRUE(bitwise_equal("encoder_backward_vocab_parallel dwte", dwte_vp, want_dwte_vp));
}
TEST(EmuCore, Bf16EncoderEqualsCpuBitForBit) { check_encoder_equals_cpu_bit_for_bit<bf16>(); }
TEST(EmuCore, Fp16EncoderEqualsCpuBitForBit) { check_encoder_equals_cpu_bit_for_bit<fp16>(); }

// LayerNorm in 16-bit storage against the CPU backend on the same inputs (CpuStorage): mean, rstd, dweight and dbias
// are float (the float tolerances); out and dinp are rounded once from float values that the two sides sum in
// different orders (the float tolerance plus one ulp of A). C = 768 and 64 take the 16-byte packs (row_pack 8), 77 and
// a row offset by one element do not.
template <typename A>
void check_layernorm_matches_cpu() {
  using S = EmuStorage<A>;
  using R = CpuStorage<A>;
  struct Case {
    int N, C, off;
  };
  for (const Case s : {Case{13, 768, 0}, Case{37, 64, 0}, Case{9, 77, 0}, Case{5, 64, 1}}) {
    SCOPED_TRACE("N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " off=" + std::to_string(s.off));
    const size_t NC = sz(int64_t{s.N} * s.C), C = sz(s.C);
    const auto inp = random_storage<A>(NC + s.off, 340, -2.0, 3.0), dout = random_storage<A>(NC + s.off, 341);
    const auto w = random_storage<A>(C + s.off, 342), b = random_storage<A>(C + s.off, 343);
    const auto dinp0 = random_storage<A>(NC + s.off, 344);
    auto dw = random_vector(C, 345), db = random_vector(C, 346);
    auto e_dinp = dinp0;
    auto e_dw = dw, e_db = db;
    std::vector<A> out(NC + s.off, from_f32<A>(2.0f));
    std::vector<float> mean(sz(s.N), 5.0f), rstd(sz(s.N), 5.0f);
    const int o = s.off;
    const int P = cu::row_pack<S>(s.C, {emu_ptr(out) + o, emu_ptr(inp) + o, emu_ptr(w) + o, emu_ptr(b) + o});
    EXPECT_EQ(P, s.C % 8 == 0 && o == 0 ? 8 : 1);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          cu::with_row_pack<S>(P, [&](auto pack) {
            constexpr int kP = decltype(pack)::value;
            EMU_LAUNCH((cu::layernorm_forward_kernel<S, kP>), cu::layernorm_rows_shape(s.N), emu_ptr(out) + o,
                       mean.data(), rstd.data(), emu_ptr(inp) + o, emu_ptr(w) + o, emu_ptr(b) + o, s.N, s.C);
          });
          emu_layernorm_backward(emu_ptr(e_dinp) + o, e_dw.data(), e_db.data(), emu_ptr(dout) + o, emu_ptr(inp) + o,
                                 emu_ptr(w) + o, mean.data(), rstd.data(), s.N, s.C, P, kCudaReducePartialsBytes);
        },
        {emu_output("out", out), emu_output("mean", mean), emu_output("rstd", rstd), emu_output("dinp", e_dinp),
         emu_output("dweight", e_dw), emu_output("dbias", e_db)}));
    std::vector<R> want(NC + s.off, from_f32<R>(2.0f)), dinp = cpu_in(dinp0);
    std::vector<float> want_mean(sz(s.N)), want_rstd(sz(s.N));
    const auto rinp = cpu_in(inp), rdout = cpu_in(dout), rw = cpu_in(w), rb = cpu_in(b);
    layernorm_forward(cpu_ctx(), want.data() + o, want_mean.data(), want_rstd.data(), rinp.data() + o, rw.data() + o,
                      rb.data() + o, s.N, s.C);
    layernorm_backward(cpu_ctx(), dinp.data() + o, dw.data(), db.data(), rdout.data() + o, rinp.data() + o,
                       rw.data() + o, want_mean.data(), want_rstd.data(), s.N, s.C);
    EXPECT_TRUE(all_close("mean", mean, want_mean, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("rstd", rstd, want_rstd, 1e-5, 1e-6));
    EXPECT_TRUE(all_close("out", out, cpu_out<A>(want), 1e-5 + kStorageUlp<A>, 1e-6));
    EXPECT_TRUE(all_close("dinp", e_dinp, cpu_out<A>(dinp), 1e-5 + kStorageUlp<A>, 1e-6));
    EXPECT_TRUE(all_close("dweight", e_dw, dw, 1e-6, 1e-7));
    EXPECT_TRUE(all_close("dbias", e_db, db, 1e-6, 1e-7));
  }
}
TEST(EmuCore, Bf16LayernormMatchesCpu) { check_layernorm_matches_cpu<bf16>(); }

// residual_layernorm_forward_kernel: the same bits as residual_kernel followed by layernorm_forward_kernel (the
// emulated pair, at the pack width cuda_core.cu chooses), in place (residual == a) too; and against the CPU backend's
// two ops (the residual exactly, the LayerNorm within its tolerances). C = 768 takes the 16-byte packs of 16-bit
// storage, 77 does not.
template <typename A>
void check_residual_layernorm_equals_the_two_kernels() {
  using S = EmuStorage<A>;
  using R = CpuStorage<A>;
  for (const LnShape s : {LnShape{13, 768}, LnShape{9, 77}}) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + (in_place ? " in place" : ""));
      const size_t NC = sz(int64_t{s.N} * s.C), C = sz(s.C);
      const auto a = random_storage<A>(NC, 350, -2.0, 3.0), b = random_storage<A>(NC, 351);
      const auto w = random_storage<A>(C, 352), bias = random_storage<A>(C, 353);
      auto fa = a, pa = a;  // the fused kernel's and the pair's a (the residual when in place)
      std::vector<A> fres(NC, from_f32<A>(2.0f)), pres = fres, fout = fres, pout = fres;
      std::vector<float> fmean(sz(s.N), 5.0f), frstd = fmean, pmean = fmean, prstd = fmean;
      A* fr = in_place ? fa.data() : fres.data();
      A* pr = in_place ? pa.data() : pres.data();
      const int P = cu::row_pack<S>(s.C, {emu_ptr(fout), emu_ptr(fres), emu_ptr(w), emu_ptr(bias)});
      ASSERT_TRUE(emulate_schedules(
          [&] {
            cu::with_row_pack<S>(P, [&](auto pack) {
              constexpr int kP = decltype(pack)::value;
              EMU_LAUNCH((cu::residual_layernorm_forward_kernel<S, kP>), cu::layernorm_rows_shape(s.N),
                         reinterpret_cast<S*>(fr), emu_ptr(fout), fmean.data(), frstd.data(),
                         reinterpret_cast<const S*>(in_place ? fr : fa.data()), emu_ptr(b), emu_ptr(w), emu_ptr(bias),
                         s.N, s.C);
              emu_residual(reinterpret_cast<S*>(pr), reinterpret_cast<const S*>(in_place ? pr : pa.data()), emu_ptr(b),
                           static_cast<int64_t>(NC));
              EMU_LAUNCH((cu::layernorm_forward_kernel<S, kP>), cu::layernorm_rows_shape(s.N), emu_ptr(pout),
                         pmean.data(), prstd.data(), reinterpret_cast<const S*>(pr), emu_ptr(w), emu_ptr(bias), s.N,
                         s.C);
            });
          },
          {emu_output("fused a", fa), emu_output("fused residual", fres), emu_output("fused out", fout),
           emu_output("fused mean", fmean), emu_output("fused rstd", frstd), emu_output("a", pa),
           emu_output("residual", pres), emu_output("out", pout), emu_output("mean", pmean),
           emu_output("rstd", prstd)}));
      const std::vector<A>& fused_res = in_place ? fa : fres;
      EXPECT_TRUE(bitwise_equal("residual", fused_res, in_place ? pa : pres));
      EXPECT_TRUE(bitwise_equal("out", fout, pout));
      EXPECT_TRUE(bitwise_equal("mean", fmean, pmean));
      EXPECT_TRUE(bitwise_equal("rstd", frstd, prstd));
      std::vector<R> want_res(NC), want_out(NC);
      std::vector<float> want_mean(sz(s.N)), want_rstd(sz(s.N));
      const auto ra = cpu_in(a), rb = cpu_in(b), rw = cpu_in(w), rbias = cpu_in(bias);
      residual_layernorm_forward(cpu_ctx(), want_res.data(), want_out.data(), want_mean.data(), want_rstd.data(),
                                 ra.data(), rb.data(), rw.data(), rbias.data(), s.N, s.C);
      EXPECT_TRUE(bitwise_equal("residual against the CPU", fused_res, cpu_out<A>(want_res)));
      EXPECT_TRUE(all_close("out against the CPU", fout, cpu_out<A>(want_out),
                            1e-5 + (std::is_same_v<A, float> ? 0.0 : kStorageUlp<A>), 1e-6));
      EXPECT_TRUE(all_close("mean against the CPU", fmean, want_mean, 1e-5, 1e-6));
    }
  }
}
TEST(EmuCore, ResidualLayernormEqualsTheTwoKernels) { check_residual_layernorm_equals_the_two_kernels<float>(); }
TEST(EmuCore, Bf16ResidualLayernormEqualsTheTwoKernels) { check_residual_layernorm_equals_the_two_kernels<bf16>(); }
TEST(EmuCore, Fp16LayernormMatchesCpu) { check_layernorm_matches_cpu<fp16>(); }

}  // namespace
}  // namespace hpct::kernels
