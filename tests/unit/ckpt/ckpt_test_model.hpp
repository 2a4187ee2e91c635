#pragma once
// A small "model" of tensors with known values, split over simulated ranks the ways the trainer splits them
// (ZeRO flat ranges cut into boxes, row splits, column splits, replicas). Shared by the gtests and by
// ckpt_make_test_checkpoint (whose output check_index_h5py.py checks with h5py: keep its TENSORS in sync).
//
// Values: element i (row-major flat index) of a tensor with salt s is ((7*i + s) % 1000) / 8 for floats
// (exact in f32) and (7*i + s) % m for integers (m = 1000, or 251 for u8).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace hpct::ckpt::testing {

enum class Split { Flat, Axis0, Axis1, Replicated, Rank0Only };

struct TestTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  int salt;
  Split split;
  std::vector<unsigned char> bytes;  // the whole tensor, row-major
};

inline int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

inline std::vector<unsigned char> make_values(const std::vector<int64_t>& shape, DType dt, int salt) {
  const int64_t n = numel_of(shape);
  std::vector<unsigned char> b(static_cast<size_t>(n) * dtype_size(dt));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = 7 * i + salt;
    switch (dt) {
      case DType::F32: reinterpret_cast<float*>(b.data())[i] = static_cast<float>(k % 1000) / 8.0f; break;
      case DType::F64: reinterpret_cast<double*>(b.data())[i] = static_cast<double>(k % 1000) / 8.0; break;
      case DType::I32: reinterpret_cast<int32_t*>(b.data())[i] = static_cast<int32_t>(k % 1000); break;
      case DType::I64: reinterpret_cast<int64_t*>(b.data())[i] = k % 1000; break;
      case DType::U8: b[static_cast<size_t>(i)] = static_cast<unsigned char>(k % 251); break;
    }
  }
  return b;
}

// The tensors of the test model (the h5py check mirrors this list).
inline std::vector<TestTensor> test_model() {
  std::vector<TestTensor> t = {
      {"model/h.0.attn.qkv.weight", {12, 10}, DType::F32, 1, Split::Flat, {}},
      {"model/h.0.block4d", {3, 4, 5, 6}, DType::F32, 2, Split::Flat, {}},
      {"model/wte", {9, 7}, DType::F32, 3, Split::Axis0, {}},
      {"model/ln_f.bias", {7}, DType::F32, 4, Split::Replicated, {}},
      {"optim/exp_avg/model/h.0.block4d", {3, 4, 5, 6}, DType::F64, 5, Split::Flat, {}},
      {"optim/exp_avg/model/wte", {9, 7}, DType::F64, 6, Split::Axis1, {}},
      {"state/step_counts", {5, 3}, DType::I64, 7, Split::Axis0, {}},
      {"state/seq", {11}, DType::I32, 8, Split::Flat, {}},
      {"state/loader", {13}, DType::U8, 9, Split::Rank0Only, {}},
  };
  for (auto& x : t) x.bytes = make_values(x.shape, x.dtype, x.salt);
  return t;
}

// Copies the box [offset, offset+count) of a row-major tensor into a contiguous row-major buffer.
inline std::vector<unsigned char> extract_box(const std::vector<unsigned char>& whole,
                                              const std::vector<int64_t>& shape, size_t esize,
                                              const std::vector<int64_t>& offset, const std::vector<int64_t>& count) {
  const size_t nd = shape.size();
  std::vector<unsigned char> out(static_cast<size_t>(numel_of(count)) * esize);
  if (out.empty()) return out;
  std::vector<int64_t> idx(nd, 0);  // index inside the box
  size_t o = 0;
  for (;;) {
    int64_t flat = 0;
    for (size_t a = 0; a < nd; ++a) flat = flat * shape[a] + offset[a] + idx[a];
    std::memcpy(out.data() + o, whole.data() + static_cast<size_t>(flat) * esize, esize);
    o += esize;
    size_t a = nd;
    while (a > 0) {
      --a;
      if (++idx[a] < count[a]) break;
      idx[a] = 0;
      if (a == 0) return out;
    }
  }
}

// Even split of n into `parts` ranges: [begin, end) of part p (the first n % parts parts get one more).
inline std::pair<int64_t, int64_t> split_range(int64_t n, int parts, int p) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t b = p * base + std::min<int64_t>(p, extra);
  return {b, b + base + (p < extra ? 1 : 0)};
}

// The pieces rank `rank` of `nranks` owns. Piece data points into `storage` (kept by the caller).
inline std::vector<Piece> pieces_for_rank(const std::vector<TestTensor>& model, int rank, int nranks,
                                          std::vector<std::vector<unsigned char>>& storage) {
  std::vector<Piece> pieces;
  auto add = [&](const TestTensor& t, std::vector<int64_t> off, std::vector<int64_t> cnt, int split_axis, int replica) {
    storage.push_back(extract_box(t.bytes, t.shape, dtype_size(t.dtype), off, cnt));
    Piece p;
    p.dataset = t.name;
    p.global_shape = t.shape;
    p.offset = std::move(off);
    p.count = std::move(cnt);
    p.split_axis = split_axis;
    p.replica = replica;
    p.dtype = t.dtype;
    p.data = storage.back().data();
    pieces.push_back(std::move(p));
  };
  // (storage may reallocate: moving the inner vectors keeps their buffers, so earlier data pointers stay valid)
  for (const auto& t : model) {
    switch (t.split) {
      case Split::Flat: {
        // Uneven cut points so that boxes start mid-row: ranges of a ZeRO flat shard.
        const int64_t n = numel_of(t.shape);
        const int64_t b = rank == 0 ? 0 : (n * rank) / nranks + 1,
                      e = rank == nranks - 1 ? n : (n * (rank + 1)) / nranks + 1;
        for (const Box& box : flat_range_to_boxes(t.shape, b, e)) add(t, box.offset, box.count, -1, 0);
        break;
      }
      case Split::Axis0:
      case Split::Axis1: {
        const int axis = t.split == Split::Axis0 ? 0 : 1;
        const auto [b, e] = split_range(t.shape[axis], nranks, rank);
        std::vector<int64_t> off(t.shape.size(), 0), cnt = t.shape;
        off[axis] = b;
        cnt[axis] = e - b;
        add(t, off, cnt, axis, 0);
        break;
      }
      case Split::Replicated:
        add(t, std::vector<int64_t>(t.shape.size(), 0), t.shape, -1, rank);  // every rank writes; replica 0 is mapped
        break;
      case Split::Rank0Only:
        if (rank == 0) add(t, std::vector<int64_t>(t.shape.size(), 0), t.shape, -1, 0);
        break;
    }
  }
  return pieces;
}

inline Attrs test_attrs(int64_t step) {
  Attrs a;
  a.ints["step"] = step;
  a.ints["tokens_seen"] = 123456789012LL;
  a.floats["lr"] = 0.000125;
  a.strings["layout"] = "dp=3 tp=1 pp=1 zero=1";
  std::string deck = "# a long deck, to exceed the 64 KiB object-header attribute limit\n[model]\n";
  while (deck.size() < 100000) deck += "key_" + std::to_string(deck.size()) + " = \"value with ünïcode\"\n";
  a.strings["deck"] = deck;
  return a;
}

// Writes a complete checkpoint of the test model at `step` under root (3 simulated ranks), committed.
inline std::string write_test_checkpoint(const std::string& root, int64_t step, int keep, int nranks = 3) {
  const auto model = test_model();
  const std::string tmp = root + "/" + tmp_step_dir_name(step);
  std::vector<ShardManifest> manifests;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::vector<unsigned char>> storage;
    const auto pieces = pieces_for_rank(model, r, nranks, storage);
    // Through JSON, as the trainer gathers them.
    manifests.push_back(ShardManifest::from_json(write_shard(tmp, r, pieces).to_json()));
  }
  write_index(tmp, manifests, test_attrs(step));
  return commit(root, step, keep);
}

}  // namespace hpct::ckpt::testing
