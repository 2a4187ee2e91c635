#include "ckpt/data_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/ckpt_internal.hpp"

namespace hpct::ckpt::detail {

namespace {

std::atomic<bool> g_refuse_direct{false};
std::atomic<bool> g_said_refused{false};

// Says once per process that a file system refused O_DIRECT.
void say_refused(const std::string& path, const char* where) {
  if (g_said_refused.exchange(true)) return;
  log_warn("checkpoint: the file system of {} refuses O_DIRECT ({} failed with EINVAL): checkpoint data is written "
           "through the page cache (slower, and its speed depends on the memory the page cache holds)",
           path, where);
}

// What a failed write says: the bytes, where, the cause.
std::string write_failure(size_t n, uint64_t offset, const std::string& path, int err) {
  return fmt::format("cannot write {} bytes at offset {} of checkpoint file {}: {} (disk full?)", n, offset, path,
                     std::strerror(err));
}

// pwrite(2) of all n bytes (a short write continues); 0 or the errno.
int pwrite_all(int fd, const char* data, size_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return 0;
}

}  // namespace

void refuse_direct_io_for_testing(bool refuse) { g_refuse_direct.store(refuse); }

DataIo data_io_from_env() {
  const char* v = std::getenv("HPCT_CKPT_IO");
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "direct") == 0) return DataIo::Direct;
  if (std::strcmp(v, "buffered") == 0) return DataIo::Buffered;
  HPCT_USAGE_FAIL("HPCT_CKPT_IO={}: use direct (the default: checkpoint data written with O_DIRECT) or buffered "
                  "(through the page cache)",
                  v);
}

DataWriter::DataWriter(std::string path, DataIo io) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) HPCT_FAIL("cannot open checkpoint file {} to write its data: {}", path_, std::strerror(errno));
  if (io == DataIo::Buffered) return;
  if (g_refuse_direct.load()) {
    errno = EINVAL;
  } else {
    direct_fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
  }
  if (direct_fd_ < 0) {
    const int err = errno;
    if (err != EINVAL) {
      ::close(fd_);
      HPCT_FAIL("cannot open checkpoint file {} with O_DIRECT: {}", path_, std::strerror(err));
    }
    refused_ = true;
    say_refused(path_, "open");
    return;
  }
  for (int i = 0; i < kIoBuffers; ++i) {
    void* p = nullptr;
    if (::posix_memalign(&p, static_cast<size_t>(kDataAlignment), kIoChunk) != 0) {
      for (char* b : buffers_) std::free(b);
      ::close(direct_fd_);
      ::close(fd_);
      HPCT_FAIL("out of memory for the checkpoint writer's {} MiB of aligned I/O buffers ({})",
                kIoBuffers * (kIoChunk >> 20), path_);
    }
    buffers_.push_back(static_cast<char*>(p));
    free_.push_back(i);
  }
  for (int t = 0; t < kIoThreads; ++t) threads_.emplace_back([this] { io_thread(); });
}

DataWriter::~DataWriter() {
  stop_threads();
  for (char* b : buffers_) std::free(b);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

bool DataWriter::direct() const { return direct_fd_ >= 0 && !refused_; }

void DataWriter::fail(const std::string& why) {
  if (failure_.empty()) failure_ = why;
}

void DataWriter::throw_if_failed() {
  std::string why;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    why = failure_;
  }
  if (!why.empty()) HPCT_FAIL("{}", why);
}

void DataWriter::buffered_write(uint64_t offset, const char* data, size_t n) {
  if (n == 0) return;
  const int err = pwrite_all(fd_, data, n, offset);
  if (err != 0) HPCT_FAIL("{}", write_failure(n, offset, path_, err));
  buffered_bytes_ += static_cast<int64_t>(n);
}

uint32_t DataWriter::checksum(const char* data, size_t n, uint32_t crc) {
  Timer t;
  crc = crc32c(data, n, crc);
  crc_s_ += t.seconds();
  return crc;
}

uint32_t DataWriter::write(uint64_t offset, const void* data, size_t n, uint32_t crc) {
  throw_if_failed();
  const char* p = static_cast<const char*>(data);
  const uint64_t a = static_cast<uint64_t>(kDataAlignment);
  const uint64_t begin = (offset + a - 1) / a * a, end = (offset + n) / a * a;  // the aligned middle [begin, end)
  if (!direct() || begin >= end) {
    crc = checksum(p, n, crc);
    buffered_write(offset, p, n);
    return crc;
  }
  crc = checksum(p, begin - offset, crc);
  buffered_write(offset, p, begin - offset);
  for (uint64_t at = begin; at < end;) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kIoChunk, end - at));
    int buffer = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return !free_.empty() || !failure_.empty(); });
      if (!failure_.empty()) break;
      buffer = free_.front();
      free_.pop_front();
    }
    char* buf = buffers_[static_cast<size_t>(buffer)];
    for (size_t done = 0; done < len; done += kCrcBlock) {
      const size_t b = std::min(kCrcBlock, len - done);
      std::memcpy(buf + done, p + (at - offset) + done, b);
      crc = checksum(buf + done, b, crc);
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back({buffer, at, len});
    }
    changed_.notify_all();
    direct_bytes_ += static_cast<int64_t>(len);
    at += len;
  }
  throw_if_failed();
  crc = checksum(p + (end - offset), offset + n - end, crc);
  buffered_write(end, p + (end - offset), offset + n - end);
  return crc;
}

void DataWriter::io_thread() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = jobs_.front();
      jobs_.pop_front();
      ++busy_;
    }
    const char* buf = buffers_[static_cast<size_t>(job.buffer)];
    int err = 0;
    if (!refused_) {
      err = pwrite_all(direct_fd_, buf, job.n, job.offset);
      if (err == EINVAL) {
        // accepted at open, refused at the write: this chunk and every later one go through the page cache
        refused_ = true;
        say_refused(path_, "a write");
        err = pwrite_all(fd_, buf, job.n, job.offset);
      }
    } else {
      err = pwrite_all(fd_, buf, job.n, job.offset);
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (err != 0) fail(write_failure(job.n, job.offset, path_, err));
      free_.push_back(job.buffer);
      --busy_;
    }
    changed_.notify_all();
  }
}

void DataWriter::stop_threads() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (!failure_.empty()) jobs_.clear();
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void DataWriter::drain() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return (jobs_.empty() && busy_ == 0) || !failure_.empty(); });
  }
  throw_if_failed();
}

void DataWriter::finish() {
  drain();
  stop_threads();
  fsync_file(path_);
  if (direct_fd_ >= 0) ::close(std::exchange(direct_fd_, -1));
  if (::close(std::exchange(fd_, -1)) != 0)
    HPCT_FAIL("cannot close checkpoint file {}: {}", path_, std::strerror(errno));
}

}  // namespace hpct::ckpt::detail
