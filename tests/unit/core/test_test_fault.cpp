// The planted-defect seam (core/test_fault.hpp): HPCT_TEST_FAULT is read once per process, so this binary's only
// reader sets it first. A malformed value (a UsageError at start-up) is checked by hand; the planted defects themselves
// by the ctest validation_sensitivity. The resume noise's box function is pure and tested here; its variable, read
// once like the fault's, by tests/integration/check_dp_ckpt.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/test_fault.hpp"

namespace hpct {
namespace {

TEST(TestFault, ReadOnceAndMatchedByKindAndGroupRank) {
  ::setenv("HPCT_TEST_FAULT", "dp_bucket_dropped:rank=1", 1);
  announce_test_fault();
  EXPECT_TRUE(fault_active(FaultKind::DpBucketDropped, 1));
  EXPECT_FALSE(fault_active(FaultKind::DpBucketDropped, 0));  // another DP rank: untouched
  EXPECT_TRUE(fault_active(FaultKind::DpBucketDropped));      // a site that does not know its rank
  EXPECT_FALSE(fault_active(FaultKind::DpBucketTwice, 1));    // another fault: inert
  EXPECT_FALSE(fault_active(FaultKind::ZeroShardOffset, 1));
  ::setenv("HPCT_TEST_FAULT", "zero_shard_offset", 1);  // read once: a later change is not seen
  EXPECT_FALSE(fault_active(FaultKind::ZeroShardOffset));
  ::unsetenv("HPCT_TEST_FAULT");
  EXPECT_TRUE(fault_active(FaultKind::DpBucketDropped, 1));
}

std::vector<float> ramp(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.5f + 0.001f * static_cast<float>(i % 997);
  return v;
}

// The box [off, off + cnt) of a row-major tensor of shape {d0, d1, d2}, copied out.
std::vector<float> box_of(const std::vector<float>& whole, const std::vector<int64_t>& shape,
                          const std::vector<int64_t>& off, const std::vector<int64_t>& cnt) {
  std::vector<float> out;
  for (int64_t i = 0; i < cnt[0]; ++i)
    for (int64_t j = 0; j < cnt[1]; ++j)
      for (int64_t k = 0; k < cnt[2]; ++k)
        out.push_back(whole[static_cast<size_t>(((off[0] + i) * shape[1] + off[1] + j) * shape[2] + off[2] + k)]);
  return out;
}

TEST(ResumeNoise, InertLeavesTheValues) {
  std::vector<float> v = ramp(60), before = v;
  perturb_resumed_box(ResumeNoise{}, "w", {3, 4, 5}, {0, 0, 0}, {3, 4, 5}, v.data());
  EXPECT_EQ(v, before);
}

// The noise is a function of (seed, name, flat index in the whole tensor): every split of the tensor into boxes (TP's
// axis split, PP's whole tensors, ZeRO's flat ranges) resumes the same perturbed values, bit for bit.
TEST(ResumeNoise, EveryBoxOfTheTensorGetsTheWholeTensorsNoise) {
  const std::vector<int64_t> shape = {4, 6, 10};
  const ResumeNoise noise{1e-3, {}, 7};
  std::vector<float> whole = ramp(240);
  const std::vector<float> original = whole;
  perturb_resumed_box(noise, "h.0.mlp.fc.weight", shape, {0, 0, 0}, shape, whole.data());
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes = {
      {{0, 0, 0}, {4, 3, 10}},
      {{0, 3, 0}, {4, 3, 10}},  // with the box above: a split on axis 1 (TP)
      {{1, 2, 3}, {2, 3, 4}},   // an inner box
      {{3, 5, 0}, {1, 1, 10}},  // the last row
      {{2, 0, 7}, {1, 6, 3}}};
  for (const auto& [off, cnt] : boxes) {
    std::vector<float> b = box_of(original, shape, off, cnt);
    perturb_resumed_box(noise, "h.0.mlp.fc.weight", shape, off, cnt, b.data());
    EXPECT_EQ(b, box_of(whole, shape, off, cnt)) << "box at " << off[0] << "," << off[1] << "," << off[2];
  }
}

TEST(ResumeNoise, RelativeSizeSeedAndNameDecideTheDraw) {
  const int64_t n = 20000;
  const double rel = 1e-4;
  const std::vector<float> original = ramp(n);
  auto perturbed = [&](const ResumeNoise& noise, const char* name) {
    std::vector<float> v = original;
    perturb_resumed_box(noise, name, {n}, {0}, {n}, v.data());
    return v;
  };
  const std::vector<float> a = perturbed({rel, {}, 1}, "wte");
  double sum2 = 0, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = static_cast<double>(a[static_cast<size_t>(i)]) / original[static_cast<size_t>(i)] - 1.0;
    sum2 += r * r;
    worst = std::max(worst, std::fabs(r));
  }
  EXPECT_LE(worst, rel * (1 + 1e-3));  // |u| < 1, plus the float rounding of the result (6e-8 at most)
  EXPECT_GT(worst, 0.99 * rel);
  EXPECT_NEAR(std::sqrt(sum2 / n), rel / std::sqrt(3.0), 0.03 * rel);  // u uniform in [-1, 1): RMS 1/sqrt(3)
  EXPECT_EQ(a, perturbed({rel, {}, 1}, "wte"));                        // deterministic
  EXPECT_NE(a, perturbed({rel, {}, 2}, "wte"));                        // another seed
  EXPECT_NE(a, perturbed({rel, {}, 1}, "wpe"));                        // another tensor
}

// Per-tensor sizes (HPCT_TEST_RESUME_NOISE=@FILE): a listed tensor gets its own size, one not listed none.
TEST(ResumeNoise, PerTensorSizes) {
  ResumeNoise noise;
  noise.seed = 5;
  noise.per_tensor = {{"wte", 1e-3}, {"wpe", 0.0}};
  EXPECT_TRUE(noise.active());
  EXPECT_EQ(noise.rel_of("wte"), 1e-3);
  EXPECT_EQ(noise.rel_of("lnf.weight"), 0.0);
  const std::vector<float> original = ramp(100);
  std::vector<float> wte = original, wpe = original, other = original, uniform = original;
  perturb_resumed_box(noise, "wte", {100}, {0}, {100}, wte.data());
  perturb_resumed_box(noise, "wpe", {100}, {0}, {100}, wpe.data());
  perturb_resumed_box(noise, "lnf.weight", {100}, {0}, {100}, other.data());
  perturb_resumed_box(ResumeNoise{1e-3, {}, 5}, "wte", {100}, {0}, {100}, uniform.data());
  EXPECT_EQ(wte, uniform);  // the same draw as one size for every tensor
  EXPECT_EQ(wpe, original);
  EXPECT_EQ(other, original);
}

}  // namespace
}  // namespace hpct
