// The CUDA backend's flash attention kernels (lib/kernels/cuda/cuda_flash_attention.cuh) run on the host emulation
// (cuda_emu.hpp), launched as cuda_gpt.cu's attention_forward / attention_backward launch them (the same geometry
// functions: forward_shape, rowdot_shape, backward_dkv_shape, backward_dq_shape, and with_head_slots), against the CPU
// backend. Forward and backward run as one launch sequence under three schedules (in-order, shuffled, run-ahead:
// emulate_schedules) and must give the same bits every time: a race between a shared-memory write and a read (a
// missing or misplaced barrier) would differ. What it cannot check: the hardware itself (the real warp scheduler and memory model, speed),
// which test_cuda_gpt.cpp covers on a GPU.
//
// Tolerances: test_cuda_gpt.cpp's kFlash* (out and dqkv: 1e-5 relative, atol 1e-5 of the tensor's largest |value|)
// and kLse* (L against a double reference: 1e-6 / 1e-6), explained there: the same function computed another way
// (the CPU's flash attention has other tiles and sums with OpenBLAS GEMMs, so its sums run in other orders), each a
// sum of at most T fp32 products with expf vs exp_simd, a few 1e-7 at these T; a wrong index, mask or rescale is an
// O(1) error.
//
// bf16 storage (the kernels' __nv_bfloat16 instantiations, which cuda_gpt.cu launches for head sizes that are not a
// multiple of 16; the others run on the tensor cores: the tests at the end of this file): the tiles are widened to
// float as they are loaded and every output rounded once when stored, the rest is the float kernels' arithmetic. So the
// bf16 kernels must equal the float kernels run on the widened inputs, with each output rounded once: bitwise, out, L
// and dqkv (the backward's float twin reads the bf16 forward's out, widened: the same D). Against the CPU backend's
// bf16 attention the difference is larger than an ulp: the CPU rounds the unnormalised probabilities (and dS) to bf16
// before their products (cpu_attention.cpp), these kernels keep them in float; each rounded probability is off
// by up to 2^-9 of itself, so an output (a convex combination of v, or of dout . v terms in the backward) moves by up
// to 2^-9 of the largest |v| from that alone, and by one more ulp from the final rounding on each side: rtol and
// atol_rel of 2 bf16 ulps (2 kBf16Ulp) there, against the tensor's scale as above. A wrong index, mask or rescale is an
// O(1) error.
//
// Shapes: every register-slot count NS = ceil(HS / 32) = 1 .. 4 (HS 8, 32, 40, 96, 128; at 128 the forward's shared
// memory passes the default 48 KiB, from 96 on the backward's), T below one tile (1, 5), across tile boundaries (33,
// 45, 70) and a whole number of tiles (64), B and NH > 1. Outputs are pre-filled with garbage: every element must be
// written.
#include "cuda_emu.hpp"  // first: the CUDA surface the kernel header compiles against
#include "kernels/cuda/cuda_flash_attention.cuh"
#include "kernels/cuda/cuda_flash_attention_tc.cuh"
//
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu_test_util.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

namespace flash = cuda::flash;
using cuda::LaunchShape;
using test::all_close;
using test::bitwise_equal;
using test::cpu_ctx;
using test::emu_output;
using test::emu_ptr;
using test::emulate_schedules;
using test::kBf16Ulp;
using test::random_bf16;
using test::random_vector;
using test::sz;
using test::to_bf16_vector;
using test::to_float_vector;

// test_cuda_gpt.cpp's tolerances (kFlash*, kLse*), where they are explained
constexpr double kFlashRtol = 1e-5, kFlashAtolRel = 1e-5;
constexpr double kLseRtol = 1e-6, kLseAtolRel = 1e-6;

// cuda_gpt.cu's attention_forward and attention_backward (without the host checks), on the emulation
template <typename S>
void emulated_forward(S* out, float* lse, const S* qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const LaunchShape shape = flash::forward_shape(B, T, NH, HS);
  const bool launched = flash::with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    EMU_LAUNCH((flash::forward_kernel<S, NS>), shape, out, lse, qkv, T, C, NH, scale);
  });
  EXPECT_TRUE(launched) << "head size " << HS;
}
template <typename S>
void emulated_backward(S* dqkv, float* scratch, const S* dout, const S* qkv, const S* out, const float* lse, int B,
                       int T, int C, int NH) {
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t rows = int64_t{B} * NH * T;
  EMU_LAUNCH(flash::rowdot_kernel, flash::rowdot_shape(rows), scratch, dout, out, rows, T, C, NH);
  const LaunchShape dkv = flash::backward_dkv_shape(B, T, NH, HS), dq = flash::backward_dq_shape(B, T, NH, HS);
  const bool launched = flash::with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    EMU_LAUNCH((flash::backward_dkv_kernel<S, NS>), dkv, dqkv, dout, qkv, lse, scratch, T, C, NH, scale);
    EMU_LAUNCH((flash::backward_dq_kernel<S, NS>), dq, dqkv, dout, qkv, lse, scratch, T, C, NH, scale);
  });
  EXPECT_TRUE(launched) << "head size " << HS;
}

struct Shape {
  int B, T, C, NH;
};
// HS 8, 8, 40, 96, 128, 32: NS = 1, 1, 2, 3, 4, 1 (see the header); kept small (every CUDA thread is a fiber)
const Shape kShapes[] = {{2, 1, 16, 2}, {2, 5, 16, 2}, {1, 70, 80, 2}, {2, 33, 96, 1}, {1, 64, 256, 2}, {1, 45, 64, 2}};

std::string name(const Shape& s) {
  return std::string("B") + std::to_string(s.B) + "T" + std::to_string(s.T) + "C" + std::to_string(s.C) + "NH" +
         std::to_string(s.NH);
}

TEST(EmuFlashAttention, MatchesCpuBackendAndIsRaceFree) {
  uint32_t seed = 700;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C), n_lse = sz(int64_t{B} * NH * T),
                 n_att = sz(attention_stats_bytes(cpu_ctx(), B, T, C, NH) / int64_t{sizeof(float)});
    const auto qkv = random_vector(n_qkv, seed++, -2.0, 2.0);  // a spread of scores: non-uniform softmax
    const auto dout = random_vector(n_out, seed++);
    std::vector<float> out(n_out), att(n_att), dqkv(n_qkv), datt(n_att);
    attention_forward(cpu_ctx(), out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(cpu_ctx(), dqkv.data(), datt.data(), dout.data(), qkv.data(), out.data(), att.data(), B, T, C,
                       NH);

    // outputs pre-filled with garbage: every element must be written (the scratch's contents must not matter)
    auto e_out = random_vector(n_out, seed++, 1e3, 2e3), e_lse = random_vector(n_lse, seed++, 1e3, 2e3);
    auto e_dqkv = random_vector(n_qkv, seed++, 1e3, 2e3), e_scratch = random_vector(n_lse, seed++, 1e3, 2e3);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emulated_forward(e_out.data(), e_lse.data(), qkv.data(), B, T, C, NH);
          emulated_backward(e_dqkv.data(), e_scratch.data(), dout.data(), qkv.data(), e_out.data(), e_lse.data(), B, T,
                            C, NH);
        },
        {emu_output("out", e_out), emu_output("L", e_lse), emu_output("dqkv", e_dqkv),
         emu_output("scratch", e_scratch)}));
    EXPECT_TRUE(all_close("out", e_out, out, kFlashRtol, kFlashAtolRel));
    const auto lse_want = test::attention_log_sum_exp_rows(qkv, B, T, C, NH);
    EXPECT_TRUE(all_close("L", e_lse, lse_want, kLseRtol, kLseAtolRel));
    EXPECT_TRUE(all_close("CPU L", att, lse_want, kLseRtol, kLseAtolRel));  // the CPU's stats are its L
    EXPECT_TRUE(all_close("dqkv", e_dqkv, dqkv, kFlashRtol, kFlashAtolRel));
    // dq, dk, dv separately (a swapped pair would pass the combined check only by accident; this names the part),
    // judged against the scale of the whole dqkv as above: at T = 1 dk is exactly 0 in exact arithmetic (one
    // probability, 1, has no gradient) and the CPU gives 0, while the kernels give dS = P (dP - D) with dP and D the
    // same dot product summed in two orders (sequential over d, and rowdot's warp tree): a few 1e-8, the rounding
    // noise of |dout . v| ~ 1, which all_close's floor of atol_rel * max|dk| = 0 would reject.
    const double atol = kFlashAtolRel * test::max_abs(dqkv.data(), dqkv.size());
    for (int part = 0; part < 3; part++) {
      const char* what[] = {"dq", "dk", "dv"};
      int bad = 0;
      for (int64_t r = 0; r < int64_t{B} * T; r++)
        for (int c = 0; c < C; c++) {
          const double g = e_dqkv[sz(r * 3 * C + part * C + c)], w = dqkv[sz(r * 3 * C + part * C + c)];
          if (!(std::fabs(g - w) <= atol + kFlashRtol * std::fabs(w)) && bad++ < 3)
            ADD_FAILURE() << what[part] << " row " << r << " column " << c << ": got " << g << ", want " << w;
        }
      EXPECT_EQ(bad, 0) << what[part] << ": elements beyond the tolerance";
    }
  }
}

// The geometry the launches use: the grid covers the heads and the tiles, the dynamic shared memory is the kernels'
// stated need, and the H100 takes every shape up to the largest head size (the emulation checks each launch too).
TEST(EmuFlashAttention, LaunchGeometry) {
  for (const int HS : {1, 32, 64, 96, 128}) {
    SCOPED_TRACE("HS " + std::to_string(HS));
    const LaunchShape f = flash::forward_shape(3, 65, 4, HS);
    EXPECT_EQ(f.grid.x, 12u);
    EXPECT_EQ(f.grid.y, 3u);
    EXPECT_EQ(f.block.count(), flash::kAttnThreads);
    EXPECT_EQ(f.shared_bytes, flash::forward_smem_floats(HS) * 4);
    EXPECT_EQ(flash::backward_dkv_shape(3, 65, 4, HS).shared_bytes, flash::backward_dkv_smem_floats(HS) * 4);
    EXPECT_EQ(flash::backward_dq_shape(3, 65, 4, HS).shared_bytes, flash::backward_dq_smem_floats(HS) * 4);
    for (const LaunchShape& s :
         {f, flash::backward_dkv_shape(3, 65, 4, HS), flash::backward_dq_shape(3, 65, 4, HS), flash::rowdot_shape(781)})
      EXPECT_EQ(cuda::launch_problem(s, cuda::kH100Limits), "");
    // the shapes above 48 KiB opt in (HPCT_LAUNCH raises the kernel's limit), those below do not need to
    for (const LaunchShape& s : {f, flash::backward_dkv_shape(3, 65, 4, HS), flash::backward_dq_shape(3, 65, 4, HS)})
      EXPECT_EQ(s.shared_opt_in, s.shared_bytes > cuda::kSharedDefaultBytes);
  }
  EXPECT_TRUE(flash::backward_dkv_shape(1, 1, 1, 96).shared_opt_in);
  EXPECT_TRUE(flash::forward_shape(1, 1, 1, 128).shared_opt_in);
  EXPECT_FALSE(flash::forward_shape(1, 1, 1, 96).shared_opt_in);
  EXPECT_EQ(flash::rowdot_shape(781).grid.x, 98u);  // ceil(781 / 8 warps)
  EXPECT_EQ(flash::rowdot_shape(8).grid.x, 1u);
}

// ---- bf16 storage ------------------------------------------------------------------------------------------------
// HS 8, 40 and 128 (NS 1, 2, 4), T within a tile and across tiles; kept smaller than the float shapes (every CUDA
// thread is a fiber, and the float twin runs too).
const Shape kBf16Shapes[] = {{1, 5, 16, 2}, {1, 33, 80, 2}, {1, 33, 128, 1}};

TEST(EmuFlashAttention, Bf16IsTheFloatKernelRoundedOnce) {
  uint32_t seed = 800;
  for (const Shape& s : kBf16Shapes) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C), n_lse = sz(int64_t{B} * NH * T);
    const auto qkv = random_bf16(n_qkv, seed++, -2.0, 2.0), dout = random_bf16(n_out, seed++);
    std::vector<bf16> out(n_out, bf16{0x4000}), dqkv(n_qkv, bf16{0x4000});
    auto lse = random_vector(n_lse, seed++, 1e3, 2e3), scratch = random_vector(n_lse, seed++, 1e3, 2e3);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emulated_forward(emu_ptr(out), lse.data(), emu_ptr(qkv), B, T, C, NH);
          emulated_backward(emu_ptr(dqkv), scratch.data(), emu_ptr(dout), emu_ptr(qkv), emu_ptr(out), lse.data(), B, T,
                            C, NH);
        },
        {emu_output("out", out), emu_output("L", lse), emu_output("dqkv", dqkv), emu_output("scratch", scratch)}));
    // the float kernels on the same values
    const auto qkv32 = to_float_vector(qkv), dout32 = to_float_vector(dout), out_bf16_32 = to_float_vector(out);
    std::vector<float> out32(n_out), lse32(n_lse), dqkv32(n_qkv), scratch32(n_lse);
    emulated_forward(out32.data(), lse32.data(), qkv32.data(), B, T, C, NH);
    emulated_backward(dqkv32.data(), scratch32.data(), dout32.data(), qkv32.data(), out_bf16_32.data(), lse32.data(), B,
                      T, C, NH);
    EXPECT_TRUE(bitwise_equal("out", out, to_bf16_vector(out32)));
    EXPECT_TRUE(bitwise_equal("L", lse, lse32));
    EXPECT_TRUE(bitwise_equal("dqkv", dqkv, to_bf16_vector(dqkv32)));
  }
}

TEST(EmuFlashAttention, Bf16MatchesCpuBackend) {
  const Shape s{1, 37, 64, 2};  // HS 32, two tiles
  const int B = s.B, T = s.T, C = s.C, NH = s.NH;
  const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C), n_lse = sz(int64_t{B} * NH * T);
  const auto qkv = random_bf16(n_qkv, 900, -2.0, 2.0), dout = random_bf16(n_out, 901);
  std::vector<bf16> out(n_out), dqkv(n_qkv);
  std::vector<float> lse(n_lse), scratch(n_lse);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        emulated_forward(emu_ptr(out), lse.data(), emu_ptr(qkv), B, T, C, NH);
        emulated_backward(emu_ptr(dqkv), scratch.data(), emu_ptr(dout), emu_ptr(qkv), emu_ptr(out), lse.data(), B, T, C,
                          NH);
      },
      {emu_output("out", out), emu_output("L", lse), emu_output("dqkv", dqkv), emu_output("scratch", scratch)}));
  const int64_t stats_bytes = attention_stats_bytes(cpu_ctx(), B, T, C, NH, DType::BF16);
  const int64_t scratch_bytes = attention_scratch_bytes(cpu_ctx(), B, T, C, NH, DType::BF16);
  std::vector<unsigned char> att(sz(stats_bytes)), datt(sz(scratch_bytes));
  std::vector<bf16> want_out(n_out), want_dqkv(n_qkv);
  attention_forward(cpu_ctx(), want_out.data(), att.data(), qkv.data(), B, T, C, NH);
  attention_backward(cpu_ctx(), want_dqkv.data(), datt.data(), dout.data(), qkv.data(), want_out.data(), att.data(), B,
                     T, C, NH);
  EXPECT_TRUE(all_close("out", out, want_out, 2 * kBf16Ulp, 2 * kBf16Ulp));
  EXPECT_TRUE(
      all_close("L", lse, test::attention_log_sum_exp_rows(to_float_vector(qkv), B, T, C, NH), kLseRtol, kLseAtolRel));
  EXPECT_TRUE(all_close("dqkv", dqkv, want_dqkv, 2 * kBf16Ulp, 2 * kBf16Ulp));
}

// ---- tensor cores: 16-bit storage (cuda_flash_attention_tc.cuh) ---------------------------------------------------
// The mma.sync kernels for S = __nv_bfloat16 and S = __half, launched as cuda_gpt.cu launches them for 16-bit storage
// and a head size that is a multiple of 16 (tc::forward_shape, backward_dkv_shape, backward_dq_shape,
// with_tc_head_size, and rowdot_kernel for D), under the three schedules, outputs pre-filled with garbage. The
// emulator executes mma and ldmatrix as warp collectives with the PTX ISA's fragment layouts (cuda_emu.hpp, checked by
// test_cuda_emu's CudaEmuTensorCores tests). Checked two ways:
//   (1) against a host twin of the same tiling (tc_twin_forward / tc_twin_backward below): tiles of 64, key and query
//       groups of 16 in the same ascending order, the same online softmax in the base-2 domain with the same explicit
//       fmaf, P and dS rounded to S the same way, each mma step modelled as c plus the exact sum of its 16 products
//       rounded once (the emulator's model). What differs: the forward's row sum l (the kernel sums per lane and then
//       across the quad, the twin in key order: a few fp32 ulps of l), and nothing else (the backward twin reads the
//       kernels' L and D, the inputs the backward kernels read). So out and dqkv may differ by the final rounding of
//       two floats a few fp32 ulps apart: one ulp of S (rtol kUlp, 2^-7 bf16 / 2^-10 f16), L by a few fp32 ulps
//       (kLse*). On a GPU the tensor cores' own accumulation order adds a few fp32 ulps per product tile, which the
//       same one S ulp covers: what test_cuda_gpt.cpp's bf16 tests rely on there. A wrong fragment, mask, tile bound or
//       rescale is an O(1) error.
//   (2) against the CPU backend: bf16 against its bf16 attention (which rounds the unnormalised p and dS as the
//       kernels do, in other tiles and summation orders), f16 against the float CPU backend
//       on the same fp16-rounded inputs; tolerances with the reasoning at kTcCpu* below.
// Shapes: HS 16, 32, 64, 80, 128 (80: the odd number of 16-column steps and the dK/dV kernel's 32-row query tiles; 128:
// the largest, above 48 KiB of shared memory for the backward); T 1 and 5 (inside one tile), 64 (a whole tile), 70
// and 130 (past one and two tile boundaries); B and NH > 1.
namespace tc = cuda::flash_tc;

template <typename S>
void emulated_forward_tc(S* out, float* lse, const S* qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const LaunchShape shape = tc::forward_shape(B, T, NH, HS);
  const bool launched = tc::with_tc_head_size(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    EMU_LAUNCH((tc::forward_tc_kernel<S, kHS>), shape, out, lse, qkv, T, C, NH, scale);
  });
  EXPECT_TRUE(launched) << "head size " << HS;
}
template <typename S>
void emulated_backward_tc(S* dqkv, float* scratch, const S* dout, const S* qkv, const S* out, const float* lse, int B,
                          int T, int C, int NH) {
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t rows = int64_t{B} * NH * T;
  EMU_LAUNCH(flash::rowdot_kernel, flash::rowdot_shape(rows), scratch, dout, out, rows, T, C, NH);
  const LaunchShape dkv = tc::backward_dkv_shape(B, T, NH, HS), dq = tc::backward_dq_shape(B, T, NH, HS);
  const bool launched = tc::with_tc_head_size(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    EMU_LAUNCH((tc::backward_dkv_tc_kernel<S, kHS>), dkv, dqkv, dout, qkv, lse, scratch, T, C, NH, scale);
    EMU_LAUNCH((tc::backward_dq_tc_kernel<S, kHS>), dq, dqkv, dout, qkv, lse, scratch, T, C, NH, scale);
  });
  EXPECT_TRUE(launched) << "head size " << HS;
}

// One mma step as the emulator models it: c plus the exact sum of the n products (double: exact at these magnitudes),
// rounded to float once.
template <typename F>
float mma_step(float c, int n, F&& product) {
  double s = c;
  for (int i = 0; i < n; i++) s += product(i);
  return static_cast<float>(s);
}

// Rows of one head of qkv (B,T,3C) or of a (B,T,C) tensor, widened; rows >= T read as zeros (the kernels' padding).
struct HeadView {
  const std::vector<float>* v;
  int64_t ld, col;  // row stride, first column of the head
  int b, T;
  float at(int t, int d) const { return t < T ? (*v)[sz((int64_t{b} * T + t) * ld + col + d)] : 0.0f; }
};

// A dot product over the head dimension in k-steps of 16, as Q K^T, K Q^T, dO V^T and V dO^T run on the mma.
inline float mma_dot(const HeadView& x, int tx, const HeadView& y, int ty, int HS) {
  float s = 0.0f;
  for (int ks = 0; ks < HS; ks += 16)
    s = mma_step(s, 16, [&](int i) { return static_cast<double>(x.at(tx, ks + i)) * y.at(ty, ks + i); });
  return s;
}

template <typename S>
float round_to(float x) {
  return static_cast<float>(S(x));
}

// The forward kernel's arithmetic, row by row: out (B,T,C) and L (B,NH,T) from qkv (values of S, widened).
template <typename S>
void tc_twin_forward(std::vector<float>& out, std::vector<float>& lse, const std::vector<float>& qkv, int B, int T,
                     int C, int NH) {
  const int HS = C / NH, kTile = tc::kTcTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS)), scale_log2 = scale * tc::kLog2e;
  std::vector<float> o(sz(HS)), x(sz(kTile)), p(sz(kTile));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const HeadView q{&qkv, 3 * int64_t{C}, int64_t{h} * HS, b, T}, k{&qkv, 3 * int64_t{C}, C + int64_t{h} * HS, b, T},
          v{&qkv, 3 * int64_t{C}, 2 * int64_t{C} + int64_t{h} * HS, b, T};
      for (int t = 0; t < T; t++) {
        const int q0 = t / kTile * kTile, q_last = std::min(q0 + kTile, T) - 1;
        float m = -INFINITY, l = 0.0f;
        std::fill(o.begin(), o.end(), 0.0f);
        for (int k0 = 0; k0 <= q_last; k0 += kTile) {
          const bool diagonal = k0 + kTile > q0;
          float mx = -INFINITY;
          for (int jj = 0; jj < kTile; jj++) {
            const int j = k0 + jj;
            x[sz(jj)] = diagonal && j > t ? -INFINITY : mma_dot(q, t, k, j, HS) * scale_log2;
            mx = std::max(mx, x[sz(jj)]);
          }
          const float m_new = std::max(m, mx), corr = exp2f(m - m_new);
          m = m_new;
          float rs = 0.0f;
          for (int jj = 0; jj < kTile; jj++) rs += p[sz(jj)] = exp2f(x[sz(jj)] - m);
          l = fmaf(l, corr, rs);
          for (int d = 0; d < HS; d++) o[sz(d)] *= corr;
          for (int kk = 0; kk < kTile; kk += 16)
            for (int d = 0; d < HS; d++)
              o[sz(d)] = mma_step(o[sz(d)], 16, [&](int i) {
                return static_cast<double>(round_to<S>(p[sz(kk + i)])) * v.at(k0 + kk + i, d);
              });
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < HS; d++)
          out[sz((int64_t{b} * T + t) * C + int64_t{h} * HS + d)] = round_to<S>(o[sz(d)] * inv);
        lse[sz((int64_t{b} * NH + h) * T + t)] = fmaf(m, tc::kLn2, logf(l));
      }
    }
}

// The backward kernels' arithmetic, given the L and D they read: dqkv (B,T,3C).
template <typename S>
void tc_twin_backward(std::vector<float>& dqkv, const std::vector<float>& dout, const std::vector<float>& qkv,
                      const std::vector<float>& lse, const std::vector<float>& dsum, int B, int T, int C, int NH) {
  const int HS = C / NH, kTile = tc::kTcTile, QT = tc::bwd_query_tile(HS);
  const int64_t C3 = 3 * int64_t{C};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS)), scale_log2 = scale * tc::kLog2e;
  std::vector<float> acc1(sz(HS)), acc2(sz(HS)), p(16), ds(16);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const HeadView q{&qkv, C3, int64_t{h} * HS, b, T}, k{&qkv, C3, C + int64_t{h} * HS, b, T},
          v{&qkv, C3, 2 * int64_t{C} + int64_t{h} * HS, b, T}, go{&dout, C, int64_t{h} * HS, b, T};
      const float* L = lse.data() + (int64_t{b} * NH + h) * T;
      const float* D = dsum.data() + (int64_t{b} * NH + h) * T;
      // P and dS of (query t, key j): (0, 0) where masked; a and b are the two operand orders (Q K^T or K Q^T).
      auto p_ds = [&](int t, int j, float& pv, float& dsv) {
        if (!(t < T && j <= t)) {
          pv = dsv = 0.0f;
          return;
        }
        pv = exp2f(fmaf(mma_dot(q, t, k, j, HS), scale_log2, -(L[t] * tc::kLog2e)));
        dsv = pv * (mma_dot(go, t, v, j, HS) - D[t]);
      };
      // dk, dv: per key, over the query tiles from the key tile's start, in groups of 16 queries
      for (int j = 0; j < T; j++) {
        const int k0 = j / kTile * kTile;
        std::fill(acc1.begin(), acc1.end(), 0.0f);  // dk
        std::fill(acc2.begin(), acc2.end(), 0.0f);  // dv
        for (int q0 = k0; q0 < T; q0 += QT)
          for (int g0 = q0; g0 < q0 + QT; g0 += 16) {
            for (int i = 0; i < 16; i++) p_ds(g0 + i, j, p[sz(i)], ds[sz(i)]);
            for (int d = 0; d < HS; d++) {
              acc2[sz(d)] = mma_step(acc2[sz(d)], 16, [&](int i) {
                return static_cast<double>(round_to<S>(p[sz(i)])) * go.at(g0 + i, d);
              });
              acc1[sz(d)] = mma_step(acc1[sz(d)], 16, [&](int i) {
                return static_cast<double>(round_to<S>(ds[sz(i)])) * q.at(g0 + i, d);
              });
            }
          }
        float* row = dqkv.data() + (int64_t{b} * T + j) * C3 + int64_t{h} * HS;
        for (int d = 0; d < HS; d++) {
          row[C + d] = round_to<S>(acc1[sz(d)] * scale);
          row[2 * C + d] = round_to<S>(acc2[sz(d)]);
        }
      }
      // dq: per query, over the key tiles up to its tile's last row, in groups of 16 keys
      for (int t = 0; t < T; t++) {
        const int q_last = std::min(t / kTile * kTile + kTile, T) - 1;
        std::fill(acc1.begin(), acc1.end(), 0.0f);
        for (int k0 = 0; k0 <= q_last; k0 += kTile)
          for (int g0 = k0; g0 < k0 + kTile; g0 += 16) {
            for (int i = 0; i < 16; i++) p_ds(t, g0 + i, p[sz(i)], ds[sz(i)]);
            for (int d = 0; d < HS; d++)
              acc1[sz(d)] = mma_step(acc1[sz(d)], 16, [&](int i) {
                return static_cast<double>(round_to<S>(ds[sz(i)])) * k.at(g0 + i, d);
              });
          }
        float* row = dqkv.data() + (int64_t{b} * T + t) * C3 + int64_t{h} * HS;
        for (int d = 0; d < HS; d++) row[d] = round_to<S>(acc1[sz(d)] * scale);
      }
    }
}

template <typename S>
std::vector<S> random_storage(size_t n, uint32_t seed, double lo, double hi) {
  const auto v = random_vector(n, seed, lo, hi);
  std::vector<S> r(n);
  for (size_t i = 0; i < n; i++) r[i] = S(v[i]);
  return r;
}
template <typename S>
std::vector<float> widen(const std::vector<S>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = static_cast<float>(v[i]);
  return r;
}
template <typename S>
std::vector<bf16> as_bf16(const std::vector<S>& v) {  // the same 16 bits as the host type
  std::vector<bf16> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = bf16{v[i].bits};
  return r;
}

// One ulp of S relative to a value (at most 2^-7 for bf16's 8-bit significand, 2^-10 for f16's 11 bits).
template <typename S>
constexpr double kUlp = std::is_same_v<S, __half> ? 1.0 / 1024.0 : 1.0 / 128.0;

// Against the CPU backend. bf16: the CPU and the kernels both round the unnormalised p (out = P V, dV = P^T dO) and dS
// once each, but from scores summed in other orders, so a p can round the other way: up to 2^-9 of each term on each
// side, so an
// output (a combination of v or dout terms weighted by P) moves by up to 2 * 2^-9 of the largest term it sums, plus
// half an ulp from each side's final rounding; in the backward dS = P (dP - D) carries either side's rounded P into dq
// and dk with the same relative size. Two ulps (2^-6) of the value and of the tensor's largest |value| bound that, as
// in the CUDA-core kernels' bf16 test above (observed: at most one ulp of the tensor's scale). f16: the reference is
// fp32 throughout on the same fp16 inputs; the kernels round p and dS to f16 (2^-11 of each term) and each output once
// (2^-11): two f16 ulps (2^-9) likewise (observed: under half of it). A wrong index, mask or rescale is O(1).
template <typename S>
constexpr double kTcCpuTol = 2 * kUlp<S>;

struct TcCase {
  int B, T, C, NH;
};
// HS 16, 32, 64, 64, 80, 128 and T 1, 5, 70, 130, 33, 64 (see above); kept small: every CUDA thread is a fiber. f16
// runs a subset (the kernels are the same code for both types but for the mma's input type and the roundings).
const TcCase kTcCases[] = {{2, 1, 32, 2},   {2, 5, 64, 2},  {1, 70, 128, 2},
                           {1, 130, 64, 1}, {1, 33, 80, 1}, {1, 64, 256, 2}};
const TcCase kTcCasesF16[] = {{2, 5, 64, 2}, {1, 70, 128, 2}, {1, 33, 80, 1}, {1, 64, 128, 1}};

template <typename S, size_t N>
void check_tensor_core_attention(const TcCase (&cases)[N], uint32_t seed) {
  for (const TcCase& s : cases) {
    SCOPED_TRACE(name(Shape{s.B, s.T, s.C, s.NH}));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C), n_lse = sz(int64_t{B} * NH * T);
    const auto qkv = random_storage<S>(n_qkv, seed++, -2.0, 2.0), dout = random_storage<S>(n_out, seed++, -1.0, 1.0);
    auto out = random_storage<S>(n_out, seed++, 1e3, 2e3), dqkv = random_storage<S>(n_qkv, seed++, 1e3, 2e3);
    auto lse = random_vector(n_lse, seed++, 1e3, 2e3), scratch = random_vector(n_lse, seed++, 1e3, 2e3);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emulated_forward_tc(out.data(), lse.data(), qkv.data(), B, T, C, NH);
          emulated_backward_tc(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                               NH);
        },
        {emu_output("out", out), emu_output("L", lse), emu_output("dqkv", dqkv), emu_output("scratch", scratch)}));

    // (1) the host twin of the tiling
    const auto qkv32 = widen(qkv), dout32 = widen(dout);
    std::vector<float> twin_out(n_out), twin_lse(n_lse), twin_dqkv(n_qkv, NAN);
    tc_twin_forward<S>(twin_out, twin_lse, qkv32, B, T, C, NH);
    tc_twin_backward<S>(twin_dqkv, dout32, qkv32, lse, scratch, B, T, C, NH);
    EXPECT_TRUE(all_close("out vs twin", out, twin_out, kUlp<S>, 1e-6));
    EXPECT_TRUE(all_close("L vs twin", lse, twin_lse, kLseRtol, kLseAtolRel));
    EXPECT_TRUE(all_close("dqkv vs twin", dqkv, twin_dqkv, kUlp<S>, 1e-6));
    // L against the log-sum-exp in double of the same 16-bit inputs (test_cuda_gpt.cpp's kLse*)
    EXPECT_TRUE(
        all_close("L vs double", lse, test::attention_log_sum_exp_rows(qkv32, B, T, C, NH), kLseRtol, kLseAtolRel));

    // (2) the CPU backend
    std::vector<float> want_out(n_out), want_dqkv(n_qkv);
    if constexpr (std::is_same_v<S, __nv_bfloat16>) {
      const auto qkv_h = as_bf16(qkv), dout_h = as_bf16(dout);
      std::vector<unsigned char> att(sz(attention_stats_bytes(cpu_ctx(), B, T, C, NH, DType::BF16))),
          datt(sz(attention_scratch_bytes(cpu_ctx(), B, T, C, NH, DType::BF16)));
      std::vector<bf16> o(n_out), g(n_qkv);
      attention_forward(cpu_ctx(), o.data(), att.data(), qkv_h.data(), B, T, C, NH);
      attention_backward(cpu_ctx(), g.data(), datt.data(), dout_h.data(), qkv_h.data(), o.data(), att.data(), B, T, C,
                         NH);
      want_out = to_float_vector(o);
      want_dqkv = to_float_vector(g);
    } else {
      const size_t n_att = sz(attention_stats_bytes(cpu_ctx(), B, T, C, NH) / int64_t{sizeof(float)});
      std::vector<float> att(n_att), datt(n_att);
      attention_forward(cpu_ctx(), want_out.data(), att.data(), qkv32.data(), B, T, C, NH);
      attention_backward(cpu_ctx(), want_dqkv.data(), datt.data(), dout32.data(), qkv32.data(), want_out.data(),
                         att.data(), B, T, C, NH);
    }
    EXPECT_TRUE(all_close("out vs CPU", out, want_out, kTcCpuTol<S>, kTcCpuTol<S>));
    EXPECT_TRUE(all_close("dqkv vs CPU", dqkv, want_dqkv, kTcCpuTol<S>, kTcCpuTol<S>));
  }
}

TEST(EmuFlashAttentionTensorCores, Bf16MatchesTwinAndCpuAndIsRaceFree) {
  check_tensor_core_attention<__nv_bfloat16>(kTcCases, 1000);
}
TEST(EmuFlashAttentionTensorCores, F16MatchesTwinAndCpuAndIsRaceFree) {
  check_tensor_core_attention<__half>(kTcCasesF16, 1100);
}

// The geometry: 64-row tiles, 4 warps, the stated shared memory, within the H100's limits for every head size; opt-in
// above 48 KiB; and the dispatch predicate's head sizes.
TEST(EmuFlashAttentionTensorCores, LaunchGeometry) {
  for (int HS = 16; HS <= tc::kTcMaxHS; HS += 16) {
    SCOPED_TRACE("HS " + std::to_string(HS));
    EXPECT_TRUE(tc::tc_head_size(HS));
    EXPECT_TRUE(tc::with_tc_head_size(HS, [](auto) {}));
    const LaunchShape f = tc::forward_shape(3, 129, 4, HS), dkv = tc::backward_dkv_shape(3, 129, 4, HS),
                      dq = tc::backward_dq_shape(3, 129, 4, HS);
    for (const LaunchShape& s : {f, dkv, dq}) {
      EXPECT_EQ(s.grid.x, 12u);
      EXPECT_EQ(s.grid.y, 3u);  // ceil(129 / 64)
      EXPECT_EQ(s.block.count(), tc::kTcThreads);
      EXPECT_EQ(cuda::launch_problem(s, cuda::kH100Limits), "");
      EXPECT_EQ(s.shared_opt_in, s.shared_bytes > cuda::kSharedDefaultBytes);
    }
    EXPECT_EQ(f.shared_bytes, 3 * 64 * (HS + 8) * 2);
    EXPECT_EQ(dq.shared_bytes, 4 * 64 * (HS + 8) * 2);
    const int QT = HS <= 64 ? 64 : 32;
    EXPECT_EQ(dkv.shared_bytes, (2 * 64 + 2 * QT) * (HS + 8) * 2 + 2 * QT * 4);
  }
  for (const int HS : {0, 8, 24, 40, 100, 144}) {
    EXPECT_FALSE(tc::tc_head_size(HS)) << HS;
    EXPECT_FALSE(tc::with_tc_head_size(HS, [](auto) {})) << HS;
  }
  EXPECT_FALSE(tc::forward_shape(1, 1, 1, 64).shared_opt_in);
  EXPECT_TRUE(tc::backward_dq_shape(1, 1, 1, 128).shared_opt_in);
  alignas(16) unsigned char buf[32];
  EXPECT_TRUE(tc::tc_pointers_aligned({buf, nullptr, buf + 16}));
  EXPECT_FALSE(tc::tc_pointers_aligned({buf, buf + 2}));
}

}  // namespace
}  // namespace hpct::kernels
