#pragma once
// Device code shared by the kernel headers (*_kernels.cuh, cuda_flash_attention.cuh): warp and block reductions, the
// shared-memory declarations, and the storage types of the kernels' tensors. Compiled by nvcc (through the .cu files)
// and, as plain C++, by the host emulation of the kernels (tests/cuda_emu/cuda_emu.hpp, included first, which supplies the CUDA built-ins and its own
// definitions of the two shared-memory macros and of __nv_bfloat16). Hence: no CUDA header here but cuda_bf16.h under
// nvcc (the emulation has its own __nv_bfloat16), only built-ins nvcc knows.
//
// Storage types (kernels.hpp, "Storage types"). A kernel's activations have the storage type S: float, __nv_bfloat16
// for A = hpct::bf16, or __half for fp16 storage (CUDA only); the 16-bit types share their bits with the host types
// (the .cu files reinterpret the pointers, cuda_common.cuh dev_ptr). Every kernel computes in float: loads widen
// (to_float, exact), and each output is rounded once when it is stored (from_float<S>: __float2bfloat16_rn or
// __float2half_rn, round to nearest even, as hpct::to_bf16 and the CPU backend).
// Pack<S, P> is P consecutive elements moved by one load or store (P = kPack<S>: 16 bytes, 4 floats or 8 bf16, as
// llm.c's x128); a kernel reads packs only where its host function found every pointer 16-byte aligned and the
// length a multiple of P, and element by element otherwise.
//
// Shared memory is declared through two macros, never with a bare __shared__ (the emulation refuses one at compile
// time): the emulation must find every shared array to fill it with NaN before each block, so that a read of
// anything not written first poisons the result.
//   HPCT_SHARED(type, name, [dims]...)  a static shared array:   __shared__ type name[dims]...
//   HPCT_DYNAMIC_SHARED(type, name)     the dynamic shared memory of the launch as `type* name`
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels/cuda/launch_shape.hpp"

#if !defined(HPCT_CUDA_EMULATION)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define HPCT_SHARED(type, name, ...) __shared__ type name __VA_ARGS__
#define HPCT_DYNAMIC_SHARED(type, name)                               \
  extern __shared__ __align__(16) unsigned char hpct_dynamic_smem_[]; \
  type* name = reinterpret_cast<type*>(hpct_dynamic_smem_)
#endif

// Grid-stride loop of a 1-D launch: i = the global thread index, then + the grid's thread count.
#define HPCT_GRID_STRIDE_LOOP(i, n)                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace hpct::kernels::cuda {
namespace {  // internal linkage: nvcc's copy and the emulation's never meet in one link

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block whose size is a multiple of 32 (<= 1024); every thread gets the result. `shared` holds >= 32.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may be reused by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? shared[lane] : T(0);
  return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(r);
}

// Online softmax statistics (m, s) of a set of values: m their max, s the sum of exp(x - m) (-inf and 0 for none).
// softmax_merge folds (m2, s2) into (m, s); it is symmetric in its two operands, bit for bit (fmaxf, and the sum of
// two products in either order), so both lanes of a butterfly get the same result.
__device__ __forceinline__ void softmax_merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;  // both empty
  s = (m == -INFINITY ? 0.0f : s * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm));
  m = mm;
}
// (m, s) over a block whose size is a multiple of 32 (<= 1024): a butterfly of softmax_merge per warp, then over the
// warps' results; every thread gets the result. `shared` holds >= 64 floats.
__device__ __forceinline__ void block_softmax_stats(float& m, float& s, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1)
    softmax_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  __syncthreads();  // shared may be reused by a previous call
  if (lane == 0) {
    shared[warp] = m;
    shared[32 + warp] = s;
  }
  __syncthreads();
  m = lane < nwarps ? shared[lane] : -INFINITY;
  s = lane < nwarps ? shared[32 + lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1)
    softmax_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// ---- storage types ----------------------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename S>
__device__ __forceinline__ S from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// Elements per 16-byte pack: 4 floats, 8 bf16.
template <typename S>
inline constexpr int kPack = static_cast<int>(16 / sizeof(S));

template <typename S, int P>
struct alignas(sizeof(S) * P < 16 ? sizeof(S) * P : 16) Pack {
  S v[P];
};

// One 16- or 8-byte load (p aligned to it), else element by element.
template <int P, typename S>
__device__ __forceinline__ Pack<S, P> load_pack(const S* p) {
  Pack<S, P> r;
  if constexpr (sizeof(r) == 16) {
    const int4 bits = *reinterpret_cast<const int4*>(p);
    memcpy(static_cast<void*>(&r), &bits, sizeof(r));  // Pack is trivially copyable
  } else if constexpr (sizeof(r) == 8) {
    const int2 bits = *reinterpret_cast<const int2*>(p);
    memcpy(static_cast<void*>(&r), &bits, sizeof(r));  // Pack is trivially copyable
  } else {
#pragma unroll
    for (int j = 0; j < P; j++) r.v[j] = p[j];
  }
  return r;
}
template <int P, typename S>
__device__ __forceinline__ void store_pack(S* p, const Pack<S, P>& v) {
  if constexpr (sizeof(v) == 16) {
    int4 bits;
    memcpy(&bits, &v, sizeof(v));
    *reinterpret_cast<int4*>(p) = bits;
  } else if constexpr (sizeof(v) == 8) {
    int2 bits;
    memcpy(&bits, &v, sizeof(v));
    *reinterpret_cast<int2*>(p) = bits;
  } else {
#pragma unroll
    for (int j = 0; j < P; j++) p[j] = v.v[j];
  }
}

// The first `valid` values of a pack into the online softmax statistics (m, s): the pack's max first, one rescale of s
// when it raises m (rare once m has settled), then the pack's exps, independent of each other, summed in order j =
// 0, 1, ... and added to s. Per value that is a conversion, a max, a subtraction, the hardware's exp2 and an add, and
// no branch. (One value at a time, as before, took about 16 PTX instructions and two branches per value, each
// compare waiting for the one before, most of them the accurate expf's range reduction; the forward-only
// cross-entropy then ran at under a third of the HBM's bandwidth on an H200.) The exps are __expf (ex2.approx of
// (x - m) log2 e): within ~|x - m| 2^-23 relative of exp, and x - m <= 0. A NaN value makes s NaN (fmaxf skips it,
// its exp does not), unless every value before it and in its pack is -inf.
template <typename S, int P>
__device__ __forceinline__ void softmax_add_pack(float& m, float& s, const Pack<S, P>& pk, int valid) {
  float x[P];
  float pm = -INFINITY;
#pragma unroll
  for (int j = 0; j < P; j++) {
    const float xj = to_float(pk.v[j]);  // converted unconditionally, so that the padding is a select, not a branch
    x[j] = j < valid ? xj : -INFINITY;
    pm = fmaxf(pm, x[j]);
  }
  if (pm > m) {
    s = m == -INFINITY ? 0.0f : s * __expf(m - pm);
    m = pm;
  }
  if (m == -INFINITY) return;  // every value so far -inf: nothing to add
  float e = 0.0f;
#pragma unroll
  for (int j = 0; j < P; j++) e += __expf(x[j] - m);
  s += e;
}

// A 1-D grid-stride loop over n elements in packs: f(i, std::integral_constant<int, W>) for the element i of each
// whole pack (W = P), over the first `packs` * P elements, then f(i, W = 1) for each element of the rest. The host
// passes packs = n / P when the kernel's pointers are 16-byte aligned (vector_packs), else 0.
template <int P, typename F>
__device__ __forceinline__ void for_each_pack(int64_t n, int64_t packs, F&& f) {
  HPCT_GRID_STRIDE_LOOP(k, packs) f(k * P, std::integral_constant<int, P>{});
  const int64_t done = packs * P;
  HPCT_GRID_STRIDE_LOOP(i, n - done) f(done + i, std::integral_constant<int, 1>{});
}

// ---- host: where packs apply -------------------------------------------------------------------------------------
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// for_each_pack's `packs` for n elements of 16-byte packs of S over the given pointers (null ones ignored): n / P
// when every pointer is 16-byte aligned, else 0 (element by element).
inline int64_t vector_packs(int64_t n, int pack, std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p != nullptr && !aligned16(p)) return 0;
  return n / pack;
}
template <typename S>
int64_t vector_packs(int64_t n, std::initializer_list<const void*> ptrs) {
  return vector_packs(n, kPack<S>, ptrs);
}

// The launch of a for_each_pack kernel: one thread per pack, or per element of the rest, whichever is more.
inline LaunchShape pack_shape(int64_t n, int64_t packs, int pack, int threads = 256) {
  const int64_t rest = n - packs * pack;
  return grid_stride_shape(packs > rest ? packs : rest, threads);
}

// The pack width P of a kernel moving rows of `len` elements (row r at base + r * len) through the given pointers
// (null ones ignored): kPack<S> when len is a multiple of it and every pointer is 16-byte aligned, else 1.
template <typename S>
int pack_width(int64_t len, std::initializer_list<const void*> ptrs) {
  if (len % kPack<S> != 0) return 1;
  for (const void* p : ptrs)
    if (p != nullptr && !aligned16(p)) return 1;
  return kPack<S>;
}

// Calls f(std::integral_constant<int, P>) with a pack width P (1, or kPack<S>): the instantiation to launch.
template <typename S, typename F>
void with_pack(int P, F&& f) {
  if (P == kPack<S>) f(std::integral_constant<int, kPack<S>>{});
  else
    f(std::integral_constant<int, 1>{});
}

// The pack width of a kernel reading rows to reduce them: pack_width for 16-bit storage; float storage always reads
// element by element there (1): its row kernels sum in the order they always have.
template <typename S>
int row_pack(int64_t len, std::initializer_list<const void*> ptrs) {
  if constexpr (std::is_same_v<S, float>) return 1;
  else
    return pack_width<S>(len, ptrs);
}

// with_pack for row_pack's P: float storage instantiates P = 1 only.
template <typename S, typename F>
void with_row_pack(int P, F&& f) {
  if constexpr (std::is_same_v<S, float>) f(std::integral_constant<int, 1>{});
  else
    with_pack<S>(P, std::forward<F>(f));
}

}  // namespace
}  // namespace hpct::kernels::cuda
