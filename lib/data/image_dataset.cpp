#include "data/image_dataset.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "core/h5_check.hpp"
#include "core/rng.hpp"

namespace hpct::data {

namespace {

constexpr const char* kPrepareHint =
    "run scripts/prepare_data.sh (it writes the image datasets under $HPCT_DATA_DIR, default <repository>/data), "
    "or build/apps/prepare_images fashion-mnist --src /usr/share/datasets/fashion-mnist --out-dir DIR";
constexpr uint64_t kCounterSpan = uint64_t{1} << 32;  // counters: (epoch or step) * 2^32 + position/sample

// Owns one HDF5 identifier; closes it with the matching H5xclose (errors on that path are ignored).
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { reset(); }
  operator hid_t() const { return id_; }  // NOLINT: handles are passed straight to the C API
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  // Closes now and checks the result (a file close flushes: its errors matter).
  void close_checked() {
    const hid_t id = std::exchange(id_, H5I_INVALID_HID);
    if (id >= 0) H5_CHECK(closer_(id));
  }

 private:
  hid_t id_;
  Closer closer_;
};

// Silences HDF5's automatic error-stack printing while alive: failures are reported as our own errors.
class QuietH5 {
 public:
  QuietH5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietH5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietH5(const QuietH5&) = delete;
  QuietH5& operator=(const QuietH5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

std::string errno_text() { return std::strerror(errno); }

void write_string_attr(hid_t loc, const char* name, const std::string& value) {
  H5Handle t(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle a(H5_CHECK(H5Acreate2(loc, name, t, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  const char* p = value.c_str();
  H5_CHECK(H5Awrite(a, t, &p));
}

// A string attribute (variable or fixed length), or "" when absent or not a string.
std::string read_string_attr(hid_t loc, const char* name) {
  if (H5Aexists(loc, name) <= 0) return {};
  H5Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return {};
  H5Handle ftype(H5Aget_type(a), H5Tclose);
  if (!ftype.valid() || H5Tget_class(ftype) != H5T_STRING) return {};
  if (H5Tis_variable_str(ftype) > 0) {
    H5Handle mtype(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
    H5_CHECK(H5Tset_size(mtype, H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(mtype, H5Tget_cset(ftype)));
    char* p = nullptr;
    if (H5Aread(a, mtype, &p) < 0) return {};
    std::string s = p != nullptr ? p : "";
    H5Handle space(H5_CHECK(H5Aget_space(a)), H5Sclose);
    H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, &p);
    return s;
  }
  const size_t size = H5Tget_size(ftype);
  std::string s(size, '\0');
  H5Handle mtype(H5_CHECK(H5Tcopy(ftype)), H5Tclose);
  if (H5Aread(a, mtype, s.data()) < 0) return {};
  s.resize(std::strlen(s.c_str()));
  return s;
}

// The shape of dataset `ds` (HDF5 simple dataspace).
std::vector<hsize_t> shape_of(hid_t ds) {
  H5Handle space(H5_CHECK(H5Dget_space(ds)), H5Sclose);
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    if (directory) return;  // best effort: the data itself is fsynced
    HPCT_USAGE_FAIL("cannot reopen image dataset {} to fsync it: {}", path, errno_text());
  }
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  if (rc != 0 && !directory) HPCT_USAGE_FAIL("cannot fsync image dataset {}: {}; check free space", path, why);
}

// One normalised (and possibly cropped / flipped) image into out (C, H, W).
void convert_image(const uint8_t* src, int C, int H, int W, const ImageNormalization& norm, int pad, int dy, int dx,
                   bool flip, float* out) {
  for (int c = 0; c < C; ++c) {
    const float mean = norm.mean[static_cast<size_t>(c)];
    const float sd = norm.std[static_cast<size_t>(c)];
    const float zero = (0.0f / 255.0f - mean) / sd;  // a padding pixel
    const uint8_t* plane = src + int64_t{c} * H * W;
    float* oplane = out + int64_t{c} * H * W;
    for (int y = 0; y < H; ++y) {
      const int sy = y + dy - pad;
      float* orow = oplane + int64_t{y} * W;
      if (sy < 0 || sy >= H) {
        for (int x = 0; x < W; ++x) orow[x] = zero;
        continue;
      }
      const uint8_t* row = plane + int64_t{sy} * W;
      for (int x = 0; x < W; ++x) {
        const int cx = flip ? W - 1 - x : x;  // flip after the crop: output column x shows crop column W-1-x
        const int sx = cx + dx - pad;
        orow[x] = (sx < 0 || sx >= W) ? zero : (static_cast<float>(row[sx]) / 255.0f - mean) / sd;
      }
    }
  }
}

}  // namespace

// ---- writing ------------------------------------------------------------------------------------

void write_image_dataset(const std::string& path, const uint8_t* images, const int32_t* labels, int64_t n, int c, int h,
                         int w, int num_classes, const std::string& name, const std::string& source) {
  HPCT_USAGE_CHECK(n >= 1 && c >= 1 && h >= 1 && w >= 1,
                   "cannot write image dataset {}: shape ({}, {}, {}, {}) must have every extent >= 1", path, n, c, h,
                   w);
  HPCT_USAGE_CHECK(num_classes >= 1, "cannot write image dataset {}: num_classes = {} must be at least 1", path,
                   num_classes);
  HPCT_CHECK(images != nullptr && labels != nullptr, "null buffers for {}", path);
  for (int64_t i = 0; i < n; ++i)
    HPCT_USAGE_CHECK(labels[i] >= 0 && labels[i] < num_classes,
                     "cannot write image dataset {}: label {} of image {} is outside [0, {})", path, labels[i], i,
                     num_classes);

  const std::string tmp = path + ".tmp";
  std::remove(tmp.c_str());
  {
    QuietH5 quiet;
    H5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.valid())
      HPCT_USAGE_FAIL("cannot create image dataset {}: check that the directory exists and is writable", tmp);
    try {
      const hsize_t idims[4] = {static_cast<hsize_t>(n), static_cast<hsize_t>(c), static_cast<hsize_t>(h),
                                static_cast<hsize_t>(w)};
      H5Handle ispace(H5_CHECK(H5Screate_simple(4, idims, nullptr)), H5Sclose);
      H5Handle ids(H5_CHECK(H5Dcreate2(file, "images", H5T_STD_U8LE, ispace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                   H5Dclose);
      if (H5Dwrite(ids, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images) < 0)
        HPCT_USAGE_FAIL("cannot write the images of {}: check free space", tmp);
      const hsize_t ldims[1] = {static_cast<hsize_t>(n)};
      H5Handle lspace(H5_CHECK(H5Screate_simple(1, ldims, nullptr)), H5Sclose);
      H5Handle lds(H5_CHECK(H5Dcreate2(file, "labels", H5T_STD_I32LE, lspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                   H5Dclose);
      if (H5Dwrite(lds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels) < 0)
        HPCT_USAGE_FAIL("cannot write the labels of {}: check free space", tmp);

      H5Handle scalar(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
      H5Handle a(H5_CHECK(H5Acreate2(file, "num_classes", H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
      const int32_t nc = num_classes;
      H5_CHECK(H5Awrite(a, H5T_NATIVE_INT32, &nc));
      write_string_attr(file, "name", name);
      write_string_attr(file, "source", source);
      ids.reset();
      lds.reset();
      a.reset();
      file.close_checked();  // flushes: its failure (disk full) must not go unnoticed
    } catch (...) {
      file.reset();
      std::remove(tmp.c_str());
      throw;
    }
  }
  try {
    fsync_path(tmp, false);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(tmp.c_str());
    HPCT_USAGE_FAIL("cannot rename {} to {}: {}", tmp, path, why);
  }
  const std::string parent = std::filesystem::path(path).parent_path().string();
  fsync_path(parent.empty() ? "." : parent, true);
}

// ---- reading ------------------------------------------------------------------------------------

ImageDataset ImageDataset::open(const std::string& path) { return open_file(path, true); }

ImageDataset ImageDataset::open_header(const std::string& path) { return open_file(path, false); }

ImageDataset ImageDataset::open_file(const std::string& path, bool read_images) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) HPCT_USAGE_FAIL("image dataset {} not found: {}", path, kPrepareHint);
  QuietH5 quiet;
  HPCT_USAGE_CHECK(H5Fis_hdf5(path.c_str()) > 0, "{} is not an HDF5 file (expected an image dataset); re-create it: {}",
                   path, kPrepareHint);
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  HPCT_USAGE_CHECK(file.valid(), "cannot open image dataset {} (unreadable or damaged HDF5); re-create it: {}", path,
                   kPrepareHint);

  ImageDataset d;
  d.path_ = path;
  for (const char* ds : {"images", "labels"})
    HPCT_USAGE_CHECK(H5Lexists(file, ds, H5P_DEFAULT) > 0,
                     "image dataset {} has no /{} dataset (expected /images uint8 (N, C, H, W) and /labels int32 "
                     "(N)); re-create it: {}",
                     path, ds, kPrepareHint);
  H5Handle ids(H5Dopen2(file, "images", H5P_DEFAULT), H5Dclose);
  H5Handle lds(H5Dopen2(file, "labels", H5P_DEFAULT), H5Dclose);
  HPCT_USAGE_CHECK(ids.valid() && lds.valid(),
                   "image dataset {}: /images or /labels is not a dataset; re-create it: {}", path, kPrepareHint);

  // /images: uint8, rank 4
  {
    H5Handle t(H5_CHECK(H5Dget_type(ids)), H5Tclose);
    HPCT_USAGE_CHECK(H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE,
                     "image dataset {}: /images must be uint8 (pixel values 0..255), it has another type; re-create "
                     "it: {}",
                     path, kPrepareHint);
  }
  const auto idims = shape_of(ids);
  HPCT_USAGE_CHECK(idims.size() == 4 && idims[0] >= 1 && idims[1] >= 1 && idims[2] >= 1 && idims[3] >= 1,
                   "image dataset {}: /images has shape {}, expected (N, C, H, W) with every extent >= 1; re-create "
                   "it: {}",
                   path, shape_text(idims), kPrepareHint);
  HPCT_USAGE_CHECK(idims[1] <= 65536 && idims[2] <= 65536 && idims[3] <= 65536,
                   "image dataset {}: /images has shape {}, implausibly large images", path, shape_text(idims));
  // /labels: integer, rank 1, N entries
  {
    H5Handle t(H5_CHECK(H5Dget_type(lds)), H5Tclose);
    HPCT_USAGE_CHECK(H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 4 && H5Tget_sign(t) == H5T_SGN_2,
                     "image dataset {}: /labels must be int32, it has another type; re-create it: {}", path,
                     kPrepareHint);
  }
  const auto ldims = shape_of(lds);
  HPCT_USAGE_CHECK(ldims.size() == 1 && ldims[0] == idims[0],
                   "image dataset {}: /labels has shape {}, expected ({}) to match /images {}; re-create it: {}", path,
                   shape_text(ldims), idims[0], shape_text(idims), kPrepareHint);
  // num_classes
  HPCT_USAGE_CHECK(H5Aexists(file, "num_classes") > 0,
                   "image dataset {} has no num_classes attribute; re-create it: {}", path, kPrepareHint);
  {
    H5Handle a(H5_CHECK(H5Aopen(file, "num_classes", H5P_DEFAULT)), H5Aclose);
    H5Handle t(H5_CHECK(H5Aget_type(a)), H5Tclose);
    H5Handle sp(H5_CHECK(H5Aget_space(a)), H5Sclose);
    int64_t nc = 0;
    HPCT_USAGE_CHECK(H5Tget_class(t) == H5T_INTEGER && H5Sget_simple_extent_npoints(sp) == 1 &&
                         H5Aread(a, H5T_NATIVE_INT64, &nc) >= 0,
                     "image dataset {}: the num_classes attribute must be one integer; re-create it: {}", path,
                     kPrepareHint);
    HPCT_USAGE_CHECK(nc >= 1 && nc <= INT32_MAX, "image dataset {}: num_classes = {} must be at least 1", path, nc);
    d.num_classes_ = static_cast<int>(nc);
  }
  d.name_ = read_string_attr(file, "name");
  d.source_ = read_string_attr(file, "source");

  d.n_ = static_cast<int64_t>(idims[0]);
  d.c_ = static_cast<int>(idims[1]);
  d.h_ = static_cast<int>(idims[2]);
  d.w_ = static_cast<int>(idims[3]);
  if (!read_images) return d;
  d.images_.resize(static_cast<size_t>(d.n_ * d.image_elems()));
  d.labels_.resize(static_cast<size_t>(d.n_));
  HPCT_USAGE_CHECK(H5Dread(ids, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.images_.data()) >= 0,
                   "cannot read /images of {} (truncated or damaged file); re-create it: {}", path, kPrepareHint);
  HPCT_USAGE_CHECK(H5Dread(lds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.labels_.data()) >= 0,
                   "cannot read /labels of {} (truncated or damaged file); re-create it: {}", path, kPrepareHint);
  for (int64_t i = 0; i < d.n_; ++i)
    HPCT_USAGE_CHECK(d.labels_[i] >= 0 && d.labels_[i] < d.num_classes_,
                     "image dataset {}: label {} of image {} is outside [0, num_classes = {}); re-create it: {}", path,
                     d.labels_[i], i, d.num_classes_, kPrepareHint);
  return d;
}

// ---- sampling -----------------------------------------------------------------------------------

void fill_images(const ImageDataset& dataset, const ImageNormalization& norm, int64_t first, int count, float* images,
                 int32_t* labels) {
  HPCT_CHECK(first >= 0 && count >= 0 && first + count <= dataset.size(), "images [{}, {}) out of range [0, {})", first,
             first + count, dataset.size());
  const int C = dataset.channels();
  HPCT_CHECK((norm.mean.size() == 1 || norm.mean.size() == static_cast<size_t>(C)) &&
                 norm.mean.size() == norm.std.size(),
             "normalisation has {} means and {} stds for {} channels", norm.mean.size(), norm.std.size(), C);
  ImageNormalization full = norm;
  full.mean.resize(static_cast<size_t>(C), norm.mean.back());
  full.std.resize(static_cast<size_t>(C), norm.std.back());
  const int64_t elems = dataset.image_elems();
  for (int r = 0; r < count; ++r) {
    convert_image(dataset.image(first + r), C, dataset.height(), dataset.width(), full, 0, 0, 0, false,
                  images + r * elems);
    labels[r] = dataset.labels()[first + r];
  }
}

ImageBatchSampler::ImageBatchSampler(const ImageDataset& dataset, uint64_t seed, int64_t global_batch,
                                     ImageNormalization norm, ImageAugmentation augment)
    : dataset_(&dataset), seed_(seed), global_batch_(global_batch), norm_(std::move(norm)), augment_(augment) {
  const int64_t n = dataset.size();
  HPCT_USAGE_CHECK(global_batch >= 1 && global_batch <= n,
                   "global batch {} does not fit image dataset {} of {} images: it must be in [1, {}]", global_batch,
                   dataset.path(), n, n);
  HPCT_USAGE_CHECK(n < static_cast<int64_t>(kCounterSpan), "image dataset {} has {} images, more than 2^32",
                   dataset.path(), n);
  const size_t C = static_cast<size_t>(dataset.channels());
  HPCT_USAGE_CHECK(!norm_.mean.empty() && norm_.mean.size() == norm_.std.size() &&
                       (norm_.mean.size() == 1 || norm_.mean.size() == C),
                   "image normalisation needs 1 or {} (channels) means and as many stds, got {} and {}", C,
                   norm_.mean.size(), norm_.std.size());
  for (float s : norm_.std) HPCT_USAGE_CHECK(s > 0.0f, "image normalisation std {} must be positive", s);
  norm_.mean.resize(C, norm_.mean.back());
  norm_.std.resize(C, norm_.std.back());
  HPCT_USAGE_CHECK(augment_.pad >= 0 && augment_.pad <= std::min(dataset.height(), dataset.width()),
                   "random-crop padding {} must be in [0, min(H, W) = {}]", augment_.pad,
                   std::min(dataset.height(), dataset.width()));
  steps_per_epoch_ = n / global_batch;  // the last n mod GB samples of each epoch's order are dropped
}

int64_t ImageBatchSampler::epoch_of(int64_t step) const {
  HPCT_CHECK(step >= 1, "step {} out of range (steps are 1-based)", step);
  return (step - 1) / steps_per_epoch_;
}

std::vector<int64_t> ImageBatchSampler::permutation(int64_t epoch) const {
  HPCT_CHECK(epoch >= 0 && static_cast<uint64_t>(epoch) < kCounterSpan, "epoch {} out of range [0, 2^32)", epoch);
  const int64_t n = dataset_->size();
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  const uint64_t stream = rng::stream_of("data.train.perm");
  const uint64_t base = static_cast<uint64_t>(epoch) * kCounterSpan;
  for (int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<int64_t>(
        rng::uniform_int(seed_, stream, base + static_cast<uint64_t>(i), static_cast<uint64_t>(i + 1)));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

const std::vector<int64_t>& ImageBatchSampler::cached_permutation(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_perm_ = permutation(epoch);
    cached_epoch_ = epoch;
  }
  return cached_perm_;
}

int64_t ImageBatchSampler::index(int64_t step, int64_t sample) const {
  HPCT_CHECK(sample >= 0 && sample < global_batch_, "global sample {} out of range [0, {})", sample, global_batch_);
  const int64_t e = epoch_of(step);
  const int64_t pos = (step - 1) % steps_per_epoch_;
  return cached_permutation(e)[static_cast<size_t>(pos * global_batch_ + sample)];
}

void ImageBatchSampler::fill(int64_t step, int64_t first, int count, float* images, int32_t* labels) const {
  HPCT_CHECK(count >= 0 && first >= 0 && first + count <= global_batch_,
             "global samples [{}, {}) out of range [0, global batch {})", first, first + count, global_batch_);
  HPCT_CHECK(step >= 1 && static_cast<uint64_t>(step) <= kCounterSpan, "step {} out of range (steps are 1-based)",
             step);
  const ImageDataset& d = *dataset_;
  const int64_t elems = d.image_elems();
  const int pad = augment_.pad;
  const uint64_t aug_stream = rng::stream_of("data.train.augment");
  const uint64_t base = static_cast<uint64_t>(step - 1) * kCounterSpan;
  for (int r = 0; r < count; ++r) {
    const int64_t g = first + r;
    const int64_t i = index(step, g);
    int dy = pad, dx = pad;  // the centred crop = the image itself
    bool flip = false;
    if (pad > 0 || augment_.flip) {
      const auto w = rng::block(seed_, aug_stream, base + static_cast<uint64_t>(g));
      if (pad > 0) {
        dy = static_cast<int>(w[0] % static_cast<uint32_t>(2 * pad + 1));
        dx = static_cast<int>(w[1] % static_cast<uint32_t>(2 * pad + 1));
      }
      flip = augment_.flip && (w[2] & 1u) != 0;
    }
    convert_image(d.image(i), d.channels(), d.height(), d.width(), norm_, pad, dy, dx, flip, images + r * elems);
    labels[r] = d.labels()[i];
  }
}

void ImageBatchSampler::fill_eval(int64_t first, int count, float* images, int32_t* labels) const {
  fill_images(*dataset_, norm_, first, count, images, labels);
}

}  // namespace hpct::data
