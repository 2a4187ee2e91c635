// Checkpoint round trip with 3 simulated ranks in one process (ZeRO-style flat ranges cut into boxes, row and
// column splits, replicas), reads onto other layouts, commit / keep / prune / latest, verify against missing,
// truncated and bit-flipped shards, the pause hook, and the export.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "ckpt/checkpoint.hpp"
#include "ckpt_test_model.hpp"
#include "core/error.hpp"

namespace hpct::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::extract_box;
using testing::numel_of;
using testing::test_model;
using testing::write_test_checkpoint;

class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("hpct_ckpt_" + std::string(info->test_suite_name()) + "_" + info->name() +
                                         "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

// Runs fn, expects an exception of type E whose what() contains every needle.
template <typename E>
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return;
  }
  ADD_FAILURE() << "nothing was thrown";
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const testing::TestTensor& tensor(const std::vector<testing::TestTensor>& m, const std::string& name) {
  for (const auto& t : m)
    if (t.name == name) return t;
  throw std::runtime_error("no test tensor " + name);
}

TEST(Checkpoint, RoundTripWholeTensorsAndAttributes) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 40, 0);
  EXPECT_EQ(step_dir, (dir.path() / "step_00000040").string());
  EXPECT_FALSE(fs::exists(dir.path() / ".tmp_step_00000040"));
  EXPECT_EQ(read_text(dir.path() / "latest"), "step_00000040\n");
  EXPECT_EQ(resolve_latest(dir.str()), step_dir);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(fs::exists(fs::path(step_dir) / shard_file_name(r)));

  Reader reader(step_dir);
  const auto model = test_model();
  std::vector<std::string> names;
  for (const auto& t : model) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(reader.datasets(), names);
  for (const auto& t : model) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(reader.has(t.name));
    EXPECT_EQ(reader.shape(t.name), t.shape);
    EXPECT_EQ(reader.dtype(t.name), t.dtype);
    std::vector<unsigned char> got(t.bytes.size(), 0xAB);
    reader.read_all(t.name, t.dtype, got.data());
    EXPECT_EQ(got, t.bytes);
  }
  EXPECT_FALSE(reader.has("model/nope"));
  EXPECT_EQ(reader.format_version(), kFormatVersion);

  const Attrs want = testing::test_attrs(40);
  const Attrs& got = reader.attrs();
  EXPECT_EQ(got.ints.at("step"), 40);
  EXPECT_EQ(got.ints.at("tokens_seen"), 123456789012LL);
  EXPECT_EQ(got.ints.at("format_version"), kFormatVersion);
  EXPECT_EQ(got.floats.at("lr"), 0.000125);
  EXPECT_EQ(got.strings.at("layout"), want.strings.at("layout"));
  EXPECT_EQ(got.strings.at("deck"), want.strings.at("deck"));  // > 64 KiB, UTF-8
  EXPECT_EQ(got.strings.count("pieces_json"), 0u);

  // The manifests come back (3 shards; every piece's CRC is the CRC of its bytes).
  ASSERT_EQ(reader.shards().size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const auto& m = reader.shards()[r];
    EXPECT_EQ(m.rank, r);
    EXPECT_EQ(m.file, shard_file_name(r));
    std::vector<std::vector<unsigned char>> storage;
    const auto pieces = testing::pieces_for_rank(model, r, 3, storage);
    ASSERT_EQ(m.pieces.size(), pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      EXPECT_EQ(m.pieces[i].dataset, pieces[i].dataset);
      EXPECT_EQ(m.pieces[i].offset, pieces[i].offset);
      EXPECT_EQ(m.pieces[i].crc, crc32c(storage[i].data(), storage[i].size()));
    }
  }
}

TEST(Checkpoint, ManifestJsonRoundTrip) {
  ShardManifest m;
  m.rank = 5;
  m.file = shard_file_name(5);
  m.pieces.push_back({"model/h.0.attn.qkv.weight",
                      "model/h.0.attn.qkv.weight/piece_0",
                      {3, 12, 64, 768},
                      {0, 4, 0, 0},
                      {3, 4, 64, 768},
                      1,
                      0,
                      DType::F64,
                      0xDEADBEEFu});
  const ShardManifest back = ShardManifest::from_json(m.to_json());
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_EQ(back.pieces[0].crc, 0xDEADBEEFu);
  EXPECT_EQ(back.pieces[0].dtype, DType::F64);
  EXPECT_EQ(back.pieces[0].split_axis, 1);
  EXPECT_THROW(ShardManifest::from_json("{\"rank\": 1}"), Error);
  EXPECT_EQ(dtype_from_name("u8"), DType::U8);
  EXPECT_THROW(dtype_from_name("bf16"), Error);
}

TEST(Checkpoint, ArbitraryHyperslabsAndOtherLayouts) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 3, 0);
  Reader reader(step_dir);
  const auto model = test_model();
  std::mt19937 rng(123);
  for (const auto& t : model) {
    SCOPED_TRACE(t.name);
    const size_t es = dtype_size(t.dtype);
    for (int trial = 0; trial < 25; ++trial) {
      std::vector<int64_t> off(t.shape.size()), cnt(t.shape.size());
      for (size_t a = 0; a < t.shape.size(); ++a) {
        off[a] = std::uniform_int_distribution<int64_t>(0, t.shape[a] - 1)(rng);
        cnt[a] = std::uniform_int_distribution<int64_t>(1, t.shape[a] - off[a])(rng);
      }
      std::vector<unsigned char> got(static_cast<size_t>(numel_of(cnt)) * es);
      reader.read(t.name, off, cnt, t.dtype, got.data());
      ASSERT_EQ(got, extract_box(t.bytes, t.shape, es, off, cnt));
    }
  }
  // Restore onto a different layout: 4 ZeRO ranks' flat ranges of a tensor written as 3 row + flat pieces,
  // and a 2-way column split of a tensor written as row pieces.
  for (const char* name : {"model/wte", "model/h.0.block4d"}) {
    const auto& t = tensor(model, name);
    const int64_t n = numel_of(t.shape);
    std::vector<unsigned char> flat(t.bytes.size());
    for (int r = 0; r < 4; ++r) {
      const auto [b, e] = testing::split_range(n, 4, r);
      for (const Box& box : flat_range_to_boxes(t.shape, b, e))
        reader.read(name, box.offset, box.count, t.dtype, flat.data() + box.flat_begin * dtype_size(t.dtype));
    }
    EXPECT_EQ(flat, t.bytes) << name;
  }
  const auto& wte = tensor(model, "model/wte");
  for (int r = 0; r < 2; ++r) {
    const auto [b, e] = testing::split_range(wte.shape[1], 2, r);
    std::vector<float> got(static_cast<size_t>(wte.shape[0] * (e - b)));
    reader.read("model/wte", {0, b}, {wte.shape[0], e - b}, DType::F32, got.data());
    const auto want = extract_box(wte.bytes, wte.shape, 4, {0, b}, {wte.shape[0], e - b});
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size()));
  }
  // Misuse is an error naming the tensor.
  std::vector<double> buf(100);
  expect_error<Error>([&] { reader.read("model/wte", {0, 0}, {2, 2}, DType::F64, buf.data()); }, {"model/wte", "f32"});
  expect_error<Error>(
      [&] {
        reader.read("model/wte", {8, 0}, {2, 2}, DType::F32, buf.data());
      },
      {"model/wte", "out of bounds"});
  expect_error<UsageError>([&] { reader.read("model/none", {0}, {1}, DType::F32, buf.data()); }, {"model/none"});
}

TEST(Checkpoint, IndexRejectsPiecesThatDoNotTile) {
  ScratchDir dir;
  const std::vector<float> data(64, 1.0f);
  auto piece = [&](std::vector<int64_t> off, std::vector<int64_t> cnt) {
    Piece p;
    p.dataset = "model/w";
    p.global_shape = {4, 4};
    p.offset = std::move(off);
    p.count = std::move(cnt);
    p.data = data.data();
    return p;
  };
  // A missing row.
  const std::string d1 = (dir.path() / "a").string();
  auto m1 = write_shard(d1, 0, {piece({0, 0}, {3, 4})});
  expect_error<Error>([&] { write_index(d1, {m1}, {}); }, {"model/w", "12 elements", "16"});
  // Same total, but an overlap and a gap.
  const std::string d2 = (dir.path() / "b").string();
  auto m2a = write_shard(d2, 0, {piece({0, 0}, {2, 4})});
  auto m2b = write_shard(d2, 1, {piece({1, 0}, {2, 4})});  // rows 1-2: row 1 overlaps rank 0's, row 3 is missing
  auto m2c = write_shard(d2, 2, {});
  expect_error<Error>([&] { write_index(d2, {m2a, m2b, m2c}, {}); }, {"model/w", "overlap"});
  // Out of bounds pieces are refused when written.
  expect_error<Error>([&] { write_shard(d2, 3, {piece({3, 0}, {2, 4})}); }, {"model/w", "outside"});
  // Reserved attribute names.
  const std::string d3 = (dir.path() / "c").string();
  auto m3 = write_shard(d3, 0, {piece({0, 0}, {4, 4})});
  Attrs bad;
  bad.strings["pieces_json"] = "x";
  expect_error<Error>([&] { write_index(d3, {m3}, bad); }, {"pieces_json", "reserved"});
  Attrs dup;
  dup.ints["step"] = 1;
  dup.floats["step"] = 1.0;
  expect_error<Error>([&] { write_index(d3, {m3}, dup); }, {"step"});
  write_index(d3, {m3}, {});  // the good one works
  Reader r(d3);
  EXPECT_EQ(r.shape("model/w"), (std::vector<int64_t>{4, 4}));
}

TEST(Checkpoint, CommitKeepPruneAndLatest) {
  ScratchDir dir;
  const std::string root = dir.str();
  EXPECT_EQ(resolve_latest(root), "");
  EXPECT_EQ(resolve_latest((dir.path() / "does_not_exist").string()), "");
  write_test_checkpoint(root, 10, 2);
  write_test_checkpoint(root, 20, 2);
  // A crashed checkpoint left a stale temporary directory behind.
  fs::create_directories(dir.path() / ".tmp_step_00000025");
  std::ofstream(dir.path() / ".tmp_step_00000025" / "shard_00000.h5") << "partial";
  write_test_checkpoint(root, 30, 2);
  EXPECT_FALSE(fs::exists(dir.path() / "step_00000010"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000020"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000030"));
  EXPECT_FALSE(fs::exists(dir.path() / ".tmp_step_00000025"));
  EXPECT_FALSE(fs::exists(dir.path() / "latest.tmp"));
  EXPECT_EQ(resolve_latest(root), (dir.path() / "step_00000030").string());
  EXPECT_EQ(Reader(resolve_latest(root)).attrs().ints.at("step"), 30);

  // keep = 1 removes every other step; keep <= 0 keeps all.
  write_test_checkpoint(root, 40, 0);
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000020"));
  write_test_checkpoint(root, 50, 1);
  EXPECT_FALSE(fs::exists(dir.path() / "step_00000020"));
  EXPECT_FALSE(fs::exists(dir.path() / "step_00000040"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000050"));

  // Committing the step `latest` already names keeps the committed one (latest never dangles).
  write_test_checkpoint(root, 50, 1);
  EXPECT_EQ(resolve_latest(root), (dir.path() / "step_00000050").string());
  EXPECT_FALSE(fs::exists(dir.path() / ".tmp_step_00000050"));
  EXPECT_GT(verify(resolve_latest(root)), 0);

  // An orphan step directory (crash after the rename) is replaced by the next commit of that step.
  fs::create_directories(dir.path() / "step_00000060");
  write_test_checkpoint(root, 60, 3);
  EXPECT_EQ(resolve_latest(root), (dir.path() / "step_00000060").string());
  EXPECT_GT(verify(resolve_latest(root)), 0);

  // find_step_dir: a step dir, a checkpoints dir, a run dir.
  EXPECT_EQ(find_step_dir((dir.path() / "step_00000060").string()), (dir.path() / "step_00000060").string());
  EXPECT_EQ(find_step_dir(root), (dir.path() / "step_00000060").string());
  const fs::path run = dir.path() / "run";
  fs::create_directories(run);
  fs::create_symlink(dir.path(), run / "checkpoints");
  EXPECT_EQ(fs::path(find_step_dir(run.string())).filename(), "step_00000060");
  expect_error<UsageError>([&] { find_step_dir((dir.path() / "nothing").string()); }, {"nothing"});

  // `latest` naming a missing directory is an error naming both.
  fs::remove_all(dir.path() / "step_00000060");
  expect_error<UsageError>([&] { resolve_latest(root); }, {"latest", "step_00000060"});

  // commit without the temporary directory is an error.
  expect_error<Error>([&] { commit(root, 70, 1); }, {".tmp_step_00000070"});
}

// With a BackgroundRemover the pruned directories leave the checkpoint namespace at once (renamed to .trash_step_*)
// and are gone once it is waited for; a .trash_* left by a crash mid-removal goes with the next commit.
TEST(Checkpoint, BackgroundPruneRenamesThenRemoves) {
  ScratchDir dir;
  const std::string root = dir.str();
  auto commit_with = [&](int64_t step, int keep, BackgroundRemover& remover) {
    const auto model = testing::test_model();
    const std::string tmp = root + "/" + tmp_step_dir_name(step);
    std::vector<std::vector<unsigned char>> storage;
    const ShardManifest m = write_shard(tmp, 0, testing::pieces_for_rank(model, 0, 1, storage));
    write_index(tmp, {m}, testing::test_attrs(step));
    SavePhases phases;
    const std::string out = commit(root, step, keep, &phases, &remover);
    EXPECT_GE(phases.prune_s, 0.0);
    return out;
  };
  {
    BackgroundRemover remover;
    commit_with(10, 1, remover);
    commit_with(20, 1, remover);
    // step_10 is out of the namespace right away: only step_20 is a checkpoint
    EXPECT_FALSE(fs::exists(dir.path() / "step_00000010"));
    EXPECT_EQ(remover.wait(), "");
    EXPECT_FALSE(fs::exists(dir.path() / ".trash_step_00000010"));
    EXPECT_EQ(resolve_latest(root), (dir.path() / "step_00000020").string());
    // a crash during a background removal leaves a .trash_* behind: the next commit removes it
    fs::create_directories(dir.path() / ".trash_step_00000015");
    std::ofstream(dir.path() / ".trash_step_00000015" / "shard_00000.h5") << "half removed";
    commit_with(30, 2, remover);
  }  // the destructor waits
  EXPECT_FALSE(fs::exists(dir.path() / ".trash_step_00000015"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000020"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000030"));
  EXPECT_GT(verify(resolve_latest(root)), 0);
}

// --- verify ---------------------------------------------------------------------------------------------

TEST(Verify, AcceptsAGoodCheckpointAndSplitsTheWork) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 1, 0);
  int64_t want = 0;
  for (const auto& t : test_model()) want += static_cast<int64_t>(t.bytes.size());
  // Replicated tensor: ranks 1 and 2 also store their copies, which verify checks too.
  want += 2 * static_cast<int64_t>(tensor(test_model(), "model/ln_f.bias").bytes.size());
  EXPECT_EQ(verify(step_dir), want);
  EXPECT_EQ(verify(step_dir, 0, 2) + verify(step_dir, 1, 2), want);
  EXPECT_EQ(verify(step_dir, 0, 3) + verify(step_dir, 1, 3) + verify(step_dir, 2, 3), want);
  EXPECT_THROW(verify(step_dir, 2, 2), Error);
}

TEST(Verify, MissingShardFileIsNamed) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 1, 0);
  fs::remove(fs::path(step_dir) / "shard_00001.h5");
  expect_error<Error>([&] { verify(step_dir); },
                      {"shard_00001.h5", "is missing", "model/h.0.attn.qkv.weight", "earlier"});
  // Only the part that owns the file sees it.
  EXPECT_NO_THROW(verify(step_dir, 0, 2));
  EXPECT_THROW(verify(step_dir, 1, 2), Error);
  // Through the virtual dataset, the missing part reads as the fill value: NaN for floats (never plausible zeros).
  Reader reader(step_dir);
  std::vector<float> wte(63);
  reader.read_all("model/wte", DType::F32, wte.data());
  EXPECT_FALSE(std::isnan(wte[0]));      // row 0: rank 0
  EXPECT_TRUE(std::isnan(wte[3 * 7]));   // row 3: rank 1, missing
  EXPECT_FALSE(std::isnan(wte[6 * 7]));  // row 6: rank 2
}

// Runs fn with HDF5's automatic error printing as a program leaves it by default (on), expects an exception of type E
// whose message is one line holding every needle, and nothing on stderr: no HDF5 error stack.
template <typename E>
void expect_one_line(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  ::testing::internal::CaptureStderr();
  std::string msg;
  bool thrown = false;
  try {
    fn();
  } catch (const E& e) {
    msg = e.what();
    thrown = true;
  } catch (const std::exception& e) {
    msg = std::string("unexpected exception type: ") + e.what();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(thrown) << (msg.empty() ? "nothing was thrown" : msg);
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  EXPECT_EQ(err, "") << "printed on stderr (an HDF5 error stack?)";
}

TEST(Verify, TruncatedShardIsNamed) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 1, 0);
  const std::string shard = (fs::path(step_dir) / "shard_00002.h5").string();
  const auto size = fs::file_size(shard);
  ASSERT_EQ(::truncate(shard.c_str(), static_cast<off_t>(size / 2)), 0);
  expect_one_line<Error>([&] { verify(step_dir); },
                         {"shard_00002.h5", fmt::format("truncated: {} of the {} bytes", size / 2, size), "damaged"});
  ASSERT_EQ(::truncate(shard.c_str(), 0), 0);
  expect_one_line<Error>([&] { verify(step_dir); }, {"shard_00002.h5", "cannot be opened", "empty (0 bytes)"});
  std::ofstream(shard) << "these bytes are no HDF5 file";
  expect_one_line<Error>([&] { verify(step_dir); }, {"shard_00002.h5", "not an HDF5 file", "damaged"});
}

// Flips one byte inside a piece's data, located with H5Dget_offset (contiguous layout).
void flip_byte_in_dataset(const std::string& file, const std::string& dataset, int64_t byte_in_data) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0);
  const haddr_t off = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  ASSERT_NE(off, HADDR_UNDEF);
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(off + byte_in_data)), 1);
  b ^= 0x01;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(off + byte_in_data)), 1);
  ::close(fd);
}

TEST(Verify, FlippedByteNamesFileAndTensor) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 1, 0);
  const std::string shard = (fs::path(step_dir) / "shard_00001.h5").string();
  flip_byte_in_dataset(shard, "optim/exp_avg/model/wte/piece_0", 13);
  expect_error<Error>([&] { verify(step_dir); },
                      {"checksum mismatch", "shard_00001.h5", "optim/exp_avg/model/wte/piece_0",
                       "(tensor optim/exp_avg/model/wte)", "computed 0x", "resume from an earlier one"});
  // The flip is real: the value read through the index differs from the written one.
  Reader reader(step_dir);
  const auto model = test_model();
  const auto& t = tensor(model, "optim/exp_avg/model/wte");
  std::vector<unsigned char> got(t.bytes.size());
  reader.read_all(t.name, t.dtype, got.data());
  EXPECT_NE(got, t.bytes);
}

TEST(Reader, MissingIndexAndNewerFormatAreClearErrors) {
  ScratchDir dir;
  expect_error<UsageError>([&] { Reader r(dir.str()); }, {"index.h5", dir.str()});
  const std::string step_dir = write_test_checkpoint(dir.str(), 5, 0);
  {
    const hid_t f = H5Fopen((fs::path(step_dir) / "index.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    const int64_t v = kFormatVersion + 98;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
    H5Fclose(f);
  }
  expect_error<UsageError>([&] { Reader r(step_dir); }, {"format version 99", "newer hpctrain"});
  std::ofstream((fs::path(step_dir) / "index.h5")) << "not hdf5";
  expect_one_line<UsageError>([&] { Reader r(step_dir); }, {"index.h5", "not an HDF5 file (no HDF5 signature)"});
}

// Overwrites the first bytes of the object header of `object` in `file` (located with H5Oget_info_by_name).
void smash_object_header(const std::string& file, const std::string& object) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5O_info_t info;
  ASSERT_GE(H5Oget_info_by_name2(f, object.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT), 0);
  H5Fclose(f);
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const unsigned char junk[16] = {0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef,
                                  0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef};
  ASSERT_EQ(::pwrite(fd, junk, sizeof junk, static_cast<off_t>(info.addr)), static_cast<ssize_t>(sizeof junk));
  ::close(fd);
}

// Every way index.h5 can be damaged is one line naming it and what looks wrong, and no HDF5 error stack.
TEST(Reader, DamagedIndexIsOneLineWithoutHdf5Stack) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 5, 0);
  const std::string index = (fs::path(step_dir) / "index.h5").string();
  const std::string good = index + ".good";
  fs::copy_file(index, good);
  const auto size = fs::file_size(index);

  ASSERT_EQ(::truncate(index.c_str(), static_cast<off_t>(size / 2)), 0);
  expect_one_line<UsageError>([&] { Reader r(step_dir); },
                              {index,
                               fmt::format("truncated: {} of the {} bytes its superblock records", size / 2, size),
                               "resume from an earlier one"});
  ASSERT_EQ(::truncate(index.c_str(), 0), 0);
  expect_one_line<UsageError>([&] { Reader r(step_dir); }, {index, "empty (0 bytes)"});

  fs::copy_file(good, index, fs::copy_options::overwrite_existing);
  smash_object_header(index, "model/wte");
  expect_one_line<UsageError>([&] { Reader r(step_dir); },
                              {index, "its HDF5 metadata is corrupt (HDF5: ", "resume from an earlier one"});
  // verify (ckpt_tool verify, the resume check) opens the index first: the same line
  expect_one_line<UsageError>([&] { verify(step_dir); }, {index, "its HDF5 metadata is corrupt"});

  fs::copy_file(good, index, fs::copy_options::overwrite_existing);
  EXPECT_NO_THROW(Reader r(step_dir));
}

// --- crash safety: the HPCT_CKPT_PAUSE_AT hook ------------------------------------------------------------

// Forks a child that runs fn with HPCT_CKPT_PAUSE_AT=phase, waits for its pause line, SIGKILLs it.
void run_until_paused_then_kill(const char* phase, const std::function<void()>& fn) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::setenv("HPCT_CKPT_PAUSE_AT", phase, 1);
    try {
      fn();
    } catch (...) {
    }
    ::_exit(0);  // not reached when the hook pauses
  }
  ::close(fds[1]);
  std::string line;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(fds[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(line, std::string("hpctrain: HPCT_CKPT_PAUSE_AT=") + phase + ": pausing (test hook)");
  EXPECT_TRUE(WIFSIGNALED(status));
}

TEST(CrashSafety, KilledAfterShardsOrAfterRenameLeavesPreviousCheckpoint) {
  ScratchDir dir;
  const std::string root = dir.str();
  write_test_checkpoint(root, 10, 2);
  // Killed with every shard written, before the index.
  run_until_paused_then_kill("shards", [&] { write_test_checkpoint(root, 20, 2); });
  EXPECT_TRUE(fs::exists(dir.path() / ".tmp_step_00000020" / "shard_00002.h5"));
  EXPECT_FALSE(fs::exists(dir.path() / ".tmp_step_00000020" / "index.h5"));
  EXPECT_EQ(resolve_latest(root), (dir.path() / "step_00000010").string());
  EXPECT_GT(verify(resolve_latest(root)), 0);
  // Killed after the rename, before `latest`: step_20 exists, latest still names step_10.
  run_until_paused_then_kill("renamed", [&] { write_test_checkpoint(root, 20, 2); });
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000020" / "index.h5"));
  EXPECT_EQ(resolve_latest(root), (dir.path() / "step_00000010").string());
  EXPECT_GT(verify(resolve_latest(root)), 0);
  // The resumed run checkpoints again: everything is consistent.
  write_test_checkpoint(root, 20, 2);
  write_test_checkpoint(root, 30, 2);
  EXPECT_EQ(resolve_latest(root), (dir.path() / "step_00000030").string());
  EXPECT_FALSE(fs::exists(dir.path() / "step_00000010"));
  EXPECT_TRUE(fs::exists(dir.path() / "step_00000020"));
  EXPECT_GT(verify(resolve_latest(root)), 0);
}

// --- export ---------------------------------------------------------------------------------------------

TEST(Export, ConsolidatedFileHoldsWholeTensorsAndAttributes) {
  ScratchDir dir;
  const std::string step_dir = write_test_checkpoint(dir.str(), 8, 0);
  const std::string out = (dir.path() / "model.h5").string();
  export_consolidated(step_dir, out, false);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  // Remove the checkpoint: the export must not depend on the shards.
  fs::remove_all(step_dir);
  const hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (const auto& t : test_model()) {
    SCOPED_TRACE(t.name);
    const bool optim = t.name.rfind("optim/", 0) == 0;
    const htri_t exists = H5Lexists(f, optim ? "optim" : t.name.c_str(), H5P_DEFAULT);
    EXPECT_EQ(exists > 0, !optim);
    if (optim) continue;
    const hid_t d = H5Dopen2(f, t.name.c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0);
    const hid_t plist = H5Dget_create_plist(d);
    EXPECT_EQ(H5Pget_layout(plist), H5D_CONTIGUOUS);  // a regular dataset, not virtual
    H5Pclose(plist);
    std::vector<unsigned char> got(t.bytes.size());
    const hid_t type = H5Dget_type(d);
    ASSERT_GE(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()), 0);
    H5Tclose(type);
    H5Dclose(d);
    EXPECT_EQ(got, t.bytes);
  }
  int64_t step = 0;
  const hid_t a = H5Aopen(f, "step", H5P_DEFAULT);
  ASSERT_GE(H5Aread(a, H5T_NATIVE_INT64, &step), 0);
  H5Aclose(a);
  EXPECT_EQ(step, 8);
  EXPECT_GT(H5Aexists(f, "deck"), 0);
  EXPECT_EQ(H5Aexists(f, "pieces_json"), 0);
  H5Fclose(f);

  // With the optimizer state.
  const std::string step2 = write_test_checkpoint(dir.str(), 9, 0);
  export_consolidated(step2, out, true);
  const hid_t f2 = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f2, 0);
  EXPECT_GT(H5Lexists(f2, "optim", H5P_DEFAULT), 0);
  H5Fclose(f2);
}

}  // namespace
}  // namespace hpct::ckpt
