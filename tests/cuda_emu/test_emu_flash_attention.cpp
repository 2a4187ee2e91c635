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
// (online softmax tile by tile and recomputed probabilities vs the CPU's normalised probabilities and GEMMs), each a
// sum of at most T fp32 products with expf vs exp_simd, a few 1e-7 at these T; a wrong index, mask or rescale is an
// O(1) error.
//
// bf16 storage (the kernels' __nv_bfloat16 instantiations): the tiles are widened to float as they are loaded and
// every output rounded once when stored, the rest is the float kernels' arithmetic. So the bf16 kernels must equal the
// float kernels run on the widened inputs, with each output rounded once: bitwise, out, L and dqkv (the backward's
// float twin reads the bf16 forward's out, widened: the same D). Against the CPU backend's bf16 attention the
// difference is larger than an ulp: the CPU stores the probabilities as bf16 (its stats, kernels.hpp) and multiplies
// the rounded ones, the flash kernels keep them in float; each rounded probability is off by up to 2^-9 of itself, so
// an output (a convex combination of v, or of dout . v terms in the backward) moves by up to 2^-9 of the largest |v|
// from that alone, and by one more ulp from the final rounding on each side: rtol and atol_rel of 2 bf16 ulps
// (2 kBf16Ulp) there, against the tensor's scale as above. A wrong index, mask or rescale is an O(1) error.
//
// Shapes: every register-slot count NS = ceil(HS / 32) = 1 .. 4 (HS 8, 32, 40, 96, 128; at 128 the forward's shared
// memory passes the default 48 KiB, from 96 on the backward's), T below one tile (1, 5), across tile boundaries (33,
// 45, 70) and a whole number of tiles (64), B and NH > 1. Outputs are pre-filled with garbage: every element must be
// written.
#include "cuda_emu.hpp"  // first: the CUDA surface the kernel header compiles against
#include "kernels/cuda/cuda_flash_attention.cuh"
//
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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
    EXPECT_TRUE(all_close("L", e_lse, test::attention_log_sum_exp_rows(qkv, B, T, C, NH), kLseRtol, kLseAtolRel));
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

}  // namespace
}  // namespace hpct::kernels
