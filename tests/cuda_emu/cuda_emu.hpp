#pragma once
// A host emulation of the CUDA built-ins that the project's kernels use, so that the kernel headers
// (lib/kernels/cuda/*_kernels.cuh, cuda_flash_attention.cuh) compile as plain C++ and run on a machine without a GPU
// (CI). Include this first, then the kernel header; launch a kernel with
//     EMU_LAUNCH(kernel, shape, args...)          // kernel<<<shape.grid, shape.block, shape.shared_bytes>>>(args...)
// where `shape` comes from the same host function the real launch uses. A kernel template with several arguments goes
// in parentheses, as in the .cu files' HPCT_LAUNCH: EMU_LAUNCH((ns::kernel<true, float, 1>), shape, args...). Built
// with the host compiler alone: no
// CUDA header, HPCT_ENABLE_CUDA=OFF included.
//
// Execution model (cuda_emu.cpp):
//   - every CUDA thread of a block is a fiber (its own stack); the fibers of one block run on the calling OS thread,
//     switching only at __syncthreads and at warp-level intrinsics (__shfl*_sync, __ballot_sync, __syncwarp), which
//     are barriers over the block or over the lanes the mask names. A schedule (set_schedule) fixes the order in
//     which runnable threads resume: InOrder in rounds in thread order, Shuffled in rounds in a fresh random
//     permutation each, RunAhead always the runnable thread of highest (random) priority, so that some threads run
//     as far ahead as the barriers allow while others lag. A race (a shared-memory read not separated from its
//     write by a barrier) then gives different bits under different schedules: the tests run every kernel under
//     all three (emulate_schedules, emu_test_util.hpp);
//   - blocks run one after another, in grid order (InOrder) or shuffled (the others); static and
//     dynamic shared memory are filled with NaN bytes (0xff) before each block;
//   - a barrier that cannot complete (a __syncthreads not reached by every thread, a thread that exited while others
//     wait, lanes that disagree on a shuffle's mask, a mask naming an exited or absent lane, a shuffle's source lane
//     outside the mask) is an EmulationError naming the kernel, block and threads, never a hang; a kernel that loops
//     forever is ended by a watchdog (HPCT_EMU_WATCHDOG_S, default 300 s per launch) with a message naming it;
//   - built with AddressSanitizer (HPCT_EMU_ASAN; the fiber switches are announced to it), an out-of-bounds access of
//     a kernel to global memory or to static or dynamic shared memory fails the test with the kernel's source line;
//   - every launch is checked against the H100's limits (launch_shape.hpp) and, where the CUDA build left a resource
//     table (ptxas' registers and static shared memory per kernel, HPCT_EMU_KERNEL_RESOURCES), against those too.
// Conversions to and from __nv_bfloat16 / __half round as the hardware does (round to nearest even, subnormals
// kept, NaN canonical); their arithmetic rounds the exact result once. The fast-math intrinsics (__expf, __logf,
// __fdividef, ...) are computed the way the hardware's approximations are built (ex2/lg2/rcp of a float-rounded
// argument), and test_cuda_emu.cpp checks them against the programming guide's error bounds.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/launch_shape.hpp"

#define HPCT_CUDA_EMULATION 1

// ---- qualifiers -----------------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// A bare __shared__ cannot be emulated (the poisoning needs to find the array): declare shared memory with
// HPCT_SHARED / HPCT_DYNAMIC_SHARED (cuda_device_common.cuh).
#define __shared__ static_assert(false, "declare shared memory with HPCT_SHARED / HPCT_DYNAMIC_SHARED");

#define HPCT_SHARED(type, name, ...) \
  static type name __VA_ARGS__;      \
  [[maybe_unused]] static const bool hpct_emu_shared_##name##_ = ::cuda_emu::track_static_shared(&name, sizeof(name))
#define HPCT_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::cuda_emu::dynamic_shared())

// ---- the thread's coordinates ---------------------------------------------------------------------------------------
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;
// Set by the scheduler before it resumes a thread (one OS thread runs them all; every switch happens inside an
// out-of-line call, after which the compiler reloads these).
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
constexpr int warpSize = 32;

namespace cuda_emu {

struct EmulationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The schedule of the following launches (see the header comment); returns the previous seed.
enum class ScheduleKind { InOrder, Shuffled, RunAhead };
struct Schedule {
  ScheduleKind kind = ScheduleKind::InOrder;
  uint64_t seed = 0;  // of the permutations (Shuffled, RunAhead)
};
Schedule set_schedule(Schedule schedule);
struct ScopedSchedule {
  explicit ScopedSchedule(Schedule s) : previous(set_schedule(s)) {}
  // seed 0: in order; any other seed: shuffled rounds
  explicit ScopedSchedule(uint64_t seed)
      : ScopedSchedule(Schedule{seed == 0 ? ScheduleKind::InOrder : ScheduleKind::Shuffled, seed}) {}
  ~ScopedSchedule() { set_schedule(previous); }
  ScopedSchedule(const ScopedSchedule&) = delete;
  ScopedSchedule& operator=(const ScopedSchedule&) = delete;
  Schedule previous;
};

// Runs `body` as the kernel `name` (for messages and the resource table) with the given geometry. Throws
// EmulationError on an invalid launch or a barrier that cannot complete.
void launch(const char* name, const hpct::kernels::cuda::LaunchShape& shape, const std::function<void()>& body);

// shared memory
bool track_static_shared(void* p, size_t bytes);  // registers (and poisons) a static shared array, once
void* dynamic_shared();                           // the launch's dynamic shared memory (16-byte aligned)

// the barriers (out of line: a thread switch happens inside)
void syncthreads();
void syncwarp(unsigned mask);
uint64_t warp_exchange(unsigned mask, uint64_t bits, int src_lane, const char* what);
unsigned warp_ballot(unsigned mask, bool pred);

// Rounding of an exact value (a double) to the 16-bit formats: round to nearest even, subnormals kept, overflow to
// infinity, NaN to the canonical 0x7fff.
uint16_t bf16_bits_from(double x);
uint16_t half_bits_from(double x);
float bf16_to_float(uint16_t bits);
float half_to_float(uint16_t bits);

// Correct rounding to float of the exact real function (computed in double): the building block of the fast-math
// emulations below, which add the hardware's argument rounding.
float exp2_rn(float x);
float log2_rn(float x);

}  // namespace cuda_emu

#define EMU_LAUNCH(kernel, shape, ...) ::cuda_emu::launch(#kernel, (shape), [&] { kernel(__VA_ARGS__); })

inline void __syncthreads() { cuda_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { cuda_emu::syncwarp(mask); }

// ---- warp-level intrinsics -----------------------------------------------------------------------------------------
namespace cuda_emu::detail {
template <typename T>
T shuffle(unsigned mask, T v, int src_lane, const char* what) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(mask, bits, src_lane, what);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
inline int lane_id() {
  return static_cast<int>((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32);
}
}  // namespace cuda_emu::detail

// width: a power of two <= 32 dividing the warp into segments, as CUDA's
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = cuda_emu::detail::lane_id();
  const int src = (lane & ~(width - 1)) + (src_lane & (width - 1));
  return cuda_emu::detail::shuffle(mask, v, src, "__shfl_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = cuda_emu::detail::lane_id();
  int src = lane ^ lane_mask;
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;  // beyond the segment: the lane's own value
  return cuda_emu::detail::shuffle(mask, v, src, "__shfl_xor_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = cuda_emu::detail::lane_id();
  int src = lane + static_cast<int>(delta);
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
  return cuda_emu::detail::shuffle(mask, v, src, "__shfl_down_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = cuda_emu::detail::lane_id();
  int src = lane - static_cast<int>(delta);
  if (src < (lane & ~(width - 1))) src = lane;
  return cuda_emu::detail::shuffle(mask, v, src, "__shfl_up_sync");
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return cuda_emu::warp_ballot(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return cuda_emu::warp_ballot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) { return cuda_emu::warp_ballot(mask, pred != 0) == mask; }

// ---- atomics: one OS thread runs every fiber and none switches inside these, so plain read-modify-writes are atomic -
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicSub(T* p, T v) {
  const T old = *p;
  *p = old - v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// ---- bit and integer intrinsics ------------------------------------------------------------------------------------
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}

// CUDA's unqualified min / max overloads
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// ---- reinterpretation and loads ----------------------------------------------------------------------------------
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline float __uint_as_float(unsigned i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}
inline long long __double_as_longlong(double d) {
  long long i;
  std::memcpy(&i, &d, 8);
  return i;
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

// ---- IEEE-rounded arithmetic intrinsics (never contracted into an FMA) ----------------------------------------------
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fdiv_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __frcp_rn(float a) {
  volatile float r = 1.0f / a;
  return r;
}
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dadd_rn(double a, double b) {
  volatile double r = a + b;
  return r;
}
inline double __dmul_rn(double a, double b) {
  volatile double r = a * b;
  return r;
}
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __saturatef(float x) { return x > 1.0f ? 1.0f : (x >= 0.0f ? x : 0.0f); }  // NaN -> 0
inline float rsqrtf(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// ---- fast-math intrinsics, built as the hardware builds them -------------------------------------------------------
// ex2.approx / lg2.approx are taken as correctly rounded (the hardware's own error is ~2 ulp); the dominant error of
// __expf, __exp10f, __logf and __powf is the float rounding of the scaled argument (x log2(e) is rounded to float
// once, then raised: an error of up to half an ulp of the exponent, which grows with |x| as the guide's bounds do).
inline float __expf(float x) { return cuda_emu::exp2_rn(static_cast<float>(x * 1.4426950408889634)); }
inline float __exp10f(float x) { return cuda_emu::exp2_rn(static_cast<float>(x * 3.3219280948873622)); }
inline float __log2f(float x) { return cuda_emu::log2_rn(x); }
inline float __logf(float x) { return __fmul_rn(cuda_emu::log2_rn(x), 0.6931471805599453f); }
inline float __log10f(float x) { return __fmul_rn(cuda_emu::log2_rn(x), 0.3010299956639812f); }
inline float __powf(float x, float y) { return cuda_emu::exp2_rn(__fmul_rn(y, cuda_emu::log2_rn(x))); }
// x * rcp.approx(y); for 2^126 < |y| < 2^128 the hardware's reciprocal underflows to 0 (the guide's caveat)
inline float __fdividef(float x, float y) {
  const float ay = std::fabs(y);
  if (ay > 8.507059173023462e37f && std::isfinite(ay)) return std::isfinite(x) ? 0.0f * x : NAN;
  return __fmul_rn(x, __frcp_rn(y));
}
inline float __sinf(float x) { return static_cast<float>(std::sin(static_cast<double>(x))); }
inline float __cosf(float x) { return static_cast<float>(std::cos(static_cast<double>(x))); }
inline float __tanf(float x) { return __fdividef(__sinf(x), __cosf(x)); }

// ---- 16-bit floating point ------------------------------------------------------------------------------------------
// Storage types with the conversions and operators of cuda_bf16.h / cuda_fp16.h that device code uses. Arithmetic
// rounds the exact result (computed in double: exact for +, -, * of 16-bit values; division rounds twice only
// where a double quotient lands on a 16-bit tie, which it cannot for these formats' 8- and 11-bit significands).
struct __nv_bfloat16 {
  uint16_t bits = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : bits(cuda_emu::bf16_bits_from(f)) {}     // NOLINT: implicit, as CUDA's
  __nv_bfloat16(double d) : bits(cuda_emu::bf16_bits_from(d)) {}    // NOLINT
  operator float() const { return cuda_emu::bf16_to_float(bits); }  // NOLINT
  static __nv_bfloat16 from_bits(uint16_t b) {
    __nv_bfloat16 h;
    h.bits = b;
    return h;
  }
};
struct __half {
  uint16_t bits = 0;
  __half() = default;
  __half(float f) : bits(cuda_emu::half_bits_from(f)) {}            // NOLINT
  __half(double d) : bits(cuda_emu::half_bits_from(d)) {}           // NOLINT
  operator float() const { return cuda_emu::half_to_float(bits); }  // NOLINT
  static __half from_bits(uint16_t b) {
    __half h;
    h.bits = b;
    return h;
  }
};
using nv_bfloat16 = __nv_bfloat16;
using half = __half;

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rz(float f) {  // truncation toward zero (NaN stays NaN)
  if (std::isnan(f)) return __nv_bfloat16::from_bits(0x7fff);
  return __nv_bfloat16::from_bits(static_cast<uint16_t>(__float_as_uint(f) >> 16));
}
inline float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(h); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16::from_bits(b); }
inline __half __ushort_as_half(unsigned short b) { return __half::from_bits(b); }

#define HPCT_EMU_16BIT_OPS(T)                                                                                        \
  inline T __hadd(T a, T b) { return T(static_cast<double>(float(a)) + static_cast<double>(float(b))); }             \
  inline T __hsub(T a, T b) { return T(static_cast<double>(float(a)) - static_cast<double>(float(b))); }             \
  inline T __hmul(T a, T b) { return T(static_cast<double>(float(a)) * static_cast<double>(float(b))); }             \
  inline T __hdiv(T a, T b) { return T(static_cast<double>(float(a)) / static_cast<double>(float(b))); }             \
  inline T __hfma(T a, T b, T c) {                                                                                   \
    return T(std::fma(static_cast<double>(float(a)), static_cast<double>(float(b)), static_cast<double>(float(c)))); \
  }                                                                                                                  \
  inline T __hneg(T a) { return T::from_bits(static_cast<uint16_t>(a.bits ^ 0x8000u)); }                             \
  inline T operator+(T a, T b) { return __hadd(a, b); }                                                              \
  inline T operator-(T a, T b) { return __hsub(a, b); }                                                              \
  inline T operator*(T a, T b) { return __hmul(a, b); }                                                              \
  inline T operator/(T a, T b) { return __hdiv(a, b); }                                                              \
  inline T operator-(T a) { return __hneg(a); }                                                                      \
  inline T& operator+=(T& a, T b) { return a = a + b; }                                                              \
  inline T& operator-=(T& a, T b) { return a = a - b; }                                                              \
  inline T& operator*=(T& a, T b) { return a = a * b; }                                                              \
  inline bool operator==(T a, T b) { return float(a) == float(b); }                                                  \
  inline bool operator!=(T a, T b) { return float(a) != float(b); }                                                  \
  inline bool operator<(T a, T b) { return float(a) < float(b); }                                                    \
  inline bool operator>(T a, T b) { return float(a) > float(b); }                                                    \
  inline bool operator<=(T a, T b) { return float(a) <= float(b); }                                                  \
  inline bool operator>=(T a, T b) { return float(a) >= float(b); }
HPCT_EMU_16BIT_OPS(__nv_bfloat16)
HPCT_EMU_16BIT_OPS(__half)
#undef HPCT_EMU_16BIT_OPS

// ---- tensor cores: mma.sync m16n8k16 and ldmatrix (kernels/cuda/cuda_mma.cuh calls these) -------------------------
// Both are warp collectives, as on the hardware (.sync.aligned: every lane of the warp executes the same instruction):
// the 32 lanes deposit their operands at a warp barrier (the errors of a shuffle's: a lane that exited, or lanes at
// a different collective, fail the launch), then each lane takes its part of the result.
//
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: D (16x8) = A (16x16) B (16x8) + C, fragments as
// the PTX ISA lays them out ("Matrix Fragments for mma.m16n8k16 with floating point type"), groupID g = lane >> 2,
// threadID_in_group t = lane % 4, two 16-bit elements per .b32 register, the lower column (A) or row (B) in the low
// half:
//   A  a[0] = (g, 2t..2t+1)   a[1] = (g+8, 2t..2t+1)   a[2] = (g, 2t+8..2t+9)   a[3] = (g+8, 2t+8..2t+9)
//   B  b[0] = (2t..2t+1, g)   b[1] = (2t+8..2t+9, g)                         (row k, column n)
//   C, D  c[0], c[1] = (g, 2t), (g, 2t+1)   c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// Arithmetic: each product of two 16-bit values is exact in fp32 (8 + 8 or 11 + 11 significant bits); the emulation
// sums c and the 16 products of each element in double (exact but for sums spanning more than double's 53 bits,
// far beyond what attention's tiles produce) and rounds to float once. The hardware's internal accumulation order and
// rounding are unspecified by the PTX ISA (in practice products are aligned to the largest exponent and may be
// truncated): its results may differ from these by a few float ulps of the summed magnitudes, which is why tests
// compare tensor-core results across implementations with a tolerance, never bitwise.
//
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16: `matrices` 8x8 matrices of 16-bit elements; lanes
// 8i .. 8i+7 give the addresses of the rows 0..7 of matrix i (16 bytes each, 16-byte aligned; the other lanes'
// addresses are ignored), and lane l receives in r[i] the elements (row l/4, columns 2(l%4), 2(l%4)+1) of matrix i,
// or with .trans those of the transposed matrix: (rows 2(l%4), 2(l%4)+1 of column l/4). Each addressing lane reads
// its row before the barrier: the load happens at once for the warp, as on the hardware.
namespace cuda_emu {
enum class MmaInput { BF16, F16 };
void mma_m16n8k16(MmaInput input, float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
void ldmatrix(int matrices, bool trans, uint32_t* r, const void* row_address);
}  // namespace cuda_emu
