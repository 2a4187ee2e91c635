// The planted-defect seam (core/test_fault.hpp): HPCT_TEST_FAULT is read once per process, so this binary's only
// reader sets it first. A malformed value (a UsageError at start-up) is checked by hand; the planted defects themselves
// by the ctest validation_sensitivity.
#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace hpct
