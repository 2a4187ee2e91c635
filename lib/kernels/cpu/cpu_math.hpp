#pragma once
// Vectorizable elementary functions for the CPU backend's `omp simd` loops.
// Why: without -ffast-math, glibc's expf/tanhf are scalar calls (~10-20 ns each), and GELU alone evaluates
// 16M tanh per GPT step; these inline versions vectorize to 8 AVX2 lanes at ~1-2 ulp of error.
// They vectorize only with -fno-trapping-math (set on hpct_kernels): under the default -ftrapping-math GCC does
// not if-convert float compares (the clamps below), and the loop stays scalar. The flag changes no result.
#include <bit>
#include <cstdint>

#include "tensor/bf16.hpp"

// HPCT_WIDE_SIMD on a function: its `omp simd` loops use 512-bit vectors where the CPU has them. With -march=native
// GCC prefers 256-bit vectors on AVX-512 CPUs; for the compute-bound loops (exp, GELU, the bf16 conversions) 512-bit
// ones measure 1.3-1.5x faster on the AVX-512 machine of validation/results/bench_bf16_cpu.md. Only on functions whose
// results do not depend on the vector width: element-wise ones, and bf16-only ones (a reduction's lanes set its
// summation order, which the float kernels keep bit for bit). Functions inlined into it follow its setting.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HPCT_WIDE_SIMD __attribute__((target("prefer-vector-width=512")))
#else
#define HPCT_WIDE_SIMD
#endif

namespace hpct::kernels::cpu {

// Whether ReLU passes the stored value x (and, backward, the gradient at it): x > 0. For bf16 on the bits:
// 0x0001..0x7f80 are the positive values up to +inf; +0, NaNs and the sign bit fail, as `x > 0.0f` fails for them. On
// 16-bit lanes, twice as many per vector as a float compare.
inline bool relu_keeps(float x) { return x > 0.0f; }
inline bool relu_keeps(bf16 x) { return static_cast<uint16_t>(x.bits - 1u) < 0x7f80u; }

// exp(x), relative error <= ~1.5 ulp (Cephes expf: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial for exp(r),
// 2^n assembled in the exponent bits). Inputs are clamped to [-87.3, 88.0] so the result stays a normal float:
// exp(-inf) -> ~1.2e-38 instead of 0 (harmless in a softmax sum, where the max element contributes 1),
// exp(+inf) -> 1.65e38.
inline float exp_simd(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln2) by the 1.5*2^23 trick: round-to-nearest of the FPU, no call to a rounding function
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;  // ln2 split in two parts so that n*ln2_hi is exact
  r = r - n * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 127]
  return p * std::bit_cast<float>(bits);
}

// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// With e = exp(2u) and d = 1 / (1 + e): 0.5 (1 + tanh u) = e d and sech^2(u) = 4 e d^2, free of overflow and of
// cancellation at both ends (gelu(-5) ~ -2.3e-7 keeps its relative precision). 2u is capped at 80, where
// e d = 1 in float already, so that d stays a normal float.
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;

inline float gelu_simd(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float two_u = 2.0f * u;
  const float e = exp_simd(two_u > 80.0f ? 80.0f : two_u);
  const float d = 1.0f / (1.0f + e);
  return x * (e * d);
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx
inline float gelu_grad_simd(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float two_u = 2.0f * u;
  const float e = exp_simd(two_u > 80.0f ? 80.0f : two_u);
  const float d = 1.0f / (1.0f + e);
  const float sech2 = 4.0f * (e * d) * d;
  return (e * d) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace hpct::kernels::cpu
