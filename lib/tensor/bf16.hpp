#pragma once
// bf16: the storage type of activations under train.precision = bf16 (docs/precision.md). A 16-bit float with fp32's
// 8-bit exponent and a 7-bit mantissa: the upper half of an fp32. Storage only: arithmetic converts to float first
// (every kernel computes in fp32 and rounds once when it stores).
//
// float -> bf16 rounds to nearest, ties to even, as the hardware does (AVX-512 BF16 vcvtneps2bf16, CUDA
// __float2bfloat16_rn, oneDNN); NaN stays a (quiet) NaN, infinities stay infinities, fp32 values beyond bf16's largest
// finite value round to infinity. bf16 -> float is exact. Plain C++17 with no intrinsics: the conversions are a few
// integer operations that the compiler vectorises in the CPU kernels' `omp simd` loops, and nvcc compiles the header
// too (its device code uses CUDA's own __nv_bfloat16, the same 16 bits: cuda/cuda_common.cuh).
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HPCT_BF16_HD __host__ __device__
#else
#define HPCT_BF16_HD
#endif

namespace hpct {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 is 16 bits");

HPCT_BF16_HD inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
HPCT_BF16_HD inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Exact.
HPCT_BF16_HD inline float to_f32(bf16 x) { return f32_from_bits(static_cast<uint32_t>(x.bits) << 16); }
HPCT_BF16_HD inline float to_f32(float x) { return x; }

// Round to nearest even; NaN -> quiet NaN of the same sign.
HPCT_BF16_HD inline bf16 to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}

// Storing a float result into an activation of type A (float or bf16): the one rounding of a kernel's output.
template <typename A>
HPCT_BF16_HD inline A from_f32(float f);
template <>
HPCT_BF16_HD inline float from_f32<float>(float f) {
  return f;
}
template <>
HPCT_BF16_HD inline bf16 from_f32<bf16>(float f) {
  return to_bf16(f);
}

// The value a float takes when stored as A and read back (tests, references).
template <typename A>
HPCT_BF16_HD inline float round_to(float f) {
  return to_f32(from_f32<A>(f));
}

}  // namespace hpct
