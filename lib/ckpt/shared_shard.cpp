// write_shared_shard: several ranks' pieces in one HDF5 file, its metadata made by one rank, its data written by each
// (see shared_shard.hpp for the layout, the protocol and its failure rules).
#include "ckpt/shared_shard.hpp"

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/ckpt_internal.hpp"
#include "ckpt/data_writer.hpp"
#include "core/mpi_check.hpp"
#include "core/timer.hpp"

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

}  // namespace

ShardManifest write_shared_shard(MPI_Comm comm, const std::string& dir, const std::string& file_name, int rank,
                                 const std::vector<Piece>& pieces, SavePhases* phases) {
  CommInfo c{comm};
  MPI_CHECK(MPI_Comm_rank(comm, &c.rank));
  MPI_CHECK(MPI_Comm_size(comm, &c.size));
  const std::string path = (fs::path(dir) / file_name).string();

  // Stage 1, local: the pieces' checks, this rank's manifest (its checksums come with the data, stage 3). Its outcome
  // travels with the metadata, so that one allgather both agrees on success and tells every rank what every dataset is.
  ShardManifest m;
  CheckedPieces checked;
  m.rank = rank;
  m.file = file_name;
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
    checked = check_pieces(pieces, fmt::format("rank_{:05d}/", rank),
                           fmt::format(" (shared checkpoint file {})", path));
    m.pieces = std::move(checked.records);
  } catch (const std::exception& e) {
    local_error = std::current_exception();
    const auto* err = dynamic_cast<const Error*>(&e);
    local_message = err != nullptr ? err->cause() : e.what();
  }

  Timer metadata;  // from the agreement on the pieces to every rank holding the offsets
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

  // Stage 2, comm's rank 0 alone: the file's HDF5 side, every rank's datasets allocated and their attributes written
  // (but the checksums: the ranks compute them as they write); their offsets in the file go to every rank.
  std::vector<const PieceRecord*> records;  // in the order of `all`, pieces in manifest order
  for (const ShardManifest& sm : all)
    for (const PieceRecord& r : sm.pieces) records.push_back(&r);
  std::vector<uint64_t> offsets(records.size());
  std::unique_ptr<ShardLayout> layout;  // rank 0's
  stage(c, path, "create the file and its datasets", [&] {
    if (c.rank != 0) return;
    layout = std::make_unique<ShardLayout>(path, records);
    offsets = layout->offsets();
  });
  static_assert(sizeof(uint64_t) == sizeof(unsigned long long));
  if (!offsets.empty())
    MPI_CHECK(MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_UNSIGNED_LONG_LONG, 0, comm));
  double metadata_s = metadata.seconds();

  // Stage 3: every rank writes its own pieces' bytes at their offsets, computing their checksums.
  size_t first = 0;  // this rank's first record in `records`
  for (int i = 0; i < c.rank; ++i) first += all[static_cast<size_t>(i)].pieces.size();
  Timer written;
  std::unique_ptr<DataWriter> out;
  stage(c, path, "write its data", [&] {
    out = std::make_unique<DataWriter>(path, data_io_from_env());
    for (size_t k = 0; k < m.pieces.size(); ++k)
      m.pieces[k].crc = write_piece_data(*out, path, m.pieces[k], offsets[first + k], checked.data[k]);
    out->drain();
  });
  const double write_s = written.seconds();

  // Stage 4: the checksums to rank 0, which writes them as the datasets' attributes and closes the file.
  Timer checksums;
  std::vector<uint32_t> mine_crcs, all_crcs(records.size());
  for (const PieceRecord& r : m.pieces) mine_crcs.push_back(r.crc);
  {
    std::vector<int> counts(static_cast<size_t>(c.size)), displs(static_cast<size_t>(c.size));
    for (int i = 0, at = 0; i < c.size; ++i) {
      counts[static_cast<size_t>(i)] = static_cast<int>(all[static_cast<size_t>(i)].pieces.size());
      displs[static_cast<size_t>(i)] = at;
      at += counts[static_cast<size_t>(i)];
    }
    MPI_CHECK(MPI_Gatherv(mine_crcs.data(), static_cast<int>(mine_crcs.size()), MPI_UINT32_T, all_crcs.data(),
                          counts.data(), displs.data(), MPI_UINT32_T, 0, comm));
  }
  stage(c, path, "finish the file", [&] {
    if (c.rank == 0) layout->finish(all_crcs);
  });
  metadata_s += checksums.seconds();

  // Stage 5: every rank fsyncs the file (on a parallel file system a client flushes only the pages it wrote), rank 0
  // the directory entry; the agreement makes every rank's bytes durable before any rank returns.
  Timer synced;
  stage(c, path, "fsync the file", [&] {
    out->finish();
    if (c.rank == 0) fsync_dir(dir);
  });
  if (phases != nullptr) {
    phases->crc_s += out->crc_seconds();
    phases->metadata_s += metadata_s;
    phases->write_s += write_s;
    phases->fsync_s += synced.seconds();
  }
  return m;
}

}  // namespace hpct::ckpt
