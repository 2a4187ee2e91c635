// Plain text -> byte-level shards: the validation split is the last val_fraction of the bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "data/text_prepare.hpp"
#include "data/token_shard.hpp"
#include "test_util.hpp"

namespace hpct::data {
namespace {

using testing::expect_usage_error;
using testing::ScratchDir;

TEST(SplitTrainVal, TailIsValidation) {
  auto s = split_train_val(100, 0.1);
  EXPECT_EQ(s.train_bytes, 90);
  EXPECT_EQ(s.val_bytes, 10);
  s = split_train_val(4298239, 0.1);  // the KJV text: 429823.9 rounds to 429824
  EXPECT_EQ(s.val_bytes, 429824);
  EXPECT_EQ(s.train_bytes, 4298239 - 429824);
  s = split_train_val(5, 0.1);  // 0.5 rounds away from zero
  EXPECT_EQ(s.val_bytes, 1);
  EXPECT_EQ(s.train_bytes, 4);
  s = split_train_val(2, 0.5);
  EXPECT_EQ(s.val_bytes, 1);
  EXPECT_EQ(s.train_bytes, 1);
}

TEST(SplitTrainVal, RejectsBadFractionsAndTinyTexts) {
  for (double f : {0.0, 1.0, -0.1, 1.5}) expect_usage_error([&] { split_train_val(1000, f); }, {"validation fraction"});
  expect_usage_error([&] { split_train_val(4, 0.1); }, {"4 bytes", "too small"});  // val rounds to 0
  expect_usage_error([&] { split_train_val(4, 0.9); }, {"4 bytes", "too small"});  // train would be 0
  expect_usage_error([&] { split_train_val(0, 0.5); }, {"too small"});
}

TEST(PrepareText, WritesByteTokensAndSplitsTail) {
  ScratchDir dir;
  // Every byte value, including NUL and non-UTF-8 bytes, in a non-periodic order.
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>((i * 37 + i / 256) & 0xff));
  const std::string input = dir.file("in.txt");
  std::ofstream(input, std::ios::binary) << text;

  const auto out = prepare_text_shards(input, dir.file("out"), "toy", 0.25);
  EXPECT_EQ(out.train_path, dir.file("out/toy_train.bin"));
  EXPECT_EQ(out.val_path, dir.file("out/toy_val.bin"));
  EXPECT_EQ(out.train_tokens, 750);
  EXPECT_EQ(out.val_tokens, 250);

  const TokenShard train = TokenShard::open(out.train_path);
  const TokenShard val = TokenShard::open(out.val_path);
  ASSERT_EQ(train.size(), 750);
  ASSERT_EQ(val.size(), 250);
  for (int64_t i = 0; i < 750; ++i) ASSERT_EQ(train.tokens()[i], static_cast<unsigned char>(text[i])) << i;
  for (int64_t i = 0; i < 250; ++i) ASSERT_EQ(val.tokens()[i], static_cast<unsigned char>(text[750 + i])) << i;
}

// --shard-tokens: the training part in shards of N tokens named NAME_train_%06d.bin (the last one shorter), whose
// concatenation is the unsharded training file; the validation split unchanged.
TEST(PrepareText, ShardTokensWritesLlmcNamedShards) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  const std::string input = dir.file("in.txt");
  std::ofstream(input, std::ios::binary) << text;
  const auto out = prepare_text_shards(input, dir.file("out"), "toy", 0.25, 300);
  ASSERT_EQ(out.train_paths.size(), 3u);  // 750 = 300 + 300 + 150
  EXPECT_EQ(out.train_paths[0], dir.file("out/toy_train_000000.bin"));
  EXPECT_EQ(out.train_paths[2], dir.file("out/toy_train_000002.bin"));
  EXPECT_EQ(out.val_path, dir.file("out/toy_val.bin"));
  int64_t at = 0;
  for (size_t k = 0; k < 3; ++k) {
    const TokenShard s = TokenShard::open(out.train_paths[k]);
    EXPECT_EQ(s.size(), k < 2 ? 300 : 150);
    for (int64_t i = 0; i < s.size(); ++i, ++at) ASSERT_EQ(s.tokens()[i], static_cast<unsigned char>(text[at]));
  }
  EXPECT_EQ(TokenShard::open(out.val_path).size(), 250);
  expect_usage_error([&] { prepare_text_shards(input, dir.file("o"), "x", 0.1, -1); }, {"--shard-tokens -1"});
}

TEST(PrepareText, Errors) {
  ScratchDir dir;
  const std::string missing = dir.file("missing.txt");
  expect_usage_error([&] { prepare_text_shards(missing, dir.file("o"), "x", 0.1); }, {missing, "not found"});
  const std::string empty = dir.file("empty.txt");
  std::ofstream(empty).close();
  expect_usage_error([&] { prepare_text_shards(empty, dir.file("o"), "x", 0.1); }, {empty, "empty"});
  const std::string ok = dir.file("ok.txt");
  std::ofstream(ok) << "some text that is long enough";
  expect_usage_error([&] { prepare_text_shards(ok, dir.file("o"), "a/b", 0.1); }, {"a/b"});
}

}  // namespace
}  // namespace hpct::data
