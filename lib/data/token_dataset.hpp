#pragma once
// A token dataset: an ordered list of token shards (llm.c / nanoGPT format, data/token_shard.hpp), as the
// deck's data.train / data.val name them (docs/contracts.md "Data"): each item a path or a glob.
//
//   expand_token_paths({"kjv_shards/kjv_train_*.bin"}, "/data", "data.train")
//     -> {"/data/kjv_shards/kjv_train_000000.bin", ..., "/data/kjv_shards/kjv_train_000003.bin"}
//
// The expanded list, in order, is the dataset: items keep their order, the matches of one glob are sorted
// (byte order), a glob matching nothing is an error naming the pattern and the data directory, a file listed
// twice is an error. TokenDataset::open opens every shard (header and size checked, data/token_shard.hpp)
// before step 1; the tokens stay memory-mapped and page in lazily as windows are read, never read whole
// (token ids are checked against the vocabulary as windows are read: data/token_sampler.hpp).
//
// Windows never cross a shard boundary. Per shard k of N_k tokens and sequence length T:
//   random order: start positions 0 .. N_k-T-1, W_k = max(0, N_k - T) windows
//   stride T (epoch order and the evaluation set): window j = tokens [j*T, j*T + T + 1), n_k = floor((N_k-1)/T)
//     windows (the tail of fewer than T+1 tokens past the last window is not used)
// WindowIndex (below) keeps the prefix sums of either count, so a global window index maps to (shard, offset) by a
// binary search.
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_shard.hpp"

namespace hpct::data {

// The deck items of `key` (paths or globs; relative ones resolve against data_dir) -> the dataset's files.
// UsageErrors: no item, a glob that matches nothing (naming the pattern and data_dir), a duplicate file.
std::vector<std::string> expand_token_paths(const std::vector<std::string>& items, const std::string& data_dir,
                                            const std::string& key);

// One shard as a checkpoint records it: file name (the last path component), resolved path, token count.
struct TokenShardInfo {
  std::string name;
  std::string path;
  int64_t tokens = 0;
  bool operator==(const TokenShardInfo&) const = default;
};

// A window of the concatenation: tokens [offset, offset + T + 1) of shard `shard`.
struct TokenWindow {
  int shard = 0;
  int64_t offset = 0;
  bool operator==(const TokenWindow&) const = default;
};

class TokenDataset {
 public:
  // Opens every shard (UsageError naming the file on a missing, truncated or foreign one). `key` names the
  // deck key in messages ("data.train").
  static TokenDataset open(const std::vector<std::string>& paths, const std::string& key = "data");

  int num_shards() const { return static_cast<int>(shards_.size()); }
  const TokenShard& shard(int k) const { return shards_[k]; }
  int64_t total_tokens() const { return total_tokens_; }
  const std::string& key() const { return key_; }
  std::vector<TokenShardInfo> info() const;
  // "kjv_train.bin (3868415 tokens)" or "4 shards, 3868415 tokens (kjv_train_000000.bin .. kjv_train_000003.bin)"
  std::string describe() const;

 private:
  std::string key_;
  std::vector<TokenShard> shards_;
  int64_t total_tokens_ = 0;
};

// The windows of a dataset at one sequence length T, numbered over the concatenation, with the prefix sums of
// the per-shard counts (above): window w -> (shard, offset) by binary search. Kind::Random: every start position
// (W_k per shard); Kind::Stride: starts j*T (n_k per shard), shard 0 first.
class WindowIndex {
 public:
  enum class Kind { Random, Stride };
  WindowIndex(const TokenDataset& ds, int seq_len, Kind kind);

  int64_t size() const { return prefix_.back(); }  // W or E
  int64_t windows_of(int shard) const { return prefix_[shard + 1] - prefix_[shard]; }
  TokenWindow at(int64_t w) const;  // 0 <= w < size()

 private:
  Kind kind_;
  int seq_len_;                  // T
  std::vector<int64_t> prefix_;  // (num_shards + 1): windows of shards [0, k)
};

}  // namespace hpct::data
