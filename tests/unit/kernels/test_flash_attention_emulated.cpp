// The CUDA backend's flash attention kernels (lib/kernels/cuda/cuda_flash_attention.cuh) executed on the host: the
// same source text, compiled as C++ against an emulation of the few CUDA built-ins it uses, one std::thread per CUDA
// thread. A machine without a GPU (this one, CI) thereby runs the kernels' indexing, tiling, causal masking, online
// softmax, recomputation and barrier placement, and checks them against the CPU backend with the tolerances of
// test_cuda_gpt.cpp. What it cannot check: anything of the hardware (the real warp scheduler and memory model,
// shared-memory limits, launch configuration errors, speed), which test_cuda_gpt.cpp covers on a GPU.
//
// The emulation: a block's 256 threads run concurrently; __syncthreads() is a std::barrier over them; a warp
// shuffle writes the lane's value into the warp's exchange slot, waits on the warp's barrier and reads the source
// lane's slot (two slots used alternately, so one barrier per shuffle suffices: a lane cannot overwrite a slot
// before every lane has passed the next barrier, i.e. has read it). Dynamic shared memory is one array, filled with
// NaN before every block, so a read of anything not loaded first poisons the result. The threads interleave
// arbitrarily (2 cores, 256 threads), so a missing barrier shows up as wrong or irreproducible results (checked
// below by running twice). Blocks run one after another. The launch configuration mirrors cuda_gpt.cu's
// attention_forward / attention_backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"

// ---- the emulated CUDA surface of cuda_flash_attention.cuh ---------------------------------------------------------
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__

struct EmuDim3 {
  unsigned x = 1, y = 1, z = 1;
};
thread_local EmuDim3 threadIdx, blockIdx;
EmuDim3 blockDim, gridDim;

namespace emu {
constexpr int kMaxWarps = 32;
std::barrier<>* g_block = nullptr;       // the running block's threads
std::barrier<>* g_warp[kMaxWarps] = {};  // each warp's 32 lanes
float g_slot[2][kMaxWarps][32];          // shuffle exchange, two slots used alternately
thread_local unsigned t_shuffles = 0;    // this lane's shuffles so far (all lanes of a warp agree)
}  // namespace emu

inline void __syncthreads() { emu::g_block->arrive_and_wait(); }
inline float __shfl_sync(unsigned /*mask: always the full warp here*/, float v, int src_lane) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  float(&slot)[emu::kMaxWarps][32] = emu::g_slot[emu::t_shuffles++ % 2];
  slot[warp][lane] = v;
  emu::g_warp[warp]->arrive_and_wait();
  return slot[warp][src_lane];
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return __shfl_sync(mask, v, static_cast<int>(threadIdx.x % 32) ^ lane_mask);
}
inline int min(int a, int b) { return a < b ? a : b; }

namespace hpct::kernels::cuda {
// cuda_common.cuh's warp reductions, the same butterfly
inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
namespace flash {
namespace {                               // the header's unnamed namespace, where the kernels declare smem
constexpr int64_t kSmemFloats = 1 << 15;  // 128 KiB: more than the largest kernel's need at HS = 128 (66 KB)
float smem[kSmemFloats];                  // `extern __shared__ float smem[]` of the kernels
}  // namespace
}  // namespace flash
}  // namespace hpct::kernels::cuda

#include "kernels/cuda/cuda_flash_attention.cuh"  // (its `#pragma unroll` is nvcc's: -Wno-unknown-pragmas here)

namespace hpct::kernels {
namespace {

namespace flash = cuda::flash;
using test::all_close;
using test::random_vector;

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// Runs body() as a kernel of grid x threads with `smem_floats` of dynamic shared memory: the same threads execute
// every block in turn (y outer, x inner), separated by barriers that also reset the shared memory to NaN.
void launch(EmuDim3 grid, int threads, int64_t smem_floats, const std::function<void()>& body) {
  ASSERT_LE(smem_floats, flash::kSmemFloats);
  ASSERT_EQ(threads % 32, 0);
  ASSERT_LE(threads / 32, emu::kMaxWarps);
  gridDim = grid;
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  std::barrier<> block(threads);
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  for (int w = 0; w < threads / 32; w++) {
    warps.push_back(std::make_unique<std::barrier<>>(32));
    emu::g_warp[w] = warps.back().get();
  }
  emu::g_block = &block;
  std::fill(flash::smem, flash::smem + flash::kSmemFloats, NAN);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++)
    pool.emplace_back([&, t] {
      threadIdx = {static_cast<unsigned>(t), 0, 0};
      emu::t_shuffles = 0;
      for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
          blockIdx = {bx, by, 0};
          body();
          block.arrive_and_wait();  // the block is done
          if (t == 0) std::fill(flash::smem, flash::smem + flash::kSmemFloats, NAN);
          block.arrive_and_wait();
        }
    });
  for (auto& th : pool) th.join();
}

// cuda_gpt.cu's attention_forward and attention_backward, launched on the emulation
EmuDim3 flash_grid(int B, int T, int NH) {
  return {static_cast<unsigned>(B * NH), static_cast<unsigned>((T + flash::kTile - 1) / flash::kTile), 1};
}
void emulated_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const bool launched = flash::with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    launch(flash_grid(B, T, NH), flash::kAttnThreads, flash::forward_smem_floats(HS),
           [&] { flash::forward_kernel<NS>(out, lse, qkv, T, C, NH, scale); });
  });
  EXPECT_TRUE(launched) << "head size " << HS;
}
void emulated_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* out,
                       const float* lse, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int64_t rows = int64_t{B} * NH * T;
  launch({static_cast<unsigned>((rows + flash::kWarps - 1) / flash::kWarps), 1, 1}, flash::kAttnThreads, 0,
         [&] { flash::rowdot_kernel(scratch, dout, out, rows, T, C, NH); });
  const bool launched = flash::with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    launch(flash_grid(B, T, NH), flash::kAttnThreads, flash::backward_dkv_smem_floats(HS),
           [&] { flash::backward_dkv_kernel<NS>(dqkv, dout, qkv, lse, scratch, T, C, NH, scale); });
    launch(flash_grid(B, T, NH), flash::kAttnThreads, flash::backward_dq_smem_floats(HS),
           [&] { flash::backward_dq_kernel<NS>(dqkv, dout, qkv, lse, scratch, T, C, NH, scale); });
  });
  EXPECT_TRUE(launched) << "head size " << HS;
}

::testing::AssertionResult bitwise_equal(const std::string& what, const std::vector<float>& got,
                                         const std::vector<float>& want) {
  if (got.size() != want.size() || std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0)
    return ::testing::AssertionFailure() << what << " differs";
  return ::testing::AssertionSuccess();
}

// test_cuda_gpt.cpp's tolerances (kFlash*, kLse*), where they are explained
constexpr double kFlashRtol = 1e-5, kFlashAtolRel = 1e-5;
constexpr double kLseRtol = 1e-6, kLseAtolRel = 1e-6;

struct Shape {
  int B, T, C, NH;
};
// every register-slot count (HS 8, 40, 96, 128: NS = 1 .. 4), T below one tile, across tile boundaries (33, 70) and
// a whole number of tiles (64), B and NH > 1; kept small (each shuffle is a barrier of 32 OS threads)
const Shape kShapes[] = {{2, 1, 16, 2}, {2, 5, 16, 2}, {1, 70, 80, 2}, {2, 33, 96, 1}, {1, 64, 256, 2}};

std::string name(const Shape& s) {
  return "B" + std::to_string(s.B) + "T" + std::to_string(s.T) + "C" + std::to_string(s.C) + "NH" +
         std::to_string(s.NH);
}

TEST(FlashAttentionEmulated, MatchesCpuBackend) {
  const ExecContext cpu{Device::CPU, nullptr};
  uint32_t seed = 700;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    const size_t n_qkv = sz(int64_t{B} * T * 3 * C), n_out = sz(int64_t{B} * T * C), n_lse = sz(int64_t{B} * NH * T),
                 n_att = sz(attention_stats_floats(cpu, B, T, C, NH));
    const auto qkv = random_vector(n_qkv, seed++, -2.0, 2.0);
    const auto dout = random_vector(n_out, seed++);
    std::vector<float> out(n_out), att(n_att), dqkv(n_qkv), datt(n_att);
    attention_forward(cpu, out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(cpu, dqkv.data(), datt.data(), dout.data(), qkv.data(), out.data(), att.data(), B, T, C, NH);

    // outputs pre-filled with garbage: every element must be written
    auto e_out = random_vector(n_out, seed++, 1e3, 2e3), e_lse = random_vector(n_lse, seed++, 1e3, 2e3);
    auto e_dqkv = random_vector(n_qkv, seed++, 1e3, 2e3), e_scratch = random_vector(n_lse, seed++, 1e3, 2e3);
    emulated_forward(e_out.data(), e_lse.data(), qkv.data(), B, T, C, NH);
    emulated_backward(e_dqkv.data(), e_scratch.data(), dout.data(), qkv.data(), e_out.data(), e_lse.data(), B, T, C,
                      NH);
    EXPECT_TRUE(all_close("out", e_out, out, kFlashRtol, kFlashAtolRel));
    EXPECT_TRUE(all_close("L", e_lse, test::attention_log_sum_exp_rows(qkv, B, T, C, NH), kLseRtol, kLseAtolRel));
    EXPECT_TRUE(all_close("dqkv", e_dqkv, dqkv, kFlashRtol, kFlashAtolRel));
  }
}

// Two emulated runs agree bit for bit: the threads interleave differently each time, so a race between a shared
// memory write and a read (a missing or misplaced barrier) would show here.
TEST(FlashAttentionEmulated, Reproducible) {
  const int B = 1, T = 45, C = 64, NH = 2;
  const auto qkv = random_vector(sz(int64_t{B} * T * 3 * C), 750, -2.0, 2.0);
  const auto dout = random_vector(sz(int64_t{B} * T * C), 751);
  std::vector<std::vector<float>> runs[2];
  for (auto& run : runs) {
    std::vector<float> out(dout.size()), lse(sz(int64_t{B} * NH * T)), dqkv(qkv.size()), scratch(lse.size());
    emulated_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    emulated_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    run = {out, lse, dqkv};
  }
  EXPECT_TRUE(bitwise_equal("out", runs[1][0], runs[0][0]));
  EXPECT_TRUE(bitwise_equal("L", runs[1][1], runs[0][1]));
  EXPECT_TRUE(bitwise_equal("dqkv", runs[1][2], runs[0][2]));
}

}  // namespace
}  // namespace hpct::kernels
