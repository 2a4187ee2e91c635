// The checkpoint's data path (ckpt/data_writer.hpp, detail::ShardLayout): byte ranges of every size and alignment land
// where they belong on both paths and after a refused O_DIRECT; a shard file's datasets of 4 KiB and more start on
// 4 KiB boundaries; a direct write leaves the tensor bytes out of the page cache (and the buffered control shows that
// the check sees them when they are there); HPCT_CKPT_IO's errors.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/data_writer.hpp"
#include "core/error.hpp"

namespace hpct::ckpt {
namespace {

namespace fs = std::filesystem;
using detail::DataIo;
using detail::DataWriter;

class DataWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("hpct_data_writer_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    detail::refuse_direct_io_for_testing(false);
    ::unsetenv("HPCT_CKPT_IO");
    fs::remove_all(dir_);
  }
  // A file of n zero bytes (HDF5 sizes the file before DataWriter writes into it).
  std::string sized_file(const std::string& name, size_t n) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).close();
    fs::resize_file(p, n);
    return p;
  }
  fs::path dir_;
};

std::vector<char> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct Range {
  uint64_t offset;
  size_t n;
};

// Ranges that exercise every branch: aligned and not at either end, inside one block, more than one chunk, a chunk's
// exact multiple, touching neighbours; disjoint.
std::vector<Range> ranges() {
  const uint64_t A = detail::kDataAlignment;
  const size_t C = detail::kIoChunk;
  return {{0, 10},
          {A, A},
          {2 * A + 7, 3},
          {3 * A - 5, 2 * A + 11},
          {8 * A, C + 123},
          {8 * A + C + 123, 1},
          {16 * A + 2 * C, 2 * C},
          {16 * A + 4 * C + 100, C + 2 * A - 100},
          {16 * A + 6 * C + 4 * A + 1, A - 2}};
}

void expect_round_trip(const std::string& path, const std::vector<char>& want) {
  const std::vector<char> got = read_all(path);
  ASSERT_EQ(got.size(), want.size());
  size_t first = 0;
  while (first < got.size() && got[first] == want[first]) ++first;
  EXPECT_EQ(first, got.size()) << "first differing byte at offset " << first;
}

void write_ranges(DataWriter& w, std::vector<char>& want, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<Range> rs = ranges();
  std::shuffle(rs.begin(), rs.end(), rng);  // any order
  for (const Range& r : rs) {
    std::vector<char> src(r.n + 3);
    for (auto& c : src) c = static_cast<char>(rng());
    const char* data = src.data() + 3;  // the source's own alignment is arbitrary
    w.write(r.offset, data, r.n);
    std::copy(data, data + r.n, want.begin() + static_cast<std::ptrdiff_t>(r.offset));
    src.assign(src.size(), 'x');  // the caller may reuse its memory as soon as write() returns
  }
}

size_t file_size_for_ranges() {
  size_t end = 0;
  for (const Range& r : ranges()) end = std::max<size_t>(end, r.offset + r.n);
  return end + 5000;
}

TEST_F(DataWriterTest, BytesOfEverySizeAndAlignmentLandWhereTheyBelong) {
  for (const DataIo io : {DataIo::Direct, DataIo::Buffered}) {
    const size_t size = file_size_for_ranges();
    const std::string p = sized_file(io == DataIo::Direct ? "direct.bin" : "buffered.bin", size);
    std::vector<char> want(size, 0);
    DataWriter w(p, io);
    write_ranges(w, want, 1);
    const bool direct = w.direct();
    const int64_t direct_bytes = w.direct_bytes(), buffered_bytes = w.buffered_bytes();
    w.finish();
    expect_round_trip(p, want);
    int64_t total = 0;
    for (const Range& r : ranges()) total += static_cast<int64_t>(r.n);
    EXPECT_EQ(direct_bytes + buffered_bytes, total);
    if (io == DataIo::Buffered) {
      EXPECT_FALSE(direct);
      EXPECT_EQ(direct_bytes, 0);
    } else if (direct) {
      // the aligned middles: all but the heads and tails
      EXPECT_GT(direct_bytes, total * 9 / 10) << "direct " << direct_bytes << " of " << total;
    }
  }
}

TEST_F(DataWriterTest, ARefusedODirectFallsBackToBufferedWrites) {
  detail::refuse_direct_io_for_testing(true);
  const size_t size = file_size_for_ranges();
  const std::string p = sized_file("refused.bin", size);
  std::vector<char> want(size, 0);
  DataWriter w(p, DataIo::Direct);
  EXPECT_FALSE(w.direct());
  write_ranges(w, want, 2);
  EXPECT_EQ(w.direct_bytes(), 0);
  w.finish();
  expect_round_trip(p, want);
}

TEST_F(DataWriterTest, ErrorsNameTheFileOrTheVariable) {
  const std::string missing = (dir_ / "no_such_dir" / "x.h5").string();
  try {
    DataWriter w(missing, DataIo::Direct);
    ADD_FAILURE() << "opened a file in a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  ::setenv("HPCT_CKPT_IO", "fast", 1);
  try {
    (void)detail::data_io_from_env();
    ADD_FAILURE() << "HPCT_CKPT_IO=fast accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("HPCT_CKPT_IO=fast: use direct"), std::string::npos) << e.what();
  }
  ::setenv("HPCT_CKPT_IO", "buffered", 1);
  EXPECT_EQ(detail::data_io_from_env(), DataIo::Buffered);
  ::setenv("HPCT_CKPT_IO", "direct", 1);
  EXPECT_EQ(detail::data_io_from_env(), DataIo::Direct);
}

// One rank's shard of two large tensors and a small one; returns the step directory's shard file.
std::string write_test_shard(const fs::path& dir, std::vector<float>& big, std::vector<float>& small) {
  big.resize(3 * 1000 * 257);
  small.resize(37);
  std::mt19937 rng(3);
  for (auto& v : big) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  for (auto& v : small) v = static_cast<float>(rng() % 1000);
  std::vector<Piece> pieces;
  Piece a{"model/a", {3000, 257}, {0, 0}, {1000, 257}, 0, 0, DType::F32, big.data()};
  Piece b{"model/a", {3000, 257}, {1000, 0}, {2000, 257}, 0, 0, DType::F32, big.data() + 1000 * 257};
  Piece c{"model/bias", {37}, {0}, {37}, -1, 0, DType::F32, small.data()};
  pieces = {a, c, b};
  write_shard(dir.string(), 0, pieces);
  return (dir / shard_file_name(0)).string();
}

TEST_F(DataWriterTest, LargeDatasetsStartOn4KiBBoundaries) {
  std::vector<float> big, small;
  const std::string shard = write_test_shard(dir_ / "step", big, small);
  const hid_t f = H5Fopen(shard.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (const char* name : {"model/a/piece_0", "model/a/piece_1", "model/bias/piece_0"}) {
    const hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ASSERT_GE(d, 0) << name;
    const haddr_t at = H5Dget_offset(d);
    const hsize_t bytes = H5Dget_storage_size(d);
    if (bytes >= static_cast<hsize_t>(detail::kDataAlignment))
      EXPECT_EQ(at % static_cast<haddr_t>(detail::kDataAlignment), 0u) << name << " at " << at;
    // HDF5 reads back what DataWriter wrote at the offset HDF5 gave
    std::vector<float> got(bytes / sizeof(float));
    ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()), 0);
    const float* want = std::string(name) == "model/a/piece_0"   ? big.data()
                        : std::string(name) == "model/a/piece_1" ? big.data() + 1000 * 257
                                                                 : small.data();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want)) << name;
    H5Dclose(d);
  }
  H5Fclose(f);
}

// Pages of [from, to) of path resident in the page cache.
size_t resident_pages(const std::string& path, uint64_t from, uint64_t to) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  const size_t len = static_cast<size_t>(::lseek(fd, 0, SEEK_END));
  void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  EXPECT_NE(m, MAP_FAILED);
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> vec((len + static_cast<size_t>(page) - 1) / static_cast<size_t>(page));
  EXPECT_EQ(::mincore(m, len, vec.data()), 0);
  size_t resident = 0;
  for (uint64_t p = from / static_cast<uint64_t>(page); p < to / static_cast<uint64_t>(page); ++p)
    resident += vec[p] & 1u;
  ::munmap(m, len);
  ::close(fd);
  return resident;
}

TEST_F(DataWriterTest, DirectWritesLeaveTheTensorBytesOutOfThePageCache) {
  struct statfs sfs {};
  ASSERT_EQ(::statfs(dir_.c_str(), &sfs), 0);
  if (sfs.f_type == 0x01021994 /* TMPFS_MAGIC: its pages are the file */)
    GTEST_SKIP() << dir_ << " is on tmpfs: every page of a file there is resident";
  std::vector<float> big, small;
  for (const char* io : {"direct", "buffered"}) {
    ::setenv("HPCT_CKPT_IO", io, 1);
    const fs::path step = dir_ / io;
    const std::string shard = write_test_shard(step, big, small);
    const hid_t f = H5Fopen(shard.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "model/a/piece_1", H5P_DEFAULT);
    const uint64_t at = H5Dget_offset(d), bytes = H5Dget_storage_size(d);
    H5Dclose(d);
    H5Fclose(f);
    const size_t pages = resident_pages(shard, at, at + bytes);
    const uint64_t total = bytes / static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    if (std::string(io) == "direct") {
      DataWriter probe(shard, DataIo::Direct);
      if (!probe.direct()) GTEST_SKIP() << "the file system of " << dir_ << " refuses O_DIRECT";
      EXPECT_LE(pages, 2u) << "of " << total << " pages of a directly written dataset resident";
    } else {
      EXPECT_GE(pages, total / 2) << "the buffered control: the check must see pages written through the cache";
    }
  }
}

}  // namespace
}  // namespace hpct::ckpt
