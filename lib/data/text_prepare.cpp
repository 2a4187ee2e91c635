#include "data/text_prepare.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "data/token_shard.hpp"

namespace hpct::data {

TrainValSplit split_train_val(int64_t n_bytes, double val_fraction) {
  HPCT_USAGE_CHECK(val_fraction > 0.0 && val_fraction < 1.0,
                   "validation fraction must lie strictly between 0 and 1 (docs/contracts.md: default 0.1), got {}",
                   val_fraction);
  HPCT_CHECK(n_bytes >= 0, "negative text size {}", n_bytes);
  TrainValSplit split;
  split.val_bytes = static_cast<int64_t>(std::llround(static_cast<double>(n_bytes) * val_fraction));
  split.train_bytes = n_bytes - split.val_bytes;
  HPCT_USAGE_CHECK(split.val_bytes >= 1 && split.train_bytes >= 1,
                   "a text of {} bytes is too small to split with validation fraction {} ({} training, {} validation "
                   "bytes): both parts need at least one byte; use a larger text",
                   n_bytes, val_fraction, split.train_bytes, split.val_bytes);
  return split;
}

PreparedText prepare_text_shards(const std::string& input_path, const std::string& out_dir, const std::string& name,
                                 double val_fraction, int64_t shard_tokens) {
  namespace fs = std::filesystem;
  HPCT_USAGE_CHECK(!name.empty() && name.find('/') == std::string::npos,
                   "dataset name '{}' must be a non-empty file name stem without '/' (e.g. kjv)", name);
  HPCT_USAGE_CHECK(shard_tokens >= 0 && shard_tokens <= kTokenShardMaxTokens,
                   "--shard-tokens {} is out of range: give 1 .. {} tokens per shard, or 0 for one training shard",
                   shard_tokens, kTokenShardMaxTokens);
  std::error_code ec;
  HPCT_USAGE_CHECK(fs::is_regular_file(input_path, ec), "input text file {} not found (or not a regular file)",
                   input_path);

  // Read the whole text: even a few GB fit easily, and the split needs the total size first.
  std::ifstream in(input_path, std::ios::binary);
  HPCT_USAGE_CHECK(in.good(), "cannot open input text file {}", input_path);
  std::vector<char> text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  HPCT_USAGE_CHECK(!in.bad(), "error while reading input text file {}", input_path);
  HPCT_USAGE_CHECK(!text.empty(), "input text file {} is empty", input_path);

  const int64_t n = static_cast<int64_t>(text.size());
  const TrainValSplit split = split_train_val(n, val_fraction);

  // Byte-level vocabulary: token = byte value (0..255).
  std::vector<uint16_t> tokens(text.size());
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<unsigned char>(text[i]);

  fs::create_directories(out_dir, ec);
  HPCT_USAGE_CHECK(!ec, "cannot create output directory {}: {}", out_dir, ec.message());

  PreparedText out;
  out.val_path = (fs::path(out_dir) / (name + "_val.bin")).string();
  out.train_tokens = split.train_bytes;
  out.val_tokens = split.val_bytes;
  if (shard_tokens == 0) {
    out.train_path = (fs::path(out_dir) / (name + "_train.bin")).string();
    out.train_paths = {out.train_path};
    write_token_shard(out.train_path, tokens.data(), split.train_bytes);
  } else {
    // llm.c's naming: NAME_train_000000.bin, NAME_train_000001.bin, ...; every shard but the last holds shard_tokens
    for (int64_t first = 0, k = 0; first < split.train_bytes; first += shard_tokens, ++k) {
      out.train_paths.push_back((fs::path(out_dir) / fmt::format("{}_train_{:06d}.bin", name, k)).string());
      write_token_shard(out.train_paths.back(), tokens.data() + first,
                        std::min<int64_t>(shard_tokens, split.train_bytes - first));
    }
    out.train_path = out.train_paths.front();
  }
  write_token_shard(out.val_path, tokens.data() + split.train_bytes, split.val_bytes);
  return out;
}

}  // namespace hpct::data
