// Token shard format (llm.c / nanoGPT): write/read round trip, and every malformed file gives a
// UsageError that names the file.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/rng.hpp"
#include "data/token_shard.hpp"
#include "test_util.hpp"

namespace hpct::data {
namespace {

using testing::expect_usage_error;
using testing::ScratchDir;

// Random tokens over the whole uint16 range (not just bytes), so a narrowing bug would show.
std::vector<uint16_t> random_tokens(int64_t n, uint64_t seed) {
  std::vector<uint16_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(rng::uniform_int(seed, 7, i, 65536));
  return t;
}

std::vector<int32_t> read_header(const std::string& path) {
  std::vector<int32_t> h(kTokenShardHeaderInts);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(h.data()), kTokenShardHeaderBytes);
  EXPECT_TRUE(in.good());
  return h;
}

void patch_int32(const std::string& path, int64_t byte_offset, int32_t value) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(byte_offset);
  f.write(reinterpret_cast<const char*>(&value), sizeof(value));
  ASSERT_TRUE(f.good());
}

TEST(TokenShard, RoundTrip) {
  ScratchDir dir;
  const std::string path = dir.file("round.bin");
  const auto tokens = random_tokens(12345, 1);
  write_token_shard(path, tokens.data(), static_cast<int64_t>(tokens.size()));

  // The exact llm.c layout: 1024-byte header, then 2 bytes per token, and no temporary left behind.
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2u * tokens.size());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const auto h = read_header(path);
  EXPECT_EQ(h[0], 20240520);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 12345);
  for (int i = 3; i < kTokenShardHeaderInts; ++i) EXPECT_EQ(h[i], 0) << "header word " << i;

  const TokenShard shard = TokenShard::open(path);
  EXPECT_EQ(shard.size(), 12345);
  EXPECT_EQ(shard.path(), path);
  ASSERT_NE(shard.tokens(), nullptr);
  EXPECT_EQ(std::memcmp(shard.tokens(), tokens.data(), 2 * tokens.size()), 0);
}

TEST(TokenShard, EmptyShardAndOverwrite) {
  ScratchDir dir;
  const std::string path = dir.file("s.bin");
  const auto tokens = random_tokens(100, 2);
  write_token_shard(path, tokens.data(), 100);
  write_token_shard(path, nullptr, 0);  // replaces the existing file atomically
  const TokenShard shard = TokenShard::open(path);
  EXPECT_EQ(shard.size(), 0);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u);
}

TEST(TokenShard, MoveKeepsMapping) {
  ScratchDir dir;
  const std::string path = dir.file("m.bin");
  const auto tokens = random_tokens(64, 3);
  write_token_shard(path, tokens.data(), 64);
  TokenShard a = TokenShard::open(path);
  const uint16_t* p = a.tokens();
  TokenShard b = std::move(a);
  EXPECT_EQ(b.tokens(), p);
  EXPECT_EQ(b.size(), 64);
  EXPECT_EQ(b.tokens()[63], tokens[63]);
  EXPECT_EQ(a.size(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(a.tokens(), nullptr);
  TokenShard c = TokenShard::open(path);
  c = std::move(b);  // move-assign releases c's own mapping first
  EXPECT_EQ(c.tokens(), p);
  EXPECT_EQ(c.tokens()[0], tokens[0]);
}

TEST(TokenShard, MissingFileSaysHowToPrepare) {
  ScratchDir dir;
  const std::string path = dir.file("nope_train.bin");
  expect_usage_error([&] { TokenShard::open(path); }, {path, "not found", "scripts/prepare_data.sh"});
}

TEST(TokenShard, BadMagic) {
  ScratchDir dir;
  const std::string path = dir.file("magic.bin");
  const auto tokens = random_tokens(10, 4);
  write_token_shard(path, tokens.data(), 10);
  patch_int32(path, 0, 20240521);
  expect_usage_error([&] { TokenShard::open(path); }, {path, "magic", "20240521", "20240520"});
}

TEST(TokenShard, BadVersion) {
  ScratchDir dir;
  const std::string path = dir.file("version.bin");
  const auto tokens = random_tokens(10, 5);
  write_token_shard(path, tokens.data(), 10);
  patch_int32(path, 4, 2);  // llm.c's version 2 is uint32 tokens (Llama 3): not ours
  expect_usage_error([&] { TokenShard::open(path); }, {path, "version 2"});
}

TEST(TokenShard, TruncatedFile) {
  ScratchDir dir;
  const std::string path = dir.file("trunc.bin");
  const auto tokens = random_tokens(1000, 6);
  write_token_shard(path, tokens.data(), 1000);
  std::filesystem::resize_file(path, 1024 + 2 * 999);  // one token short
  expect_usage_error([&] { TokenShard::open(path); }, {path, "truncated", "1000 tokens"});
  std::filesystem::resize_file(path, 1024 + 2 * 1000 + 1);  // one stray byte too many
  expect_usage_error([&] { TokenShard::open(path); }, {path, "truncated"});
}

TEST(TokenShard, ShorterThanHeader) {
  ScratchDir dir;
  const std::string path = dir.file("tiny.bin");
  std::ofstream(path) << "hello";
  expect_usage_error([&] { TokenShard::open(path); }, {path, "not a token shard"});
}

TEST(TokenShard, NegativeCountInHeader) {
  ScratchDir dir;
  const std::string path = dir.file("neg.bin");
  write_token_shard(path, nullptr, 0);
  patch_int32(path, 8, -1);
  expect_usage_error([&] { TokenShard::open(path); }, {path, "truncated or corrupt"});
}

TEST(TokenShard, WriteIntoMissingDirectoryNamesFile) {
  ScratchDir dir;
  const std::string path = dir.file("no/such/dir/x.bin");
  const auto tokens = random_tokens(4, 8);
  expect_usage_error([&] { write_token_shard(path, tokens.data(), 4); }, {path, "cannot create"});
}

}  // namespace
}  // namespace hpct::data
