// verify: every shard file named in the index exists and every piece's bytes match its CRC32C (manifest and
// shard attribute). A virtual dataset whose source file is missing reads as its fill value, silently, so the
// loader must not trust a checkpoint that has not passed this.
#include <algorithm>
#include <filesystem>

#include "ckpt/checkpoint.hpp"
#include "ckpt/ckpt_internal.hpp"

namespace hpct::ckpt {

using namespace detail;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kSlabBytes = 16 << 20;  // read pieces in slabs of whole axis-0 rows, about this size

std::string tensors_of(const ShardManifest& m) {
  std::vector<std::string> names;
  for (const auto& p : m.pieces)
    if (std::find(names.begin(), names.end(), p.dataset) == names.end()) names.push_back(p.dataset);
  std::string s;
  for (size_t i = 0; i < names.size() && i < 4; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 4) s += fmt::format(", ... {} tensors in all", names.size());
  return names.empty() ? "no tensors" : s;
}

// CRC32C of a piece dataset's raw bytes, read in slabs of axis-0 rows (bounded memory for big tensors).
uint32_t dataset_crc(hid_t ds, const PieceRecord& p, const std::string& path, std::vector<unsigned char>& buf) {
  const size_t esize = dtype_size(p.dtype);
  int64_t row = 1;
  for (size_t a = 1; a < p.count.size(); ++a) row *= p.count[a];
  const int64_t rows_per_slab = std::max<int64_t>(1,
                                                  kSlabBytes / std::max<int64_t>(1, row * static_cast<int64_t>(esize)));
  H5Id fspace = space_id(H5_CHECK(H5Dget_space(ds)));
  uint32_t crc = 0;
  for (int64_t r0 = 0; r0 < p.count[0]; r0 += rows_per_slab) {
    std::vector<hsize_t> off(p.count.size(), 0), cnt(p.count.begin(), p.count.end());
    off[0] = static_cast<hsize_t>(r0);
    cnt[0] = static_cast<hsize_t>(std::min(rows_per_slab, p.count[0] - r0));
    const size_t bytes = static_cast<size_t>(cnt[0]) * static_cast<size_t>(row) * esize;
    buf.resize(bytes);
    H5Id mspace = space_id(H5_CHECK(H5Screate_simple(static_cast<int>(cnt.size()), cnt.data(), nullptr)));
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
    if (H5Dread(ds, h5_file_type(p.dtype), mspace, fspace, H5P_DEFAULT, buf.data()) < 0) {
      const std::string why = h5::error_stack_cause();
      HPCT_FAIL("cannot read dataset {} of {} (tensor {}): the file is {}: {}", p.file_dataset, path, p.dataset,
                damage_of(path, why), kDamaged);
    }
    crc = crc32c(buf.data(), bytes, crc);
  }
  return crc;
}

}  // namespace

int64_t verify(const std::string& step_dir, int part, int nparts) {
  HPCT_CHECK(nparts >= 1 && part >= 0 && part < nparts, "verify part {} of {}", part, nparts);
  Reader reader(step_dir);
  QuietH5Errors quiet;  // every failure below is reported with its own message
  int64_t bytes = 0;
  std::vector<unsigned char> buf;
  const auto& shards = reader.shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    if (static_cast<int>(i % static_cast<size_t>(nparts)) != part) continue;
    const ShardManifest& m = shards[i];
    const std::string path = (fs::path(step_dir) / m.file).string();
    if (!fs::exists(path))
      HPCT_FAIL("checkpoint {}: shard file {} is missing (it holds {}): {}", step_dir, m.file, tensors_of(m), kDamaged);
    H5Id file = file_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));  // default fapl: see Reader::Reader
    if (file.get() < 0) {
      const std::string why = h5::error_stack_cause();
      HPCT_FAIL("checkpoint {}: shard file {} cannot be opened: {} (it holds {}): {}", step_dir, m.file,
                damage_of(path, why), tensors_of(m), kDamaged);
    }
    for (const PieceRecord& p : m.pieces) {
      H5Id ds = dataset_id(H5Dopen2(file, p.file_dataset.c_str(), H5P_DEFAULT));
      if (ds.get() < 0) {
        const std::string why = h5::error_stack_cause();
        HPCT_FAIL("checkpoint {}: shard file {} has no readable dataset {} (tensor {}{}): {}", step_dir, m.file,
                  p.file_dataset, p.dataset, why.empty() ? "" : "; HDF5: " + why, kDamaged);
      }
      H5Id type = type_id(H5_CHECK(H5Dget_type(ds)));
      H5Id space = space_id(H5_CHECK(H5Dget_space(ds)));
      const int nd = H5Sget_simple_extent_ndims(space);
      std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
      if (nd > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
      const bool shape_ok = std::equal(dims.begin(), dims.end(), p.count.begin(), p.count.end(),
                                       [](hsize_t a, int64_t b) { return static_cast<int64_t>(a) == b; });
      const bool type_ok = H5Tget_size(type) == dtype_size(p.dtype) &&
                           H5Tget_class(type) == H5Tget_class(h5_file_type(p.dtype));
      if (!shape_ok || !type_ok)
        HPCT_FAIL("checkpoint {}: dataset {} in {} (tensor {}) has the wrong shape or type (manifest: {} {}): {}",
                  step_dir, p.file_dataset, m.file, p.dataset, shape_str(p.count), dtype_name(p.dtype), kDamaged);
      uint32_t attr_crc = 0;
      {
        H5Id a = attr_id(H5Aopen(ds, "crc32c", H5P_DEFAULT));
        if (a.get() < 0 || H5Aread(a, H5T_NATIVE_UINT32, &attr_crc) < 0)
          HPCT_FAIL("checkpoint {}: dataset {} in {} (tensor {}) has no readable crc32c attribute: {}", step_dir,
                    p.file_dataset, m.file, p.dataset, kDamaged);
      }
      const uint32_t computed = dataset_crc(ds, p, path, buf);
      if (computed != p.crc || attr_crc != p.crc)
        HPCT_FAIL(
            "checksum mismatch in {} dataset {} (tensor {}): stored 0x{:08x} (index) / 0x{:08x} (shard attribute), "
            "computed 0x{:08x}: {}",
            path, p.file_dataset, p.dataset, p.crc, attr_crc, computed, kDamaged);
      bytes += numel(p.count) * static_cast<int64_t>(dtype_size(p.dtype));
    }
  }
  return bytes;
}

}  // namespace hpct::ckpt
