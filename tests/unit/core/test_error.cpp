#include <gtest/gtest.h>

#include "core/error.hpp"

TEST(Error, CarriesRankFileLineCause) {
  hpct::set_process_identity(3, 8);
  try {
    const int x = 2;
    HPCT_CHECK(x == 3, "x is {}", x);
    FAIL();
  } catch (const hpct::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("[rank 3 on "), std::string::npos) << w;
    EXPECT_NE(w.find("test_error.cpp:"), std::string::npos) << w;
    EXPECT_NE(w.find("x == 3"), std::string::npos) << w;
    EXPECT_NE(w.find("x is 2"), std::string::npos) << w;
    EXPECT_EQ(e.rank(), 3);
    EXPECT_GT(e.line(), 0);
  }
  hpct::set_process_identity(-1, 1);
}

TEST(Error, UsageErrorIsAnError) {
  EXPECT_THROW(HPCT_USAGE_FAIL("bad {}", 1), hpct::UsageError);
  EXPECT_THROW(HPCT_USAGE_FAIL("bad {}", 1), hpct::Error);
}
