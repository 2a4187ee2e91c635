// Multi-shard token datasets (data/token_dataset.hpp) and their two sampling orders (data/token_sampler.hpp):
// glob expansion, windows that never cross a shard boundary, the epoch order's keyed bijection, the single-file
// random order bit for bit the old formula, and the per-window vocabulary check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <set>
#include <vector>

#include "core/rng.hpp"
#include "data/token_dataset.hpp"
#include "data/token_sampler.hpp"
#include "data/token_shard.hpp"
#include "test_util.hpp"

namespace hpct::data {
namespace {

using testing::expect_usage_error;
using testing::ScratchDir;

// Shard k's token i is 1000*k + i (i < 1000): a window reveals its shard and offset.
std::vector<std::string> tagged_shards(const ScratchDir& dir, const std::vector<int64_t>& sizes,
                                       const std::string& prefix = "part") {
  std::vector<std::string> paths;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<uint16_t> t(sizes[k]);
    for (int64_t i = 0; i < sizes[k]; ++i) t[i] = static_cast<uint16_t>(1000 * k + i);
    paths.push_back(dir.file(fmt::format("{}_{:06d}.bin", prefix, k)));
    write_token_shard(paths.back(), t.data(), sizes[k]);
  }
  return paths;
}

std::string cause_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const hpct::UsageError& e) {
    return e.cause();
  }
  return "(no UsageError)";
}

TEST(FeistelPermute, IsABijectionOfEveryDomain) {
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 7ull, 16ull, 17ull, 255ull, 1000ull, 4096ull, 65537ull}) {
    for (uint64_t seed : {1ull, 1337ull})
      for (uint64_t epoch : {0ull, 1ull, 7ull}) {
        std::vector<uint64_t> img(n);
        for (uint64_t p = 0; p < n; ++p)
          img[p] = feistel_permute(p, n, seed, epoch, rng::stream_of("data.train.epoch"));
        std::vector<uint64_t> sorted = img;
        std::sort(sorted.begin(), sorted.end());
        std::vector<uint64_t> iota(n);
        std::iota(iota.begin(), iota.end(), 0);
        ASSERT_EQ(sorted, iota) << "not a bijection of [0, " << n << "), seed " << seed << ", epoch " << epoch;
      }
  }
}

TEST(FeistelPermute, DiffersPerEpochAndSeedAndIsNotTheIdentity) {
  const uint64_t n = 1000, st = rng::stream_of("data.train.epoch");
  auto perm = [&](uint64_t seed, uint64_t epoch) {
    std::vector<uint64_t> v(n);
    for (uint64_t p = 0; p < n; ++p) v[p] = feistel_permute(p, n, seed, epoch, st);
    return v;
  };
  const auto a = perm(1, 0);
  EXPECT_NE(a, perm(1, 1));
  EXPECT_NE(a, perm(2, 0));
  EXPECT_EQ(a, perm(1, 0));  // a pure function
  int fixed = 0;
  for (uint64_t p = 0; p < n; ++p) fixed += a[p] == p;
  EXPECT_LT(fixed, 10) << "a random permutation of 1000 has ~1 fixed point";
  // large domains stay in range (2^(2h) >= n with h = 16 for 3e9)
  for (uint64_t p : {0ull, 1ull, 2999999999ull, 123456789ull})
    EXPECT_LT(feistel_permute(p, 3000000000ull, 5, 3, st), 3000000000ull);
}

// rng::uniform_int is a 64 x 64 -> 128-bit multiply-high: exact for W > 2^32 (a multi-shard dataset of billions of
// windows). Its draws must reach the whole range and average W/2.
TEST(UniformInt, CoversRangesBeyond32Bits) {
  const uint64_t W = 3 * (uint64_t{1} << 32) + 5;
  double sum = 0;
  uint64_t hi = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const uint64_t u = rng::uniform_int(1337, rng::stream_of("data.train"), static_cast<uint64_t>(i), W);
    ASSERT_LT(u, W);
    sum += static_cast<double>(u);
    hi = std::max(hi, u);
  }
  EXPECT_GT(hi, 2 * (uint64_t{1} << 32)) << "draws never exceed 2^33";
  EXPECT_NEAR(sum / n / static_cast<double>(W), 0.5, 0.01);  // std of the mean ~0.002
}

TEST(TokenDataset, SingleFileRandomOrderIsTheOldFormulaBitForBit) {
  ScratchDir dir;
  const auto paths = tagged_shards(dir, {900});
  const TokenDataset ds = TokenDataset::open(paths);
  const int T = 32;
  const TokenBatchSampler s(ds, T, 1337);
  for (int64_t step : {1, 2, 77, 100000})
    for (int64_t i = 0; i < 16; ++i) {
      const uint64_t counter = static_cast<uint64_t>(step - 1) * (uint64_t{1} << 32) + static_cast<uint64_t>(i);
      const auto old = static_cast<int64_t>(rng::uniform_int(1337, rng::stream_of("data.train"), counter, 900 - T));
      EXPECT_EQ(s.window(step, i), (TokenWindow{0, old})) << "step " << step << " sample " << i;
    }
}

// Windows of both orders lie inside one shard; shards shorter than T+1 tokens contribute none; both orders reach the
// shards with windows.
TEST(TokenDataset, WindowsNeverCrossAShardBoundary) {
  ScratchDir dir;
  const std::vector<int64_t> sizes = {700, 10, 450, 65, 333};
  const TokenDataset ds = TokenDataset::open(tagged_shards(dir, sizes));
  const int T = 64;
  EXPECT_EQ(WindowIndex(ds, T, WindowIndex::Kind::Random).size(), (700 - 64) + 0 + (450 - 64) + 1 + (333 - 64));
  EXPECT_EQ(WindowIndex(ds, T, WindowIndex::Kind::Stride).size(), 10 + 0 + 7 + 1 + 5);
  for (TokenOrder order : {TokenOrder::Random, TokenOrder::Epoch}) {
    const TokenBatchSampler s(ds, T, 42, 65536, order, 16);
    std::set<int> shards_seen;
    for (int64_t step = 1; step <= 20; ++step) {
      std::vector<int32_t> inp(16 * T), tgt(16 * T);
      s.fill(step, 0, 16, inp.data(), tgt.data());
      for (int r = 0; r < 16; ++r) {
        const int k = inp[r * T] / 1000;
        const int64_t o = inp[r * T] % 1000;
        shards_seen.insert(k);
        ASSERT_NE(k, 1) << "a shard of 10 tokens has no window";
        ASSERT_LE(o + T, sizes[k] - 1) << "the last target is past the end of shard " << k;
        if (order == TokenOrder::Epoch) {
          ASSERT_EQ(o % T, 0) << "epoch windows start at multiples of T";
        }
        for (int t = 0; t < T; ++t) {
          ASSERT_EQ(inp[r * T + t], 1000 * k + o + t);
          ASSERT_EQ(tgt[r * T + t], 1000 * k + o + t + 1);
        }
      }
    }
    // random: shard 3's one window of ~1290 is rarely drawn; epoch: every window of the 14 epochs' worth of samples
    if (order == TokenOrder::Epoch) {
      EXPECT_EQ(shards_seen, (std::set<int>{0, 2, 3, 4}));
    } else {
      EXPECT_TRUE(shards_seen.count(0) && shards_seen.count(2) && shards_seen.count(4));
    }
  }
}

// Epoch order: every stride-T window once per epoch, in an order that changes from epoch to epoch; epoch and position
// follow from (step, sample) alone, across epoch boundaries inside a step.
TEST(TokenDataset, EpochOrderVisitsEveryWindowOncePerEpoch) {
  ScratchDir dir;
  const TokenDataset ds = TokenDataset::open(tagged_shards(dir, {700, 450, 333, 10}));
  const int T = 64, GB = 16;
  const TokenBatchSampler s(ds, T, 1337, 65536, TokenOrder::Epoch, GB);
  const int64_t E = s.num_windows();
  ASSERT_EQ(E, 22);
  std::vector<std::vector<TokenWindow>> epochs(8);
  for (int64_t step = 1; step <= 11; ++step)  // 176 samples = 8 epochs of 22
    for (int i = 0; i < GB; ++i) epochs[s.epoch(step, i)].push_back(s.window(step, i));
  const WindowIndex stride(ds, T, WindowIndex::Kind::Stride);
  std::vector<TokenWindow> all;
  for (int64_t w = 0; w < E; ++w) all.push_back(stride.at(w));
  auto key = [](const TokenWindow& w) { return std::pair(w.shard, w.offset); };
  auto sorted = [&](std::vector<TokenWindow> v) {
    std::sort(v.begin(), v.end(), [&](auto& a, auto& b) { return key(a) < key(b); });
    return v;
  };
  for (int e = 0; e < 8; ++e) {
    ASSERT_EQ(epochs[e].size(), static_cast<size_t>(E)) << "epoch " << e;
    EXPECT_EQ(sorted(epochs[e]), sorted(all)) << "epoch " << e << " does not visit every window once";
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[0], all) << "epoch 0 in file order: not shuffled";
  // another seed, another order
  const TokenBatchSampler other(ds, T, 1338, 65536, TokenOrder::Epoch, GB);
  std::vector<TokenWindow> first;
  for (int i = 0; i < GB; ++i) first.push_back(other.window(1, i));
  EXPECT_NE(first, std::vector<TokenWindow>(epochs[0].begin(), epochs[0].begin() + GB));
}

// Both orders are layout-independent: blocks of a global batch filled separately equal the serial fill.
TEST(TokenDataset, BothOrdersAreSplitIndependent) {
  ScratchDir dir;
  const TokenDataset ds = TokenDataset::open(tagged_shards(dir, {700, 450, 333}));
  const int T = 64, GB = 16;
  for (TokenOrder order : {TokenOrder::Random, TokenOrder::Epoch}) {
    const TokenBatchSampler s(ds, T, 7, 65536, order, GB);
    for (int64_t step : {1, 2, 3, 5}) {
      std::vector<int32_t> inp(GB * T), tgt(GB * T), inp2(GB * T, -1), tgt2(GB * T, -1);
      s.fill(step, 0, GB, inp.data(), tgt.data());
      for (int first : {0, 4, 8, 12}) s.fill(step, first, 4, inp2.data() + first * T, tgt2.data() + first * T);
      EXPECT_EQ(inp, inp2) << token_order_name(order) << " step " << step;
      EXPECT_EQ(tgt, tgt2);
    }
  }
}

TEST(TokenDataset, NoWindowAtAllIsAnError) {
  ScratchDir dir;
  const TokenDataset ds = TokenDataset::open(tagged_shards(dir, {10, 64}));
  EXPECT_EQ(cause_of([&] { TokenBatchSampler(ds, 64, 1); }),
            fmt::format("data: none of the 2 shards (2 shards, 74 tokens ({} .. part_000001.bin)) holds a training "
                        "sequence of seq_len+1 = 65 tokens; use larger shards or a smaller sequence length",
                        ds.shard(0).path()));
}

TEST(TokenEvalSet, WalksTheShardsInOrderWithoutCrossingBoundaries) {
  ScratchDir dir;
  const TokenDataset ds = TokenDataset::open(tagged_shards(dir, {20, 5, 30}));
  const int T = 8;
  const TokenEvalSet eval(ds, T, 5);  // shard 0: 2 windows (0, 8); shard 1: none; shard 2: 3 (0, 8, 16)
  std::vector<int32_t> inp(5 * T), tgt(5 * T);
  eval.fill(0, 5, inp.data(), tgt.data());
  const int32_t starts[5] = {0, 8, 2000, 2008, 2016};
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(inp[r * T], starts[r]) << "window " << r;
    EXPECT_EQ(tgt[r * T + T - 1], starts[r] + T);
  }
  expect_usage_error([&] { TokenEvalSet(ds, T, 6); }, {"holds 5 windows of seq_len 8", "6 sequences"});
}

// Token ids are checked as windows are read, with the file, the token index and its byte offset in the message.
TEST(TokenDataset, TokenBeyondVocabularyNamesFileAndOffset) {
  ScratchDir dir;
  std::vector<uint16_t> t(40, 7);
  t[20] = 300;
  const std::string path = dir.file("big_token.bin");
  write_token_shard(path, t.data(), 40);
  const TokenDataset ds = TokenDataset::open({path});
  const std::string expected = fmt::format(
      "data file {} holds token 300 at token 20 (byte offset 1064) but model.vocab_size = 256; raise "
      "model.vocab_size or re-tokenise",
      path);
  EXPECT_EQ(cause_of([&] { TokenEvalSet(ds, 8, 4, 256); }), expected);  // window 2 = tokens [16, 25)
  EXPECT_NO_THROW(TokenEvalSet(ds, 8, 2, 256));                         // windows [0, 17): clean
  const TokenBatchSampler s(ds, 8, 1, 256);
  std::vector<int32_t> inp(8), tgt(8);
  std::string got;
  for (int64_t i = 0; i < 200 && got.empty(); ++i) {
    const TokenWindow w = s.window(1, i);
    if (w.offset + 8 < 20 || w.offset > 20) {
      EXPECT_NO_THROW(s.fill(1, i, 1, inp.data(), tgt.data()));
    } else {
      got = cause_of([&] { s.fill(1, i, 1, inp.data(), tgt.data()); });
    }
  }
  EXPECT_EQ(got, expected);
}

TEST(ExpandTokenPaths, GlobsSortListsKeepOrderRelativeResolve) {
  ScratchDir dir;
  tagged_shards(dir, {20, 20, 20}, "b");
  tagged_shards(dir, {20}, "a");
  const std::string d = dir.path().string();
  EXPECT_EQ(expand_token_paths({"b_*.bin"}, d, "data.train"),
            (std::vector<std::string>{dir.file("b_000000.bin"), dir.file("b_000001.bin"), dir.file("b_000002.bin")}));
  // items keep their order; absolute items stay; a plain missing path is left to TokenShard::open's message
  EXPECT_EQ(expand_token_paths({"b_00000[2].bin", "a_000000.bin", dir.file("b_000000.bin"), "missing.bin"}, d,
                               "data.train"),
            (std::vector<std::string>{dir.file("b_000002.bin"), dir.file("a_000000.bin"), dir.file("b_000000.bin"),
                                      dir.file("missing.bin")}));
}

TEST(ExpandTokenPaths, Errors) {
  ScratchDir dir;
  tagged_shards(dir, {20, 20}, "b");
  const std::string d = dir.path().string();
  EXPECT_EQ(cause_of([&] { expand_token_paths({"nomatch_*.bin"}, d, "data.train"); }),
            fmt::format("data.train: the pattern {}/nomatch_*.bin matches no file (relative items resolve against the "
                        "data directory {}, $HPCT_DATA_DIR); check the pattern, or run scripts/prepare_data.sh",
                        d, d));
  EXPECT_EQ(cause_of([&] {
              expand_token_paths({"b_*.bin", "b_000001.bin"}, d, "data.val");
            }),
            fmt::format("data.val lists {} twice (shards 1 and 2 of the expanded list); each shard may appear once: "
                        "remove the duplicate item or narrow the glob",
                        dir.file("b_000001.bin")));
  expect_usage_error([&] { expand_token_paths({}, d, "data.train"); }, {"data.train is empty"});
}

}  // namespace
}  // namespace hpct::data
