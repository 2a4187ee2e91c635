#pragma once
// Deterministic global-batch sampling from a token shard (docs/invariants.md, invariant 1, layout independence).
//
// Training: optimizer step s (1-based) uses the global samples i = 0 .. global_batch-1. Sample i of
// step s is the window starting at
//
//     o(s, i) = rng::uniform_int(seed, rng::stream_of(stream_name), (s-1) * 2^32 + i, N - T)
//
// (N tokens in the shard, T = seq_len), so o is uniform in [0, N-T-1] and
//     inputs  = tokens[o,   o+T)
//     targets = tokens[o+1, o+T+1)          (the last target is at most token N-1)
// The offset is a pure function of (seed, stream, step, global sample index): it never depends on which
// rank or micro-batch asks for it. DP rank d of a global batch GB holds the contiguous block
// [d*B, (d+1)*B) (B = GB/DP), and its micro-batch j of size M the sub-block [d*B + j*M, d*B + (j+1)*M);
// calling fill() with those ranges yields exactly the sequences the serial run (DP=1, one micro-batch)
// puts in the same places. Samples are drawn with replacement (offsets may repeat or overlap, as in
// nanoGPT's get_batch), so there is no epoch and no permutation to store in a checkpoint: resuming at
// step s needs only s. Steps differ because the counter differs; 2^32 samples per step is far beyond any
// global batch, so (step, sample) pairs never share a counter.
//
// Evaluation: a fixed set, the same at every evaluation and on every layout: the first num_sequences
// consecutive non-overlapping windows of the (validation) shard, window k starting at k*T.
//
// Both classes keep a pointer to the shard's mapped tokens: the TokenShard must outlive them (moving the
// TokenShard object is fine, the mapping does not move).
#include <cstdint>
#include <string>
#include <string_view>

#include "data/token_shard.hpp"

namespace hpct::data {

class TokenBatchSampler {
 public:
  // The shard must hold at least seq_len + 1 tokens (UsageError naming the file and seq_len otherwise).
  TokenBatchSampler(const TokenShard& shard, int seq_len, uint64_t seed, std::string_view stream_name = "data.train");

  // o(step, sample) above; step >= 1, 0 <= sample < 2^32.
  int64_t offset(int64_t step, int64_t sample) const;

  // Global samples [first_sample, first_sample + count) of optimizer step `step`:
  // inputs (count, T), targets (count, T), row r = sample first_sample + r.
  void fill(int64_t step, int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const;

  int seq_len() const { return seq_len_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  const uint16_t* tokens_;  // (N)
  int64_t num_tokens_;      // N
  std::string path_;
  int seq_len_;  // T
  uint64_t seed_;
  uint64_t stream_;
};

class TokenEvalSet {
 public:
  // Needs num_sequences * seq_len + 1 tokens (the last window's last target); UsageError otherwise.
  TokenEvalSet(const TokenShard& shard, int seq_len, int num_sequences);

  // Windows [first_sequence, first_sequence + count): inputs (count, T), targets (count, T).
  void fill(int first_sequence, int count, int32_t* inputs, int32_t* targets) const;

  int num_sequences() const { return num_sequences_; }
  int seq_len() const { return seq_len_; }

 private:
  const uint16_t* tokens_;  // (N)
  int seq_len_;             // T
  int num_sequences_;
};

}  // namespace hpct::data
