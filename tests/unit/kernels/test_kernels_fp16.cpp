// The fp16 storage type (tensor/fp16.hpp: IEEE binary16, CUDA-only storage): the host conversions on their edge cases
// (ties to even, subnormals, the largest finite value, overflow, NaN, signed zeros), exhaustively fp16 -> float ->
// fp16, and the CPU backend's refusal of fp16 storage (kernels.hpp: a clear error naming the op and the fix).
//
// The reference values are written in binary: fp16 has 1 sign bit, 5 exponent bits (bias 15) and 10 mantissa bits,
// so 1.0 is 0x3c00, its ulp 2^-10, the largest finite value 65504 = 0x7bff, the smallest normal 2^-14 = 0x0400 and the
// smallest subnormal 2^-24 = 0x0001.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/kernels.hpp"
#include "tensor/fp16.hpp"
#include "tensor/tensor.hpp"

namespace hpct {
namespace {

uint16_t bits_of(float f) { return to_fp16(f).bits; }
float widen(uint16_t bits) { return to_f32(fp16{bits}); }

TEST(Fp16, ExactValuesRoundTrip) {
  EXPECT_EQ(bits_of(1.0f), 0x3c00);
  EXPECT_EQ(bits_of(-2.0f), 0xc000);
  EXPECT_EQ(bits_of(0.5f), 0x3800);
  EXPECT_EQ(bits_of(65504.0f), 0x7bff);    // the largest finite fp16
  EXPECT_EQ(bits_of(0x1p-14f), 0x0400);    // the smallest normal
  EXPECT_EQ(bits_of(0x1p-24f), 0x0001);    // the smallest subnormal
  EXPECT_EQ(bits_of(0x3ffp-24f), 0x03ff);  // the largest subnormal
  EXPECT_EQ(bits_of(0.0f), 0x0000);
  EXPECT_EQ(bits_of(-0.0f), 0x8000);  // the sign of zero kept
  EXPECT_EQ(widen(0x7bff), 65504.0f);
  EXPECT_EQ(widen(0x0001), 0x1p-24f);
  EXPECT_EQ(widen(0x03ff), 0x3ffp-24f);
  EXPECT_TRUE(std::signbit(widen(0x8000)) && widen(0x8000) == 0.0f);
}

TEST(Fp16, RoundsToNearestWithTiesToEven) {
  // normal range: 1 + half an ulp (2^-11) is a tie -> 1.0 (even); 1 + 1.5 ulp -> 1 + 2 ulp (even); just above half an
  // ulp -> up; just below -> down
  EXPECT_EQ(bits_of(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(bits_of(1.0f + 0x3p-11f), 0x3c02);
  EXPECT_EQ(bits_of(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(bits_of(1.0f + 0x1p-11f - 0x1p-20f), 0x3c00);
  EXPECT_EQ(bits_of(-(1.0f + 0x3p-11f)), 0xbc02);
  // a carry from the mantissa into the exponent: 2 - 2^-12 rounds to 2.0
  EXPECT_EQ(bits_of(2.0f - 0x1p-12f), 0x4000);
  // subnormal range (unit 2^-24): 1.5 units is a tie -> 2 (even); 2.5 units -> 2 (even); 0.5 unit -> 0 (even)
  EXPECT_EQ(bits_of(0x3p-25f), 0x0002);
  EXPECT_EQ(bits_of(0x5p-25f), 0x0002);
  EXPECT_EQ(bits_of(0x1p-25f), 0x0000);
  EXPECT_EQ(bits_of(0x1p-25f + 0x1p-40f), 0x0001);  // just above half a unit: up
  EXPECT_EQ(bits_of(-0x1p-25f), 0x8000);            // a negative value rounding to zero keeps its sign
  EXPECT_EQ(bits_of(0x1p-30f), 0x0000);             // far below: zero
  EXPECT_EQ(bits_of(1e-45f), 0x0000);               // an fp32 subnormal
  // the largest subnormal plus half a unit is a tie with the smallest normal: to even (0x0400)
  EXPECT_EQ(bits_of(0x7ffp-25f), 0x0400);
}

TEST(Fp16, OverflowsToInfinityAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits_of(65519.0f), 0x7bff);  // below the tie: 65504
  EXPECT_EQ(bits_of(65520.0f), 0x7c00);  // the tie between 65504 (odd mantissa) and 65536: to even, infinity
  EXPECT_EQ(bits_of(1e6f), 0x7c00);
  EXPECT_EQ(bits_of(-3.4e38f), 0xfc00);
  EXPECT_EQ(bits_of(inf), 0x7c00);
  EXPECT_EQ(bits_of(-inf), 0xfc00);
  EXPECT_EQ(widen(0x7c00), inf);
  EXPECT_EQ(widen(0xfc00), -inf);
  // NaN stays a quiet NaN of the same sign (never infinity)
  const uint16_t qnan = bits_of(std::numeric_limits<float>::quiet_NaN());
  const uint16_t snan = bits_of(-std::numeric_limits<float>::signaling_NaN());
  EXPECT_EQ(qnan & 0x7e00, 0x7e00) << std::hex << qnan;
  EXPECT_EQ(snan & 0xfe00, 0xfe00) << std::hex << snan;
  EXPECT_TRUE(std::isnan(widen(qnan)) && std::isnan(widen(snan)));
  EXPECT_TRUE(std::isnan(widen(0x7c01)));  // a signalling fp16 NaN widens to a NaN
}

// Every one of the 65536 fp16 values widens exactly and rounds back to itself (NaNs to a NaN).
TEST(Fp16, EveryValueRoundTripsThroughFloat) {
  for (uint32_t b = 0; b <= 0xffff; b++) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = widen(bits);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(bits_of(f), bits) << std::hex << bits << " widened to " << f;
    // exactness: the value is sign * m * 2^(e - 25) (normal) or sign * m * 2^-24 (subnormal)
    const int e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
    const double want = e == 0x1f ? INFINITY : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    ASSERT_EQ(static_cast<double>(std::fabs(f)), want) << std::hex << bits;
  }
}

// Between two neighbouring fp16 values every float rounds to the nearer one (the midpoint to the even one): checked
// at the midpoints and one float ulp either side of them, over a sweep of the positive finite range.
TEST(Fp16, MidpointsOverTheWholeRange) {
  for (uint32_t b = 0; b < 0x7bff; b += 7) {
    const float lo = widen(static_cast<uint16_t>(b)), hi = widen(static_cast<uint16_t>(b + 1));
    const float mid = lo + (hi - lo) / 2;  // exact in float (fp16 has fewer bits)
    const uint16_t even = (b & 1) == 0 ? static_cast<uint16_t>(b) : static_cast<uint16_t>(b + 1);
    ASSERT_EQ(bits_of(mid), even) << std::hex << b;
    ASSERT_EQ(bits_of(std::nextafter(mid, 0.0f)), b) << std::hex << b;
    ASSERT_EQ(bits_of(std::nextafter(mid, INFINITY)), b + 1) << std::hex << b;
  }
}

TEST(Fp16, DtypeAndTensorAccess) {
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_STREQ(dtype_name(DType::F16), "f16");
  EXPECT_EQ(round_to<fp16>(1.0f + 0x1p-11f), 1.0f);
  std::vector<fp16> storage(4);
  Tensor t{"t", {4}, DType::F16, Device::CPU, storage.data()};
  EXPECT_EQ(t.bytes(), 8u);
  EXPECT_EQ(t.as<fp16>(), storage.data());
  EXPECT_THROW(t.as<bf16>(), Error);  // the dtype is checked
  // with_activation_type names the storage type of each activation dtype
  EXPECT_EQ(with_activation_type(DType::F16, [](auto type) { return sizeof(typename decltype(type)::type); }), 2u);
  EXPECT_EQ(with_activation_type(DType::F32, [](auto type) { return sizeof(typename decltype(type)::type); }), 4u);
  EXPECT_THROW(with_activation_type(DType::I32, [](auto) { return 0; }), Error);
  // host widening of stored logits
  storage = {to_fp16(1.5f), to_fp16(-2.0f), to_fp16(65504.0f), fp16{0x0001}};
  float out[4];
  widen_to_f32(DType::F16, storage.data(), out, 4);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 65504.0f);
  EXPECT_EQ(out[3], 0x1p-24f);
}

// The CPU backend has no fp16 storage: every templated op with A = fp16, the casts and the size queries of f16 on the
// CPU throw, naming the op and the fix (train.precision=fp32 or bf16 on the CPU).
TEST(Fp16, TheCpuBackendRefusesFp16StorageNamingTheFix) {
  const ExecContext cpu{Device::CPU, nullptr, Precision::FP32};
  std::vector<fp16> a(8), b(8);
  std::vector<float> f(8);
  auto expect_refusal = [](const char* op, auto&& call) {
    try {
      call();
      ADD_FAILURE() << op << ": no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("kernels::") + op), std::string::npos) << m;
      EXPECT_NE(m.find("fp16 storage"), std::string::npos) << m;
      EXPECT_NE(m.find("train.precision=fp32 or bf16"), std::string::npos) << m;
    }
  };
  expect_refusal("residual_forward", [&] { kernels::residual_forward(cpu, a.data(), a.data(), b.data(), 8); });
  expect_refusal("gelu_forward", [&] { kernels::gelu_forward(cpu, a.data(), b.data(), 8); });
  expect_refusal("matmul_forward", [&] {
    kernels::matmul_forward(cpu, a.data(), b.data(), b.data(), static_cast<const fp16*>(nullptr), 2, 2, 2);
  });
  expect_refusal("crossentropy_forward",
                 [&] { kernels::crossentropy_forward(cpu, f.data(), a.data(), nullptr, 1, 8, 8); });
  expect_refusal("cast", [&] { kernels::cast(cpu, a.data(), f.data(), 8); });
  expect_refusal("cast", [&] { kernels::cast(cpu, f.data(), a.data(), 8); });
  expect_refusal("attention_stats_bytes", [&] { kernels::attention_stats_bytes(cpu, 1, 4, 8, 2, DType::F16); });
  expect_refusal("conv2d_workspace_floats",
                 [&] { kernels::conv2d_workspace_floats(cpu, 1, 1, 4, 4, 1, 3, 3, 1, 1, DType::F16); });
}

}  // namespace
}  // namespace hpct
