#include "data/token_dataset.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/error.hpp"

namespace hpct::data {

namespace fs = std::filesystem;

namespace {

bool is_glob(const std::string& item) { return item.find_first_of("*?[") != std::string::npos; }

// glob(3) without GLOB_NOSORT sorts by strcoll (the locale); sort again by bytes so that every rank and every
// locale sees the same order.
std::vector<std::string> glob_sorted(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  HPCT_USAGE_CHECK(rc == 0 || rc == GLOB_NOMATCH, "cannot expand the pattern {}: glob(3) failed (code {})", pattern,
                   rc);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> expand_token_paths(const std::vector<std::string>& items, const std::string& data_dir,
                                            const std::string& key) {
  HPCT_USAGE_CHECK(!items.empty(), "{} is empty: give a token shard, a glob or a list of shards", key);
  std::vector<std::string> paths;
  for (const std::string& item : items) {
    HPCT_USAGE_CHECK(!item.empty(), "{} holds an empty item: give a token shard, a glob or a list of shards", key);
    const std::string full = fs::path(item).is_absolute() ? item : (fs::path(data_dir) / item).string();
    if (!is_glob(item)) {
      paths.push_back(full);  // a missing file is reported by TokenShard::open, with the command that prepares it
      continue;
    }
    const std::vector<std::string> matches = glob_sorted(full);
    HPCT_USAGE_CHECK(!matches.empty(),
                     "{}: the pattern {} matches no file (relative items resolve against the data directory {}, "
                     "$HPCT_DATA_DIR); check the pattern, or run scripts/prepare_data.sh",
                     key, full, data_dir);
    paths.insert(paths.end(), matches.begin(), matches.end());
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string canon = fs::path(paths[i]).lexically_normal().string();
    const auto [it, fresh] = seen.emplace(canon, i);
    HPCT_USAGE_CHECK(fresh,
                     "{} lists {} twice (shards {} and {} of the expanded list); each shard may appear once: remove "
                     "the duplicate item or narrow the glob",
                     key, paths[i], it->second, i);
  }
  return paths;
}

TokenDataset TokenDataset::open(const std::vector<std::string>& paths, const std::string& key) {
  HPCT_USAGE_CHECK(!paths.empty(), "{} names no token shard", key);
  TokenDataset ds;
  ds.key_ = key;
  ds.shards_.reserve(paths.size());
  for (const std::string& p : paths) {
    ds.shards_.push_back(TokenShard::open(p));  // header and size, nothing else: the tokens stay on disk
    ds.total_tokens_ += ds.shards_.back().size();
  }
  return ds;
}

std::vector<TokenShardInfo> TokenDataset::info() const {
  std::vector<TokenShardInfo> v;
  for (const TokenShard& s : shards_) v.push_back({fs::path(s.path()).filename().string(), s.path(), s.size()});
  return v;
}

std::string TokenDataset::describe() const {
  if (shards_.size() == 1) return fmt::format("{} ({} tokens)", shards_[0].path(), shards_[0].size());
  return fmt::format("{} shards, {} tokens ({} .. {})", shards_.size(), total_tokens_, shards_.front().path(),
                     fs::path(shards_.back().path()).filename().string());
}

WindowIndex::WindowIndex(const TokenDataset& ds, int seq_len, Kind kind) : kind_(kind), seq_len_(seq_len) {
  HPCT_USAGE_CHECK(seq_len >= 1, "sequence length must be at least 1, got {}", seq_len);
  prefix_.assign(static_cast<size_t>(ds.num_shards()) + 1, 0);
  const int64_t T = seq_len;
  for (int k = 0; k < ds.num_shards(); ++k) {
    const int64_t n = ds.shard(k).size();
    // random: starts 0 .. N-T-1 (the last target, o+T, inside the shard); stride: j*T + T <= N-1
    const int64_t w = kind == Kind::Random ? std::max<int64_t>(0, n - T) : (n >= 1 ? (n - 1) / T : 0);
    prefix_[k + 1] = prefix_[k] + w;
  }
}

TokenWindow WindowIndex::at(int64_t w) const {
  HPCT_CHECK(w >= 0 && w < size(), "window {} out of range [0, {})", w, size());
  // the last k with prefix_[k] <= w: shards without windows have prefix_[k] == prefix_[k+1] and are skipped
  const auto it = std::upper_bound(prefix_.begin(), prefix_.end(), w);
  const int k = static_cast<int>(it - prefix_.begin()) - 1;
  const int64_t local = w - prefix_[k];
  return {k, kind_ == Kind::Random ? local : local * seq_len_};
}

}  // namespace hpct::data
