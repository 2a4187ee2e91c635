#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.hpp"

using namespace hpct::rng;

// Known-answer test from the Random123 distribution (kat_vectors: philox4x32_10).
TEST(Rng, PhiloxKnownAnswers) {
  auto r = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  r = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r[0], 0x408f276du);
  EXPECT_EQ(r[1], 0x41c83b0eu);
  EXPECT_EQ(r[2], 0xa20bc7c6u);
  EXPECT_EQ(r[3], 0x6d5451fdu);
  r = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(r[0], 0xd16cfe09u);
  EXPECT_EQ(r[1], 0x94fdccebu);
  EXPECT_EQ(r[2], 0x5001e420u);
  EXPECT_EQ(r[3], 0x24126ea1u);
}

TEST(Rng, SliceEqualsWhole) {  // a shard drawing [off, off+n) sees exactly the serial values
  std::vector<float> whole(1000), part(300);
  fill_normal(whole.data(), 1000, 0.0f, 0.02f, 42, stream_of("h.0.attn.qkv.weight"), 0);
  fill_normal(part.data(), 300, 0.0f, 0.02f, 42, stream_of("h.0.attn.qkv.weight"), 500);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(part[i], whole[500 + i]);
}

TEST(Rng, StreamsAndSeedsDiffer) {
  EXPECT_NE(normal(1, stream_of("a"), 0), normal(1, stream_of("b"), 0));
  EXPECT_NE(normal(1, stream_of("a"), 0), normal(2, stream_of("a"), 0));
  EXPECT_NE(stream_of("wte"), stream_of("wpe"));
}

TEST(Rng, NormalMoments) {
  // n = 200k: the standard error of the mean is 1/sqrt(n) = 0.0022, of the variance ~sqrt(2/n) = 0.0032.
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = normal(7, 99, static_cast<uint64_t>(i));
    s += x;
    s2 += x * x;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.011);  // 5 standard errors
  EXPECT_NEAR(var, 1.0, 0.016);
}

TEST(Rng, UniformIntInRangeAndUnbiased) {
  const uint64_t n = 10;
  std::vector<int> counts(n, 0);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = uniform_int(3, 5, static_cast<uint64_t>(i), n);
    ASSERT_LT(v, n);
    counts[v]++;
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);  // ~5 sigma of a binomial(1e5, 0.1): sigma = 95
}
