#include <gtest/gtest.h>

#include <cstdint>

#include "tensor/tensor.hpp"

TEST(Slab, PlansAlignedTensorsInOneBlock) {
  hpct::Slab s("test", hpct::Device::CPU);
  auto& a = s.add("a", {3, 5});                       // 60 bytes -> 64
  auto& b = s.add("b", {7}, hpct::DType::I32);        // 28 -> 64
  auto& c = s.add("c", {2, 2, 2}, hpct::DType::F64);  // 64
  EXPECT_EQ(s.bytes(), 192u);
  s.allocate();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u);
  EXPECT_EQ(static_cast<char*>(b.data) - static_cast<char*>(a.data), 64);
  EXPECT_EQ(static_cast<char*>(c.data) - static_cast<char*>(a.data), 128);
  EXPECT_EQ(a.numel(), 15);
  EXPECT_EQ(a.shape_str(), "(3, 5)");
  EXPECT_EQ(&s.get("b"), &b);
  b.i32()[6] = 42;
  EXPECT_EQ(static_cast<int32_t*>(b.data)[6], 42);
}

TEST(Slab, TypeAndLifecycleChecks) {
  hpct::Slab s("test", hpct::Device::CPU);
  auto& a = s.add("a", {4});
  EXPECT_THROW(a.f32(), hpct::Error);  // no memory before allocate()
  s.allocate();
  EXPECT_THROW(a.i32(), hpct::Error);  // wrong dtype
  EXPECT_THROW(s.add("late", {1}), hpct::Error);
  EXPECT_THROW(s.get("missing"), hpct::Error);
}
