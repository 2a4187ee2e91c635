// write_shard (every rank) and write_index (rank 0). See checkpoint.hpp for the layout and the protocol.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/ckpt_internal.hpp"
#include "ckpt/data_writer.hpp"
#include "core/timer.hpp"

namespace hpct::ckpt {

using namespace detail;
namespace fs = std::filesystem;

// Piece checks shared with write_shared_shard (declared in ckpt_internal.hpp).
namespace detail {

// A logical name becomes an HDF5 path in the shard files and in the index: non-empty components, no
// leading or trailing '/', no "." or ".." components. Dots inside a component are fine ("h.0.attn.qkv.weight").
void check_dataset_name(const std::string& name) {
  bool ok = !name.empty() && name.front() != '/' && name.back() != '/' && name.find("//") == std::string::npos;
  size_t start = 0;
  while (ok && start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    const std::string comp = name.substr(start, end - start);
    ok = comp != "." && comp != "..";
    start = end + 1;
  }
  HPCT_CHECK(ok,
             "invalid checkpoint dataset name '{}': use slash-separated non-empty components such as "
             "model/h.0.attn.qkv.weight",
             name);
}

void check_box(const std::string& name, const std::vector<int64_t>& global, const std::vector<int64_t>& offset,
               const std::vector<int64_t>& count) {
  HPCT_CHECK(!global.empty(), "tensor {}: a checkpoint piece needs at least one axis (store a scalar as shape (1))",
             name);
  HPCT_CHECK(offset.size() == global.size() && count.size() == global.size(),
             "tensor {}: piece offset {} / count {} do not match the rank of global shape {}", name, shape_str(offset),
             shape_str(count), shape_str(global));
  for (size_t a = 0; a < global.size(); ++a)
    HPCT_CHECK(global[a] >= 0 && offset[a] >= 0 && count[a] >= 0 && offset[a] + count[a] <= global[a],
               "tensor {}: piece offset {} count {} is outside the global shape {} (axis {})", name, shape_str(offset),
               shape_str(count), shape_str(global), a);
}

}  // namespace detail

namespace {

// The VDS mapping strings treat '%' as a format character (%b: block number); '%%' is a literal '%'.
std::string escape_vds_name(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

}  // namespace

detail::CheckedPieces detail::check_pieces(const std::vector<Piece>& pieces, const std::string& prefix,
                                           const std::string& where) {
  CheckedPieces out;
  std::map<std::string, int> next_piece;  // per logical dataset: k of its next piece_<k>
  for (const Piece& p : pieces) {
    check_dataset_name(p.dataset);
    check_box(p.dataset, p.global_shape, p.offset, p.count);
    HPCT_CHECK(p.split_axis >= -1 && p.split_axis < static_cast<int>(p.global_shape.size()),
               "tensor {}: split_axis {} for a tensor of {} axes{}", p.dataset, p.split_axis, p.global_shape.size(),
               where);
    HPCT_CHECK(p.replica >= 0, "tensor {}: negative replica id {}{}", p.dataset, p.replica, where);
    const int64_t n = numel(p.count);
    if (n == 0) continue;
    HPCT_CHECK(p.data != nullptr, "tensor {}: piece of {} elements has no data{}", p.dataset, n, where);
    (void)h5_file_type(p.dtype);  // a 16-bit dtype fails here, before any file is made
    PieceRecord r;
    r.dataset = p.dataset;
    r.file_dataset = fmt::format("{}{}/piece_{}", prefix, p.dataset, next_piece[p.dataset]++);
    r.global_shape = p.global_shape;
    r.offset = p.offset;
    r.count = p.count;
    r.split_axis = p.split_axis;
    r.replica = p.replica;
    r.dtype = p.dtype;
    out.records.push_back(std::move(r));
    out.data.push_back(p.data);
  }
  return out;
}

detail::ShardLayout::ShardLayout(std::string path, const std::vector<const PieceRecord*>& pieces)
    : path_(std::move(path)) {
  H5Id fapl = make_fapl(false);
  // Data of 4 KiB and more starts on a 4 KiB boundary, so that DataWriter can write it with O_DIRECT; smaller objects
  // (the metadata, tiny tensors) are packed as usual.
  H5_CHECK(H5Pset_alignment(fapl, static_cast<hsize_t>(kDataAlignment), static_cast<hsize_t>(kDataAlignment)));
  file_ = file_id(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  if (file_.get() < 0) {
    const std::string why = h5::error_stack_cause();
    HPCT_FAIL("cannot create checkpoint file {} (check the directory is writable){}{}", path_,
              why.empty() ? "" : ": HDF5: ", why);
  }
  H5Id lcpl = make_lcpl();
  H5Id dcpl = plist_id(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));            // plain bytes: no chunk index, H5Dget_offset works
  H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));  // its place in the file is known at creation
  H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));    // HDF5 writes none of the data: DataWriter writes it all
  offsets_.reserve(pieces.size());
  for (const PieceRecord* r : pieces) {
    try {
      std::vector<hsize_t> dims(r->count.begin(), r->count.end());
      H5Id space = space_id(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
      H5Id ds = dataset_id(
          H5_CHECK(H5Dcreate2(file_, r->file_dataset.c_str(), h5_file_type(r->dtype), space, lcpl, dcpl, H5P_DEFAULT)));
      write_attr_i64_array(ds, "global_shape", r->global_shape);
      write_attr_i64_array(ds, "offset", r->offset);
      write_attr_i64_array(ds, "count", r->count);
      const int32_t split_axis = r->split_axis, replica = r->replica;
      write_attr_scalar(ds, "split_axis", H5T_STD_I32LE, H5T_NATIVE_INT32, &split_axis);
      write_attr_scalar(ds, "replica", H5T_STD_I32LE, H5T_NATIVE_INT32, &replica);
      const haddr_t at = H5Dget_offset(ds);
      HPCT_CHECK(at != HADDR_UNDEF, "HDF5 allocated no contiguous storage for dataset {}", r->file_dataset);
      offsets_.push_back(static_cast<uint64_t>(at));
      names_.push_back(r->file_dataset);
    } catch (const Error& e) {
      HPCT_FAIL("cannot create dataset {} (tensor {}) in checkpoint file {}: {} (disk full? a name used both as a "
                "tensor and as a group?)",
                r->file_dataset, r->dataset, path_, e.cause());
    }
  }
}

void detail::ShardLayout::finish(const std::vector<uint32_t>& crcs) {
  HPCT_CHECK(crcs.size() == names_.size(), "checkpoint file {}: {} checksums for {} datasets", path_, crcs.size(),
             names_.size());
  try {
    for (size_t i = 0; i < names_.size(); ++i) {
      H5Id ds = dataset_id(H5_CHECK(H5Dopen2(file_, names_[i].c_str(), H5P_DEFAULT)));
      write_attr_scalar(ds, "crc32c", H5T_STD_U32LE, H5T_NATIVE_UINT32, &crcs[i]);
    }
    file_.close_checked();
  } catch (const Error& e) {
    HPCT_FAIL("cannot finish checkpoint file {} (its checksums, the close; disk full?): {}", path_, e.cause());
  }
}

uint32_t detail::write_piece_data(DataWriter& out, const std::string& path, const PieceRecord& r, uint64_t offset,
                                  const void* data) {
  try {
    return out.write(offset, data, static_cast<size_t>(numel(r.count)) * dtype_size(r.dtype));
  } catch (const Error& e) {
    HPCT_FAIL("cannot write tensor {} (dataset {}) to checkpoint file {}: {}", r.dataset, r.file_dataset, path,
              e.cause());
  }
}

ShardManifest write_shard(const std::string& dir, int rank, const std::vector<Piece>& pieces, SavePhases* phases) {
  HPCT_CHECK(rank >= 0, "negative rank {} for shard file in {}", rank, dir);
  const DataIo io = data_io_from_env();
  std::error_code ec;
  fs::create_directories(dir, ec);
  HPCT_CHECK(!ec, "cannot create checkpoint directory {}: {}", dir, ec.message());

  ShardManifest m;
  m.rank = rank;
  m.file = shard_file_name(rank);
  const std::string path = (fs::path(dir) / m.file).string();

  CheckedPieces checked = check_pieces(pieces, "", "");
  m.pieces = std::move(checked.records);

  Timer metadata;
  std::vector<const PieceRecord*> records;
  for (const PieceRecord& r : m.pieces) records.push_back(&r);
  ShardLayout layout(path, records);
  double metadata_s = metadata.seconds();

  Timer written;
  DataWriter out(path, io);
  for (size_t i = 0; i < m.pieces.size(); ++i)
    m.pieces[i].crc = write_piece_data(out, path, m.pieces[i], layout.offsets()[i], checked.data[i]);
  out.drain();
  const double write_s = written.seconds();
  Timer checksums;
  std::vector<uint32_t> crcs;
  for (const PieceRecord& r : m.pieces) crcs.push_back(r.crc);
  layout.finish(crcs);
  metadata_s += checksums.seconds();
  Timer synced;
  out.finish();
  fsync_dir(dir);
  if (phases != nullptr) {
    phases->crc_s += out.crc_seconds();
    phases->metadata_s += metadata_s;
    phases->write_s += write_s;
    phases->fsync_s += synced.seconds();
  }
  return m;
}

namespace {

struct MappedPiece {
  const PieceRecord* rec;
  const std::string* file;
};

// Replica-0 pieces must tile the tensor: same global shape and dtype, inside it (checked), pairwise disjoint
// and as many elements as the tensor. Overlaps: a sweep along axis 0 compares only boxes whose axis-0
// intervals meet (near-linear for row and flat splits; a column split compares all of its few pieces).
void check_tiling(const std::string& name, const std::vector<MappedPiece>& all) {
  const PieceRecord& first = *all.front().rec;
  std::vector<const PieceRecord*> r0;
  for (const auto& mp : all) {
    const PieceRecord& p = *mp.rec;
    HPCT_CHECK(p.global_shape == first.global_shape && p.dtype == first.dtype,
               "checkpoint tensor {}: its pieces disagree on the global shape or dtype ({} {} in {} vs {} {} in {})",
               name, shape_str(p.global_shape), dtype_name(p.dtype), *mp.file, shape_str(first.global_shape),
               dtype_name(first.dtype), *all.front().file);
    check_box(name, p.global_shape, p.offset, p.count);
    if (p.replica == 0) r0.push_back(&p);
  }
  int64_t total = 0;
  for (const auto* p : r0) total += numel(p->count);
  const int64_t want = numel(first.global_shape);
  HPCT_CHECK(total == want,
             "checkpoint tensor {} {} is not covered exactly by its replica-0 pieces: they hold {} elements, the "
             "tensor has {} (a rank did not write its part, or two ranks wrote the same part as replica 0)",
             name, shape_str(first.global_shape), total, want);
  std::sort(r0.begin(), r0.end(),
            [](const PieceRecord* a, const PieceRecord* b) { return a->offset[0] < b->offset[0]; });
  std::vector<const PieceRecord*> active;
  for (const auto* p : r0) {
    std::erase_if(active, [&](const PieceRecord* q) { return q->offset[0] + q->count[0] <= p->offset[0]; });
    for (const auto* q : active) {
      bool meet = true;
      for (size_t a = 0; a < p->offset.size() && meet; ++a)
        meet = std::max(p->offset[a], q->offset[a]) < std::min(p->offset[a] + p->count[a], q->offset[a] + q->count[a]);
      HPCT_CHECK(!meet, "checkpoint tensor {}: replica-0 pieces overlap (offset {} count {} and offset {} count {})",
                 name, shape_str(p->offset), shape_str(p->count), shape_str(q->offset), shape_str(q->count));
    }
    active.push_back(p);
  }
}

void write_virtual_dataset(hid_t file, hid_t lcpl, const std::string& name, const std::vector<MappedPiece>& pieces) {
  const PieceRecord& first = *pieces.front().rec;
  const int ndim = static_cast<int>(first.global_shape.size());
  std::vector<hsize_t> dims(first.global_shape.begin(), first.global_shape.end());
  H5Id vspace = space_id(H5_CHECK(H5Screate_simple(ndim, dims.data(), nullptr)));
  H5Id dcpl = plist_id(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  // A mapping whose source file is missing reads the fill value: NaN makes that visible for floats.
  if (first.dtype == DType::F32) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    H5_CHECK(H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &nan));
  } else if (first.dtype == DType::F64) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    H5_CHECK(H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan));
  }
  for (const auto& mp : pieces) {
    const PieceRecord& p = *mp.rec;
    if (p.replica != 0) continue;
    std::vector<hsize_t> off(p.offset.begin(), p.offset.end()), cnt(p.count.begin(), p.count.end());
    H5_CHECK(H5Sselect_hyperslab(vspace, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
    H5Id src = space_id(H5_CHECK(H5Screate_simple(ndim, cnt.data(), nullptr)));
    // "./file": resolved relative to index.h5's directory, so the step directory can be renamed.
    const std::string src_file = escape_vds_name("./" + *mp.file);
    const std::string src_dset = escape_vds_name("/" + p.file_dataset);
    H5_CHECK(H5Pset_virtual(dcpl, vspace, src_file.c_str(), src_dset.c_str(), src));
  }
  H5_CHECK(H5Sselect_all(vspace));
  H5Id ds = dataset_id(H5Dcreate2(file, name.c_str(), h5_file_type(first.dtype), vspace, lcpl, dcpl, H5P_DEFAULT));
  HPCT_CHECK(ds.get() >= 0,
             "cannot create virtual dataset {} in the checkpoint index (is {} also used as a group, i.e. a prefix "
             "of another tensor's name?)",
             name, name);
}

}  // namespace

void write_index(const std::string& dir, const std::vector<ShardManifest>& shards, const Attrs& attrs,
                 SavePhases* phases) {
  pause_if_requested("shards");
  Timer total;
  const std::string path = (fs::path(dir) / "index.h5").string();

  // Logical datasets, sorted by name, with their pieces in shard order.
  std::map<std::string, std::vector<MappedPiece>> by_name;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& m : shards) {
    HPCT_CHECK(fs::exists(fs::path(dir) / m.file),
               "checkpoint {}: shard file {} (rank {}) is missing before the index "
               "is written",
               dir, m.file, m.rank);
    for (const auto& p : m.pieces) by_name[p.dataset].push_back({&p, &m.file});
    all.push_back(nlohmann::json::parse(m.to_json()));
  }
  for (const auto& [name, pieces] : by_name) check_tiling(name, pieces);
  for (const auto* key : {"format_version", "pieces_json"})
    HPCT_CHECK(!attrs.ints.count(key) && !attrs.floats.count(key) && !attrs.strings.count(key),
               "checkpoint attribute name '{}' is reserved by lib/ckpt", key);
  {
    std::map<std::string, const char*> seen;
    auto once = [&](const std::string& key, const char* kind) {
      const auto [it, fresh] = seen.emplace(key, kind);
      HPCT_CHECK(fresh, "checkpoint attribute '{}' given both as {} and as {}", key, it->second, kind);
    };
    for (const auto& kv : attrs.ints) once(kv.first, "int");
    for (const auto& kv : attrs.floats) once(kv.first, "float");
    for (const auto& kv : attrs.strings) once(kv.first, "string");
  }

  H5Id fapl = make_fapl(true);
  H5Id file = file_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  HPCT_CHECK(file.get() >= 0, "cannot create checkpoint index {} (check the directory is writable)", path);
  H5Id lcpl = make_lcpl();
  for (const auto& [name, pieces] : by_name) write_virtual_dataset(file, lcpl, name, pieces);

  try {
    write_attr_scalar(file, "format_version", H5T_STD_I64LE, H5T_NATIVE_INT64, &kFormatVersion);
    for (const auto& [k, v] : attrs.ints) write_attr_scalar(file, k.c_str(), H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
    for (const auto& [k, v] : attrs.floats) write_attr_scalar(file, k.c_str(), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
    for (const auto& [k, v] : attrs.strings) write_attr_string(file, k.c_str(), v);
    write_attr_string(file, "pieces_json", all.dump());
    lcpl.reset();
    file.close_checked();
  } catch (const Error& e) {
    HPCT_FAIL("cannot write the attributes of checkpoint index {}: {}", path, e.cause());
  }
  fsync_file(path);
  fsync_dir(dir);
  if (phases != nullptr) phases->index_s += total.seconds();
}

}  // namespace hpct::ckpt
