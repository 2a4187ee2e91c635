#pragma once
// Token shards in the llm.c / nanoGPT format (docs/contracts.md), so shards written by llm.c's
// dev/data/*.py scripts load here unchanged, and ours load there:
//
//   header: 256 x int32 (1024 bytes), little-endian
//     [0] magic   20240520
//     [1] version 1
//     [2] number of tokens N
//     [3..255] zero
//   body:   N x uint16 tokens
//
// So the file size is exactly 1024 + 2*N bytes. The token count is an int32, hence at most 2^31-1
// tokens per shard (llm.c splits bigger corpora into several shards).
#include <cstdint>
#include <string>

namespace hpct::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int kTokenShardHeaderInts = 256;
inline constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;  // 1024
inline constexpr int64_t kTokenShardMaxTokens = INT32_MAX;

// Writes tokens[0, n) as a shard at `path`, atomically: the bytes go to `path.tmp`, which is fsynced
// and renamed onto `path` (then the directory is fsynced), so a reader never sees a half-written shard,
// even after a crash. Errors (cannot create, disk full, n too large) are UsageErrors naming the file.
void write_token_shard(const std::string& path, const uint16_t* tokens, int64_t n);

// A read-only, memory-mapped shard. open() validates the header against the file size, so every
// accessor can be trusted afterwards. The mapping is shared by all readers of the file (page cache),
// which matters when many ranks of one node read the same shard. Move-only; unmaps on destruction.
// Moving a TokenShard keeps tokens() valid (the mapping itself does not move).
class TokenShard {
 public:
  // Missing file -> UsageError naming the file and saying to run scripts/prepare_data.sh; bad magic,
  // bad version, or a size that disagrees with the header's token count -> UsageError naming the file.
  static TokenShard open(const std::string& path);

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  int64_t size() const { return num_tokens_; }        // number of tokens N
  const uint16_t* tokens() const { return tokens_; }  // (N)
  const std::string& path() const { return path_; }

 private:
  TokenShard() = default;
  void release() noexcept;

  std::string path_;
  void* map_ = nullptr;  // the whole file, header included
  int64_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
};

}  // namespace hpct::data
