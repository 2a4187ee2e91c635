#include "data/token_sampler.hpp"

#include <string>

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

// splitmix64's finaliser: a bijective 64-bit mixer (Steele et al., OOPSLA'14).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

TokenOrder parse_token_order(const std::string& name) {
  if (name == "random") return TokenOrder::Random;
  if (name == "epoch") return TokenOrder::Epoch;
  HPCT_USAGE_FAIL("data.order = \"{}\" is not allowed: use \"random\" or \"epoch\"", name);
}

const char* token_order_name(TokenOrder order) { return order == TokenOrder::Random ? "random" : "epoch"; }

uint64_t feistel_permute(uint64_t x, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t stream) {
  HPCT_CHECK(n >= 1 && x < n, "feistel_permute: {} out of range [0, {})", x, n);
  if (n == 1) return 0;
  int h = 1;  // half width in bits: the smallest h >= 1 with 2^(2h) >= n
  while (h < 32 && (uint64_t{1} << (2 * h)) < n) ++h;
  const uint64_t mask = h == 32 ? ~uint32_t{0} : (uint64_t{1} << h) - 1;
  uint64_t keys[kFeistelRounds];
  for (int r = 0; r < kFeistelRounds; ++r) {
    const auto b = rng::block(seed, stream, epoch * kFeistelRounds + static_cast<uint64_t>(r));
    keys[r] = (static_cast<uint64_t>(b[0]) << 32) | b[1];
  }
  // cycle walking: a permutation of [0, 2^(2h)) restricted to [0, n) by iterating until inside stays a bijection
  do {
    uint64_t left = x >> h, right = x & mask;
    for (int r = 0; r < kFeistelRounds; ++r) {
      const uint64_t next = left ^ (mix64(right ^ keys[r]) & mask);
      left = right;
      right = next;
    }
    x = (left << h) | right;
  } while (x >= n);
  return x;
}

void check_tokens(const TokenShard& shard, int64_t offset, int64_t count, int vocab_size, bool rank_local) {
  const uint16_t* t = shard.tokens() + offset;
  uint16_t m = 0;
  for (int64_t i = 0; i < count; ++i) m = t[i] > m ? t[i] : m;
  if (m < vocab_size) return;
  int64_t i = 0;
  while (t[i] < vocab_size) ++i;
  const int64_t index = offset + i;
  const std::string cause = fmt::format(
      "data file {} holds token {} at token {} (byte offset {}) but model.vocab_size = {}; raise model.vocab_size or "
      "re-tokenise",
      shard.path(), t[i], index, kTokenShardHeaderBytes + 2 * index, vocab_size);
  if (rank_local) HPCT_RANK_USAGE_FAIL("{}", cause);
  HPCT_USAGE_FAIL("{}", cause);
}

TokenBatchSampler::TokenBatchSampler(const TokenDataset& data, int seq_len, uint64_t seed, int vocab_size,
                                     TokenOrder order, int64_t global_batch, std::string_view stream_name)
    : data_(data),
      seq_len_(seq_len),
      seed_(seed),
      vocab_size_(vocab_size),
      order_(order),
      global_batch_(global_batch),
      stream_(rng::stream_of(stream_name)),
      epoch_stream_(rng::stream_of(std::string(stream_name) + ".epoch")),
      index_(data, seq_len, order == TokenOrder::Random ? WindowIndex::Kind::Random : WindowIndex::Kind::Stride) {
  HPCT_USAGE_CHECK(order == TokenOrder::Random || global_batch >= 1,
                   "data.order = \"epoch\" needs the global batch size, got {}", global_batch);
  if (data.num_shards() == 1)
    HPCT_USAGE_CHECK(index_.size() >= 1,
                     "token shard {} has {} tokens, too few for seq_len {}: a training sequence needs seq_len+1 = {} "
                     "tokens; use a larger data file or a smaller sequence length",
                     data.shard(0).path(), data.shard(0).size(), seq_len, int64_t{seq_len} + 1);
  HPCT_USAGE_CHECK(index_.size() >= 1,
                   "{}: none of the {} shards ({}) holds a training sequence of seq_len+1 = {} tokens; use larger "
                   "shards or a smaller sequence length",
                   data.key(), data.num_shards(), data.describe(), int64_t{seq_len} + 1);
}

int64_t TokenBatchSampler::epoch(int64_t step, int64_t sample) const {
  if (order_ == TokenOrder::Random) return 0;
  return ((step - 1) * global_batch_ + sample) / index_.size();
}

TokenWindow TokenBatchSampler::window(int64_t step, int64_t sample) const {
  HPCT_CHECK(step >= 1 && step <= kSamplesPerStep, "step {} out of range (steps are 1-based)", step);
  HPCT_CHECK(sample >= 0 && sample < kSamplesPerStep, "global sample index {} out of range [0, 2^32)", sample);
  if (order_ == TokenOrder::Random) {
    const uint64_t counter = static_cast<uint64_t>(step - 1) * static_cast<uint64_t>(kSamplesPerStep) +
                             static_cast<uint64_t>(sample);
    const uint64_t u = rng::uniform_int(seed_, stream_, counter, static_cast<uint64_t>(index_.size()));
    return index_.at(static_cast<int64_t>(u));
  }
  HPCT_CHECK(sample < global_batch_, "global sample index {} out of range [0, {})", sample, global_batch_);
  const uint64_t g = static_cast<uint64_t>(step - 1) * static_cast<uint64_t>(global_batch_) +
                     static_cast<uint64_t>(sample);
  const uint64_t E = static_cast<uint64_t>(index_.size());
  const uint64_t w = feistel_permute(g % E, E, seed_, g / E, epoch_stream_);
  return index_.at(static_cast<int64_t>(w));
}

void TokenBatchSampler::fill(int64_t step, int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const {
  HPCT_CHECK(count >= 0, "negative sample count {}", count);
  HPCT_CHECK(first_sample >= 0 && first_sample + count <= kSamplesPerStep, "samples [{}, {}) out of range [0, 2^32)",
             first_sample, first_sample + count);
  // Serial on purpose: copying B*T tokens costs nothing next to one training step (validation/bench_token_loader).
  for (int r = 0; r < count; ++r) {
    const TokenWindow w = window(step, first_sample + r);
    const TokenShard& shard = data_.shard(w.shard);
    check_tokens(shard, w.offset, int64_t{seq_len_} + 1, vocab_size_, /*rank_local=*/true);  // this rank's block
    copy_window(shard.tokens(), w.offset, seq_len_, inputs + int64_t{r} * seq_len_, targets + int64_t{r} * seq_len_);
  }
}

TokenEvalSet::TokenEvalSet(const TokenDataset& data, int seq_len, int num_sequences, int vocab_size)
    : data_(data), seq_len_(seq_len), num_sequences_(num_sequences), index_(data, seq_len, WindowIndex::Kind::Stride) {
  HPCT_USAGE_CHECK(num_sequences >= 1, "the evaluation set needs at least one sequence, got {}", num_sequences);
  const int64_t needed = int64_t{num_sequences} * seq_len + 1;
  if (data.num_shards() == 1)
    HPCT_USAGE_CHECK(index_.size() >= num_sequences,
                     "validation shard {} has {} tokens, too few for an evaluation set of {} sequences x seq_len {}: "
                     "it needs {} tokens (docs/contracts.md asks for an evaluation set of at least 64 x seq_len "
                     "tokens); use a larger validation split or fewer evaluation sequences",
                     data.shard(0).path(), data.shard(0).size(), num_sequences, seq_len, needed);
  HPCT_USAGE_CHECK(index_.size() >= num_sequences,
                   "validation data {} holds {} windows of seq_len {} (stride seq_len, none crossing a shard "
                   "boundary), too few for an evaluation set of {} sequences (docs/contracts.md asks for at least 64 x "
                   "seq_len tokens); use a larger validation split or fewer evaluation sequences",
                   data.describe(), index_.size(), seq_len, num_sequences);
  for (int k = 0; k < num_sequences; ++k) {
    const TokenWindow w = index_.at(k);
    check_tokens(data.shard(w.shard), w.offset, int64_t{seq_len} + 1, vocab_size, /*rank_local=*/false);  // all ranks
  }
}

void TokenEvalSet::fill(int first_sequence, int count, int32_t* inputs, int32_t* targets) const {
  HPCT_CHECK(first_sequence >= 0 && count >= 0 && int64_t{first_sequence} + count <= num_sequences_,
             "evaluation windows [{}, {}) out of range [0, {})", first_sequence, int64_t{first_sequence} + count,
             num_sequences_);
  for (int r = 0; r < count; ++r) {
    const TokenWindow w = index_.at(int64_t{first_sequence} + r);
    copy_window(data_.shard(w.shard).tokens(), w.offset, seq_len_, inputs + int64_t{r} * seq_len_,
                targets + int64_t{r} * seq_len_);
  }
}

}  // namespace hpct::data
