#pragma once
// fp16: the storage type of activations under train.precision = fp16 on CUDA (docs/precision.md). IEEE 754 binary16:
// 1 sign bit, a 5-bit exponent (bias 15) and a 10-bit mantissa, so 11 significant bits (one rounding errs by at most
// 2^-11 relative), largest finite value 65504, smallest normal 2^-14 (6.1e-5), subnormals down to 2^-24 (6.0e-8).
// Storage only: arithmetic converts to float first (every kernel computes in fp32 and rounds once when it stores).
// Host code never computes on fp16 (the CPU backend has no fp16 storage: kernels.hpp); the host type exists so that
// the precision-generic model code, the tests and the host copies of device tensors can name it.
//
// float -> fp16 rounds to nearest, ties to even, as CUDA's __float2half_rn does: subnormal results are kept (not
// flushed to zero), values whose magnitude rounds beyond 65504 (|x| >= 65520) become infinities, NaN stays a (quiet)
// NaN of the same sign. fp16 -> float is exact. Plain C++17 with no intrinsics, like bf16.hpp, so that nvcc compiles
// the header too (device code uses CUDA's own __half, the same 16 bits: cuda/cuda_common.cuh).
#include <cstdint>

#include "tensor/bf16.hpp"  // f32_bits, f32_from_bits, from_f32, HPCT_BF16_HD

namespace hpct {

struct fp16 {
  uint16_t bits;
};
static_assert(sizeof(fp16) == 2, "fp16 is 16 bits");

// Exact: normal values rebias the exponent (15 -> 127) and widen the mantissa; subnormals are m * 2^-24.
HPCT_BF16_HD inline float to_f32(fp16 x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  const uint32_t exponent = (x.bits >> 10) & 0x1fu, mantissa = x.bits & 0x3ffu;
  if (exponent == 0x1fu) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN (payload kept)
  if (exponent != 0) return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // zero or subnormal; exact in float
  return sign ? -magnitude : magnitude;
}

// Round to nearest even; subnormals kept; overflow to infinity; NaN -> quiet NaN of the same sign.
HPCT_BF16_HD inline fp16 to_fp16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;  // |f|
  if (a > 0x7f800000u) return fp16{static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
  if (a >= 0x477ff000u) return fp16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: the tie above 65504 and up
  if (a >= 0x38800000u) {  // >= 2^-14: a normal fp16; exponent 127 -> 15 bias, 23 -> 10 mantissa bits
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);  // round to nearest even on the 13 dropped bits (a carry may raise the exponent)
    return fp16{static_cast<uint16_t>(sign | (r >> 13))};
  }
  // |f| < 2^-14: a subnormal fp16, round(|f| / 2^-24) = round(m * 2^(e - 126)) with m the 24-bit significand
  const uint32_t e = a >> 23;
  const uint32_t shift = 126u - e;                            // >= 14
  if (shift > 24u) return fp16{static_cast<uint16_t>(sign)};  // below 2^-25: rounds to zero (a tie needs m = 2^24)
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t r = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (r & 1u))) r += 1u;  // 0x3ff + 1 = 0x400: the smallest normal, as it should be
  return fp16{static_cast<uint16_t>(sign | r)};
}

template <>
HPCT_BF16_HD inline fp16 from_f32<fp16>(float f) {
  return to_fp16(f);
}

}  // namespace hpct
