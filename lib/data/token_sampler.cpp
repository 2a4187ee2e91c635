#include "data/token_sampler.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"

namespace hpct::data {

namespace {
constexpr int64_t kSamplesPerStep = int64_t{1} << 32;  // counter space of one step: (s-1)*2^32 + i

// One window: inputs = tokens[o, o+T), targets = tokens[o+1, o+T+1).
inline void copy_window(const uint16_t* tokens, int64_t o, int T, int32_t* inp, int32_t* tgt) {
  for (int t = 0; t < T; ++t) {
    inp[t] = tokens[o + t];
    tgt[t] = tokens[o + t + 1];
  }
}
}  // namespace

TokenBatchSampler::TokenBatchSampler(const TokenShard& shard, int seq_len, uint64_t seed, std::string_view stream_name)
    : tokens_(shard.tokens()),
      num_tokens_(shard.size()),
      path_(shard.path()),
      seq_len_(seq_len),
      seed_(seed),
      stream_(rng::stream_of(stream_name)) {
  HPCT_USAGE_CHECK(seq_len >= 1, "sequence length must be at least 1, got {}", seq_len);
  HPCT_USAGE_CHECK(num_tokens_ >= int64_t{seq_len} + 1,
                   "token shard {} has {} tokens, too few for seq_len {}: a training sequence needs seq_len+1 = {} "
                   "tokens; use a larger data file or a smaller sequence length",
                   path_, num_tokens_, seq_len, int64_t{seq_len} + 1);
}

int64_t TokenBatchSampler::offset(int64_t step, int64_t sample) const {
  HPCT_CHECK(step >= 1 && step <= kSamplesPerStep, "step {} out of range (steps are 1-based)", step);
  HPCT_CHECK(sample >= 0 && sample < kSamplesPerStep, "global sample index {} out of range [0, 2^32)", sample);
  const uint64_t index = static_cast<uint64_t>(step - 1) * static_cast<uint64_t>(kSamplesPerStep) +
                         static_cast<uint64_t>(sample);
  // N - T start positions 0 .. N-T-1 keep the last target (o+T) inside the shard.
  return static_cast<int64_t>(rng::uniform_int(seed_, stream_, index, static_cast<uint64_t>(num_tokens_ - seq_len_)));
}

void TokenBatchSampler::fill(int64_t step, int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const {
  HPCT_CHECK(count >= 0, "negative sample count {}", count);
  HPCT_CHECK(first_sample >= 0 && first_sample + count <= kSamplesPerStep, "samples [{}, {}) out of range [0, 2^32)",
             first_sample, first_sample + count);
  // Serial on purpose: copying B*T tokens costs nothing next to one training step.
  for (int r = 0; r < count; ++r) {
    const int64_t o = offset(step, first_sample + r);
    copy_window(tokens_, o, seq_len_, inputs + int64_t{r} * seq_len_, targets + int64_t{r} * seq_len_);
  }
}

TokenEvalSet::TokenEvalSet(const TokenShard& shard, int seq_len, int num_sequences)
    : tokens_(shard.tokens()), seq_len_(seq_len), num_sequences_(num_sequences) {
  HPCT_USAGE_CHECK(seq_len >= 1, "sequence length must be at least 1, got {}", seq_len);
  HPCT_USAGE_CHECK(num_sequences >= 1, "the evaluation set needs at least one sequence, got {}", num_sequences);
  const int64_t needed = int64_t{num_sequences} * seq_len + 1;
  HPCT_USAGE_CHECK(shard.size() >= needed,
                   "validation shard {} has {} tokens, too few for an evaluation set of {} sequences x seq_len {}: "
                   "it needs {} tokens (docs/contracts.md asks for an evaluation set of at least 64 x seq_len tokens); "
                   "use a larger validation split or fewer evaluation sequences",
                   shard.path(), shard.size(), num_sequences, seq_len, needed);
}

void TokenEvalSet::fill(int first_sequence, int count, int32_t* inputs, int32_t* targets) const {
  HPCT_CHECK(first_sequence >= 0 && count >= 0 && int64_t{first_sequence} + count <= num_sequences_,
             "evaluation windows [{}, {}) out of range [0, {})", first_sequence, int64_t{first_sequence} + count,
             num_sequences_);
  for (int r = 0; r < count; ++r) {
    const int64_t o = (int64_t{first_sequence} + r) * seq_len_;
    copy_window(tokens_, o, seq_len_, inputs + int64_t{r} * seq_len_, targets + int64_t{r} * seq_len_);
  }
}

}  // namespace hpct::data
