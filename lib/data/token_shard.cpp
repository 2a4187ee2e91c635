#include "data/token_shard.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.hpp"

namespace hpct::data {

// The format is little-endian on disk and we read it in place through mmap.
static_assert(std::endian::native == std::endian::little, "token shards are read in place: little-endian hosts only");

namespace {

constexpr const char* kPrepareHint =
    "run scripts/prepare_data.sh (it writes the shards under $HPCT_DATA_DIR, default <repository>/data), "
    "or build/apps/prepare_text for your own text";

std::string errno_text() { return std::strerror(errno); }

// write(2) may write less than asked (and be interrupted): loop until all bytes are out.
void write_all(int fd, const void* data, int64_t bytes, const std::string& tmp_path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd, p, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)));
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp_path.c_str());
      HPCT_USAGE_FAIL("cannot write token shard {}: {}; check free space and permissions", tmp_path, why);
    }
    p += w;
    bytes -= w;
  }
}

// Makes the rename itself durable: fsync the directory that holds the entry.
void fsync_parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const char* dir = parent.empty() ? "." : parent.c_str();
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: the data itself is already fsynced
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_token_shard(const std::string& path, const uint16_t* tokens, int64_t n) {
  HPCT_USAGE_CHECK(n >= 0 && n <= kTokenShardMaxTokens,
                   "cannot write token shard {}: {} tokens do not fit the format's int32 token count "
                   "(at most {}); split the text into several shards",
                   path, n, kTokenShardMaxTokens);
  HPCT_CHECK(n == 0 || tokens != nullptr, "null token buffer for {}", path);

  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = static_cast<int32_t>(n);

  const std::string tmp_path = path + ".tmp";
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    HPCT_USAGE_FAIL("cannot create token shard {}: {}; check that the directory exists and is writable", tmp_path,
                    errno_text());
  write_all(fd, header, kTokenShardHeaderBytes, tmp_path);
  write_all(fd, tokens, 2 * n, tmp_path);
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    ::unlink(tmp_path.c_str());
    HPCT_USAGE_FAIL("cannot fsync token shard {}: {}", tmp_path, why);
  }
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp_path.c_str());
    HPCT_USAGE_FAIL("cannot close token shard {}: {}; check free space", tmp_path, why);
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp_path.c_str());
    HPCT_USAGE_FAIL("cannot rename {} to {}: {}", tmp_path, path, why);
  }
  fsync_parent_dir(path);
}

TokenShard TokenShard::open(const std::string& path) {
  TokenShard shard;
  shard.path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) HPCT_USAGE_FAIL("token shard {} not found: {}", path, kPrepareHint);
    HPCT_USAGE_FAIL("cannot open token shard {}: {}", path, errno_text());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    HPCT_USAGE_FAIL("cannot stat token shard {}: {}", path, why);
  }
  const int64_t file_bytes = st.st_size;
  if (!S_ISREG(st.st_mode) || file_bytes < kTokenShardHeaderBytes) {
    ::close(fd);
    HPCT_USAGE_FAIL("{} is not a token shard: {} bytes, shorter than the {}-byte header; re-create it: {}", path,
                    file_bytes, kTokenShardHeaderBytes, kPrepareHint);
  }
  // MAP_SHARED read-only: all ranks of a node share the page cache copy of the shard.
  void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
  const std::string map_error = map == MAP_FAILED ? errno_text() : std::string();
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) HPCT_USAGE_FAIL("cannot mmap token shard {}: {}", path, map_error);
  // From here the destructor unmaps if a check below throws.
  shard.map_ = map;
  shard.map_bytes_ = file_bytes;

  const int32_t* header = static_cast<const int32_t*>(map);
  HPCT_USAGE_CHECK(header[0] == kTokenShardMagic,
                   "{} is not a token shard: magic number {} instead of {} (the llm.c / nanoGPT format); "
                   "re-create it: {}",
                   path, header[0], kTokenShardMagic, kPrepareHint);
  HPCT_USAGE_CHECK(header[1] == kTokenShardVersion,
                   "token shard {} has format version {}, this build reads version {} (uint16 tokens); "
                   "re-create it: {}",
                   path, header[1], kTokenShardVersion, kPrepareHint);
  const int64_t n = header[2];
  const int64_t expected_bytes = kTokenShardHeaderBytes + 2 * n;
  HPCT_USAGE_CHECK(n >= 0 && file_bytes == expected_bytes,
                   "token shard {} is truncated or corrupt: its header says {} tokens ({} bytes), the file has {} "
                   "bytes; re-create it: {}",
                   path, n, expected_bytes, file_bytes, kPrepareHint);

  shard.num_tokens_ = n;
  // The header is 1024 bytes and mmap returns a page-aligned address, so the tokens are aligned.
  shard.tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kTokenShardHeaderBytes);
  return shard;
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      num_tokens_(std::exchange(other.num_tokens_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
  }
  return *this;
}

TokenShard::~TokenShard() { release(); }

void TokenShard::release() noexcept {
  if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(map_bytes_));
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  num_tokens_ = 0;
}

}  // namespace hpct::data
