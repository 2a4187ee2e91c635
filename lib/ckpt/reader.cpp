// Reader: whole tensors and any hyperslab of a checkpoint, through index.h5's virtual datasets.
#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/ckpt_internal.hpp"

namespace hpct::ckpt {

using namespace detail;
namespace fs = std::filesystem;

namespace {

struct AttrVisit {
  Attrs* attrs;
  std::string pieces_json;
  bool has_pieces = false;
  std::string error;
};

// Root attributes by HDF5 type class: integer -> ints, float -> floats, string -> strings (scalars only;
// nothing else is written by lib/ckpt). pieces_json is kept apart (it is parsed into the manifests).
herr_t visit_attr(hid_t loc, const char* name, const H5A_info_t*, void* op) {
  auto* v = static_cast<AttrVisit*>(op);
  try {
    H5Id a = attr_id(H5_CHECK(H5Aopen(loc, name, H5P_DEFAULT)));
    H5Id space = space_id(H5_CHECK(H5Aget_space(a)));
    if (H5_CHECK(H5Sget_simple_extent_npoints(space)) != 1) return 0;
    H5Id type = type_id(H5_CHECK(H5Aget_type(a)));
    const H5T_class_t cls = H5_CHECK(H5Tget_class(type));
    const std::string key = name;
    if (cls == H5T_INTEGER) {
      int64_t x = 0;
      H5_CHECK(H5Aread(a, H5T_NATIVE_INT64, &x));
      v->attrs->ints[key] = x;
    } else if (cls == H5T_FLOAT) {
      double x = 0;
      H5_CHECK(H5Aread(a, H5T_NATIVE_DOUBLE, &x));
      v->attrs->floats[key] = x;
    } else if (cls == H5T_STRING) {
      if (key == "pieces_json") {
        v->pieces_json = read_attr_string(a);
        v->has_pieces = true;
      } else {
        v->attrs->strings[key] = read_attr_string(a);
      }
    }
  } catch (const Error& e) {
    v->error = fmt::format("attribute {}: {}", name, e.cause());
    return -1;
  }
  return 0;
}

// Every dataset reachable from the root, by path without the leading '/'; root-level names starting with
// '_' are reserved for lib/ckpt internals and skipped.
herr_t visit_link(hid_t group, const char* name, const H5L_info_t* info, void* op) {
  auto* names = static_cast<std::vector<std::string>*>(op);
  if (info->type != H5L_TYPE_HARD || name[0] == '_') return 0;
  const hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) return -1;
  const bool is_dataset = H5Iget_type(obj) == H5I_DATASET;
  H5Oclose(obj);
  if (is_dataset) names->emplace_back(name);
  return 0;
}

}  // namespace

Reader::Reader(const std::string& step_dir) : dir_(step_dir) {
  const std::string path = (fs::path(step_dir) / "index.h5").string();
  HPCT_USAGE_CHECK(fs::exists(path),
                   "checkpoint {} has no index.h5: it is not a checkpoint step directory, or an incomplete one "
                   "(a crash before its commit); use a step_* directory named by `latest`",
                   step_dir);
  // Every failure below becomes one line naming index.h5 and what looks wrong with it (every rank reads the same
  // index and fails the same way: a UsageError).
  QuietH5Errors quiet;
  // Default access list for read-only opens: HDF5 refuses to open a file that is already open in this process
  // with another close degree (the virtual datasets open the shard files with the default one).
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) {
    const std::string why = h5::error_stack_cause();
    HPCT_USAGE_FAIL("checkpoint index {} cannot be opened: {}: {}", path, damage_of(path, why), kDamaged);
  }
  try {
    HPCT_USAGE_CHECK(attr_exists(file_, "format_version"),
                     "{} has no format_version attribute: it is not an hpctrain checkpoint index", path);
    format_version_ = read_attr_i64(file_, "format_version");
    HPCT_USAGE_CHECK(format_version_ <= kFormatVersion && format_version_ >= 1,
                     "checkpoint {} has format version {}, this build reads versions up to {}: use a newer hpctrain "
                     "to read it",
                     step_dir, format_version_, kFormatVersion);

    AttrVisit av{&attrs_, {}, false, {}};
    hsize_t idx = 0;
    if (H5Aiterate2(file_, H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attr, &av) < 0) {
      const std::string why = av.error.empty() ? h5::error_stack_cause() : av.error;
      HPCT_USAGE_FAIL("checkpoint index {}: its root attributes cannot be read: {}: {}", path, damage_of(path, why),
                      kDamaged);
    }
    HPCT_USAGE_CHECK(av.has_pieces, "{} has no pieces_json attribute: it is not an hpctrain checkpoint index", path);
    try {
      for (const auto& m : nlohmann::json::parse(av.pieces_json)) shards_.push_back(ShardManifest::from_json(m.dump()));
    } catch (const nlohmann::json::exception& e) {
      HPCT_USAGE_FAIL("checkpoint index {}: its pieces_json attribute is not valid JSON ({}): {}", path, e.what(),
                      kDamaged);
    }

    H5_CHECK(H5Lvisit(file_, H5_INDEX_NAME, H5_ITER_INC, visit_link, &datasets_));
    std::sort(datasets_.begin(), datasets_.end());
  } catch (const UsageError&) {
    H5Fclose(file_);
    throw;
  } catch (const H5Error& e) {
    H5Fclose(file_);
    HPCT_USAGE_FAIL("checkpoint index {}: {}: {}", path, damage_of(path, e.hdf5_cause()), kDamaged);
  } catch (...) {
    H5Fclose(file_);
    throw;
  }
}

Reader::~Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

std::vector<std::string> Reader::datasets() const { return datasets_; }

bool Reader::has(const std::string& dataset) const {
  return std::binary_search(datasets_.begin(), datasets_.end(), dataset);
}

namespace {

H5Id open_logical(const Reader& r, hid_t file, const std::string& dataset) {
  HPCT_USAGE_CHECK(r.has(dataset), "checkpoint {} has no tensor {} (it holds {} tensors; see ckpt_tool inspect)",
                   r.dir(), dataset, r.datasets().size());
  return dataset_id(H5_CHECK(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT)));
}

std::vector<int64_t> dims_of(hid_t ds) {
  H5Id space = space_id(H5_CHECK(H5Dget_space(ds)));
  const int nd = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> d(static_cast<size_t>(nd));
  H5_CHECK(H5Sget_simple_extent_dims(space, d.data(), nullptr));
  return {d.begin(), d.end()};
}

}  // namespace

std::vector<int64_t> Reader::shape(const std::string& dataset) const {
  H5Id ds = open_logical(*this, file_, dataset);
  return dims_of(ds);
}

DType Reader::dtype(const std::string& dataset) const {
  H5Id ds = open_logical(*this, file_, dataset);
  H5Id type = type_id(H5_CHECK(H5Dget_type(ds)));
  return dtype_of_h5(type, fmt::format("tensor {} of checkpoint {}", dataset, dir_));
}

void Reader::read(const std::string& dataset, const std::vector<int64_t>& offset, const std::vector<int64_t>& count,
                  DType dtype, void* out) const {
  H5Id ds = open_logical(*this, file_, dataset);
  H5Id type = type_id(H5_CHECK(H5Dget_type(ds)));
  const DType stored = dtype_of_h5(type, fmt::format("tensor {} of checkpoint {}", dataset, dir_));
  HPCT_CHECK(stored == dtype, "tensor {} of checkpoint {} is stored as {}, read as {}", dataset, dir_,
             dtype_name(stored), dtype_name(dtype));
  const std::vector<int64_t> shape = dims_of(ds);
  HPCT_CHECK(offset.size() == shape.size() && count.size() == shape.size(),
             "tensor {} {} of checkpoint {}: hyperslab offset {} count {} has the wrong number of axes", dataset,
             shape_str(shape), dir_, shape_str(offset), shape_str(count));
  for (size_t a = 0; a < shape.size(); ++a)
    HPCT_CHECK(offset[a] >= 0 && count[a] >= 0 && offset[a] + count[a] <= shape[a],
               "tensor {} {} of checkpoint {}: hyperslab offset {} count {} is out of bounds on axis {}", dataset,
               shape_str(shape), dir_, shape_str(offset), shape_str(count), a);
  if (numel(count) == 0) return;
  HPCT_CHECK(out != nullptr, "null output buffer reading tensor {}", dataset);
  std::vector<hsize_t> off(offset.begin(), offset.end()), cnt(count.begin(), count.end());
  H5Id fspace = space_id(H5_CHECK(H5Dget_space(ds)));
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr));
  H5Id mspace = space_id(H5_CHECK(H5Screate_simple(static_cast<int>(cnt.size()), cnt.data(), nullptr)));
  QuietH5Errors quiet;  // a failure is reported below, naming the damaged shard file
  if (H5Dread(ds, h5_mem_type(dtype), mspace, fspace, H5P_DEFAULT, out) < 0) {
    const std::string why = h5::error_stack_cause();
    // the read goes through the virtual dataset to the shard files holding the tensor: name the damaged one
    std::string damage;
    for (const ShardManifest& m : shards_) {
      if (std::none_of(m.pieces.begin(), m.pieces.end(), [&](const PieceRecord& p) { return p.dataset == dataset; }))
        continue;
      const std::string problem = file_problem((fs::path(dir_) / m.file).string());
      if (!problem.empty()) {
        damage = fmt::format("shard file {} is {}", m.file, problem);
        break;
      }
    }
    if (damage.empty()) damage = "HDF5: " + (why.empty() ? std::string("the read failed") : why);
    HPCT_FAIL("cannot read tensor {} (offset {} count {}) from checkpoint {}: {}: {}", dataset, shape_str(offset),
              shape_str(count), dir_, damage, kDamaged);
  }
}

void Reader::read_all(const std::string& dataset, DType dtype, void* out) const {
  const std::vector<int64_t> s = shape(dataset);
  read(dataset, std::vector<int64_t>(s.size(), 0), s, dtype, out);
}

}  // namespace hpct::ckpt
