#pragma once
// HDF5 sharded checkpoints (docs/invariants.md, invariant 4, and docs/contracts.md "Checkpoints").
//
// On disk, DIR/checkpoints/ holds
//   step_%08d/shard_%05d.h5   one file per rank: only the bytes that rank owns ("pieces"), each piece a
//                             dataset with attributes global_shape, offset, count, split_axis, replica,
//                             crc32c (CRC32C of the piece's raw little-endian bytes)
//   step_%08d/index.h5        whole named tensors as HDF5 virtual datasets over the shard files
//                             (/model/<name>, /optim/exp_avg/<name>, ...; source paths relative, so the
//                             directory can be renamed), root attributes (format_version, step, ... and
//                             whatever the trainer stores: deck text, layout, RNG and loader state) and
//                             `pieces_json`: every piece's file, dataset, offset, count and crc32c
//   latest                    text file naming the newest complete step_%08d
// A checkpoint becomes visible only when complete: shards and index are written into
// .tmp_step_%08d/, fsynced, the directory renamed to step_%08d, the parent fsynced, then `latest` is
// replaced by write-temporary + fsync + rename + fsync of the directory. A crash at any moment leaves
// the previous checkpoint usable.
//
// The library is communication-free (except write_shared_shard, ckpt/shared_shard.hpp): the trainer runs the
// collective protocol (train/checkpoint/protocol.hpp, write_checkpoint)
//   every rank: m = write_shard(tmp, rank, pieces)          (fsynced)
//   gather the manifests' to_json() to rank 0 (metadata only; data never moves)
//   rank 0:     write_index(tmp, manifests, attrs); commit(root, step, keep)
//   barrier
//
// Errors. A checkpoint that cannot be opened (missing index.h5, newer format, `latest` naming a missing
// directory) is a hpct::UsageError (every rank sees it the same way; the message says what to do). A damaged
// checkpoint found by verify() is a hpct::Error (verify may run split across ranks, so the rank that finds
// the damage must print it itself). Wrong arguments from the caller (pieces that do not tile a tensor, a
// hyperslab out of bounds) are hpct::Error.
//
// Test hook (crash-safety tests): when the environment variable HPCT_CKPT_PAUSE_AT equals a phase name,
// the library prints `hpctrain: HPCT_CKPT_PAUSE_AT=<phase>: pausing (test hook)` on stderr and sleeps for
// 3600 s at that point, so that a test can SIGKILL the job there:
//   "shards"   in write_index, before anything is written (every shard file is written and fsynced);
//   "renamed"  in commit, after .tmp_step_N was renamed to step_N, before `latest` is replaced.
//
// HDF5 notes. Pieces are contiguous, uncompressed datasets (H5Dget_offset works, reads are plain I/O).
// The index's virtual datasets of floating-point tensors have fill value NaN, so a read through a mapping
// whose source file is missing gives NaN instead of silently plausible zeros (integers still read 0); the
// loader must call verify() anyway. index.h5 is written with library-version bounds V18..latest so that
// root attributes may exceed 64 KiB (dense attribute storage: pieces_json of a large job, the deck text);
// h5py and h5dump of HDF5 >= 1.10 read it.
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tensor/tensor.hpp"

namespace hpct::ckpt {

inline constexpr int64_t kFormatVersion = 1;

// CRC32C (Castagnoli), hardware SSE4.2 when available, table-driven otherwise. Chains:
// crc32c(b, nb, crc32c(a, na)) == crc32c(a followed by b). crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The two implementations, for tests and benchmarks (crc32c_hw requires crc32c_hw_available()).
uint32_t crc32c_sw(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc = 0);
bool crc32c_hw_available();

// A hyperslab of a tensor of shape `shape`: the elements [offset, offset + count) per axis.
struct Box {
  std::vector<int64_t> offset, count;
  int64_t flat_begin = 0;  // row-major flat index (in the whole tensor) of the box's first element
  int64_t numel() const;
};
// Decomposes the flat row-major range [begin, end) of a tensor into hyperslab boxes whose elements are
// contiguous in that range, in order (at most 2*ndim-1 boxes). A ZeRO shard that cuts a tensor is
// stored as these pieces (docs/contracts.md: never as raw flat buffers).
std::vector<Box> flat_range_to_boxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end);

// Part of one global tensor held by this rank, contiguous in memory (row-major over `count`).
struct Piece {
  std::string dataset;                 // "model/wte", "optim/exp_avg/h.0.attn.qkv.weight"
  std::vector<int64_t> global_shape;   // logical shape of the whole tensor
  std::vector<int64_t> offset, count;  // place of this piece in the global tensor
  int split_axis = -1;                 // axis the tensor is split on (-1: not split, or a flat cut)
  int replica = 0;                     // replica id of this copy (0 for the copy that is written)
  DType dtype = DType::F32;
  const void* data = nullptr;
};

// What one shard file holds; serialisable so that rank 0 can build the index without touching data.
struct PieceRecord {
  std::string dataset, file_dataset;  // logical name; path of the piece's dataset inside the shard file
  std::vector<int64_t> global_shape, offset, count;
  int split_axis = -1, replica = 0;
  DType dtype = DType::F32;
  uint32_t crc = 0;
};
struct ShardManifest {
  int rank = 0;
  std::string file;  // "shard_00003.h5", relative to the step directory
  std::vector<PieceRecord> pieces;
  std::string to_json() const;
  static ShardManifest from_json(const std::string& text);
};

// Root attributes of index.h5 (the trainer's metadata): typed key/value maps.
struct Attrs {
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::string> strings;
};

std::string step_dir_name(int64_t step);      // "step_00000040"
std::string tmp_step_dir_name(int64_t step);  // ".tmp_step_00000040"
std::string shard_file_name(int rank);        // "shard_00003.h5"
// Parses a DType name as written by dtype_name() ("f32", ...); error for anything else.
DType dtype_from_name(const std::string& name);

// Seconds spent in each phase of a save on this rank's clock (write_shard, write_index and commit add theirs when
// given one), for the save's log line and validation/bench_ckpt: what limits a save's bandwidth.
struct SavePhases {
  // write_shard: the pieces' CRC32C, taken as their bytes are copied for the write (part of write_s)
  double crc_s = 0;
  // write_shard: the HDF5 file: its datasets created (allocated, not written) with their attributes, then the
  // checksums added and the file closed
  double metadata_s = 0;
  // write_shard: the pieces' bytes written at their datasets' offsets (O_DIRECT, see ckpt/data_writer.hpp)
  double write_s = 0;
  double fsync_s = 0;   // write_shard: fsync of the shard file and its directory
  double index_s = 0;   // write_index: index.h5 written and fsynced
  double commit_s = 0;  // commit: rename of the step directory, `latest` replaced (each fsynced)
  double prune_s = 0;   // commit: older step directories and stale temporaries removed (with a BackgroundRemover:
                        // renamed, removed on its thread)
};

// Writes this rank's shard file into dir (created if needed), fsyncs it and returns its manifest.
// The k-th piece of logical dataset D in this file is the dataset /D/piece_<k> (k counts from 0 per D),
// of shape piece.count, with attributes global_shape, offset, count (int64 arrays), split_axis, replica
// (int32) and crc32c (uint32). Pieces of 0 elements are not written (nothing to store). Every piece needs
// at least one axis (store a scalar as shape (1)), a consistent box and non-null data.
ShardManifest write_shard(const std::string& dir, int rank, const std::vector<Piece>& pieces,
                          SavePhases* phases = nullptr);
// Rank 0: writes dir/index.h5 (virtual datasets over all shards; every logical dataset must be fully
// covered by pieces, else an error names the dataset) with attrs + format_version, and fsyncs it.
// Only replica-0 pieces are mapped; they must tile the tensor exactly (in bounds, no overlap, all elements)
// and agree on global shape and dtype. Attribute names format_version and pieces_json are reserved.
void write_index(const std::string& dir, const std::vector<ShardManifest>& shards, const Attrs& attrs,
                 SavePhases* phases = nullptr);
// Removes directories on a thread of its own, so that a save need not wait for the file system to free the checkpoint
// it prunes (several seconds for a GPT-2-size checkpoint just written). Filesystem calls only (no HDF5), so it may run
// beside anything. remove() waits for the previous batch first; wait() returns the first failure ("" when none; a
// failed removal loses nothing: the directories are already out of the checkpoint namespace, see commit); the
// destructor waits.
class BackgroundRemover {
 public:
  BackgroundRemover() = default;
  ~BackgroundRemover();
  BackgroundRemover(const BackgroundRemover&) = delete;
  BackgroundRemover& operator=(const BackgroundRemover&) = delete;
  void remove(std::vector<std::string> dirs);
  std::string wait();
  // wait(), and a failure logged as a warning (rank 0's log: commit runs there)
  void wait_and_warn();

 private:
  std::thread thread_;
  std::string error_;
};

// Rank 0: renames root/.tmp_step_N to root/step_N, fsyncs root, replaces root/latest atomically,
// then deletes the oldest step_* directories so that `keep` remain (keep <= 0: keep all) and removes
// stale .tmp_step_* directories. Returns the final path. With a remover, the pruned step_* directories are first
// renamed to .trash_step_* (atomic: no longer a checkpoint anyone could name) and removed on its thread; a .trash_*
// left by a crash mid-removal is removed by the next commit.
// A step_N that already exists is replaced when `latest` does not name it (left by a crash between the
// rename and `latest`, or by a run that went further before it was resumed from an earlier step). When
// `latest` already names step_N (a run resumed at step N checkpoints N again, same content), the committed
// one is kept and .tmp_step_N discarded, so that `latest` never names a missing directory.
std::string commit(const std::string& root, int64_t step, int keep, SavePhases* phases = nullptr,
                   BackgroundRemover* remover = nullptr);

// "latest" in root -> the step directory it names, or "" when there is none (no file).
// A `latest` naming a missing directory is an error that names both.
std::string resolve_latest(const std::string& root);

// A user's checkpoint path -> a step directory: PATH itself when it holds index.h5, else the directory
// named by PATH/latest, else by PATH/checkpoints/latest (a run directory). UsageError when none applies.
std::string find_step_dir(const std::string& path);

// Reads a checkpoint through its index (whole tensors, any hyperslab: restore onto any layout).
class Reader {
 public:
  explicit Reader(const std::string& step_dir);  // opens index.h5; clear error if missing/unreadable
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& dir() const { return dir_; }
  const Attrs& attrs() const { return attrs_; }
  std::vector<std::string> datasets() const;  // logical names ("model/wte", ...), sorted
  bool has(const std::string& dataset) const;
  std::vector<int64_t> shape(const std::string& dataset) const;
  DType dtype(const std::string& dataset) const;
  int64_t format_version() const { return format_version_; }
  const std::vector<ShardManifest>& shards() const { return shards_; }
  // Reads the hyperslab [offset, offset+count) of a logical dataset into out (row-major, dtype).
  // dtype must be the stored dtype (no silent conversion); the box must lie inside the tensor.
  void read(const std::string& dataset, const std::vector<int64_t>& offset, const std::vector<int64_t>& count,
            DType dtype, void* out) const;
  // Reads a whole tensor (out holds numel * dtype_size bytes).
  void read_all(const std::string& dataset, DType dtype, void* out) const;

 private:
  std::string dir_;
  Attrs attrs_;
  std::vector<ShardManifest> shards_;
  std::vector<std::string> datasets_;  // sorted logical names found in index.h5
  int64_t format_version_ = 0;
  int64_t file_ = -1;  // hid_t of index.h5
};

// Checks that every shard file named in the index exists and that every piece's bytes match its
// CRC32C (and the attribute in the shard file). Checks the manifests with (manifest index % nparts ==
// part), so ranks can split the work (a file shared by several ranks, see shared_shard.hpp, holds several
// manifests: each of its pieces is still checked once, by the part that holds its manifest). Throws hpct::Error naming the file and the tensor on the first
// problem (missing file, truncated/unreadable file, missing dataset, checksum mismatch).
// Returns the number of bytes checked.
int64_t verify(const std::string& step_dir, int part = 0, int nparts = 1);

// Writes one plain HDF5 file with every logical tensor of the checkpoint as a regular contiguous dataset
// (read through the index; /optim/... only when with_optimizer) and the root attributes (pieces_json
// excepted: it describes shard files the export does not have). Atomic: out_file.tmp, fsync, rename.
void export_consolidated(const std::string& step_dir, const std::string& out_file, bool with_optimizer);

// How far two checkpoints of one model lie apart, tensor by tensor: two runs of one deck on two devices, two layouts
// or two thread counts, compared at the same step (ckpt_tool diff; validation/gpu_layouts.py's restart control).
// Values are read through each index (any layout on either side) and compared in double.
struct TensorDifference {
  std::string name;  // logical, "model/wte"
  int64_t values = 0;
  double norm_a = 0, norm_b = 0;  // L2 norms
  double diff_l2 = 0;             // ||a - b||
  double max_abs = 0;             // max |a - b|
  int64_t unequal = 0;            // values that differ at all (bitwise, NaN payloads aside)
  double relative() const { return norm_b > 0 ? diff_l2 / norm_b : diff_l2; }  // ||a - b|| / ||b||
};
// A group of tensors ("model/" or "optim/") taken as one vector.
struct GroupDifference {
  double relative = 0;                      // ||a - b|| / ||b|| over the group
  int64_t values = 0, unequal = 0;          // the tensors' sums
  const TensorDifference* worst = nullptr;  // the largest relative(); null where every tensor of the group is equal
};
struct CheckpointDifference {
  std::string dir_a, dir_b;
  int64_t step_a = -1, step_b = -1;       // the step attributes (-1: none)
  std::vector<TensorDifference> tensors;  // sorted by name
  GroupDifference group(const std::string& prefix) const;
};
// Compares every model/ tensor (and optim/ with with_optimizer). Both sides must hold the same tensors with the same
// shapes (a UsageError naming the first that differs otherwise: another model, or an optimizer state the other lacks).
CheckpointDifference diff_checkpoints(const std::string& step_dir_a, const std::string& step_dir_b,
                                      bool with_optimizer);

}  // namespace hpct::ckpt
