// write_shared_shard: several ranks' pieces in one HDF5 file, written collectively with parallel HDF5 (see
// shared_shard.hpp for the layout, the protocol and its failure rules).
#include "ckpt/shared_shard.hpp"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/ckpt_internal.hpp"
#include "core/mpi_check.hpp"
#include "core/timer.hpp"

#ifndef H5_HAVE_PARALLEL
#error "write_shared_shard needs the parallel (MPI) build of HDF5 (Debian: libhdf5-openmpi-dev)"
#endif

namespace hpct::ckpt {

using namespace detail;
namespace fs = std::filesystem;

std::string node_file_name(int node) { return fmt::format("node_{:05d}.h5", node); }

NodeGroup node_group(MPI_Comm world) {
  NodeGroup n;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  const char* k = std::getenv("HPCT_CKPT_RANKS_PER_NODE");
  if (k != nullptr && std::atoi(k) > 0) {
    MPI_CHECK(MPI_Comm_split(world, rank / std::atoi(k), rank, &n.comm));
  } else {
    MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &n.comm));
  }
  int node_rank = 0;
  MPI_CHECK(MPI_Comm_rank(n.comm, &node_rank));
  MPI_Comm leaders = MPI_COMM_NULL;  // every node's first rank, in world order
  MPI_CHECK(MPI_Comm_split(world, node_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders));
  int ids[2] = {0, 0};  // node index, number of nodes
  if (leaders != MPI_COMM_NULL) {
    MPI_CHECK(MPI_Comm_rank(leaders, &ids[0]));
    MPI_CHECK(MPI_Comm_size(leaders, &ids[1]));
    MPI_CHECK(MPI_Comm_free(&leaders));
  }
  MPI_CHECK(MPI_Bcast(ids, 2, MPI_INT, 0, n.comm));
  n.index = ids[0];
  n.count = ids[1];
  return n;
}

namespace {

struct CommInfo {
  MPI_Comm comm;
  int rank = 0, size = 1;
};

// After a stage that may have failed on some ranks only: every rank learns the lowest rank that failed (size: none).
// A rank that failed rethrows its own error; the others throw one naming the file, the stage and that rank, so that no
// rank goes on into a collective call that another will not make.
void agree(const CommInfo& c, const std::exception_ptr& mine, const std::string& path, const char* stage) {
  const int failed = mine ? c.rank : c.size;
  int first = c.size;
  MPI_CHECK(MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, c.comm));
  if (mine) std::rethrow_exception(mine);
  if (first < c.size)
    HPCT_FAIL("cannot write shared checkpoint file {}: rank {} of its communicator failed to {} (that rank's own "
              "message says why); the other ranks stop too",
              path, first, stage);
}

template <typename F>
void stage(const CommInfo& c, const std::string& path, const char* what, F&& fn) {
  std::exception_ptr err;
  try {
    fn();
  } catch (...) {
    err = std::current_exception();
  }
  agree(c, err, path, what);
}

// Every rank's text, gathered on every rank (in comm rank order).
std::vector<std::string> allgather_text(const CommInfo& c, const std::string& mine) {
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(c.size)), displs(static_cast<size_t>(c.size));
  MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, c.comm));
  int total = 0;
  for (int i = 0; i < c.size; ++i) {
    displs[static_cast<size_t>(i)] = total;
    total += lens[static_cast<size_t>(i)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, c.comm));
  std::vector<std::string> out;
  for (int i = 0; i < c.size; ++i)
    out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(i)]),
                             static_cast<size_t>(lens[static_cast<size_t>(i)])));
  return out;
}

bool collective_transfers() {
  const char* v = std::getenv("HPCT_CKPT_SHARED_COLLECTIVE");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace

ShardManifest write_shared_shard(MPI_Comm comm, const std::string& dir, const std::string& file_name, int rank,
                                 const std::vector<Piece>& pieces, SavePhases* phases) {
  Timer total;
  CommInfo c{comm};
  MPI_CHECK(MPI_Comm_rank(comm, &c.rank));
  MPI_CHECK(MPI_Comm_size(comm, &c.size));
  const std::string path = (fs::path(dir) / file_name).string();

  // Stage 1, local: the pieces' checks and CRCs, this rank's manifest. Its outcome travels with the metadata, so that
  // one allgather both agrees on success and tells every rank what every dataset is.
  ShardManifest m;
  m.rank = rank;
  m.file = file_name;
  double crc_s = 0;
  std::exception_ptr local_error;
  std::string local_message;
  try {
    HPCT_CHECK(rank >= 0, "negative rank {} for the shared checkpoint file {}", rank, path);
    HPCT_CHECK(!file_name.empty() && file_name.find('/') == std::string::npos,
               "shared checkpoint file name '{}' in {}: give a plain file name (no directory part)", file_name, dir);
    if (c.rank == 0) {
      // One rank creates the directory (the others open the file only after the allgather below).
      std::error_code ec;
      fs::create_directories(dir, ec);
      HPCT_CHECK(!ec, "cannot create checkpoint directory {}: {}", dir, ec.message());
    }
    std::map<std::string, int> next_piece;  // per logical dataset: k of its next piece_<k>
    for (const Piece& p : pieces) {
      check_dataset_name(p.dataset);
      check_box(p.dataset, p.global_shape, p.offset, p.count);
      HPCT_CHECK(p.split_axis >= -1 && p.split_axis < static_cast<int>(p.global_shape.size()),
                 "tensor {}: split_axis {} for a tensor of {} axes (shared checkpoint file {})", p.dataset,
                 p.split_axis, p.global_shape.size(), path);
      HPCT_CHECK(p.replica >= 0, "tensor {}: negative replica id {} (shared checkpoint file {})", p.dataset, p.replica,
                 path);
      const int64_t n = numel(p.count);
      if (n == 0) continue;
      HPCT_CHECK(p.data != nullptr, "tensor {}: piece of {} elements has no data (shared checkpoint file {})",
                 p.dataset, n, path);
      (void)h5_file_type(p.dtype);  // a 16-bit dtype fails here, before any collective HDF5 call
      m.pieces.push_back(
          record_of(p, fmt::format("rank_{:05d}/{}/piece_{}", rank, p.dataset, next_piece[p.dataset]++), &crc_s));
    }
  } catch (const std::exception& e) {
    local_error = std::current_exception();
    const auto* err = dynamic_cast<const Error*>(&e);
    local_message = err != nullptr ? err->cause() : e.what();
  }

  nlohmann::json mine = {{"path", path}, {"ok", local_error == nullptr}};
  if (local_error) mine["error"] = local_message;
  else
    mine["manifest"] = nlohmann::json::parse(m.to_json());
  const std::vector<std::string> gathered = allgather_text(c, mine.dump());
  std::vector<ShardManifest> all;  // every rank's manifest, in comm rank order
  {
    std::vector<nlohmann::json> parsed;
    for (const auto& t : gathered) parsed.push_back(nlohmann::json::parse(t));
    for (int i = 0; i < c.size; ++i) {
      const auto& j = parsed[static_cast<size_t>(i)];
      if (j.at("ok").get<bool>()) continue;
      if (local_error) std::rethrow_exception(local_error);
      HPCT_FAIL("cannot write shared checkpoint file {}: rank {} of its communicator failed its checks: {}; the other "
                "ranks stop too",
                path, i, j.at("error").get<std::string>());
    }
    // The same decisions on every rank (same gathered data): no rank goes on alone.
    std::set<int> ranks;
    for (int i = 0; i < c.size; ++i) {
      const auto& j = parsed[static_cast<size_t>(i)];
      HPCT_CHECK(j.at("path").get<std::string>() == path,
                 "write_shared_shard: ranks of one communicator name different files ({} on rank {}, {} on rank {}): "
                 "every rank of comm must pass the same dir and file_name",
                 path, c.rank, j.at("path").get<std::string>(), i);
      all.push_back(ShardManifest::from_json(j.at("manifest").dump()));
      HPCT_CHECK(ranks.insert(all.back().rank).second,
                 "shared checkpoint file {}: two ranks of its communicator pass the same rank {} (pass the world rank: "
                 "it keeps the dataset paths rank_%05d/... unique)",
                 path, all.back().rank);
    }
  }

  // Stage 2, collective: the file.
  H5Id fapl = make_fapl(false);
  H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  // Metadata goes out in one collective write at the close instead of rank 0 writing it alone.
  H5_CHECK(H5Pset_coll_metadata_write(fapl, true));
  H5Id file;
  stage(c, path, "create the file", [&] {
    file = file_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    if (file.get() < 0) {
      const std::string why = h5::error_stack_cause();
      HPCT_FAIL("cannot create shared checkpoint file {} (check the directory is writable and on a file system every "
                "rank sees){}{}",
                path, why.empty() ? "" : ": HDF5: ", why);
    }
  });

  // Stage 3, collective: every rank's datasets and attributes, created in the same order on every rank.
  std::vector<H5Id> datasets;  // in the order of `all`, pieces in manifest order
  stage(c, path, "create the datasets", [&] {
    H5Id lcpl = make_lcpl();
    H5Id dcpl = plist_id(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));          // plain bytes: no chunk index, H5Dget_offset works
    H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every byte is written right away
    for (const ShardManifest& sm : all)
      for (const PieceRecord& r : sm.pieces) {
        try {
          std::vector<hsize_t> dims(r.count.begin(), r.count.end());
          H5Id space = space_id(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
          H5Id ds = dataset_id(H5_CHECK(
              H5Dcreate2(file, r.file_dataset.c_str(), h5_file_type(r.dtype), space, lcpl, dcpl, H5P_DEFAULT)));
          write_attr_i64_array(ds, "global_shape", r.global_shape);
          write_attr_i64_array(ds, "offset", r.offset);
          write_attr_i64_array(ds, "count", r.count);
          const int32_t split_axis = r.split_axis, replica = r.replica;
          write_attr_scalar(ds, "split_axis", H5T_STD_I32LE, H5T_NATIVE_INT32, &split_axis);
          write_attr_scalar(ds, "replica", H5T_STD_I32LE, H5T_NATIVE_INT32, &replica);
          write_attr_scalar(ds, "crc32c", H5T_STD_U32LE, H5T_NATIVE_UINT32, &r.crc);
          datasets.push_back(std::move(ds));
        } catch (const Error& e) {
          HPCT_FAIL("cannot create dataset {} (tensor {}, rank {}) in shared checkpoint file {}: {} (disk full? a name "
                    "used both as a tensor and as a group?)",
                    r.file_dataset, r.dataset, sm.rank, path, e.cause());
        }
      }
  });

  // Stage 4: every rank writes its own pieces' bytes (datasets of the other ranks get an empty selection when the
  // transfers are collective).
  const bool collective = collective_transfers();
  stage(c, path, "write its data", [&] {
    H5Id dxpl = plist_id(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
    H5_CHECK(H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT));
    size_t k = 0;
    for (int i = 0; i < c.size; ++i) {
      const ShardManifest& sm = all[static_cast<size_t>(i)];
      size_t own = 0;  // index into `pieces` of this rank's next written piece (pieces of 0 elements have no record)
      for (const PieceRecord& r : sm.pieces) {
        const hid_t ds = datasets[k++];
        if (i != c.rank && !collective) continue;
        try {
          if (i == c.rank) {
            while (numel(pieces[own].count) == 0) ++own;
            const Piece& p = pieces[own++];
            H5_CHECK(H5Dwrite(ds, h5_mem_type(p.dtype), H5S_ALL, H5S_ALL, dxpl, p.data));
          } else {
            H5Id fspace = space_id(H5_CHECK(H5Dget_space(ds)));
            H5_CHECK(H5Sselect_none(fspace));
            H5Id mspace = space_id(H5_CHECK(H5Scopy(fspace)));
            static const unsigned char nothing = 0;  // HDF5 wants a buffer even for an empty selection
            H5_CHECK(H5Dwrite(ds, h5_mem_type(r.dtype), mspace, fspace, dxpl, &nothing));
          }
        } catch (const Error& e) {
          HPCT_FAIL("cannot write tensor {} (dataset {}) to shared checkpoint file {}: {} (disk full?)", r.dataset,
                    r.file_dataset, path, e.cause());
        }
      }
    }
  });

  // Stage 5, collective: the close flushes HDF5's metadata and MPI-IO's buffers.
  stage(c, path, "close the file", [&] {
    try {
      datasets.clear();
      file.close_checked();
    } catch (const Error& e) {
      HPCT_FAIL("cannot close shared checkpoint file {} (disk full?): {}", path, e.cause());
    }
  });
  fapl.reset();
  const double written_s = total.seconds();

  // Stage 6: every rank flushes what it wrote (a parallel file system's client holds its own dirty pages), rank 0 the
  // directory entry; the agreement makes every rank's bytes durable before any rank returns.
  stage(c, path, "fsync the file", [&] {
    fsync_file(path);
    if (c.rank == 0) fsync_dir(dir);
  });
  if (phases != nullptr) {
    phases->crc_s += crc_s;
    phases->write_s += written_s - crc_s;
    phases->fsync_s += total.seconds() - written_s;
  }
  return m;
}

}  // namespace hpct::ckpt
