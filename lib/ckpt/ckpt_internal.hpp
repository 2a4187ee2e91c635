#pragma once
// Internals of lib/ckpt shared by its translation units (not part of the interface): RAII HDF5 handles,
// HDF5 types of DTypes, attribute helpers, POSIX fsync helpers, the test pause hook.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "core/h5_check.hpp"

namespace hpct::ckpt::detail {

// Owns one HDF5 identifier and closes it with the matching H5xclose (errors on that path are ignored;
// use close_checked() where a close can fail for real, i.e. a file close that flushes).
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: handles are passed straight to the C API
  void reset() {
    if (id_ >= 0 && closer_ != nullptr) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  // Closes now and checks the result (file closes flush: their errors matter).
  void close_checked();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline H5Id file_id(hid_t id) { return {id, H5Fclose}; }
inline H5Id dataset_id(hid_t id) { return {id, H5Dclose}; }
inline H5Id space_id(hid_t id) { return {id, H5Sclose}; }
inline H5Id plist_id(hid_t id) { return {id, H5Pclose}; }
inline H5Id attr_id(hid_t id) { return {id, H5Aclose}; }
inline H5Id type_id(hid_t id) { return {id, H5Tclose}; }

// Turns off HDF5's automatic error-stack printing while alive (for calls whose failure we report ourselves:
// opening a damaged shard, probing for a dataset); HPCT_HDF5_DEBUG=1 keeps it on (core/h5_check.hpp).
class QuietH5Errors {
 public:
  QuietH5Errors();
  ~QuietH5Errors();
  QuietH5Errors(const QuietH5Errors&) = delete;
  QuietH5Errors& operator=(const QuietH5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// What is wrong with an HDF5 file at the container level, from its bytes alone (no HDF5 call): "missing", "empty (0
// bytes)", "not an HDF5 file (no HDF5 signature)", "truncated: 4096 of the 9646 bytes its superblock records", or ""
// when the file looks whole (its damage, if any, is inside the HDF5 metadata or data).
std::string file_problem(const std::string& path);
// One phrase for a file HDF5 failed on: file_problem(path), else "its HDF5 metadata is corrupt (HDF5: <hdf5_cause>)".
std::string damage_of(const std::string& path, const std::string& hdf5_cause);
// Suffix of every damaged-checkpoint message.
inline constexpr const char* kDamaged = "the checkpoint is damaged; resume from an earlier one";

// Little-endian file type and native memory type of a DType (the same bytes on this little-endian host).
hid_t h5_file_type(DType t);
hid_t h5_mem_type(DType t);
// The DType of an HDF5 dataset type (error naming `what` for anything else).
DType dtype_of_h5(hid_t type, const std::string& what);

// File access list for the files we create: H5F_CLOSE_STRONG (a close really closes, so the fsync that
// follows sees every byte) and, for index/export files, libver bounds V18..latest (dense attribute storage:
// attributes may exceed 64 KiB). Read-only opens use H5P_DEFAULT (see Reader::Reader).
H5Id make_fapl(bool dense_attributes);
// Link creation list that creates missing parent groups.
H5Id make_lcpl();

void write_attr_i64_array(hid_t loc, const char* name, const std::vector<int64_t>& v);
void write_attr_scalar(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const void* value);
void write_attr_string(hid_t loc, const char* name, const std::string& value);  // variable-length UTF-8
int64_t read_attr_i64(hid_t loc, const char* name);
std::string read_attr_string(hid_t attr);  // fixed- or variable-length string attribute
bool attr_exists(hid_t loc, const char* name);

// fsync(2) of a file (after H5Fclose) or a directory (after creating, renaming or removing entries) by path;
// errors name the path.
void fsync_path(const std::string& path, bool directory);
inline void fsync_file(const std::string& path) { fsync_path(path, false); }
inline void fsync_dir(const std::string& path) { fsync_path(path, true); }

// HPCT_CKPT_PAUSE_AT test hook (checkpoint.hpp): sleeps for an hour when the variable equals `phase`.
void pause_if_requested(const char* phase);

// Piece checks of the writers (write_shard, write_shared_shard); errors name the tensor.
// A logical name: slash-separated non-empty components, no "." or "..".
void check_dataset_name(const std::string& name);
// offset/count of a piece inside global (same rank, at least one axis, in bounds).
void check_box(const std::string& name, const std::vector<int64_t>& global, const std::vector<int64_t>& offset,
               const std::vector<int64_t>& count);

// A writer's pieces, checked (name, box, split axis, replica, data, a dtype checkpoints store; errors name the tensor,
// followed by `where`), and the records of the non-empty ones (pieces of 0 elements are not written): the k-th piece of
// logical dataset D is stored as prefix + "D/piece_<k>", its crc 0 until the writer fills it in as it writes the
// bytes; data[i] holds records[i]'s bytes.
struct CheckedPieces {
  std::vector<PieceRecord> records;
  std::vector<const void*> data;
};
CheckedPieces check_pieces(const std::vector<Piece>& pieces, const std::string& prefix, const std::string& where);

class DataWriter;  // ckpt/data_writer.hpp
// The HDF5 side of a shard file (write_shard's, or the one write_shared_shard's ranks share). The constructor creates
// (truncates) path with one dataset per record (its file_dataset, shape, dtype and the attributes global_shape, offset,
// count, split_axis, replica), each contiguous, allocated at creation, its data 4 KiB-aligned from 4 KiB up, none of it
// written; offsets() gives each dataset's byte offset in the file, in the order of `pieces`: DataWriter writes the
// bytes there, computing their CRC32C as it goes. finish(crcs) adds each dataset's crc32c attribute and closes the file
// (the file stays open in between: HDF5 writes only its metadata, never the data regions). Errors name the tensor.
class ShardLayout {
 public:
  ShardLayout(std::string path, const std::vector<const PieceRecord*>& pieces);
  const std::vector<uint64_t>& offsets() const { return offsets_; }
  void finish(const std::vector<uint32_t>& crcs);

 private:
  std::string path_;
  std::vector<std::string> names_;  // file_dataset per record
  std::vector<uint64_t> offsets_;
  H5Id file_;
};
// The bytes of the piece of record r (at data) written at `offset` of the file `path` through out; returns their
// CRC32C. Errors name the tensor.
uint32_t write_piece_data(DataWriter& out, const std::string& path, const PieceRecord& r, uint64_t offset,
                          const void* data);

int64_t numel(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<int64_t>& shape);  // "(3, 4)"

}  // namespace hpct::ckpt::detail
