// The CUDA backend's GPT-group kernels other than flash attention (lib/kernels/cuda/cuda_gpt_kernels.cuh: the Linear
// bias and the cross-entropies; flash attention is test_emu_flash_attention.cpp) run on the host emulation
// (cuda_emu.hpp), launched as cuda_gpt.cu launches them (the same geometry functions), against the CPU backend. Every
// launch sequence runs under three schedules (in-order, shuffled, run-ahead: emulate_schedules) and must give the
// same bits every time.
// The vocabulary-parallel phases run over simulated TP ranks, the allreduces done on the host (MAX, then SUM in rank
// order) as the model does between the calls.
//
// Tolerances: those of the GPU test of the same ops (tests/unit/kernels/test_cuda_gpt.cpp), for the same reasons:
//   - exact: the bias broadcast (a copy), a max (the vocabulary-parallel local max), a copy or 0 (the target logit),
//     the padded dlogits (exactly 0), a rank holding only padding (sumexp 0, dlogits 0), the NaN of a bad target;
//   - 1e-5 / 1e-6 (kSoftmax*): cross-entropy losses and dlogits and the local sums of exponentials. The kernels sum
//     exp over a row in a tree of per-thread partial sums, the CPU over 8 SIMD lanes, and expf (here the host's, on a
//     GPU <= 2 ulp) differs from exp_simd (<= 1.5 ulp): ~1e-7 relative on both sides;
//   - 1e-6 / 1e-7 (kDouble*): dbias, summed over the rows in double on both sides with only the order differing,
//     then rounded to float (at most an ulp apart); the vocabulary-parallel loss from identical reduced statistics
//     (logf vs log).
// (atol is atol_rel times the largest |value| of the expected tensor: sums that cancel to ~0 are judged against the
// tensor's scale.)
//
// bf16 storage (the kernels' __nv_bfloat16 instantiations): against the CPU backend's bf16 ops on the same bf16
// inputs. Losses, dbias and the vocabulary-parallel statistics are float: the float tolerances above (both sides widen
// the same bf16 values and compute in float). The stored dlogits are rounded once from float values that differ in
// their last bits: the float tolerance plus one bf16 ulp (kBf16Ulp, emu_test_util.hpp). The plain cross-entropy's
// bf16 rows take the 16-byte packs where the padded row allows (Vp a multiple of 8: P = 8) and go element by element
// otherwise (V = Vp = 33), both run here.
// fp16 storage (the __half instantiations): the same checks, written once over the 16-bit type; the CPU has no fp16
// storage, so the reference is its fp32 op on the widened fp16 inputs with each stored output rounded once to fp16
// (CpuStorage), and the added ulp is fp16's (kFp16Ulp = 2^-10, 11 significant bits).
//
// Shapes hit the kernels' edges: row lengths that are not multiples of 32 or of the block, a single row, one element
// (V = Vp = 1, K = 1), a vocabulary below one warp, padded vocabularies (Vp > V), the largest row block (512 threads,
// row_threads) with several elements per thread up to the GPT-2 vocabulary, out-of-range targets (the row's loss and
// dlogits NaN, as the kernels document; the other rows unaffected), dloss other than 1 / N, dbias over several
// column blocks and row groups (and over a buffer of two groups), accumulated over two launches, vp_loss over several
// blocks.
// Kept small: every CUDA thread is a fiber.
#include "cuda_emu.hpp"  // first: the CUDA surface the kernel header compiles against
#include "kernels/cuda/cuda_gpt_kernels.cuh"
//
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "emu_test_util.hpp"
#include "kernel_test_util.hpp"
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
using test::cross_entropy_logits;
using test::cross_entropy_targets;
using test::emu_output;
using test::emu_ptr;
using test::emulate_schedules;
using test::EmuOutput;
using test::EmuStorage;
using test::kStorageUlp;
using test::random_ints;
using test::random_storage;
using test::random_vector;
using test::sz;
using test::to_float_vector;
using test::to_storage_vector;

// test_cuda_gpt.cpp's tolerances (see the header)
constexpr double kSoftmaxRtol = 1e-5, kSoftmaxAtolRel = 1e-6;
constexpr double kDoubleRtol = 1e-6, kDoubleAtolRel = 1e-7;

// The rows `rows` of a row-major (., width) matrix.
std::vector<float> rows_of(const std::vector<float>& m, const std::vector<int>& rows, int64_t width) {
  std::vector<float> r;
  for (const int n : rows) r.insert(r.end(), m.begin() + n * width, m.begin() + (n + 1) * width);
  return r;
}

// How many elements of the columns [c0, c1) of a row-major (rows, width) matrix are not exactly +0.0.
int64_t nonzero_in_columns(const std::vector<float>& m, int64_t rows, int64_t width, int64_t c0, int64_t c1) {
  int64_t bad = 0;
  for (int64_t n = 0; n < rows; n++)
    for (int64_t c = c0; c < c1; c++) {
      const float v = m[sz(n * width + c)];
      if (!(v == 0.0f && !std::signbit(v))) bad++;
    }
  return bad;
}

// ==============================================================================================================
// Linear: the bias seed of matmul_forward and the dbias of matmul_backward
// ==============================================================================================================
struct LinearShape {
  int N, C, OC;
};
// tiny; odd sizes (nothing a multiple of 32); more rows than the 16 row groups and columns across several dbias
// blocks of 32 (and several 256-thread broadcast blocks); a GPT-like 3C = 768 with an odd N
const LinearShape kLinearShapes[] = {{1, 1, 1}, {7, 5, 3}, {37, 45, 29}, {131, 20, 257}, {253, 8, 768}};

std::string name(const LinearShape& s) {
  return std::string("N") + std::to_string(s.N) + "C" + std::to_string(s.C) + "OC" + std::to_string(s.OC);
}

// matmul_backward's dbias as cuda_gpt.cu launches it (bias_grad_partial_kernel<S, P> at bias_grad_launch with P =
// pack_width<S>(OC, {dout}), then column_partials_kernel), the rows cut as a partials buffer of partials_bytes
// allows; the partials it uses start NaN (a partial the first kernel does not write poisons dbias) and end where the
// groups do (AddressSanitizer: a write beyond them fails).
template <typename S>
void emu_bias_grad(float* dbias, const S* dout, int N, int OC, int64_t partials_bytes = kCudaReducePartialsBytes) {
  const int P = cu::pack_width<S>(OC, {dout});
  const cu::BiasGradLaunch launch = cu::bias_grad_launch(N, OC, P, partials_bytes);
  std::vector<double> partials(sz(launch.rows.groups * OC), std::numeric_limits<double>::quiet_NaN());
  cu::with_pack<S>(P, [&](auto p) {
    EMU_LAUNCH((cu::bias_grad_partial_kernel<S, decltype(p)::value>), launch.shape, partials.data(), dout, int64_t{N},
               OC, launch.rows.rows_per_group);
  });
  EMU_LAUNCH(cu::column_partials_kernel, cu::column_partials_shape(OC, launch.rows.groups), dbias, nullptr,
             partials.data(), launch.rows.groups, OC, OC);
}

// Two launches (two micro-batches) add both contributions onto a pre-filled dbias (+=), as two matmul_backward calls
// of the CPU backend do; the last shape also over a buffer of two row groups (many rows per group).
TEST(EmuGpt, BiasGradMatchesCpuDbias) {
  uint32_t seed = 200;
  for (const LinearShape& s : kLinearShapes) {
    SCOPED_TRACE(name(s));
    const int N = s.N, C = s.C, OC = s.OC;
    const auto dout1 = random_vector(sz(int64_t{N} * OC), seed++), dout2 = random_vector(sz(int64_t{N} * OC), seed++);
    const auto inp = random_vector(sz(int64_t{N} * C), seed++), weight = random_vector(sz(int64_t{OC} * C), seed++);
    const auto dbias0 = random_vector(sz(OC), seed++);
    auto dbias = dbias0;
    const int64_t partials_bytes = OC == 768 ? 2 * 768 * 8 : kCudaReducePartialsBytes;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bias_grad(dbias.data(), dout1.data(), N, OC, partials_bytes);
          emu_bias_grad(dbias.data(), dout2.data(), N, OC, partials_bytes);
        },
        {emu_output("dbias", dbias)}));
    std::vector<float> want = dbias0, dweight(sz(int64_t{OC} * C), 0.0f);
    for (const auto* d : {&dout1, &dout2})
      matmul_backward(cpu_ctx(), static_cast<float*>(nullptr), dweight.data(), want.data(), d->data(), inp.data(),
                      weight.data(), N, C, OC);
    EXPECT_TRUE(all_close("dbias", dbias, want, kDoubleRtol, kDoubleAtolRel));
  }
}

// ==============================================================================================================
// Cross-entropies
// ==============================================================================================================

struct VocabShape {
  int N, V, Vp;
};
// one element; one row with a vocabulary below one warp; odd V with padding in the last warp; V = Vp not a multiple
// of 32 (a 64-thread block); V across several per-thread strides of the 512-thread block; the GPT-2 vocabulary
// (50257 padded to 50304, ~100 elements per thread)
const VocabShape kVocabShapes[] = {{1, 1, 1},        {1, 3, 128},     {5, 17, 128},     {4, 33, 33},
                                   {37, 1000, 1024}, {9, 3001, 3072}, {3, 50257, 50304}};

std::string name(const VocabShape& s) {
  return std::string("N") + std::to_string(s.N) + "V" + std::to_string(s.V) + "Vp" + std::to_string(s.Vp);
}

// crossentropy_forward and crossentropy_forward_backward (the two instantiations of crossentropy_kernel)
TEST(EmuGpt, CrossentropyMatchesCpu) {
  uint32_t seed = 700;
  int k = 0;
  for (const VocabShape& s : kVocabShapes) {
    SCOPED_TRACE(name(s));
    const int N = s.N, V = s.V, Vp = s.Vp;
    const float dloss = k++ % 2 ? 0.37f : 1.0f / static_cast<float>(N);  // the mean's scale, and another
    const auto logits = cross_entropy_logits(N, V, Vp, seed++);
    const auto targets = cross_entropy_targets(N, V, seed++);
    auto losses = random_vector(sz(N), seed++, 1e3, 2e3), losses_fused = random_vector(sz(N), seed++, 1e3, 2e3);
    auto dlogits = logits;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH((cu::crossentropy_kernel<false, float, 1>), cu::row_shape(N, V), losses.data(), logits.data(),
                     targets.data(), 0.0f, V, Vp);
          EMU_LAUNCH((cu::crossentropy_kernel<true, float, 1>), cu::row_shape(N, V), losses_fused.data(),
                     dlogits.data(), targets.data(), dloss, V, Vp);
        },
        {emu_output("losses", losses), emu_output("fused losses", losses_fused), emu_output("dlogits", dlogits)}));
    std::vector<float> want_losses(sz(N)), want_fused(sz(N)), want_dlogits = logits;
    crossentropy_forward(cpu_ctx(), want_losses.data(), logits.data(), targets.data(), N, V, Vp);
    crossentropy_forward_backward(cpu_ctx(), want_fused.data(), want_dlogits.data(), targets.data(), dloss, N, V, Vp);
    EXPECT_TRUE(all_close("losses", losses, want_losses, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_TRUE(all_close("fused losses", losses_fused, want_fused, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_TRUE(all_close("dlogits", dlogits, want_dlogits, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_EQ(nonzero_in_columns(dlogits, N, Vp, V, Vp), 0) << "padded dlogits must be exactly 0";
  }
}

// The one-pass statistics (online softmax) where they differ from a max pass then a sum pass: a row rising left to
// right (every thread's max grows at each of its columns: a rescale per element), a falling one, a row whose
// logits sit near 80 (exp overflows without the max), and a row with -inf logits (no contribution, no NaN) besides
// its finite ones, including at a thread's first column.
TEST(EmuGpt, CrossentropyOnlineSoftmaxMatchesCpu) {
  const int N = 4, V = 3001, Vp = 3072;
  std::vector<float> logits(sz(int64_t{N} * Vp), 0.0f);
  auto noise = random_vector(sz(int64_t{N} * Vp), 1100, -0.5, 0.5);
  for (int v = 0; v < V; v++) {
    logits[sz(v)] = 0.01f * v + noise[sz(v)];
    logits[sz(Vp + v)] = -0.01f * v + noise[sz(Vp + v)];
    logits[sz(2 * Vp + v)] = 80.0f + noise[sz(2 * Vp + v)];
    logits[sz(3 * Vp + v)] = v % 7 == 0 ? -INFINITY : noise[sz(3 * Vp + v)];
  }
  const std::vector<int32_t> targets{3000, 0, 1234, 1};
  auto losses = random_vector(sz(N), 1101, 1e3, 2e3);
  auto dlogits = logits;
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH((cu::crossentropy_kernel<true, float, 1>), cu::row_shape(N, V), losses.data(), dlogits.data(),
                   targets.data(), 0.25f, V, Vp);
      },
      {emu_output("losses", losses), emu_output("dlogits", dlogits)}));
  std::vector<float> want(sz(N)), want_dlogits = logits;
  crossentropy_forward_backward(cpu_ctx(), want.data(), want_dlogits.data(), targets.data(), 0.25f, N, V, Vp);
  for (float l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_TRUE(all_close("losses", losses, want, kSoftmaxRtol, kSoftmaxAtolRel));
  EXPECT_TRUE(all_close("dlogits", dlogits, want_dlogits, kSoftmaxRtol, kSoftmaxAtolRel));
}

TEST(EmuGpt, CrossentropySmoothedMatchesCpu) {
  struct Case {
    int N, K;
  };
  // one class; two; below a warp; K not a multiple of 32 (64 threads); 100 (128 threads); the 512-thread block with
  // ~2 classes per thread, and K one past that
  const Case cases[] = {{1, 1}, {1, 2}, {33, 10}, {5, 33}, {130, 100}, {33, 1000}, {3, 1001}};
  uint32_t seed = 1000;
  for (const Case& c : cases) {
    for (const float eps : {0.0f, 0.1f}) {
      const int N = c.N, K = c.K;
      SCOPED_TRACE(std::string("N") + std::to_string(N) + "K" + std::to_string(K) + " eps " + std::to_string(eps));
      auto logits = random_vector(sz(int64_t{N} * K), seed++, -4.0, 4.0);
      for (int k = 0; k < K; k++) logits[sz(k)] += 80.0f;  // row 0: overflows without the max subtraction
      const auto targets = cross_entropy_targets(N, K, seed++);
      const float dloss = 0.25f;
      auto losses = random_vector(sz(N), seed++, 1e3, 2e3), losses_fused = random_vector(sz(N), seed++, 1e3, 2e3);
      auto dlogits = logits;
      ASSERT_TRUE(emulate_schedules(
          [&] {
            EMU_LAUNCH((cu::crossentropy_smoothed_kernel<false, float>), cu::row_shape(N, K), losses.data(),
                       logits.data(), targets.data(), 0.0f, eps, K);
            EMU_LAUNCH((cu::crossentropy_smoothed_kernel<true, float>), cu::row_shape(N, K), losses_fused.data(),
                       dlogits.data(), targets.data(), dloss, eps, K);
          },
          {emu_output("losses", losses), emu_output("fused losses", losses_fused), emu_output("dlogits", dlogits)}));
      std::vector<float> want_losses(sz(N)), want_fused(sz(N)), want_dlogits = logits;
      crossentropy_smoothed_forward(cpu_ctx(), want_losses.data(), logits.data(), targets.data(), eps, N, K);
      crossentropy_smoothed_forward_backward(cpu_ctx(), want_fused.data(), want_dlogits.data(), targets.data(), dloss,
                                             eps, N, K);
      EXPECT_TRUE(all_close("smoothed losses", losses, want_losses, kSoftmaxRtol, kSoftmaxAtolRel));
      EXPECT_TRUE(all_close("smoothed fused losses", losses_fused, want_fused, kSoftmaxRtol, kSoftmaxAtolRel));
      EXPECT_TRUE(all_close("smoothed dlogits", dlogits, want_dlogits, kSoftmaxRtol, kSoftmaxAtolRel));
    }
  }
}

// The device cannot throw on a bad target (the CPU backend does): the row's loss and all of its dlogits (padding
// included) are NaN instead, and the other rows are those of the CPU backend on the valid rows.
TEST(EmuGpt, CrossentropyBadTargetGivesNanRow) {
  const int N = 4, V = 100, Vp = 128, K = 100;
  const std::vector<int32_t> targets = {3, V, -1, V - 1};  // rows 1 and 2 out of range (a padding column; negative)
  const std::vector<int32_t> valid_targets = {3, 0, 0, V - 1};
  const std::vector<int> good = {0, 3}, bad = {1, 2};
  const auto logits = cross_entropy_logits(N, V, Vp, 901);
  const auto slogits = random_vector(sz(int64_t{N} * K), 902, -4.0, 4.0);
  const float dloss = 0.5f, eps = 0.1f;
  std::vector<float> losses(sz(N)), losses_fused(sz(N)), dlogits = logits;
  std::vector<float> slosses(sz(N)), slosses_fused(sz(N)), sdlogits = slogits;
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH((cu::crossentropy_kernel<false, float, 1>), cu::row_shape(N, V), losses.data(), logits.data(),
                   targets.data(), 0.0f, V, Vp);
        EMU_LAUNCH((cu::crossentropy_kernel<true, float, 1>), cu::row_shape(N, V), losses_fused.data(), dlogits.data(),
                   targets.data(), dloss, V, Vp);
        EMU_LAUNCH((cu::crossentropy_smoothed_kernel<false, float>), cu::row_shape(N, K), slosses.data(),
                   slogits.data(), targets.data(), 0.0f, eps, K);
        EMU_LAUNCH((cu::crossentropy_smoothed_kernel<true, float>), cu::row_shape(N, K), slosses_fused.data(),
                   sdlogits.data(), targets.data(), dloss, eps, K);
      },
      {emu_output("losses", losses), emu_output("fused losses", losses_fused), emu_output("dlogits", dlogits),
       emu_output("smoothed losses", slosses), emu_output("smoothed fused losses", slosses_fused),
       emu_output("smoothed dlogits", sdlogits)}));
  std::vector<float> w_losses(sz(N)), w_fused(sz(N)), w_dlogits = logits;
  std::vector<float> w_slosses(sz(N)), w_sfused(sz(N)), w_sdlogits = slogits;
  crossentropy_forward(cpu_ctx(), w_losses.data(), logits.data(), valid_targets.data(), N, V, Vp);
  crossentropy_forward_backward(cpu_ctx(), w_fused.data(), w_dlogits.data(), valid_targets.data(), dloss, N, V, Vp);
  crossentropy_smoothed_forward(cpu_ctx(), w_slosses.data(), slogits.data(), valid_targets.data(), eps, N, K);
  crossentropy_smoothed_forward_backward(cpu_ctx(), w_sfused.data(), w_sdlogits.data(), valid_targets.data(), dloss,
                                         eps, N, K);
  const struct {
    const char* what;
    const std::vector<float>& got;
    const std::vector<float>& want;
    int64_t width;
  } outputs[] = {{"losses", losses, w_losses, 1},
                 {"fused losses", losses_fused, w_fused, 1},
                 {"dlogits", dlogits, w_dlogits, Vp},
                 {"smoothed losses", slosses, w_slosses, 1},
                 {"smoothed fused losses", slosses_fused, w_sfused, 1},
                 {"smoothed dlogits", sdlogits, w_sdlogits, K}};
  for (const auto& o : outputs) {
    SCOPED_TRACE(o.what);
    EXPECT_TRUE(all_close("valid rows", rows_of(o.got, good, o.width), rows_of(o.want, good, o.width), kSoftmaxRtol,
                          kSoftmaxAtolRel));
    const auto nan_rows = rows_of(o.got, bad, o.width);
    EXPECT_TRUE(std::all_of(nan_rows.begin(), nan_rows.end(), [](float v) { return std::isnan(v); }))
        << "every element of a bad target's row must be NaN";
  }
}

// ---- vocabulary-parallel pieces: every rank's slice, each phase on its own with identical inputs on both sides ----
// The reduced statistics (the model's allreduces) are computed on the host from the CPU backend's per-rank outputs;
// each emulated phase is then compared with the CPU phase on the same inputs. V = 700 of Vp = 1024 over t = 4 ranks
// (Vl = 256): ranks 0, 1 all real, rank 2 partly padding (188 real columns), rank 3 padding only (a 32-thread block
// over no column); t = 3 on Vp = 768 (not a power of two of ranks); t = 2 with Vl = 50 (not a multiple of 32, the
// last slice 45 real columns); t = 1 (the serial case).
struct VpCase {
  int N, V, Vp, t;
};
const VpCase kVpCases[] = {{37, 700, 1024, 4}, {5, 700, 768, 3}, {6, 95, 100, 2}, {4, 1000, 1024, 1}};

std::string name(const VpCase& c) {
  return std::string("N") + std::to_string(c.N) + "V" + std::to_string(c.V) + "Vp" + std::to_string(c.Vp) + "t" +
         std::to_string(c.t);
}

// The real local columns of a rank's slice, as cuda_gpt.cu's check_vp_slice computes them.
int real_columns(int v0, int Vl, int V) { return static_cast<int>(std::clamp<int64_t>(int64_t{V} - v0, 0, Vl)); }

// The rank slices (N, Vl) of logits (N, Vp).
std::vector<std::vector<float>> slices_of(const std::vector<float>& logits, int N, int Vp, int t) {
  const int Vl = Vp / t;
  std::vector<std::vector<float>> slices(sz(t), std::vector<float>(sz(int64_t{N} * Vl)));
  for (int r = 0; r < t; r++)
    for (int n = 0; n < N; n++)
      std::memcpy(&slices[sz(r)][sz(int64_t{n} * Vl)], &logits[sz(int64_t{n} * Vp + int64_t{r} * Vl)],
                  sizeof(float) * sz(Vl));
  return slices;
}

TEST(EmuGpt, CrossentropyVocabParallelMatchesCpu) {
  uint32_t seed = 1100;
  for (const VpCase& c : kVpCases) {
    SCOPED_TRACE(name(c));
    const int N = c.N, V = c.V, Vp = c.Vp, t = c.t, Vl = Vp / t;
    const auto logits = cross_entropy_logits(N, V, Vp, seed++);
    const auto targets = cross_entropy_targets(N, V, seed++);
    const float dloss = 1.0f / static_cast<float>(N);
    const auto slices = slices_of(logits, N, Vp, t);

    // phase a: local max, allreduce(MAX) on the host
    std::vector<float> global_max(sz(N), -INFINITY);
    for (int r = 0; r < t; r++) {
      SCOPED_TRACE(std::string("rank ") + std::to_string(r));
      const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
      const float* slice = slices[sz(r)].data();
      auto mx = random_vector(sz(N), seed++, 1e3, 2e3);
      ASSERT_TRUE(emulate_schedules(
          [&] { EMU_LAUNCH(cu::vp_local_max_kernel, cu::row_shape(N, Vr), mx.data(), slice, Vl, Vr); },
          {emu_output("max", mx)}));
      std::vector<float> want(sz(N));
      crossentropy_vp_local_max(cpu_ctx(), want.data(), slice, v0, Vl, V, N);
      EXPECT_TRUE(bitwise_equal("vp local max", mx, want));  // a max is exact; -inf for padding only
      for (int n = 0; n < N; n++) global_max[sz(n)] = std::max(global_max[sz(n)], want[sz(n)]);
    }

    // phase b: local sum of exp and target logit, allreduce(SUM) on the host in rank order
    std::vector<float> global_sumexp(sz(N), 0.0f), global_tl(sz(N), 0.0f);
    for (int r = 0; r < t; r++) {
      SCOPED_TRACE(std::string("rank ") + std::to_string(r));
      const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
      const float* slice = slices[sz(r)].data();
      auto se = random_vector(sz(N), seed++, 1e3, 2e3), tl = random_vector(sz(N), seed++, 1e3, 2e3);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            EMU_LAUNCH(cu::vp_local_sumexp_kernel, cu::row_shape(N, Vr), se.data(), tl.data(), slice, global_max.data(),
                       targets.data(), v0, Vl, Vr, V);
          },
          {emu_output("sumexp", se), emu_output("target logit", tl)}));
      std::vector<float> want_se(sz(N)), want_tl(sz(N));
      crossentropy_vp_local_sumexp(cpu_ctx(), want_se.data(), want_tl.data(), slice, global_max.data(), targets.data(),
                                   v0, Vl, V, N);
      // a rank of padding only: exactly 0 on both sides (all_close's atol floor would be 0): the exact check
      if (v0 >= V) {
        EXPECT_TRUE(bitwise_equal("vp local sumexp (padding only)", se, want_se));
      } else {
        EXPECT_TRUE(all_close("vp local sumexp", se, want_se, kSoftmaxRtol, kSoftmaxAtolRel));
      }
      EXPECT_TRUE(bitwise_equal("vp local target logit", tl, want_tl));  // a copy or 0
      for (int n = 0; n < N; n++) {
        global_sumexp[sz(n)] += want_se[sz(n)];
        global_tl[sz(n)] += want_tl[sz(n)];
      }
    }

    // phase c: losses and dlogits in place (training), losses only (evaluation)
    for (int r = 0; r < t; r++) {
      SCOPED_TRACE(std::string("rank ") + std::to_string(r));
      const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
      auto losses = random_vector(sz(N), seed++, 1e3, 2e3);
      auto dl = slices[sz(r)];
      ASSERT_TRUE(emulate_schedules(
          [&] {
            EMU_LAUNCH(cu::vp_loss_backward_kernel, cu::row_shape(N, Vl), losses.data(), dl.data(), global_max.data(),
                       global_sumexp.data(), global_tl.data(), targets.data(), dloss, v0, Vl, Vr, V);
          },
          {emu_output("losses", losses), emu_output("dlogits", dl)}));
      std::vector<float> want_losses(sz(N)), want_dl = slices[sz(r)];
      crossentropy_vp_loss_backward(cpu_ctx(), want_losses.data(), want_dl.data(), global_max.data(),
                                    global_sumexp.data(), global_tl.data(), targets.data(), dloss, v0, Vl, V, N);
      EXPECT_TRUE(all_close("vp losses", losses, want_losses, kDoubleRtol, kDoubleAtolRel));
      if (v0 >= V) {
        EXPECT_TRUE(bitwise_equal("vp dlogits (padding only)", dl, want_dl));  // all exactly 0
      } else {
        EXPECT_TRUE(all_close("vp dlogits", dl, want_dl, kSoftmaxRtol, kSoftmaxAtolRel));
      }
      EXPECT_EQ(nonzero_in_columns(dl, N, Vl, Vr, Vl), 0) << "padded dlogits must be exactly 0";
    }
    auto losses = random_vector(sz(N), seed++, 1e3, 2e3);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::vp_loss_kernel, cu::vp_loss_shape(N), losses.data(), global_max.data(), global_sumexp.data(),
                     global_tl.data(), N);
        },
        {emu_output("losses", losses)}));
    std::vector<float> want(sz(N));
    crossentropy_vp_loss(cpu_ctx(), want.data(), global_max.data(), global_sumexp.data(), global_tl.data(), N);
    EXPECT_TRUE(all_close("vp_loss", losses, want, kDoubleRtol, kDoubleAtolRel));
  }
}

// The emulated phases composed as the model composes them (the statistics reduced on the host from the emulated
// per-rank outputs) against the CPU backend's serial fused cross-entropy: the sum of exponentials split into t
// partial sums and the exp differ, ~1e-7 relative: kSoftmax*.
TEST(EmuGpt, CrossentropyVocabParallelComposedMatchesSerialCpu) {
  const int N = 23, V = 700, Vp = 1024, t = 4, Vl = Vp / t;
  const auto logits = cross_entropy_logits(N, V, Vp, 1201);
  const auto targets = cross_entropy_targets(N, V, 1202);
  const float dloss = 1.0f / N;
  auto slices = slices_of(logits, N, Vp, t);
  std::vector<std::vector<float>> losses(sz(t), std::vector<float>(sz(N)));
  std::vector<float> gmax(sz(N)), gse(sz(N)), gtl(sz(N)), eval_losses(sz(N));
  std::vector<EmuOutput> outputs = {emu_output("eval losses", eval_losses)};
  for (int r = 0; r < t; r++) {
    outputs.push_back(emu_output("dlogits rank " + std::to_string(r), slices[sz(r)]));
    outputs.push_back(emu_output("losses rank " + std::to_string(r), losses[sz(r)]));
  }
  ASSERT_TRUE(emulate_schedules(
      [&] {
        std::fill(gmax.begin(), gmax.end(), -INFINITY);
        std::fill(gse.begin(), gse.end(), 0.0f);
        std::fill(gtl.begin(), gtl.end(), 0.0f);
        std::vector<float> part(sz(N)), part_tl(sz(N));
        for (int r = 0; r < t; r++) {
          const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
          EMU_LAUNCH(cu::vp_local_max_kernel, cu::row_shape(N, Vr), part.data(), slices[sz(r)].data(), Vl, Vr);
          for (int n = 0; n < N; n++) gmax[sz(n)] = std::max(gmax[sz(n)], part[sz(n)]);  // allreduce(MAX)
        }
        for (int r = 0; r < t; r++) {
          const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
          EMU_LAUNCH(cu::vp_local_sumexp_kernel, cu::row_shape(N, Vr), part.data(), part_tl.data(),
                     slices[sz(r)].data(), gmax.data(), targets.data(), v0, Vl, Vr, V);
          for (int n = 0; n < N; n++) gse[sz(n)] += part[sz(n)], gtl[sz(n)] += part_tl[sz(n)];  // allreduce(SUM)
        }
        EMU_LAUNCH(cu::vp_loss_kernel, cu::vp_loss_shape(N), eval_losses.data(), gmax.data(), gse.data(), gtl.data(),
                   N);
        for (int r = 0; r < t; r++) {
          const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
          EMU_LAUNCH(cu::vp_loss_backward_kernel, cu::row_shape(N, Vl), losses[sz(r)].data(), slices[sz(r)].data(),
                     gmax.data(), gse.data(), gtl.data(), targets.data(), dloss, v0, Vl, Vr, V);
        }
      },
      outputs));
  std::vector<float> want_losses(sz(N)), want_dlogits = logits;
  crossentropy_forward_backward(cpu_ctx(), want_losses.data(), want_dlogits.data(), targets.data(), dloss, N, V, Vp);
  std::vector<float> dlogits(logits.size());
  for (int r = 0; r < t; r++) {
    EXPECT_TRUE(all_close("vp losses vs serial (rank " + std::to_string(r) + ")", losses[sz(r)], want_losses,
                          kSoftmaxRtol, kSoftmaxAtolRel));
    for (int n = 0; n < N; n++)
      std::memcpy(&dlogits[sz(int64_t{n} * Vp + int64_t{r} * Vl)], &slices[sz(r)][sz(int64_t{n} * Vl)],
                  sizeof(float) * sz(Vl));
  }
  EXPECT_TRUE(all_close("vp_loss vs serial", eval_losses, want_losses, kSoftmaxRtol, kSoftmaxAtolRel));
  EXPECT_TRUE(all_close("vp dlogits vs serial", dlogits, want_dlogits, kSoftmaxRtol, kSoftmaxAtolRel));
  EXPECT_EQ(nonzero_in_columns(dlogits, N, Vp, V, Vp), 0) << "padded dlogits must be exactly 0";
}

// A bad target: the target logit is NaN on every rank (so the reduced one is NaN whichever rank would hold it), the
// row's losses and all of its local dlogits are NaN, the evaluation loss is NaN; the other rows stay finite.
TEST(EmuGpt, CrossentropyVocabParallelBadTargetGivesNanRow) {
  const int N = 3, V = 100, Vp = 128, t = 2, Vl = Vp / t;
  const std::vector<int32_t> targets = {5, V, -1};  // row 1: a padding column of rank 1; row 2: negative
  const auto logits = cross_entropy_logits(N, V, Vp, 1301);
  auto slices = slices_of(logits, N, Vp, t);
  std::vector<float> gmax(sz(N), -INFINITY), gse(sz(N), 0.0f), gtl(sz(N), 0.0f);
  for (int r = 0; r < t; r++) {  // the valid statistics from the CPU (bad targets do not enter the max and sumexp)
    std::vector<float> m(sz(N)), se(sz(N)), tl(sz(N));
    crossentropy_vp_local_max(cpu_ctx(), m.data(), slices[sz(r)].data(), r * Vl, Vl, V, N);
    for (int n = 0; n < N; n++) gmax[sz(n)] = std::max(gmax[sz(n)], m[sz(n)]);
  }
  std::vector<std::vector<float>> se(sz(t), std::vector<float>(sz(N))), tl = se, losses = se;
  std::vector<float> eval_losses(sz(N));
  ASSERT_TRUE(emulate_schedules(
      [&] {
        std::fill(gse.begin(), gse.end(), 0.0f);
        std::fill(gtl.begin(), gtl.end(), 0.0f);
        for (int r = 0; r < t; r++) {
          const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
          EMU_LAUNCH(cu::vp_local_sumexp_kernel, cu::row_shape(N, Vr), se[sz(r)].data(), tl[sz(r)].data(),
                     slices[sz(r)].data(), gmax.data(), targets.data(), v0, Vl, Vr, V);
          for (int n = 0; n < N; n++) gse[sz(n)] += se[sz(r)][sz(n)], gtl[sz(n)] += tl[sz(r)][sz(n)];
        }
        EMU_LAUNCH(cu::vp_loss_kernel, cu::vp_loss_shape(N), eval_losses.data(), gmax.data(), gse.data(), gtl.data(),
                   N);
        for (int r = 0; r < t; r++) {
          const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
          EMU_LAUNCH(cu::vp_loss_backward_kernel, cu::row_shape(N, Vl), losses[sz(r)].data(), slices[sz(r)].data(),
                     gmax.data(), gse.data(), gtl.data(), targets.data(), 1.0f, v0, Vl, Vr, V);
        }
      },
      {emu_output("target logit 0", tl[0]), emu_output("target logit 1", tl[1]), emu_output("eval", eval_losses),
       emu_output("losses 0", losses[0]), emu_output("losses 1", losses[1]), emu_output("dlogits 0", slices[0]),
       emu_output("dlogits 1", slices[1])}));
  for (int r = 0; r < t; r++) {
    SCOPED_TRACE(std::string("rank ") + std::to_string(r));
    EXPECT_TRUE(std::isnan(tl[sz(r)][1]) && std::isnan(tl[sz(r)][2]));
    EXPECT_TRUE(std::isfinite(tl[sz(r)][0]));
    EXPECT_TRUE(std::isfinite(losses[sz(r)][0]));
    EXPECT_TRUE(std::isnan(losses[sz(r)][1]) && std::isnan(losses[sz(r)][2]));
    const auto nan_rows = rows_of(slices[sz(r)], {1, 2}, Vl), good_row = rows_of(slices[sz(r)], {0}, Vl);
    EXPECT_TRUE(std::all_of(nan_rows.begin(), nan_rows.end(), [](float v) { return std::isnan(v); }));
    EXPECT_TRUE(std::all_of(good_row.begin(), good_row.end(), [](float v) { return std::isfinite(v); }));
  }
  EXPECT_TRUE(std::isfinite(eval_losses[0]));
  EXPECT_TRUE(std::isnan(eval_losses[1]) && std::isnan(eval_losses[2]));
}

// vp_loss_kernel over several 256-thread blocks with a partial last one, and a single row.
TEST(EmuGpt, VpLossOverSeveralBlocks) {
  uint32_t seed = 1400;
  for (const int N : {1, 300, 513}) {
    SCOPED_TRACE(std::string("N") + std::to_string(N));
    const auto gmax = random_vector(sz(N), seed++, -5.0, 90.0);
    const auto gse = random_vector(sz(N), seed++, 1.0, 5e4);  // >= 1: the max column contributes exp(0)
    const auto gtl = random_vector(sz(N), seed++, -5.0, 90.0);
    auto losses = random_vector(sz(N), seed++, 1e3, 2e3);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::vp_loss_kernel, cu::vp_loss_shape(N), losses.data(), gmax.data(), gse.data(), gtl.data(), N);
        },
        {emu_output("losses", losses)}));
    std::vector<float> want(sz(N));
    crossentropy_vp_loss(cpu_ctx(), want.data(), gmax.data(), gse.data(), gtl.data(), N);
    EXPECT_TRUE(all_close("vp_loss", losses, want, kDoubleRtol, kDoubleAtolRel));
  }
}

// The launch geometry: the row blocks are whole warps between 32 and 512 threads, and every shape here is one the
// H100 takes.
TEST(EmuGpt, LaunchGeometry) {
  const std::pair<int64_t, int> rows[] = {{0, 32}, {1, 32}, {32, 32}, {33, 64}, {480, 480}, {481, 512}, {50257, 512}};
  for (const auto& [len, threads] : rows) EXPECT_EQ(cu::row_threads(len), threads) << "len " << len;
  const cu::LaunchShape r = cu::row_shape(37, 1000);
  EXPECT_EQ(r.grid.x, 37u);
  EXPECT_EQ(r.block.x, 512u);
  const cu::LaunchShape g = cu::bias_grad_launch(1000, 65, 1, kCudaReducePartialsBytes).shape;
  EXPECT_EQ(g.grid.x, 3u);
  EXPECT_EQ(g.grid.y, 8u);  // groups of kBiasMinRows = 128 rows
  EXPECT_EQ(g.block.x, 32u);
  EXPECT_EQ(g.block.y, 8u);
  // GPT-2's MLP bias at micro-batch 32 x 1024: 3072 bf16 columns in 12 blocks of 256; the buffer would hold 341
  // groups, kBiasMinRows makes them 256 of 128 rows: 3072 blocks
  const cu::BiasGradLaunch fc = cu::bias_grad_launch(32 * 1024, 3072, 8, kCudaReducePartialsBytes);
  EXPECT_EQ(fc.shape.grid.x, 12u);
  EXPECT_EQ(fc.rows.groups, 256);
  EXPECT_EQ(fc.rows.rows_per_group, 128);
  const cu::LaunchShape b = cu::bias_broadcast_shape(100000, 3 * 768, 8);
  EXPECT_EQ(b.grid.x, 3u);
  EXPECT_EQ(b.grid.y, static_cast<unsigned>(cu::kBiasBroadcastRows));
  EXPECT_EQ(cu::bias_broadcast_shape(5, 257, 1).grid.y, 5u);
  EXPECT_EQ(cu::vp_loss_shape(513).grid.x, 3u);
  for (const cu::LaunchShape& s :
       {r, g, fc.shape, b, cu::bias_broadcast_shape(int64_t{1} << 40, 65536, 1), cu::vp_loss_shape(1)})
    EXPECT_EQ(cu::launch_problem(s, cu::kH100Limits), "");
}

// ==============================================================================================================
// 16-bit storage (bf16, fp16), each check written once over the storage type A; the CPU reference is CpuStorage<A>
// (kernel_test_util.hpp: the CPU's bf16 ops, or for fp16 its fp32 ops on the widened inputs, outputs rounded once)
// ==============================================================================================================

// dbias of 16-bit dout: float sums in double, as for float storage.
template <typename A>
void check_bias_grad_matches_cpu_dbias() {
  using R = CpuStorage<A>;
  const int N = 131, C = 20, OC = 257;
  const auto dout = random_storage<A>(sz(int64_t{N} * OC), 400), inp = random_storage<A>(sz(int64_t{N} * C), 401);
  const auto weight = random_storage<A>(sz(int64_t{OC} * C), 402);
  const auto dbias0 = random_vector(sz(OC), 403);
  auto dbias = dbias0;
  ASSERT_TRUE(
      emulate_schedules([&] { emu_bias_grad(dbias.data(), emu_ptr(dout), N, OC); }, {emu_output("dbias", dbias)}));
  std::vector<float> want = dbias0, dweight(sz(int64_t{OC} * C), 0.0f);
  const auto rdout = cpu_in(dout), rinp = cpu_in(inp), rweight = cpu_in(weight);
  matmul_backward(cpu_ctx(), static_cast<R*>(nullptr), dweight.data(), want.data(), rdout.data(), rinp.data(),
                  rweight.data(), N, C, OC);
  EXPECT_TRUE(all_close("dbias", dbias, want, kDoubleRtol, kDoubleAtolRel));
}
TEST(EmuGpt, Bf16BiasGradMatchesCpuDbias) { check_bias_grad_matches_cpu_dbias<bf16>(); }
TEST(EmuGpt, Fp16BiasGradMatchesCpuDbias) { check_bias_grad_matches_cpu_dbias<fp16>(); }

// The bias seed of matmul_forward in every storage type: every row a copy of the bias, bit for bit, the garbage gone;
// in 16-byte packs where OC allows (16, 264) and element by element otherwise, or when out starts mid-pack (offset
// 1); with a grid of at most 3 blocks along the rows, so that blocks stride over the rest as the real grid does beyond
// kBiasBroadcastRows (the emulator runs every thread: the real limit would make this test slow).
template <typename A>
void check_bias_broadcast_is_exact() {
  uint32_t seed = 500;
  for (const LinearShape& s : {LinearShape{1, 1, 1}, LinearShape{7, 1, 3}, LinearShape{5, 1, 16},
                               LinearShape{37, 1, 29}, LinearShape{11, 1, 264}})
    for (const int off : {0, 1}) {
      SCOPED_TRACE(name(s) + " offset " + std::to_string(off));
      const int64_t N = s.N;
      const int OC = s.OC;
      const auto bias = random_storage<A>(sz(OC), seed++, -8.0, 8.0);
      auto out = random_storage<A>(sz(N * OC + off), seed++, 1e3, 2e3);
      A* dst = out.data() + off;
      const int P = cu::pack_width<EmuStorage<A>>(OC, {dst, bias.data()});
      EXPECT_EQ(P, OC % cu::kPack<EmuStorage<A>> == 0 && off == 0 ? cu::kPack<EmuStorage<A>> : 1);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            cu::with_pack<EmuStorage<A>>(P, [&](auto p) {
              EMU_LAUNCH((cu::bias_broadcast_kernel<EmuStorage<A>, decltype(p)::value>),
                         cu::bias_broadcast_shape(N, OC, P, 3), reinterpret_cast<EmuStorage<A>*>(dst), emu_ptr(bias), N,
                         OC);
            });
          },
          {emu_output("out", out)}));
      std::vector<A> want(out.begin(), out.begin() + off);
      for (int64_t n = 0; n < N; n++) want.insert(want.end(), bias.begin(), bias.end());
      if constexpr (std::is_same_v<A, float>) EXPECT_TRUE(bitwise_equal("bias broadcast", out, want));
      else
        EXPECT_TRUE(bitwise_equal("bias broadcast", to_float_vector(out), to_float_vector(want)));
    }
}
TEST(EmuGpt, BiasBroadcastIsExact) { check_bias_broadcast_is_exact<float>(); }
TEST(EmuGpt, Bf16BiasBroadcastIsExact) { check_bias_broadcast_is_exact<bf16>(); }
TEST(EmuGpt, Fp16BiasBroadcastIsExact) { check_bias_broadcast_is_exact<fp16>(); }

// cuda_gpt.cu's crossentropy_forward / crossentropy_forward_backward for a 16-bit storage S: the pack width from
// row_pack, then the instantiation of it (the backward holding the row in registers where it fits, as there).
template <bool kBackward, typename S>
void emu_16bit_crossentropy(float* losses, std::conditional_t<kBackward, S*, const S*> logits, const int32_t* targets,
                            float dloss, int N, int V, int Vp) {
  const int P = cu::row_pack<S>(Vp, {logits});
  cu::with_row_pack<S>(P, [&](auto pack) {
    constexpr int kP = decltype(pack)::value;
    if constexpr (kBackward) {
      if (cu::crossentropy_holds_row(Vp, sizeof(S), cu::kH100Limits.shared_optin_bytes)) {
        EMU_LAUNCH((cu::crossentropy_kernel<true, S, kP, true>), cu::crossentropy_held_shape(N, V, Vp, kP, sizeof(S)),
                   losses, logits, targets, dloss, V, Vp);
        return;
      }
    }
    EMU_LAUNCH((cu::crossentropy_kernel<kBackward, S, kP>), cu::row_shape(N, V, kP), losses, logits, targets, dloss, V,
               Vp);
  });
}

// The backward that holds the row in shared memory (one read of the logits) against the one that reads it again: the
// same losses and dlogits bit for bit, one value at a time and in packs (float P 1 and 4, bf16 P 8 over GPT-2's
// padded vocabulary: 98.3 KiB of shared memory, the opt-in), an invalid target's NaN row included.
template <typename A, int P>
void check_crossentropy_held_row_is_two_pass(int N, int V, int Vp) {
  using S = EmuStorage<A>;
  SCOPED_TRACE(std::string(sizeof(A) == 4 ? "float" : "16-bit") + " P" + std::to_string(P) + " V" + std::to_string(V) +
               " Vp" + std::to_string(Vp));
  ASSERT_TRUE(cu::crossentropy_holds_row(Vp, sizeof(S), cu::kH100Limits.shared_optin_bytes));
  const std::vector<float> values = cross_entropy_logits(N, V, Vp, static_cast<uint32_t>(1500 + V));
  std::vector<A> logits;
  if constexpr (std::is_same_v<A, float>) logits = values;
  else
    logits = to_storage_vector<A>(values);
  auto targets = cross_entropy_targets(N, V, static_cast<uint32_t>(1501 + V));
  targets[1] = V;  // a padding column: the row's loss and dlogits NaN in both
  auto held = logits, twice = logits;
  std::vector<float> held_losses(sz(N)), twice_losses(sz(N));
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH((cu::crossentropy_kernel<true, S, P, true>), cu::crossentropy_held_shape(N, V, Vp, P, sizeof(S)),
                   held_losses.data(), emu_ptr(held), targets.data(), 0.3f, V, Vp);
        EMU_LAUNCH((cu::crossentropy_kernel<true, S, P>), cu::row_shape(N, V, P), twice_losses.data(), emu_ptr(twice),
                   targets.data(), 0.3f, V, Vp);
      },
      {emu_output("held losses", held_losses), emu_output("held dlogits", held),
       emu_output("two-pass losses", twice_losses), emu_output("two-pass dlogits", twice)}));
  EXPECT_TRUE(bitwise_equal("losses", held_losses, twice_losses));
  EXPECT_TRUE(bitwise_equal("dlogits", held, twice));
  EXPECT_TRUE(std::isnan(held_losses[1]) && std::isfinite(held_losses[0]));
}
TEST(EmuGpt, CrossentropyHeldRowIsTheTwoPassBitwise) {
  check_crossentropy_held_row_is_two_pass<float, 1>(3, 3001, 3072);
  check_crossentropy_held_row_is_two_pass<float, 4>(3, 20000, 20000);
  check_crossentropy_held_row_is_two_pass<bf16, 8>(3, 50257, 50304);
}

// The logits of cross_entropy_logits lie within a few units (far inside fp16's range); the stored dlogits, dloss times
// a probability, reach fp16's subnormals for the smallest probabilities of the GPT-2 vocabulary, where one fp16
// rounding errs by at most 2^-25 absolute: under the atol floor (1e-6 of the largest |dlogit| >= 1e-7).
template <typename A>
void check_crossentropy_matches_cpu() {
  using S = EmuStorage<A>;
  // packs of 8 (Vp = 128, 1024, 50304) and element by element (V = Vp = 33); the GPT-2 vocabulary with padding
  const VocabShape shapes[] = {{5, 17, 128}, {4, 33, 33}, {37, 1000, 1024}, {2, 50257, 50304}};
  uint32_t seed = 410;
  for (const VocabShape& s : shapes) {
    SCOPED_TRACE(name(s));
    const int N = s.N, V = s.V, Vp = s.Vp;
    const float dloss = 1.0f / static_cast<float>(N);
    const auto logits = to_storage_vector<A>(cross_entropy_logits(N, V, Vp, seed++));
    const auto targets = cross_entropy_targets(N, V, seed++);
    auto losses = random_vector(sz(N), seed++, 1e3, 2e3), losses_fused = random_vector(sz(N), seed++, 1e3, 2e3);
    auto dlogits = logits;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_16bit_crossentropy<false, S>(losses.data(), emu_ptr(logits), targets.data(), 0.0f, N, V, Vp);
          emu_16bit_crossentropy<true, S>(losses_fused.data(), emu_ptr(dlogits), targets.data(), dloss, N, V, Vp);
        },
        {emu_output("losses", losses), emu_output("fused losses", losses_fused), emu_output("dlogits", dlogits)}));
    std::vector<float> want_losses(sz(N)), want_fused(sz(N));
    const auto rlogits = cpu_in(logits);
    auto want_dlogits = rlogits;
    crossentropy_forward(cpu_ctx(), want_losses.data(), rlogits.data(), targets.data(), N, V, Vp);
    crossentropy_forward_backward(cpu_ctx(), want_fused.data(), want_dlogits.data(), targets.data(), dloss, N, V, Vp);
    EXPECT_TRUE(all_close("losses", losses, want_losses, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_TRUE(all_close("fused losses", losses_fused, want_fused, kSoftmaxRtol, kSoftmaxAtolRel));
    EXPECT_TRUE(
        all_close("dlogits", dlogits, cpu_out<A>(want_dlogits), kSoftmaxRtol + kStorageUlp<A>, kSoftmaxAtolRel));
    int64_t padded_nonzero = 0;
    for (int n = 0; n < N; n++)
      for (int v = V; v < Vp; v++) padded_nonzero += dlogits[sz(int64_t{n} * Vp + v)].bits != 0;
    EXPECT_EQ(padded_nonzero, 0) << "padded dlogits must be exactly +0";
  }
}
TEST(EmuGpt, Bf16CrossentropyMatchesCpu) { check_crossentropy_matches_cpu<bf16>(); }
TEST(EmuGpt, Fp16CrossentropyMatchesCpu) { check_crossentropy_matches_cpu<fp16>(); }

// Logits near 80 (row 0 of every class shifted): the softmax's max subtraction keeps exp in range; 80 is exact in both
// 16-bit types' range.
template <typename A>
void check_crossentropy_smoothed_matches_cpu() {
  using S = EmuStorage<A>;
  const int N = 33, K = 100;
  const float dloss = 0.25f, eps = 0.1f;
  auto lf = random_vector(sz(int64_t{N} * K), 420, -4.0, 4.0);
  for (int k = 0; k < K; k++) lf[sz(k)] += 80.0f;
  const auto logits = to_storage_vector<A>(lf);
  const auto targets = cross_entropy_targets(N, K, 421);
  std::vector<float> losses(sz(N)), losses_fused(sz(N));
  auto dlogits = logits;
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH((cu::crossentropy_smoothed_kernel<false, S>), cu::row_shape(N, K), losses.data(), emu_ptr(logits),
                   targets.data(), 0.0f, eps, K);
        EMU_LAUNCH((cu::crossentropy_smoothed_kernel<true, S>), cu::row_shape(N, K), losses_fused.data(),
                   emu_ptr(dlogits), targets.data(), dloss, eps, K);
      },
      {emu_output("losses", losses), emu_output("fused losses", losses_fused), emu_output("dlogits", dlogits)}));
  std::vector<float> want_losses(sz(N)), want_fused(sz(N));
  const auto rlogits = cpu_in(logits);
  auto want_dlogits = rlogits;
  crossentropy_smoothed_forward(cpu_ctx(), want_losses.data(), rlogits.data(), targets.data(), eps, N, K);
  crossentropy_smoothed_forward_backward(cpu_ctx(), want_fused.data(), want_dlogits.data(), targets.data(), dloss, eps,
                                         N, K);
  EXPECT_TRUE(all_close("smoothed losses", losses, want_losses, kSoftmaxRtol, kSoftmaxAtolRel));
  EXPECT_TRUE(all_close("smoothed fused losses", losses_fused, want_fused, kSoftmaxRtol, kSoftmaxAtolRel));
  EXPECT_TRUE(
      all_close("smoothed dlogits", dlogits, cpu_out<A>(want_dlogits), kSoftmaxRtol + kStorageUlp<A>, kSoftmaxAtolRel));
}
TEST(EmuGpt, Bf16CrossentropySmoothedMatchesCpu) { check_crossentropy_smoothed_matches_cpu<bf16>(); }
TEST(EmuGpt, Fp16CrossentropySmoothedMatchesCpu) { check_crossentropy_smoothed_matches_cpu<fp16>(); }

// The three vocabulary-parallel phases on 16-bit slices over t = 4 ranks (rank 2 partly padding, rank 3 padding
// only), the statistics reduced on the host from the CPU backend's per-rank outputs, each phase against the CPU's.
template <typename A>
void check_crossentropy_vocab_parallel_matches_cpu() {
  using R = CpuStorage<A>;
  const int N = 7, V = 700, Vp = 1024, t = 4, Vl = Vp / t;
  const auto logits = to_storage_vector<A>(cross_entropy_logits(N, V, Vp, 430));
  const auto targets = cross_entropy_targets(N, V, 431);
  const float dloss = 1.0f / static_cast<float>(N);
  std::vector<std::vector<A>> slices(sz(t), std::vector<A>(sz(int64_t{N} * Vl)));
  for (int r = 0; r < t; r++)
    for (int n = 0; n < N; n++)
      std::memcpy(&slices[sz(r)][sz(int64_t{n} * Vl)], &logits[sz(int64_t{n} * Vp + int64_t{r} * Vl)],
                  sizeof(A) * sz(Vl));
  std::vector<std::vector<R>> rslices;
  for (const auto& slice : slices) rslices.push_back(cpu_in(slice));
  std::vector<float> gmax(sz(N), -INFINITY), gse(sz(N), 0.0f), gtl(sz(N), 0.0f);
  for (int r = 0; r < t; r++) {
    SCOPED_TRACE("max, rank " + std::to_string(r));
    const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
    std::vector<float> mx(sz(N), 5.0f), want(sz(N));
    ASSERT_TRUE(emulate_schedules(
        [&] { EMU_LAUNCH(cu::vp_local_max_kernel, cu::row_shape(N, Vr), mx.data(), emu_ptr(slices[sz(r)]), Vl, Vr); },
        {emu_output("max", mx)}));
    crossentropy_vp_local_max(cpu_ctx(), want.data(), rslices[sz(r)].data(), v0, Vl, V, N);
    EXPECT_TRUE(bitwise_equal("vp local max", mx, want));
    for (int n = 0; n < N; n++) gmax[sz(n)] = std::max(gmax[sz(n)], want[sz(n)]);
  }
  for (int r = 0; r < t; r++) {
    SCOPED_TRACE("sumexp, rank " + std::to_string(r));
    const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
    std::vector<float> se(sz(N), 5.0f), tl(sz(N), 5.0f), want_se(sz(N)), want_tl(sz(N));
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::vp_local_sumexp_kernel, cu::row_shape(N, Vr), se.data(), tl.data(), emu_ptr(slices[sz(r)]),
                     gmax.data(), targets.data(), v0, Vl, Vr, V);
        },
        {emu_output("sumexp", se), emu_output("target logit", tl)}));
    crossentropy_vp_local_sumexp(cpu_ctx(), want_se.data(), want_tl.data(), rslices[sz(r)].data(), gmax.data(),
                                 targets.data(), v0, Vl, V, N);
    if (v0 >= V) {
      EXPECT_TRUE(bitwise_equal("vp local sumexp (padding only)", se, want_se));
    } else {
      EXPECT_TRUE(all_close("vp local sumexp", se, want_se, kSoftmaxRtol, kSoftmaxAtolRel));
    }
    EXPECT_TRUE(bitwise_equal("vp local target logit", tl, want_tl));  // a widened 16-bit value or 0
    for (int n = 0; n < N; n++) gse[sz(n)] += want_se[sz(n)], gtl[sz(n)] += want_tl[sz(n)];
  }
  for (int r = 0; r < t; r++) {
    SCOPED_TRACE("loss and dlogits, rank " + std::to_string(r));
    const int v0 = r * Vl, Vr = real_columns(v0, Vl, V);
    std::vector<float> losses(sz(N), 5.0f), want_losses(sz(N));
    auto dl = slices[sz(r)];
    auto want_dl = rslices[sz(r)];
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::vp_loss_backward_kernel, cu::row_shape(N, Vl), losses.data(), emu_ptr(dl), gmax.data(),
                     gse.data(), gtl.data(), targets.data(), dloss, v0, Vl, Vr, V);
        },
        {emu_output("losses", losses), emu_output("dlogits", dl)}));
    crossentropy_vp_loss_backward(cpu_ctx(), want_losses.data(), want_dl.data(), gmax.data(), gse.data(), gtl.data(),
                                  targets.data(), dloss, v0, Vl, V, N);
    EXPECT_TRUE(all_close("vp losses", losses, want_losses, kDoubleRtol, kDoubleAtolRel));
    if (v0 >= V) {
      EXPECT_TRUE(bitwise_equal("vp dlogits (padding only)", dl, cpu_out<A>(want_dl)));
    } else {
      EXPECT_TRUE(all_close("vp dlogits", dl, cpu_out<A>(want_dl), kSoftmaxRtol + kStorageUlp<A>, kSoftmaxAtolRel));
    }
  }
}
TEST(EmuGpt, Bf16CrossentropyVocabParallelMatchesCpu) { check_crossentropy_vocab_parallel_matches_cpu<bf16>(); }
TEST(EmuGpt, Fp16CrossentropyVocabParallelMatchesCpu) { check_crossentropy_vocab_parallel_matches_cpu<fp16>(); }

// The plain cross-entropy's pack width: 16-byte packs of bf16 or fp16 where the padded row length is a multiple of 8
// and the logits 16-byte aligned; float rows always element by element; the block sized for the packs of a row.
TEST(EmuGpt, RowPacksOf16BitStorage) {
  alignas(16) static const __nv_bfloat16 buf[16] = {};
  EXPECT_EQ(cu::row_pack<__nv_bfloat16>(50304, {buf}), 8);
  EXPECT_EQ(cu::row_pack<__nv_bfloat16>(33, {buf}), 1);
  EXPECT_EQ(cu::row_pack<__nv_bfloat16>(64, {buf + 1}), 1);
  alignas(16) static const __half hbuf[16] = {};  // fp16 packs alike: 8 elements of 2 bytes
  EXPECT_EQ(cu::row_pack<__half>(50304, {hbuf}), 8);
  EXPECT_EQ(cu::row_pack<__half>(33, {hbuf}), 1);
  EXPECT_EQ(cu::row_pack<__half>(64, {hbuf + 1}), 1);
  alignas(16) static const float fbuf[4] = {};
  EXPECT_EQ(cu::row_pack<float>(1024, {fbuf}), 1);
  EXPECT_EQ(cu::row_shape(3, 50257, 8).block.x, 512u);  // 6283 packs: 512 threads, ~12 packs each
  EXPECT_EQ(cu::row_shape(3, 17, 8).block.x, 32u);
}

}  // namespace
}  // namespace hpct::kernels
