#pragma once
// How a checkpoint's tensor bytes reach the disk (internal to lib/ckpt; the writers' "data" phase).
//
// HDF5 makes a shard file's metadata (ckpt/shard_layout.hpp): every dataset contiguous, allocated when it is created,
// its data 4 KiB-aligned in the file. A DataWriter then puts the pieces' bytes at those offsets with pwrite(2): the
// aligned middle of each range through an O_DIRECT descriptor, the unaligned head and tail (at most 4 KiB each, and
// ranges too small to be aligned) through an ordinary one. O_DIRECT takes the page cache out of the checkpoint's data:
// through it, a save ran at the speed of the page cache's writeback and reclaim (from 0.15 s to 1.4 s for the same
// bytes, depending on what earlier checkpoints had left there); a direct write runs at the disk's speed every time.
//
// O_DIRECT needs the memory address, the file offset and the length aligned. The middle is copied into 4 KiB-aligned
// buffers (kIoBuffers of kIoChunk bytes) that kIoThreads threads write while the caller fills the next: the copy
// overlaps the disk, and two writes in flight keep the device busy. The pieces' own memory may be anywhere. The caller
// takes each piece's CRC32C from those buffers as it fills them (kCrcBlock at a time, while the block is in cache), so
// the source is read once for the copy and the checksum.
//
// A file system that refuses O_DIRECT (the open, or the first write, fails with EINVAL) gets buffered writes for the
// whole file, and the process says so once (a warning on rank 0). HPCT_CKPT_IO=buffered asks for the buffered path
// everywhere (the benchmarks' control, and a way out on a file system whose O_DIRECT is slow); any other value than
// direct or buffered is a UsageError.
//
// Durability: finish() waits for every write, then fsyncs the file (the buffered heads and tails, HDF5's metadata, the
// extents the direct writes allocated).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hpct::ckpt::detail {

enum class DataIo { Direct, Buffered };
// HPCT_CKPT_IO: direct (the default, also when unset or empty) or buffered.
DataIo data_io_from_env();

inline constexpr int64_t kDataAlignment = 4096;  // of the file offsets, the lengths and the buffers of direct writes
inline constexpr size_t kIoChunk = size_t{4} << 20;  // bytes per direct write
inline constexpr int kIoThreads = 2;
inline constexpr int kIoBuffers = 4;
inline constexpr size_t kCrcBlock = size_t{256} << 10;  // copied, then checksummed, while in the core's cache

class DataWriter {
 public:
  // Opens the existing file `path` for writing (never truncates: HDF5 made it and sized it).
  DataWriter(std::string path, DataIo io);
  // Stops the I/O threads (a writer not finished, i.e. an error path, drops what it had not written yet).
  ~DataWriter();
  DataWriter(const DataWriter&) = delete;
  DataWriter& operator=(const DataWriter&) = delete;

  // Writes n bytes of data at file offset `offset` and returns crc32c(data, n, crc): the checksum is taken from the
  // aligned buffers right after each block is copied there (the bytes still in cache: one pass over the source for
  // both). The data is copied or written before the call returns (the caller may reuse it), but the direct writes may
  // still be in flight: drain() waits for them. Throws the first failure of any earlier write (naming the file, the
  // offset and the cause).
  uint32_t write(uint64_t offset, const void* data, size_t n, uint32_t crc = 0);
  // Waits for every write queued so far; throws the first failure.
  void drain();
  // drain(), then fsyncs the file and closes it. Call once.
  void finish();

  // Whether the direct path was used (false with DataIo::Buffered or after the file system refused O_DIRECT).
  bool direct() const;
  int64_t direct_bytes() const { return direct_bytes_; }
  double crc_seconds() const { return crc_s_; }  // the checksums' share of the write() calls
  int64_t buffered_bytes() const { return buffered_bytes_; }

 private:
  struct Job {
    int buffer = 0;
    uint64_t offset = 0;
    size_t n = 0;
  };
  void buffered_write(uint64_t offset, const char* data, size_t n);
  uint32_t checksum(const char* data, size_t n, uint32_t crc);  // crc32c, timed into crc_s_
  void io_thread();
  void fail(const std::string& why);  // records the first failure (under mutex_)
  void throw_if_failed();
  void stop_threads();

  std::string path_;
  int fd_ = -1;                       // ordinary descriptor: heads, tails, the fallback
  int direct_fd_ = -1;                // O_DIRECT; -1 when not used (DataIo::Buffered, or refused)
  std::atomic<bool> refused_{false};  // set by an I/O thread when a direct write meets EINVAL
  int64_t direct_bytes_ = 0, buffered_bytes_ = 0;
  double crc_s_ = 0;

  std::vector<char*> buffers_;  // kIoBuffers aligned buffers of kIoChunk bytes
  std::vector<std::thread> threads_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<int> free_;  // buffers the caller may fill
  std::deque<Job> jobs_;  // filled buffers for the I/O threads
  int busy_ = 0;          // jobs an I/O thread is writing
  bool stopping_ = false;
  std::string failure_;  // the first failure, "" while none
};

// Test seam: while set, opening a file with O_DIRECT fails with EINVAL, as on a file system that refuses it (the
// fallback's test). Process-wide.
void refuse_direct_io_for_testing(bool refuse);

}  // namespace hpct::ckpt::detail
