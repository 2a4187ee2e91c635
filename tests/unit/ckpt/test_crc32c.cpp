// CRC32C: standard check values, hardware (SSE4.2) == software (slicing-by-8) on random buffers of odd lengths
// and alignments, and chaining over split buffers.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace hpct::ckpt {
namespace {

TEST(Crc32c, CheckValues) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(crc32c_sw(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c_sw(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c_sw(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c_sw(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, HardwareMatchesSoftwareOnRandomBuffers) {
  if (!crc32c_hw_available()) GTEST_SKIP() << "no SSE4.2 on this CPU: only the table-driven path exists";
  std::mt19937_64 rng(42);
  std::vector<unsigned char> buf(70000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  // around the three-stream blocks: 3 x 256 and 3 x 8192 bytes, and their multiples with a remainder
  for (size_t len : {1u,     3u,    7u,    8u,    9u,    15u,    63u,    255u,   767u,
                     768u,   769u,  1023u, 1543u, 4097u, 24575u, 24576u, 24577u, 49152u + 768u + 9u,
                     65535u, 69993u}) {
    for (size_t start : {0u, 1u, 3u, 5u}) {
      if (start + len > buf.size()) continue;
      const uint32_t sw = crc32c_sw(buf.data() + start, len), hw = crc32c_hw(buf.data() + start, len);
      EXPECT_EQ(sw, hw) << "len " << len << " start " << start;
    }
  }
}

TEST(Crc32c, ChainsOverSplitBuffers) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(10007);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  const uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t cut : {0u, 1u, 13u, 4096u, 10006u, 10007u}) {
    EXPECT_EQ(crc32c(buf.data() + cut, buf.size() - cut, crc32c(buf.data(), cut)), whole) << "cut " << cut;
    EXPECT_EQ(crc32c_sw(buf.data() + cut, buf.size() - cut, crc32c_sw(buf.data(), cut)), whole) << "cut " << cut;
  }
  // One flipped bit changes the checksum.
  buf[5000] ^= 0x10;
  EXPECT_NE(crc32c(buf.data(), buf.size()), whole);
}

}  // namespace
}  // namespace hpct::ckpt
