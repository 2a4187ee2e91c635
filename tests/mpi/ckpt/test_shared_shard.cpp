// write_shared_shard under mpirun: a small GPT-like state (random values, never zeros) split over the ranks in ZeRO
// flat shares, row and column splits, replicas and a rank-0-only tensor, written as checkpoint.files = single (one file
// over MPI_COMM_WORLD) and per_node (ranks grouped by rank / 2, one file per group), indexed and committed by rank 0 as
// the trainer does; every rank reads whole tensors and random hyperslabs back through Reader and compares bit for bit;
// per_rank, per_node and single give identical tensors; verify passes and catches a flipped byte in a shared file;
// a rank whose pieces are wrong makes every rank fail (none hangs).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/shared_shard.hpp"
#include "core/error.hpp"

namespace hpct::ckpt {
namespace {

namespace fs = std::filesystem;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

enum class Split { Flat, Axis0, Axis1, Replicated, Rank0Only };
enum class Files { PerRank, PerNode, Single };
const char* files_name(Files f) {
  return f == Files::PerRank ? "per_rank" : f == Files::PerNode ? "per_node" : "single";
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  Split split;
  std::vector<unsigned char> bytes;  // whole tensor, row-major
};

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Random values, the same on every rank (seeded by the tensor's position), none zero: a piece that was never written
// (read as 0 or NaN) or written in the wrong place cannot pass for the right one.
std::vector<Tensor> gpt_like_state() {
  std::vector<Tensor> t = {
      {"model/wte", {67, 24}, DType::F32, Split::Flat, {}},
      {"model/h.0.attn.qkv.weight", {3, 4, 6, 24}, DType::F32, Split::Flat, {}},
      {"model/h.0.attn.proj.weight", {24, 24}, DType::F32, Split::Axis1, {}},
      {"model/h.0.ln_1.weight", {24}, DType::F32, Split::Replicated, {}},
      {"model/h.0.mlp.fc.weight", {96, 24}, DType::F32, Split::Axis0, {}},
      {"optim/exp_avg/model/wte", {67, 24}, DType::F64, Split::Flat, {}},
      {"optim/exp_avg/model/h.0.attn.qkv.weight", {3, 4, 6, 24}, DType::F64, Split::Flat, {}},
      {"state/step_counts", {5, 3}, DType::I64, Split::Rank0Only, {}},
  };
  for (size_t i = 0; i < t.size(); ++i) {
    std::mt19937_64 gen(1234 + i);
    std::uniform_real_distribution<double> mag(0.5, 2.0);
    const int64_t n = numel_of(t[i].shape);
    t[i].bytes.resize(static_cast<size_t>(n) * dtype_size(t[i].dtype));
    for (int64_t k = 0; k < n; ++k) {
      const double v = (gen() & 1 ? 1.0 : -1.0) * mag(gen);
      switch (t[i].dtype) {
        case DType::F32: reinterpret_cast<float*>(t[i].bytes.data())[k] = static_cast<float>(v); break;
        case DType::F64: reinterpret_cast<double*>(t[i].bytes.data())[k] = v; break;
        case DType::I64:
          reinterpret_cast<int64_t*>(t[i].bytes.data())[k] = 1 + static_cast<int64_t>(gen() % 100000);
          break;
        default: ADD_FAILURE() << "unused dtype";
      }
    }
  }
  return t;
}

// The box [offset, offset+count) of a row-major tensor, contiguous.
std::vector<unsigned char> extract_box(const Tensor& t, const std::vector<int64_t>& offset,
                                       const std::vector<int64_t>& count) {
  const size_t es = dtype_size(t.dtype), nd = t.shape.size();
  std::vector<unsigned char> out(static_cast<size_t>(numel_of(count)) * es);
  if (out.empty()) return out;
  std::vector<int64_t> idx(nd, 0);
  for (size_t o = 0; o < out.size(); o += es) {
    int64_t flat = 0;
    for (size_t a = 0; a < nd; ++a) flat = flat * t.shape[a] + offset[a] + idx[a];
    std::memcpy(out.data() + o, t.bytes.data() + static_cast<size_t>(flat) * es, es);
    for (size_t a = nd; a-- > 0;) {
      if (++idx[a] < count[a]) break;
      idx[a] = 0;
    }
  }
  return out;
}

// This rank's pieces (data in storage, kept by the caller).
std::vector<Piece> my_pieces(const std::vector<Tensor>& state, std::vector<std::vector<unsigned char>>& storage) {
  const int rank = world_rank(), world = world_size();
  std::vector<Piece> pieces;
  // (storage may reallocate: moving the inner vectors keeps their buffers, so earlier data pointers stay valid)
  auto add = [&](const Tensor& t, std::vector<int64_t> off, std::vector<int64_t> cnt, int axis, int replica) {
    storage.push_back(extract_box(t, off, cnt));
    Piece p;
    p.dataset = t.name;
    p.global_shape = t.shape;
    p.offset = std::move(off);
    p.count = std::move(cnt);
    p.split_axis = axis;
    p.replica = replica;
    p.dtype = t.dtype;
    p.data = storage.back().data();
    pieces.push_back(std::move(p));
  };
  for (const Tensor& t : state) {
    const int64_t n = numel_of(t.shape);
    switch (t.split) {
      case Split::Flat:
        // ZeRO flat shares: cut points fall mid-row, so a share is several hyperslab boxes.
        for (const Box& b : flat_range_to_boxes(t.shape, n * rank / world, n * (rank + 1) / world))
          add(t, b.offset, b.count, -1, 0);
        break;
      case Split::Axis0:
      case Split::Axis1: {
        const int axis = t.split == Split::Axis0 ? 0 : 1;
        std::vector<int64_t> off(t.shape.size(), 0), cnt = t.shape;
        off[axis] = t.shape[axis] * rank / world;
        cnt[axis] = t.shape[axis] * (rank + 1) / world - off[axis];
        add(t, off, cnt, axis, 0);
        break;
      }
      case Split::Replicated: add(t, std::vector<int64_t>(t.shape.size(), 0), t.shape, -1, rank); break;
      case Split::Rank0Only:
        if (rank == 0) add(t, std::vector<int64_t>(t.shape.size(), 0), t.shape, -1, 0);
        break;
    }
  }
  return pieces;
}

// A scratch root every rank sees (rank 0 names it), removed at the end.
class SharedScratch {
 public:
  SharedScratch() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info->name();  // "WholeTensorsHyperslabsAndVerify/single": one path component
    std::replace(name.begin(), name.end(), '/', '_');
    std::string p =
        (fs::temp_directory_path() / ("hpct_shared_shard_" + name + "_" + std::to_string(::getpid()))).string();
    int len = static_cast<int>(p.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    p.resize(static_cast<size_t>(len));
    MPI_Bcast(p.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = p;
    if (world_rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedScratch() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (world_rank() == 0) fs::remove_all(path_, ec);
  }
  fs::path path() const { return path_; }

 private:
  fs::path path_;
};

// The trainer's protocol: every rank writes (per mode), the manifests go to rank 0 as JSON, rank 0 writes the index
// and commits, barrier. Returns the committed step directory.
std::string save(const fs::path& root, Files files, const std::vector<Piece>& pieces, int64_t step = 1) {
  const int rank = world_rank(), world = world_size();
  const std::string tmp = (root / tmp_step_dir_name(step)).string();
  ShardManifest m;
  if (files == Files::PerRank) {
    m = write_shard(tmp, rank, pieces);
  } else if (files == Files::Single) {
    m = write_shared_shard(MPI_COMM_WORLD, tmp, kSingleFileName, rank, pieces);
  } else {
    MPI_Comm node;
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &node);  // pseudo-nodes of 2 ranks
    m = write_shared_shard(node, tmp, node_file_name(rank / 2), rank, pieces);
    MPI_Comm_free(&node);
  }
  const std::string js = m.to_json();
  int len = static_cast<int>(js.size());
  std::vector<int> lens(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int i = 0; i < world; ++i) {
    displs[static_cast<size_t>(i)] = total;
    total += lens[static_cast<size_t>(i)];
  }
  std::string all(static_cast<size_t>(rank == 0 ? total : 0), '\0');
  MPI_Gatherv(js.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::vector<ShardManifest> ms;
    for (int i = 0; i < world; ++i)
      ms.push_back(ShardManifest::from_json(all.substr(static_cast<size_t>(displs[static_cast<size_t>(i)]),
                                                       static_cast<size_t>(lens[static_cast<size_t>(i)]))));
    Attrs attrs;
    attrs.ints["step"] = step;
    attrs.strings["files"] = files_name(files);
    write_index(tmp, ms, attrs);
    commit(root.string(), step, 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return (root / step_dir_name(step)).string();
}

int64_t sum_over_ranks(int64_t v) {
  int64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

class SharedShard : public ::testing::TestWithParam<Files> {};

TEST_P(SharedShard, WholeTensorsHyperslabsAndVerify) {
  const Files files = GetParam();
  const int rank = world_rank(), world = world_size();
  SharedScratch scratch;
  const auto state = gpt_like_state();
  std::vector<std::vector<unsigned char>> storage;
  const auto pieces = my_pieces(state, storage);
  const std::string step_dir = save(scratch.path(), files, pieces);

  // Files: one shared file (single) or one per pseudo-node of 2 ranks, and index.h5; nothing per rank.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(step_dir)) names.insert(e.path().filename().string());
  std::set<std::string> want = {"index.h5"};
  if (files == Files::Single) want.insert(kSingleFileName);
  else
    for (int node = 0; node < (world + 1) / 2; ++node) want.insert(node_file_name(node));
  EXPECT_EQ(names, want);

  Reader reader(step_dir);
  ASSERT_EQ(reader.shards().size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const ShardManifest& m = reader.shards()[static_cast<size_t>(r)];
    EXPECT_EQ(m.rank, r);
    EXPECT_EQ(m.file, files == Files::Single ? std::string(kSingleFileName) : node_file_name(r / 2));
    for (const auto& p : m.pieces) EXPECT_EQ(p.file_dataset.rfind(fmt::format("rank_{:05d}/", r), 0), 0u);
  }
  // Whole tensors, bit for bit.
  for (const Tensor& t : state) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(reader.has(t.name));
    EXPECT_EQ(reader.shape(t.name), t.shape);
    std::vector<unsigned char> got(t.bytes.size(), 0);
    reader.read_all(t.name, t.dtype, got.data());
    EXPECT_TRUE(got == t.bytes);
  }
  // Random hyperslabs (a restore onto another layout), different on every rank.
  std::mt19937 gen(77 + static_cast<unsigned>(rank));
  for (int k = 0; k < 40; ++k) {
    const Tensor& t = state[gen() % state.size()];
    std::vector<int64_t> off(t.shape.size()), cnt(t.shape.size());
    for (size_t a = 0; a < t.shape.size(); ++a) {
      off[a] = static_cast<int64_t>(gen() % static_cast<unsigned>(t.shape[a]));
      cnt[a] = 1 + static_cast<int64_t>(gen() % static_cast<unsigned>(t.shape[a] - off[a]));
    }
    std::vector<unsigned char> got(static_cast<size_t>(numel_of(cnt)) * dtype_size(t.dtype), 0);
    reader.read(t.name, off, cnt, t.dtype, got.data());
    EXPECT_TRUE(got == extract_box(t, off, cnt)) << t.name << " offset " << off[0] << " count " << cnt[0];
  }
  // verify split over the ranks checks every piece once: its byte count is every piece written (replicas included).
  int64_t mine = 0;
  for (const Piece& p : pieces) mine += numel_of(p.count) * static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t written = sum_over_ranks(mine);
  int64_t checked = 0;
  EXPECT_NO_THROW(checked = verify(step_dir, rank, world));
  EXPECT_EQ(sum_over_ranks(checked), written);
  if (rank == 0) {
    EXPECT_EQ(verify(step_dir), written);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, SharedShard, ::testing::Values(Files::Single, Files::PerNode),
                         [](const auto& info) { return std::string(files_name(info.param)); });

TEST(SharedShardModes, PerRankPerNodeAndSingleGiveIdenticalTensors) {
  SharedScratch scratch;
  const auto state = gpt_like_state();
  std::vector<std::vector<unsigned char>> storage;
  const auto pieces = my_pieces(state, storage);
  std::vector<std::string> dirs;
  for (Files f : {Files::PerRank, Files::PerNode, Files::Single})
    dirs.push_back(save(scratch.path() / files_name(f), f, pieces));
  std::vector<std::unique_ptr<Reader>> readers;
  for (const auto& d : dirs) readers.push_back(std::make_unique<Reader>(d));
  for (const Tensor& t : state) {
    std::vector<std::vector<unsigned char>> got;
    for (const auto& r : readers) {
      got.emplace_back(t.bytes.size(), 0);
      r->read_all(t.name, t.dtype, got.back().data());
    }
    EXPECT_TRUE(got[0] == t.bytes) << t.name << " per_rank";
    EXPECT_TRUE(got[1] == got[0]) << t.name << " per_node differs from per_rank";
    EXPECT_TRUE(got[2] == got[0]) << t.name << " single differs from per_rank";
  }
}

// Flips one byte of a piece's data in the shared file, located with H5Dget_offset (contiguous layout).
void flip_byte(const std::string& file, const std::string& dataset, int64_t byte) {
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
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(off + byte)), 1);
  b ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(off + byte)), 1);
  ::fsync(fd);
  ::close(fd);
}

TEST(SharedShardVerify, FlippedByteInTheSharedFileIsNamed) {
  const int rank = world_rank(), world = world_size();
  SharedScratch scratch;
  const auto state = gpt_like_state();
  std::vector<std::vector<unsigned char>> storage;
  const auto pieces = my_pieces(state, storage);
  const std::string step_dir = save(scratch.path(), Files::Single, pieces);
  const std::string file = (fs::path(step_dir) / kSingleFileName).string();
  EXPECT_NO_THROW(verify(step_dir, rank, world));
  MPI_Barrier(MPI_COMM_WORLD);
  // The last rank's first piece of the optimizer's wte.
  const std::string victim = fmt::format("rank_{:05d}/optim/exp_avg/model/wte/piece_0", world - 1);
  if (rank == 0) flip_byte(file, victim, 5);
  MPI_Barrier(MPI_COMM_WORLD);

  // Split over the ranks: exactly one part (the one holding the last rank's manifest) finds it, and names the file,
  // the dataset and the tensor.
  int found = 0;
  try {
    verify(step_dir, rank, world);
  } catch (const Error& e) {
    found = 1;
    const std::string msg = e.what();
    for (const std::string& needle :
         {std::string("checksum mismatch"), file, victim, std::string("(tensor optim/exp_avg/model/wte)")})
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
  }
  int found_total = 0;
  MPI_Allreduce(&found, &found_total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(found_total, 1);
  // Whole, on one rank.
  if (rank == 0) {
    try {
      verify(step_dir);
      ADD_FAILURE() << "verify passed a shared file with a flipped byte";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(kSingleFileName), std::string::npos) << e.what();
    }
  }
}

// A rank whose pieces are wrong fails with its own message; the others fail too, naming the file and that rank, and
// nobody hangs in a collective call.
TEST(SharedShardErrors, OneBadRankFailsEveryRank) {
  const int rank = world_rank(), world = world_size();
  SharedScratch scratch;
  const auto state = gpt_like_state();
  std::vector<std::vector<unsigned char>> storage;
  auto pieces = my_pieces(state, storage);
  const int bad = world - 1;
  if (rank == bad) pieces.front().data = nullptr;
  const std::string dir = (scratch.path() / "bad").string();
  try {
    write_shared_shard(MPI_COMM_WORLD, dir, kSingleFileName, rank, pieces);
    ADD_FAILURE() << "write_shared_shard succeeded with a piece without data on rank " << bad;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(pieces.front().dataset), std::string::npos) << msg;
    EXPECT_NE(msg.find("has no data"), std::string::npos) << msg;
    if (rank != bad) {
      EXPECT_NE(msg.find(fmt::format("rank {} of its communicator", bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find(kSingleFileName), std::string::npos) << msg;
    }
  }
  // Two ranks passing the same rank value would collide inside the file: refused on every rank.
  if (world > 1) {
    auto good = my_pieces(state, storage);
    EXPECT_THROW(write_shared_shard(MPI_COMM_WORLD, dir, kSingleFileName, 0, good), Error);
  }
}

}  // namespace
}  // namespace hpct::ckpt
