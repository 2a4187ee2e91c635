#include <gtest/gtest.h>

#include "core/format.hpp"

TEST(Format, HumanBytes) {
  EXPECT_EQ(hpct::human_bytes(0), "0.00 B");
  EXPECT_EQ(hpct::human_bytes(512), "512.00 B");
  EXPECT_EQ(hpct::human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(hpct::human_bytes(4.0 * 1024 * 1024), "4.00 MiB");
  EXPECT_EQ(hpct::human_bytes(3.0 * 1024 * 1024 * 1024), "3.00 GiB");
  EXPECT_EQ(hpct::human_bytes(2048.0 * 1024 * 1024 * 1024 * 1024), "2048.00 TiB");  // TiB is the last unit
}
