#pragma once
// Plain text -> byte-level token shards (docs/contracts.md "Data preparation"), the library half of
// apps/prepare_text so that tests can call it. Vocabulary 256: token = byte value, no merges, no special
// tokens, so any file (UTF-8 or not) round-trips byte for byte. The validation split is the LAST
// val_fraction of the text and the training split the rest: a contiguous tail (not a random subset of
// lines) keeps validation text unseen in training, as nanoGPT's shakespeare_char does.
#include <cstdint>
#include <string>
#include <vector>

namespace hpct::data {

// train = bytes [0, train_bytes), validation = bytes [train_bytes, train_bytes + val_bytes = n_bytes).
struct TrainValSplit {
  int64_t train_bytes = 0;
  int64_t val_bytes = 0;
};

// val_bytes = round(n_bytes * val_fraction) (half away from zero), train_bytes = the rest.
// val_fraction must lie in (0, 1) and both parts must be non-empty (UsageError otherwise).
TrainValSplit split_train_val(int64_t n_bytes, double val_fraction);

struct PreparedText {
  std::string train_path;                // out_dir/name_train.bin (sharded: the first shard)
  std::vector<std::string> train_paths;  // every training shard, in order
  std::string val_path;                  // out_dir/name_val.bin
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// Reads input_path whole, splits it with split_train_val, and writes out_dir/name_train.bin and
// out_dir/name_val.bin (atomically, see write_token_shard); creates out_dir if needed. shard_tokens > 0 splits the
// training part into shards of that many tokens (the last one shorter), named as llm.c names its shards:
// out_dir/name_train_000000.bin, name_train_000001.bin, ...; the validation split stays one file, name_val.bin.
PreparedText prepare_text_shards(const std::string& input_path, const std::string& out_dir, const std::string& name,
                                 double val_fraction, int64_t shard_tokens = 0);

}  // namespace hpct::data
