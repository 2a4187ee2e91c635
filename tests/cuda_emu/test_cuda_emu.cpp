// The CUDA host emulation itself (cuda_emu.hpp): barriers, warp intrinsics, the detection of what a GPU would
// refuse or leave undefined, the schedules, the poisoning of shared memory, the launch limits, and the numerics of
// the 16-bit conversions and the fast-math intrinsics against oracles independent of the emulation's own code.
#include "cuda_emu.hpp"  // first: the CUDA surface

#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device_common.cuh"
#include "kernels/cuda/cuda_mma.cuh"

namespace {

using hpct::kernels::cuda::LaunchShape;

LaunchShape shape(unsigned grid, unsigned block, int64_t smem = 0) { return {{grid, 1, 1}, {block, 1, 1}, smem}; }

// ---- kernels written for these tests ---------------------------------------------------------------------------------
// out[i] = in[(i + 1) % n] through shared memory, with or without the barrier between the write and the read
template <bool kBarrier>
__global__ void rotate_kernel(float* out, const float* in) {
  HPCT_SHARED(float, tile, [256]);
  const int n = blockDim.x, i = threadIdx.x;
  tile[i] = in[blockIdx.x * n + i];
  if (kBarrier) __syncthreads();
  out[blockIdx.x * n + i] = tile[(i + 1) % n];
}

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void early_exit_kernel(float* out) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void shuffle_exited_lane_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0);
}

__global__ void block_sum_kernel(double* out, const float* in) {
  HPCT_SHARED(double, shared, [32]);
  const double s = hpct::kernels::cuda::block_sum(static_cast<double>(in[blockIdx.x * blockDim.x + threadIdx.x]),
                                                  shared);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

__global__ void warp_ops_kernel(int* out) {
  const int lane = threadIdx.x % 32, t = threadIdx.x;
  out[8 * t + 0] = __shfl_sync(0xffffffffu, t * 10, 7);
  out[8 * t + 1] = __shfl_xor_sync(0xffffffffu, t, 1);
  out[8 * t + 2] = __shfl_down_sync(0xffffffffu, t, 3);
  out[8 * t + 3] = __shfl_up_sync(0xffffffffu, t, 2);
  out[8 * t + 4] = __shfl_sync(0xffffffffu, t, 1, 8);  // width 8: lane 1 of each 8-lane segment
  out[8 * t + 5] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[8 * t + 6] = __shfl_xor_sync(0xffffffffu, t, 4, 4);  // beyond a 4-wide segment: own value
  const double d = __shfl_sync(0xffffffffu, 0.5 + t, 31);
  out[8 * t + 7] = static_cast<int>(d * 2);
}

__global__ void read_shared_unwritten_kernel(float* out) {
  HPCT_DYNAMIC_SHARED(float, smem);
  if (threadIdx.x == 0) smem[1] = 2.0f;
  __syncthreads();
  out[blockIdx.x * 2 + threadIdx.x] = smem[threadIdx.x];  // smem[0] is never written
}

__global__ void record_block_kernel(int* order, int* next) {
  if (threadIdx.x == 0) order[atomicAdd(next, 1)] = static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y);
}

__global__ void endless_kernel(const volatile int* flag) {
  while (*flag == 0) {
  }
}

// A kernel that never yields cannot be preempted; the watchdog ends the process, naming it, instead of a hang.
TEST(CudaEmuDeathTest, AnEndlessKernelIsStoppedByTheWatchdog) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  ASSERT_EQ(setenv("HPCT_EMU_WATCHDOG_S", "1", 1), 0);
  const int flag = 0;
  EXPECT_EXIT(EMU_LAUNCH(endless_kernel, shape(1, 2), &flag), ::testing::ExitedWithCode(124),
              "endless_kernel has run for 1 s");
  ASSERT_EQ(unsetenv("HPCT_EMU_WATCHDOG_S"), 0);
}

// Two block sums in a row through one shared array; without the barrier at the start of the second, a warp that runs
// ahead overwrites its slot while a lagging warp has not read the first sum's value there yet.
template <bool kProtected>
__global__ void two_block_sums_kernel(double* out, const float* in) {
  HPCT_SHARED(double, shared, [32]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  double result[2];
  for (int k = 0; k < 2; k++) {
    double v = hpct::kernels::cuda::warp_sum(static_cast<double>(in[(2 * blockIdx.x + k) * blockDim.x + threadIdx.x]));
    if (kProtected) __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    result[k] = hpct::kernels::cuda::warp_sum(lane < nwarps ? shared[lane] : 0.0);
  }
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = result[0];
    out[2 * blockIdx.x + 1] = result[1];
  }
}

TEST(CudaEmu, RunAheadCatchesASlotOverwrittenBeforeItIsRead) {
  const unsigned blocks = 4, threads = 512;
  std::vector<float> in(2 * blocks * threads);
  for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<float>(i % 13 + (i / threads) * 100);
  std::vector<double> want(2 * blocks);
  for (size_t i = 0; i < in.size(); i++) want[i / threads] += in[i];
  const auto run = [&](cuda_emu::ScheduleKind kind, bool protect) {
    std::vector<double> out(2 * blocks);
    cuda_emu::ScopedSchedule s(cuda_emu::Schedule{kind, 0xa4eadULL});
    if (protect) EMU_LAUNCH(two_block_sums_kernel<true>, shape(blocks, threads), out.data(), in.data());
    else
      EMU_LAUNCH(two_block_sums_kernel<false>, shape(blocks, threads), out.data(), in.data());
    return out;
  };
  for (auto kind :
       {cuda_emu::ScheduleKind::InOrder, cuda_emu::ScheduleKind::Shuffled, cuda_emu::ScheduleKind::RunAhead})
    EXPECT_EQ(run(kind, true), want);
  // rounds resume every thread once before any runs again: the race stays hidden; running ahead shows it
  EXPECT_EQ(run(cuda_emu::ScheduleKind::InOrder, false), want);
  EXPECT_EQ(run(cuda_emu::ScheduleKind::Shuffled, false), want);
  EXPECT_NE(run(cuda_emu::ScheduleKind::RunAhead, false), want);
}

// Out-of-bounds accesses of a kernel, found by AddressSanitizer (the emulated tests are built with it: HPCT_EMU_ASAN)
__global__ void read_past_global_kernel(float* out, const float* in, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) out[0] = in[i];  // `<=`: one element too far
}
__global__ void read_past_static_shared_kernel(float* out) {
  HPCT_SHARED(float, tile, [32]);
  tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x + 1];  // the last thread reads tile[32]
}
__global__ void read_past_dynamic_shared_kernel(float* out) {
  HPCT_DYNAMIC_SHARED(float, smem);
  smem[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = smem[threadIdx.x + 1];  // the launch has blockDim.x floats of dynamic shared memory
}

TEST(CudaEmuDeathTest, OutOfBoundsAccessesAreReported) {
#if defined(__SANITIZE_ADDRESS__)
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  std::vector<float> in(64), out(64);
  EXPECT_DEATH(EMU_LAUNCH(read_past_global_kernel, shape(2, 64), out.data(), in.data(), 64), "heap-buffer-overflow");
  EXPECT_DEATH(EMU_LAUNCH(read_past_static_shared_kernel, shape(1, 32), out.data()), "global-buffer-overflow");
  EXPECT_DEATH(EMU_LAUNCH(read_past_dynamic_shared_kernel, shape(1, 32, 32 * 4), out.data()), "heap-buffer-overflow");
  // within bounds: no report
  EMU_LAUNCH(read_past_global_kernel, shape(1, 32), out.data(), in.data(), 31);
#else
  GTEST_SKIP() << "built without AddressSanitizer (HPCT_EMU_ASAN=OFF)";
#endif
}

TEST(CudaEmu, BarrierSeparatesWritesFromReads) {
  std::vector<float> in(512), out(512);
  for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<float>(i);
  for (uint64_t seed : {0, 1, 2}) {
    cuda_emu::ScopedSchedule s(seed);
    EMU_LAUNCH(rotate_kernel<true>, shape(2, 256), out.data(), in.data());
    for (int b = 0; b < 2; b++)
      for (int i = 0; i < 256; i++) ASSERT_EQ(out[b * 256 + i], in[b * 256 + (i + 1) % 256]) << "seed " << seed;
  }
}

// The race the schedules exist to expose: without the barrier, thread order reads NaN poison (the neighbour has not
// written yet) and a shuffled order reads a mixture.
TEST(CudaEmu, MissingBarrierShowsUnderTheSchedules) {
  std::vector<float> in(256, 1.0f), a(256), b(256);
  {
    cuda_emu::ScopedSchedule s(0);
    EMU_LAUNCH(rotate_kernel<false>, shape(1, 256), a.data(), in.data());
  }
  {
    cuda_emu::ScopedSchedule s(7);
    EMU_LAUNCH(rotate_kernel<false>, shape(1, 256), b.data(), in.data());
  }
  const auto nans = [](const std::vector<float>& v) {
    return std::count_if(v.begin(), v.end(), [](float x) { return std::isnan(x); });
  };
  EXPECT_EQ(nans(a), 255);  // thread order: every thread but the last reads a slot its neighbour has not filled
  EXPECT_GT(nans(b), 0);
  EXPECT_LT(nans(b), 255);
}

TEST(CudaEmu, DivergentBarrierIsAnErrorNotAHang) {
  std::vector<float> out(64);
  try {
    EMU_LAUNCH(divergent_barrier_kernel, shape(1, 64), out.data());
    FAIL() << "no error";
  } catch (const cuda_emu::EmulationError& e) {
    EXPECT_NE(std::string(e.what()).find("divergent"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("divergent_barrier_kernel"), std::string::npos) << e.what();
  }
  EXPECT_THROW(EMU_LAUNCH(early_exit_kernel, shape(1, 64), out.data()), cuda_emu::EmulationError);
  EXPECT_THROW(EMU_LAUNCH(shuffle_exited_lane_kernel, shape(1, 32), out.data()), cuda_emu::EmulationError);
}

TEST(CudaEmu, WarpIntrinsicsFollowCuda) {
  const int n = 64;
  std::vector<int> out(8 * n);
  cuda_emu::ScopedSchedule s(3);
  EMU_LAUNCH(warp_ops_kernel, shape(1, n), out.data());
  for (int t = 0; t < n; t++) {
    const int lane = t % 32, base = t - lane;
    SCOPED_TRACE(t);
    EXPECT_EQ(out[8 * t + 0], (base + 7) * 10);
    EXPECT_EQ(out[8 * t + 1], t ^ 1);
    EXPECT_EQ(out[8 * t + 2], lane + 3 < 32 ? t + 3 : t);
    EXPECT_EQ(out[8 * t + 3], lane >= 2 ? t - 2 : t);
    EXPECT_EQ(out[8 * t + 4], base + (lane & ~7) + 1);
    EXPECT_EQ(static_cast<unsigned>(out[8 * t + 5]), 0x49249249u);  // lanes 0, 3, 6, ..., 30
    EXPECT_EQ(out[8 * t + 6], t);
    EXPECT_EQ(out[8 * t + 7], 2 * (base + 31) + 1);
  }
}

TEST(CudaEmu, BlockSumIsExactAndScheduleIndependent) {
  std::vector<float> in(3 * 1024);
  for (size_t i = 0; i < in.size(); i++) in[i] = static_cast<float>(i % 97);
  std::vector<double> a(3), b(3);
  {
    cuda_emu::ScopedSchedule s(0);
    EMU_LAUNCH(block_sum_kernel, shape(3, 1024), a.data(), in.data());
  }
  {
    cuda_emu::ScopedSchedule s(11);
    EMU_LAUNCH(block_sum_kernel, shape(3, 1024), b.data(), in.data());
  }
  for (int blk = 0; blk < 3; blk++) {
    double want = 0;
    for (int i = 0; i < 1024; i++) want += in[blk * 1024 + i];
    EXPECT_EQ(a[blk], want);
    EXPECT_EQ(b[blk], want);
  }
}

TEST(CudaEmu, SharedMemoryIsPoisonedBeforeEachBlock) {
  std::vector<float> out(2 * 2);
  EMU_LAUNCH(read_shared_unwritten_kernel, shape(2, 2, 8), out.data());
  for (int b = 0; b < 2; b++) {
    EXPECT_TRUE(std::isnan(out[2 * b])) << "block " << b;
    EXPECT_EQ(out[2 * b + 1], 2.0f);
  }
}

TEST(CudaEmu, BlocksRunOnceEachInShuffledOrder) {
  const unsigned gx = 7, gy = 5;
  std::vector<int> order(gx * gy);
  int next = 0;
  {
    cuda_emu::ScopedSchedule s(0);
    EMU_LAUNCH(record_block_kernel, (LaunchShape{{gx, gy, 1}, {32, 1, 1}, 0}), order.data(), &next);
    for (int i = 0; i < static_cast<int>(order.size()); i++) EXPECT_EQ(order[i], i);
  }
  next = 0;
  cuda_emu::ScopedSchedule s(5);
  EMU_LAUNCH(record_block_kernel, (LaunchShape{{gx, gy, 1}, {32, 1, 1}, 0}), order.data(), &next);
  EXPECT_EQ(next, static_cast<int>(gx * gy));
  EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), gx * gy);
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
}

TEST(CudaEmu, LaunchesAnH100WouldRefuseFail) {
  std::vector<float> out(4096);
  const auto refused = [&](const LaunchShape& s) {
    try {
      EMU_LAUNCH(divergent_barrier_kernel, s, out.data());
    } catch (const cuda_emu::EmulationError& e) {
      return std::string(e.what()).find("H100 would refuse") != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused(shape(1, 1025)));
  EXPECT_TRUE(refused({{1, 65536, 1}, {32, 1, 1}, 0}));
  EXPECT_TRUE(refused({{1, 1, 1}, {1, 1, 65}, 0}));
  EXPECT_TRUE(refused(shape(1, 32, 49 * 1024)));  // above 48 KiB without the opt-in
  EXPECT_FALSE(refused({{1, 1, 1}, {32, 1, 1}, 49 * 1024, true}));
  EXPECT_TRUE(refused({{1, 1, 1}, {32, 1, 1}, 227 * 1024 + 4, true}));
  EXPECT_TRUE(refused(shape(0, 32)));
  // and the helper directly, with a kernel's registers and static shared memory
  using hpct::kernels::cuda::kH100Limits;
  using hpct::kernels::cuda::launch_problem;
  EXPECT_EQ(launch_problem(shape(1, 1024), kH100Limits, 0, 64), "");
  EXPECT_NE(launch_problem(shape(1, 1024), kH100Limits, 0, 65), "");
  EXPECT_NE(launch_problem(shape(1, 256, 40 * 1024), kH100Limits, 9 * 1024, 32), "");  // 49 KiB without the opt-in
  EXPECT_EQ(launch_problem({{1, 1, 1}, {256, 1, 1}, 40 * 1024, true}, kH100Limits, 9 * 1024, 32), "");
}

// In a CUDA build, ptxas' table of the real kernels is there and read (lib/kernels/CMakeLists.txt).
TEST(CudaEmu, KernelResourceTable) {
#ifdef HPCT_EMU_REQUIRE_RESOURCES
  const char* path = HPCT_EMU_DEFAULT_RESOURCES_PATH;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string name;
  int regs = 0;
  int64_t smem = 0;
  std::set<std::string> names;
  while (in >> name >> regs >> smem) {
    EXPECT_GT(regs, 0) << name;
    EXPECT_LE(regs, 255) << name;
    names.insert(name);
  }
  for (const char* k :
       {"reduce_kernel", "forward_kernel", "bn_stats_partial_kernel", "crossentropy_kernel", "forward_tc_kernel"})
    EXPECT_TRUE(names.count(k)) << k << " missing from " << path;
#else
  GTEST_SKIP() << "a CPU-only build has no ptxas resource table";
#endif
}

// ---- 16-bit conversions ----------------------------------------------------------------------------------------------
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// An independent oracle: round-to-nearest-even on the bit pattern (correct for every finite float, subnormals
// included, and overflowing to infinity).
uint16_t bf16_oracle(float f) {
  if (std::isnan(f)) return 0x7fff;
  const uint32_t u = bits(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

std::vector<float> probe_floats() {
  std::vector<float> v;
  std::mt19937 rng(1234);
  for (int i = 0; i < 1 << 21; i++) v.push_back(from_bits(rng()));
  for (uint32_t e = 0; e < 256; e++)  // around every exponent: the ties and their neighbours
    for (uint32_t m : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0x17fffu, 0x18000u, 0x18001u, 0x1000u, 0x1001u, 0xfffu,
                       0x7fffffu, 0x7fe000u, 0x7ff000u, 0x3ff000u})
      for (uint32_t s : {0u, 0x80000000u}) v.push_back(from_bits(s | (e << 23) | (m & 0x7fffffu)));
  return v;
}

TEST(CudaEmu16Bit, Bf16RoundsToNearestEvenLikeTheHardware) {
  for (float f : probe_floats()) {
    if (std::isnan(f)) {
      EXPECT_EQ(__float2bfloat16(f).bits, 0x7fff);
      continue;
    }
    ASSERT_EQ(__float2bfloat16(f).bits, bf16_oracle(f)) << std::hexfloat << f;
  }
  for (uint32_t b = 0; b < 65536; b++) {  // every bf16 converts to float and back unchanged
    const float f = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(b)));
    if (std::isnan(f)) continue;
    ASSERT_EQ(__float2bfloat16(f).bits, b);
  }
  EXPECT_EQ(__float2bfloat16_rz(1.0f + 0x1.fep-8f).bits, 0x3f80);
}

TEST(CudaEmu16Bit, HalfRoundsLikeF16C) {
  for (float f : probe_floats()) {
    const uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);  // the CPU's IEEE conversion
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(__half2float(__float2half(f))));
      continue;
    }
    ASSERT_EQ(__float2half(f).bits, hw) << std::hexfloat << f;
  }
  for (uint32_t b = 0; b < 65536; b++) {
    const float f = __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
    const float hw = _cvtsh_ss(static_cast<unsigned short>(b));
    if (std::isnan(hw)) {
      ASSERT_TRUE(std::isnan(f)) << b;  // NaN payloads aside
      continue;
    }
    ASSERT_EQ(bits(f), bits(hw)) << b;
    ASSERT_EQ(__float2half(f).bits, b);
  }
}

TEST(CudaEmu16Bit, ArithmeticRoundsTheExactResultOnce) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  for (int i = 0; i < 100000; i++) {
    const __nv_bfloat16 a = u(rng), b = u(rng);
    // a bf16 product is exact in float (16 significant bits); a sum of two is exact in double
    ASSERT_EQ(__hmul(a, b).bits, bf16_oracle(float(a) * float(b)));
    ASSERT_EQ((a + b).bits, __nv_bfloat16(static_cast<double>(float(a)) + float(b)).bits);
    const __half c = u(rng), d = u(rng);
    ASSERT_EQ(__hmul(c, d).bits, _cvtss_sh(float(c) * float(d), _MM_FROUND_TO_NEAREST_INT));
  }
}

// ---- fast-math intrinsics within the CUDA C++ programming guide's bounds (its table of intrinsic functions) ---------
double ulp_error(float got, double exact) {
  const float r = static_cast<float>(exact);
  const double ulp = std::nextafter(std::fabs(r), INFINITY) - std::fabs(r);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

TEST(CudaEmuFastMath, WithinTheGuidesBounds) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ux(-87.0f, 88.0f), u10(-37.0f, 38.0f), upos(1e-30f, 1e30f), unear(0.5f, 2.0f),
      upi(-3.14159265f, 3.14159265f), uy(1e-30f, 1e30f);
  for (int i = 0; i < 200000; i++) {
    const float x = ux(rng);
    ASSERT_LE(ulp_error(__expf(x), std::exp(static_cast<double>(x))), 2 + std::floor(std::fabs(1.16 * x))) << x;
    const float x10 = u10(rng);
    ASSERT_LE(ulp_error(__exp10f(x10), std::pow(10.0, static_cast<double>(x10))), 2 + std::floor(std::fabs(2.95 * x10)))
        << x10;
    const float p = upos(rng), q = unear(rng);
    ASSERT_LE(ulp_error(__logf(p), std::log(static_cast<double>(p))), 3.0) << p;
    ASSERT_LE(std::fabs(__logf(q) - std::log(static_cast<double>(q))), std::pow(2.0, -21.41)) << q;
    ASSERT_LE(ulp_error(__log2f(p), std::log2(static_cast<double>(p))), 2.0) << p;
    ASSERT_LE(std::fabs(__log2f(q) - std::log2(static_cast<double>(q))), std::pow(2.0, -22)) << q;
    const float y = uy(rng) * (i % 2 ? 1.0f : -1.0f), n = ux(rng);
    ASSERT_LE(ulp_error(__fdividef(n, y), static_cast<double>(n) / y), 2.0) << n << " / " << y;
    const float a = upi(rng);
    ASSERT_LE(std::fabs(__sinf(a) - std::sin(static_cast<double>(a))), std::pow(2.0, -21.41)) << a;
    ASSERT_LE(std::fabs(__cosf(a) - std::cos(static_cast<double>(a))), std::pow(2.0, -21.19)) << a;
    ASSERT_LE(ulp_error(rsqrtf(p), 1.0 / std::sqrt(static_cast<double>(p))), 2.0) << p;
    ASSERT_EQ(__frcp_rn(y), 1.0f / y);
  }
  // the guide's caveat, reproduced: a denominator beyond 2^126 gives 0
  EXPECT_EQ(__fdividef(1.0f, 1e38f), 0.0f);
  // __fmul_rn is never contracted into an FMA: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds (a tie, to even) to
  // 1 + 2^-11 before the subtraction; an FMA would keep the 2^-24
  const float a = 1.0f + 0x1p-12f;
  EXPECT_EQ(__fmul_rn(a, a) - (1.0f + 0x1p-11f), 0.0f);
}

// ---- tensor cores: mma.sync m16n8k16 and ldmatrix -----------------------------------------------------------------
// The emulator's model (cuda_emu.hpp) against the PTX ISA's fragment layouts, restated here independently of
// cuda_emu.cpp: the fragments are built element by element from the ISA's formulas, and the results compared with a
// plain matrix product (exact products, one rounding of the exact sum: what the model promises) and, with unit
// matrices, position by position, so that a misplaced fragment element names itself.
namespace mma = hpct::kernels::cuda::mma;

template <typename S>
uint32_t pair_bits(S lo, S hi) {
  return static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
}

// D = A B + C by one mma on the A and B fragments given, C read and D written (16,8) row-major per the ISA's C/D
// fragment layout: the last step of both test kernels below.
template <typename S>
__device__ void mma_with_c_and_d_in_memory(float* d, const uint32_t (&af)[4], const uint32_t (&bf)[2], const float* c) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;
  const float cf[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  float df[4];
  mma::mma_m16n8k16<S>(df, af, bf, cf);
  d[g * 8 + 2 * t] = df[0];
  d[g * 8 + 2 * t + 1] = df[1];
  d[(g + 8) * 8 + 2 * t] = df[2];
  d[(g + 8) * 8 + 2 * t + 1] = df[3];
}

// D = A B + C by one mma, fragments per the ISA: A (16,16) row-major, B (16,8) as B[k][n] row-major, C, D (16,8).
template <typename S>
__global__ void mma_layout_kernel(float* d, const S* a, const S* b, const float* c) {
  const int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;
  const uint32_t af[4] = {pair_bits(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                          pair_bits(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                          pair_bits(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                          pair_bits(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
  const uint32_t bf[2] = {pair_bits(b[2 * t * 8 + g], b[(2 * t + 1) * 8 + g]),
                          pair_bits(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
  mma_with_c_and_d_in_memory<S>(d, af, bf, c);
}

// The same product with the operands loaded by ldmatrix from shared memory (rows padded to 24 elements, 48 bytes), as
// the attention kernels load them: A by .x4 from its rows; B either by .trans from its k-major rows (B[k][.]), or
// without .trans from the rows of B^T (B[.][n]: the "col" layout), by one .x2 or two .x1.
template <typename S, bool kTrans, int kX>
__global__ void ldmatrix_mma_kernel(float* d, const S* a, const S* b, const float* c) {
  constexpr int LD = 24;
  HPCT_DYNAMIC_SHARED(S, smem);
  S* sa = smem;          // (16, LD) A
  S* sb = sa + 16 * LD;  // kTrans: (16, LD) B as B[k][n]; else (8, LD) B^T as B^T[n][k]
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 256; e += 32) sa[(e / 16) * LD + e % 16] = a[e];
  for (int e = lane; e < 128; e += 32) {
    const int k = e / 8, n = e % 8;
    if (kTrans) sb[k * LD + n] = b[e];
    else
      sb[n * LD + k] = b[e];
  }
  __syncwarp();
  uint32_t af[4], bf[2];
  mma::ldmatrix<4, false>(af, sa + (lane % 16) * LD + (lane / 16) * 8);
  // matrix 0 of B: k 0-7, matrix 1: k 8-15 (lanes 16-31 give addresses that are ignored)
  const S* row = kTrans ? sb + (lane % 16) * LD : sb + (lane % 8) * LD + ((lane / 8) % 2) * 8;
  if constexpr (kX == 2) {
    mma::ldmatrix<2, kTrans>(bf, row);
  } else {
    uint32_t r0[1], r1[1];
    mma::ldmatrix<1, kTrans>(r0, sb + (lane % 8) * LD);
    mma::ldmatrix<1, kTrans>(r1, kTrans ? sb + (8 + lane % 8) * LD : sb + (lane % 8) * LD + 8);
    bf[0] = r0[0];
    bf[1] = r1[0];
  }
  mma_with_c_and_d_in_memory<S>(d, af, bf, c);
}

// ldmatrix of kN matrices from a (32, 8) tile whose element (row, col) holds the bits row * 8 + col: lane l gives row
// l, and out[lane * 4 + i] receives its register i.
template <int kN, bool kTrans>
__global__ void ldmatrix_probe_kernel(uint32_t* out) {
  HPCT_DYNAMIC_SHARED(__half, tile);
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 256; e += 32) tile[e] = __half::from_bits(static_cast<uint16_t>(e));
  __syncwarp();
  uint32_t r[kN];
  mma::ldmatrix<kN, kTrans>(r, tile + lane * 8);
  for (int i = 0; i < kN; i++) out[lane * 4 + i] = r[i];
}

__global__ void mma_exited_lane_kernel(float* out) {
  if (threadIdx.x == 7) return;
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float d[4] = {0, 0, 0, 0};
  mma::mma_m16n8k16<__nv_bfloat16>(d, a, b, d);
  out[threadIdx.x] = d[0];
}
__global__ void mma_and_shuffle_kernel(float* out) {  // lane 0 at a shuffle while the others are at an mma
  float d[4] = {0, 0, 0, 0};
  if (threadIdx.x == 0) {
    d[0] = __shfl_sync(0xffffffffu, 1.0f, 0);
  } else {
    const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    mma::mma_m16n8k16<__half>(d, a, b, d);
  }
  out[threadIdx.x] = d[0];
}
__global__ void ldmatrix_misaligned_kernel(float* out) {
  HPCT_DYNAMIC_SHARED(__half, tile);
  for (int e = threadIdx.x; e < 512; e += 32) tile[e] = __half(0.0f);
  __syncwarp();
  uint32_t r[1];
  mma::ldmatrix<1, false>(r, tile + threadIdx.x * 8 + 1);  // 2 bytes past a 16-byte boundary
  out[threadIdx.x] = static_cast<float>(r[0]);
}

template <typename S>
std::vector<S> random_16bit(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<S> v(n);
  for (auto& x : v) x = S(static_cast<float>(u(gen)));
  return v;
}

// The model's D: c + the 16 exact products, summed exactly (double: these values span far less than 53 bits), rounded
// to float once.
template <typename S>
std::vector<float> mma_reference(const std::vector<S>& a, const std::vector<S>& b, const std::vector<float>& c) {
  std::vector<float> d(128);
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 8; n++) {
      double s = c[r * 8 + n];
      for (int k = 0; k < 16; k++) s += static_cast<double>(float(a[r * 16 + k])) * float(b[k * 8 + n]);
      d[r * 8 + n] = static_cast<float>(s);
    }
  return d;
}

template <typename S>
void check_mma_layout_and_product(const char* type) {
  SCOPED_TRACE(type);
  const LaunchShape warp = shape(1, 32);
  std::vector<float> d(128), zero_c(128, 0.0f);
  // B through the identity: D = B (position by position: a misplaced A or B element shows as a wrong entry)
  {
    std::vector<S> a(256, S(0.0f));
    for (int r = 0; r < 16; r++) a[r * 16 + r] = S(1.0f);
    std::vector<S> b(128);
    for (int i = 0; i < 128; i++) b[i] = S(static_cast<float>(i + 1));  // exact in bf16 and f16 (<= 256)
    EMU_LAUNCH(mma_layout_kernel<S>, warp, d.data(), a.data(), b.data(), zero_c.data());
    for (int k = 0; k < 16; k++)
      for (int n = 0; n < 8; n++)
        EXPECT_EQ(d[k * 8 + n], static_cast<float>(k * 8 + n + 1)) << "B (" << k << ", " << n << ")";
  }
  // A through column selectors: B[k][n] = (k == n + 8 h) gives D = columns 8h .. 8h+7 of A
  for (int half = 0; half < 2; half++) {
    std::vector<S> a(256), b(128, S(0.0f));
    for (int i = 0; i < 256; i++) a[i] = S(static_cast<float>(i + 1));
    for (int n = 0; n < 8; n++) b[(n + 8 * half) * 8 + n] = S(1.0f);
    EMU_LAUNCH(mma_layout_kernel<S>, warp, d.data(), a.data(), b.data(), zero_c.data());
    for (int r = 0; r < 16; r++)
      for (int n = 0; n < 8; n++)
        EXPECT_EQ(d[r * 8 + n], static_cast<float>(r * 16 + n + 8 * half + 1))
            << "A (" << r << ", " << n + 8 * half << ")";
  }
  // C through A = 0: D = C
  {
    std::vector<S> a(256, S(0.0f)), b(128, S(1.0f));
    std::vector<float> c(128);
    for (int i = 0; i < 128; i++) c[i] = 0.5f + static_cast<float>(i);
    EMU_LAUNCH(mma_layout_kernel<S>, warp, d.data(), a.data(), b.data(), c.data());
    for (int i = 0; i < 128; i++) EXPECT_EQ(d[i], c[i]) << "C element " << i;
  }
  // random A, B, C: the model's one rounding of the exact sum, bit for bit; by element fragments and through ldmatrix
  for (uint32_t seed = 1; seed <= 3; seed++) {
    const auto a = random_16bit<S>(256, seed, -2.0, 2.0), b = random_16bit<S>(128, seed + 10, -2.0, 2.0);
    std::vector<float> c(128);
    std::mt19937 gen(seed + 20);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (auto& x : c) x = u(gen);
    const auto want = mma_reference(a, b, c);
    EMU_LAUNCH(mma_layout_kernel<S>, warp, d.data(), a.data(), b.data(), c.data());
    EXPECT_EQ(d, want) << "mma, fragments by element, seed " << seed;
    const LaunchShape with_tiles = shape(1, 32, 2 * 16 * 24 * 2);
    std::fill(d.begin(), d.end(), NAN);
    EMU_LAUNCH((ldmatrix_mma_kernel<S, true, 2>), with_tiles, d.data(), a.data(), b.data(), c.data());
    EXPECT_EQ(d, want) << "mma, B by ldmatrix .x2.trans, seed " << seed;
    std::fill(d.begin(), d.end(), NAN);
    EMU_LAUNCH((ldmatrix_mma_kernel<S, false, 2>), with_tiles, d.data(), a.data(), b.data(), c.data());
    EXPECT_EQ(d, want) << "mma, B by ldmatrix .x2, seed " << seed;
    std::fill(d.begin(), d.end(), NAN);
    EMU_LAUNCH((ldmatrix_mma_kernel<S, true, 1>), with_tiles, d.data(), a.data(), b.data(), c.data());
    EXPECT_EQ(d, want) << "mma, B by two ldmatrix .x1.trans, seed " << seed;
    std::fill(d.begin(), d.end(), NAN);
    EMU_LAUNCH((ldmatrix_mma_kernel<S, false, 1>), with_tiles, d.data(), a.data(), b.data(), c.data());
    EXPECT_EQ(d, want) << "mma, B by two ldmatrix .x1, seed " << seed;
  }
}

TEST(CudaEmuTensorCores, MmaFragmentLayoutAndProductBf16) { check_mma_layout_and_product<__nv_bfloat16>("bf16"); }
TEST(CudaEmuTensorCores, MmaFragmentLayoutAndProductF16) { check_mma_layout_and_product<__half>("f16"); }

// ldmatrix against the ISA's statement: lane l receives in register i the elements (row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1) of matrix i, low half first; with .trans those of the transposed matrix, (rows 2 (l % 4), 2 (l % 4)
// + 1 of column l / 4). Matrix i is rows 8i .. 8i + 7 of the probe tile, so the bits name row and column.
template <int kN, bool kTrans>
void check_ldmatrix_probe() {
  SCOPED_TRACE("ldmatrix .x" + std::to_string(kN) + (kTrans ? ".trans" : ""));
  std::vector<uint32_t> out(128, 0xdeadbeefu);
  EMU_LAUNCH((ldmatrix_probe_kernel<kN, kTrans>), shape(1, 32, 32 * 8 * 2), out.data());
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < kN; i++) {
      const uint32_t lo = kTrans ? (8 * i + 2 * (l % 4)) * 8 + l / 4 : (8 * i + l / 4) * 8 + 2 * (l % 4);
      const uint32_t hi = kTrans ? lo + 8 : lo + 1;
      EXPECT_EQ(out[l * 4 + i], lo | (hi << 16)) << "lane " << l << " register " << i;
    }
}

TEST(CudaEmuTensorCores, LdmatrixFollowsTheIsa) {
  check_ldmatrix_probe<1, false>();
  check_ldmatrix_probe<2, false>();
  check_ldmatrix_probe<4, false>();
  check_ldmatrix_probe<1, true>();
  check_ldmatrix_probe<2, true>();
  check_ldmatrix_probe<4, true>();
}

// What the hardware leaves undefined is an error: a lane that exited, lanes at different warp collectives, a row
// address that is not 16-byte aligned.
TEST(CudaEmuTensorCores, MisuseIsAnError) {
  std::vector<float> out(32);
  EXPECT_THROW(EMU_LAUNCH(mma_exited_lane_kernel, shape(1, 32), out.data()), cuda_emu::EmulationError);
  EXPECT_THROW(EMU_LAUNCH(mma_and_shuffle_kernel, shape(1, 32), out.data()), cuda_emu::EmulationError);
  EXPECT_THROW(EMU_LAUNCH(ldmatrix_misaligned_kernel, shape(1, 32, 1024), out.data()), cuda_emu::EmulationError);
}

}  // namespace
