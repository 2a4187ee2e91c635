#pragma once
// Deterministic global-batch sampling from a token dataset of one or many shards (data/token_dataset.hpp;
// docs/invariants.md, invariant 1, layout independence).
//
// Training: optimizer step s (1-based) uses the global samples i = 0 .. global_batch-1. Sample i of step s is
// one window of T+1 tokens of one shard, inputs = tokens[o, o+T), targets = tokens[o+1, o+T+1); windows never
// cross a shard boundary. Two orders (data.order):
//
//   random (default): with replacement, as nanoGPT's get_batch. With W_k = max(0, N_k - T) start positions in
//     shard k and W = sum W_k,
//         u(s, i) = rng::uniform_int(seed, rng::stream_of(stream_name), (s-1) * 2^32 + i, W)
//     is mapped to (shard k, offset u - sum_{k'<k} W_k') by binary search over the prefix sums. For one shard
//     this is exactly o = uniform_int(..., N - T), the formula of the single-file sampler (bitwise the same
//     batches). uniform_int is a 64 x 64 -> 128-bit multiply-high, exact for any W < 2^64.
//   epoch: every stride-T window of the dataset once per epoch (n_k = floor((N_k - 1) / T) windows in shard k,
//     E = sum n_k; the tail of a shard shorter than T+1 tokens past its last window is not used). The global
//     window counter g = (s-1) * GB + i gives epoch e = g / E and position p = g % E; the window is
//     feistel_permute(p, E, seed, e): a keyed bijection of [0, E), so no permutation is stored and resuming at
//     step s needs only s.
//
// Either way a window is a pure function of (seed, stream, step, global sample index): it never depends on which
// rank or micro-batch asks for it. DP rank d of a global batch GB holds the contiguous block [d*B, (d+1)*B)
// (B = GB/DP), and its micro-batch j of size M the sub-block [d*B + j*M, d*B + (j+1)*M); calling fill() with those
// ranges yields exactly the sequences the serial run (DP=1, one micro-batch) puts in the same places.
//
// Token ids are checked against the vocabulary as windows are read (a terabyte dataset cannot be scanned up
// front): a token >= vocab_size is a UsageError naming the file, the token's index and byte offset.
//
// Evaluation: a fixed set, the same at every evaluation and on every layout: the first num_sequences stride-T
// windows walking shard 0, then shard 1, ... (for one shard: window k starts at k*T). Checked against the
// vocabulary when built (it is small).
//
// Both classes keep a reference to the dataset: the TokenDataset must outlive them.
#include <cstdint>
#include <string>
#include <string_view>

#include "data/token_dataset.hpp"

namespace hpct::data {

enum class TokenOrder { Random, Epoch };
// "random" | "epoch" (UsageError naming data.order otherwise)
TokenOrder parse_token_order(const std::string& name);
const char* token_order_name(TokenOrder order);

// Rounds of the Feistel network of epoch order (round keys: rng::block(seed, stream_of("data.train.epoch"),
// epoch * kFeistelRounds + r)).
inline constexpr int kFeistelRounds = 6;
// A keyed bijection of [0, n) (n >= 1): a balanced Feistel network on the smallest domain of 2h bits with
// 2^(2h) >= n (h >= 1), round function a 64-bit mixer of the right half and the round key, walked in cycles
// until the value falls inside [0, n) (at most ~4 steps on average since 2^(2h) < 4n). Integer arithmetic only:
// identical on every machine.
uint64_t feistel_permute(uint64_t x, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t stream);

// Any token >= vocab_size in tokens[offset, offset + count) of `shard` -> the UsageError described above; a
// RankUsageError when rank_local (a training window, read by one rank only: every rank that meets it says so).
void check_tokens(const TokenShard& shard, int64_t offset, int64_t count, int vocab_size, bool rank_local);

class TokenBatchSampler {
 public:
  // The dataset must hold at least one window (UsageError naming the files and seq_len otherwise). Epoch order
  // needs global_batch (the samples per step, GB above); random order ignores it.
  TokenBatchSampler(const TokenDataset& data, int seq_len, uint64_t seed, int vocab_size = 65536,
                    TokenOrder order = TokenOrder::Random, int64_t global_batch = 0,
                    std::string_view stream_name = "data.train");

  // The window of (step, sample); step >= 1, 0 <= sample < 2^32 (epoch order: < global_batch).
  TokenWindow window(int64_t step, int64_t sample) const;
  // Epoch order: the epoch (0-based) sample i of step s belongs to; random order: 0.
  int64_t epoch(int64_t step, int64_t sample) const;

  // Global samples [first_sample, first_sample + count) of optimizer step `step`:
  // inputs (count, T), targets (count, T), row r = sample first_sample + r. Checks every token against the vocabulary.
  void fill(int64_t step, int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const;

  int seq_len() const { return seq_len_; }
  TokenOrder order() const { return order_; }
  int64_t num_windows() const { return index_.size(); }  // W (random) or E (windows per epoch)
  const TokenDataset& data() const { return data_; }

 private:
  const TokenDataset& data_;
  int seq_len_;  // T
  uint64_t seed_;
  int vocab_size_;
  TokenOrder order_;
  int64_t global_batch_;
  uint64_t stream_, epoch_stream_;
  WindowIndex index_;
};

class TokenEvalSet {
 public:
  // Needs num_sequences stride-T windows in the dataset; UsageError otherwise. Checks their tokens against vocab_size.
  TokenEvalSet(const TokenDataset& data, int seq_len, int num_sequences, int vocab_size = 65536);

  // Windows [first_sequence, first_sequence + count): inputs (count, T), targets (count, T).
  void fill(int first_sequence, int count, int32_t* inputs, int32_t* targets) const;

  int num_sequences() const { return num_sequences_; }
  int seq_len() const { return seq_len_; }

 private:
  const TokenDataset& data_;
  int seq_len_;  // T
  int num_sequences_;
  WindowIndex index_;
};

}  // namespace hpct::data
