// export_consolidated: one plain HDF5 file (regular contiguous datasets, no virtual datasets, no shards) for
// tools that want a single file: every logical tensor read through the index, root attributes copied.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint.hpp"
#include "ckpt/ckpt_internal.hpp"

namespace hpct::ckpt {

using namespace detail;
namespace fs = std::filesystem;

void export_consolidated(const std::string& step_dir, const std::string& out_file, bool with_optimizer) {
  constexpr int64_t kSlabBytes = 64 << 20;  // copy in slabs of whole axis-0 rows, about this size
  Reader reader(step_dir);
  const std::string tmp = out_file + ".tmp";
  const fs::path parent = fs::absolute(out_file).parent_path();
  {
    H5Id fapl = make_fapl(true);  // the deck text and other attributes may exceed 64 KiB
    H5Id file = file_id(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    HPCT_USAGE_CHECK(file.get() >= 0, "cannot create {} (check that its directory exists and is writable)", tmp);
    H5Id lcpl = make_lcpl();
    std::vector<unsigned char> buf;
    for (const std::string& name : reader.datasets()) {
      if (!with_optimizer && name.rfind("optim/", 0) == 0) continue;
      const DType dt = reader.dtype(name);
      const std::vector<int64_t> shape = reader.shape(name);
      std::vector<hsize_t> dims(shape.begin(), shape.end());
      H5Id space = space_id(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
      H5Id ds = dataset_id(
          H5_CHECK(H5Dcreate2(file, name.c_str(), h5_file_type(dt), space, lcpl, H5P_DEFAULT, H5P_DEFAULT)));
      const int64_t row = shape.empty() ? 1 : numel(shape) / std::max<int64_t>(1, shape[0]);
      const int64_t row_bytes = std::max<int64_t>(1, row * static_cast<int64_t>(dtype_size(dt)));
      const int64_t rows_per_slab = std::max<int64_t>(1, kSlabBytes / row_bytes);
      for (int64_t r0 = 0; r0 < shape[0]; r0 += rows_per_slab) {
        std::vector<int64_t> off(shape.size(), 0), cnt = shape;
        off[0] = r0;
        cnt[0] = std::min(rows_per_slab, shape[0] - r0);
        if (numel(cnt) == 0) continue;
        buf.resize(static_cast<size_t>(numel(cnt)) * dtype_size(dt));
        reader.read(name, off, cnt, dt, buf.data());
        std::vector<hsize_t> hoff(off.begin(), off.end()), hcnt(cnt.begin(), cnt.end());
        H5Id fspace = space_id(H5_CHECK(H5Dget_space(ds)));
        H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, hoff.data(), nullptr, hcnt.data(), nullptr));
        H5Id mspace = space_id(H5_CHECK(H5Screate_simple(static_cast<int>(hcnt.size()), hcnt.data(), nullptr)));
        H5_CHECK(H5Dwrite(ds, h5_mem_type(dt), mspace, fspace, H5P_DEFAULT, buf.data()));
      }
    }
    const int64_t version = reader.format_version();
    write_attr_scalar(file, "format_version", H5T_STD_I64LE, H5T_NATIVE_INT64, &version);
    for (const auto& [k, v] : reader.attrs().ints)
      if (k != "format_version") write_attr_scalar(file, k.c_str(), H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
    for (const auto& [k, v] : reader.attrs().floats)
      write_attr_scalar(file, k.c_str(), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
    for (const auto& [k, v] : reader.attrs().strings) write_attr_string(file, k.c_str(), v);
    lcpl.reset();
    file.close_checked();
  }
  fsync_file(tmp);
  if (std::rename(tmp.c_str(), out_file.c_str()) != 0)
    HPCT_FAIL("cannot rename {} to {}: {}", tmp, out_file, std::strerror(errno));
  fsync_dir(parent.string());
}

}  // namespace hpct::ckpt
