// bench_ckpt: checkpoint write bandwidth of lib/ckpt, the full protocol as the trainer runs it:
//   every rank: write_shard (its ZeRO-style flat share of every tensor, as hyperslab pieces; fsynced)
//   gather the manifests' JSON to rank 0; rank 0: write_index + commit (fsyncs, rename, latest); barrier
// The state is `--size-mib` MiB of f32 in total (default 512), spread over a GPT-like mix of tensors, and
// split evenly over the ranks by flat range (each rank writes size/np). Timed from a barrier to the final
// barrier; phases are the maximum over ranks. Each repetition writes a new step (commit keep=1 prunes the
// previous one, in the background as the trainer does). verify() is timed too: the data was written with O_DIRECT
// (ckpt/data_writer.hpp), so it reads from the disk, except under HPCT_CKPT_IO=buffered (then from the page cache: CRC
// and HDF5 read speed).
//
// --files (checkpoint.files): per_rank (write_shard: one file per rank, no communication), per_node
// (write_shared_shard over the ranks of a node: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or ranks grouped by
// rank / K when HPCT_CKPT_RANKS_PER_NODE=K, so that one machine can stand for several nodes; file node_<i>.h5 with i the
// node's rank among the node leaders) or single (write_shared_shard over all ranks into shards.h5). `files` counts the
// files one checkpoint creates, index.h5 included.
//
// Usage: mpirun -np N bench_ckpt [--dir DIR] [--size-mib 512] [--reps 3] [--files per_rank|per_node|single]
// Output: one row per repetition, then `BENCH_CKPT np=N files_mode=M files=F size_mib=S ... MiB_per_s=X` (median over
// reps). validation/bench_ckpt.sh runs it at np 1 and 2 and compares with dd (conv=fsync) on the same directory;
// validation/bench_ckpt_files.py compares the three --files modes at np 2, 4, 8.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/shared_shard.hpp"

namespace {

namespace ck = hpct::ckpt;

double now() { return MPI_Wtime(); }

double max_over_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
};

// A GPT-like mix: an embedding, per layer qkv (3, NH, HS, C) / proj / fc / fcproj weights and biases,
// scaled so that the total is about `target` elements.
std::vector<Spec> make_model(int64_t target) {
  const int64_t C = 768, NH = 12, HS = 64;
  std::vector<Spec> layer = {{"attn.qkv.weight", {3, NH, HS, C}}, {"attn.qkv.bias", {3, NH, HS}},
                             {"attn.proj.weight", {C, C}},        {"attn.proj.bias", {C}},
                             {"mlp.fc.weight", {4 * C, C}},       {"mlp.fc.bias", {4 * C}},
                             {"mlp.proj.weight", {C, 4 * C}},     {"ln_1.weight", {C}}};
  int64_t per_layer = 0;
  for (const auto& s : layer) {
    int64_t n = 1;
    for (auto d : s.shape) n *= d;
    per_layer += n;
  }
  const int64_t vocab_rows = 50304;
  const int64_t wte = vocab_rows * C;
  std::vector<Spec> model;
  int64_t total = 0;
  if (target >= 2 * wte) {
    model.push_back({"model/wte", {vocab_rows, C}});
    total += wte;
  }
  for (int l = 0; total + per_layer <= target; ++l) {
    for (const auto& s : layer) model.push_back({"model/h." + std::to_string(l) + "." + s.name, s.shape});
    total += per_layer;
  }
  if (target > total) model.push_back({"model/rest", {target - total}});  // top up to the exact size
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  hpct::set_process_identity(rank, world);

  std::string dir = "bench_ckpt_tmp";
  int64_t size_mib = 512;
  int reps = 3;
  std::string files = "per_rank";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--size-mib" && i + 1 < argc)
      size_mib = std::atoll(argv[++i]);
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--files" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "per_rank" || std::string(argv[i + 1]) == "per_node" ||
              std::string(argv[i + 1]) == "single"))
      files = argv[++i];
    else {
      if (rank == 0)
        std::fprintf(stderr,
                     "usage: bench_ckpt [--dir DIR] [--size-mib 512] [--reps 3] [--files per_rank|per_node|single]\n");
      MPI_Finalize();
      return 2;
    }
  }

  int code = 0;
  ck::NodeGroup node;
  if (files == "per_node") node = ck::node_group(MPI_COMM_WORLD);
  // files one checkpoint creates: the data files and index.h5
  const int nfiles = 1 + (files == "per_rank" ? world : files == "per_node" ? node.count : 1);
  try {
    const int64_t total_elems = size_mib * (1 << 20) / 4;
    const auto model = make_model(total_elems);
    // This rank's flat range of the concatenated state, as ZeRO shards it.
    const int64_t begin = total_elems * rank / world, end = total_elems * (rank + 1) / world;
    std::vector<float> mine(static_cast<size_t>(end - begin));
    uint32_t x = 12345u + 77u * static_cast<uint32_t>(rank);
    for (auto& v : mine) {
      x = x * 1664525u + 1013904223u;  // LCG: non-constant data (no sparse or compressible blocks)
      v = static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
    }
    std::vector<ck::Piece> pieces;
    int64_t base = 0;
    for (const auto& s : model) {
      int64_t n = 1;
      for (auto d : s.shape) n *= d;
      const int64_t lo = std::max(begin, base), hi = std::min(end, base + n);
      if (lo < hi)
        for (const auto& box : ck::flat_range_to_boxes(s.shape, lo - base, hi - base)) {
          ck::Piece p;
          p.dataset = s.name;
          p.global_shape = s.shape;
          p.offset = box.offset;
          p.count = box.count;
          p.data = mine.data() + (base + box.flat_begin - begin);
          pieces.push_back(std::move(p));
        }
      base += n;
    }
    if (rank == 0) {
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      std::printf(
          "# bench_ckpt: np=%d, %lld MiB of f32 in %zu tensors (%lld MiB per rank, %zu pieces on rank 0), dir %s, "
          "files %s (%d files per checkpoint, index.h5 included)%s\n",
          world, static_cast<long long>(size_mib), model.size(), static_cast<long long>(size_mib / world),
          pieces.size(), dir.c_str(), files.c_str(), nfiles,
          std::getenv("HPCT_CKPT_IO") != nullptr
              ? (std::string(", HPCT_CKPT_IO=") + std::getenv("HPCT_CKPT_IO")).c_str()
              : "");
      std::printf("%4s %10s %8s %10s %8s %8s %10s %10s %10s %10s %10s %10s | %12s %12s\n", "rep", "shard_s", "crc_s",
                  "metadata_s", "write_s", "fsync_s", "gather_s", "index_s", "commit_s", "prune_s", "total_s", "MiB/s",
                  "verify_s", "verify_MiB/s");
    }
    std::vector<double> totals, shards_t, crc_t, metadata_t, write_t, fsync_t, index_t, commit_t, prune_t, verify_t;
    ck::BackgroundRemover pruner;  // rank 0 prunes the previous step in the background, as the trainer does
    for (int r = 0; r < reps; ++r) {
      const int64_t step = r + 1;
      const std::string tmp = dir + "/" + ck::tmp_step_dir_name(step);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      ck::SavePhases ph;
      const ck::ShardManifest m = files == "per_rank" ? ck::write_shard(tmp, rank, pieces, &ph)
                                  : files == "per_node"
                                      ? ck::write_shared_shard(node.comm, tmp, ck::node_file_name(node.index), rank,
                                                               pieces, &ph)
                                      : ck::write_shared_shard(MPI_COMM_WORLD, tmp, ck::kSingleFileName, rank, pieces,
                                                               &ph);
      const double t1 = now();
      // Gather the manifests' JSON to rank 0 (metadata only).
      const std::string js = m.to_json();
      int len = static_cast<int>(js.size());
      std::vector<int> lens(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
      MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::string all;
      if (rank == 0) {
        int off = 0;
        for (int i = 0; i < world; ++i) {
          displs[i] = off;
          off += lens[i];
        }
        all.resize(static_cast<size_t>(off));
      }
      MPI_Gatherv(js.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
      const double t2 = now();
      double t3 = t2;
      if (rank == 0) {
        std::vector<ck::ShardManifest> ms;
        for (int i = 0; i < world; ++i) ms.push_back(ck::ShardManifest::from_json(all.substr(displs[i], lens[i])));
        ck::Attrs attrs;
        attrs.ints["step"] = step;
        ck::write_index(tmp, ms, attrs, &ph);
        t3 = now();
        ck::commit(dir, step, 1, &ph, &pruner);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      const double t5 = now();
      const double shard_s = max_over_ranks(t1 - t0), gather_s = max_over_ranks(t2 - t1);
      const double total = t5 - t0;
      // verify, split over the ranks (from the page cache: see the header).
      const std::string step_dir = dir + "/" + ck::step_dir_name(step);
      MPI_Barrier(MPI_COMM_WORLD);
      const double v0 = now();
      ck::verify(step_dir, rank, world);
      MPI_Barrier(MPI_COMM_WORLD);
      const double vs = now() - v0;
      // the shard phases of the slowest rank in each (the save waits for it); index, commit and prune are rank 0's
      const double crc_s = max_over_ranks(ph.crc_s), metadata_s = max_over_ranks(ph.metadata_s),
                   write_s = max_over_ranks(ph.write_s), fsync_s = max_over_ranks(ph.fsync_s);
      totals.push_back(total);
      shards_t.push_back(shard_s);
      crc_t.push_back(crc_s);
      metadata_t.push_back(metadata_s);
      write_t.push_back(write_s);
      fsync_t.push_back(fsync_s);
      index_t.push_back(t3 - t2);
      commit_t.push_back(ph.commit_s);
      prune_t.push_back(ph.prune_s);
      verify_t.push_back(vs);
      if (rank == 0)
        std::printf("%4d %10.3f %8.3f %10.3f %8.3f %8.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.1f | %12.3f %12.1f\n",
                    r, shard_s, crc_s, metadata_s, write_s, fsync_s, gather_s, t3 - t2, ph.commit_s, ph.prune_s, total,
                    static_cast<double>(size_mib) / total, vs, static_cast<double>(size_mib) / vs);
    }
    pruner.wait();
    if (rank == 0) {
      std::printf("BENCH_CKPT np=%d files_mode=%s files=%d size_mib=%lld reps=%d shard_s=%.3f crc_s=%.3f "
                  "metadata_s=%.3f write_s=%.3f fsync_s=%.3f "
                  "index_s=%.3f commit_s=%.3f prune_s=%.3f total_s=%.3f MiB_per_s=%.1f verify_MiB_per_s=%.1f "
                  "(medians)\n",
                  world, files.c_str(), nfiles, static_cast<long long>(size_mib), reps, median(shards_t), median(crc_t),
                  median(metadata_t), median(write_t), median(fsync_t), median(index_t), median(commit_t),
                  median(prune_t), median(totals), static_cast<double>(size_mib) / median(totals),
                  static_cast<double>(size_mib) / median(verify_t));
      std::filesystem::remove_all(dir);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ckpt: error: %s\n", e.what());
    code = 1;
  }
  if (code != 0 && world > 1) MPI_Abort(MPI_COMM_WORLD, code);
  if (node.comm != MPI_COMM_NULL) MPI_Comm_free(&node.comm);
  MPI_Finalize();
  return code;
}
