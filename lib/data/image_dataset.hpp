#pragma once
// HDF5 image datasets and deterministic global-batch sampling over them (docs/contracts.md "Images",
// docs/invariants.md, invariant 1).
//
// File format (one file per split, e.g. fmnist_train.h5, written by apps/prepare_images):
//   /images   uint8 (N, C, H, W)     pixel values 0..255, row-major, channel first
//   /labels   int32 (N)              class indices in [0, num_classes)
//   root attributes: num_classes (integer), name (string, e.g. "fashion-mnist/train"), source (string:
//   where the pixels came from). h5py reads it as f["images"][...], f["labels"][...], f.attrs[...].
//
// Training order (ImageBatchSampler): epochs of N / GB optimizer steps (GB = global batch; the last
// N mod GB samples of each epoch's order are dropped, so every step has a full batch). Epoch e (0-based)
// visits the samples in the order perm_e, a Fisher-Yates shuffle of [0, N) whose draw for position i
// (i = N-1 .. 1, swap with j in [0, i]) is
//
//     j = rng::uniform_int(seed, rng::stream_of("data.train.perm"), e * 2^32 + i, i + 1)
//
// Optimizer step s (1-based) is step p = (s-1) mod (N/GB) of epoch e = (s-1) div (N/GB), and global sample
// g in [0, GB) of it is image perm_e[p*GB + g]. DP rank d holds [d*B, (d+1)*B) (B = GB/DP) and its
// micro-batch j of size M the sub-block [d*B + j*M, d*B + (j+1)*M), as for tokens: fill() with those
// ranges yields exactly what the serial run puts there.
//
// Augmentation (optional): a random crop with zero padding (pad the uint8 image by `pad` pixels of value 0
// on every side, crop back an H x W window at offset (dy, dx) in [0, 2*pad]^2), then a horizontal flip with
// probability 1/2 — torchvision's RandomCrop(H, padding=pad) + RandomHorizontalFlip(). All three draws come
// from one Philox block keyed by (seed, step, global sample index):
//
//     w = rng::block(seed, rng::stream_of("data.train.augment"), (s-1) * 2^32 + g)
//     dy = w[0] mod (2*pad+1),  dx = w[1] mod (2*pad+1),  flip = w[2] & 1
//
// so the augmentation of a sample does not depend on the layout either.
//
// Normalisation: out[c][y][x] = (float(v) / 255.0f - mean[c]) / std[c], in float (padding pixels are v = 0).
//
// Loader state for checkpoints: nothing but the step. The order of any step is a pure function of
// (seed, N, GB, step), so resuming at step s needs only s (and the same seed, dataset and global batch).
#include <cstdint>
#include <string>
#include <vector>

namespace hpct::data {

// Channel statistics of Fashion-MNIST's training images (pixel / 255): mean 0.2860, std 0.3530.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Writes an image dataset file at `path`, atomically: the file is built as `path.tmp`, fsynced and renamed
// onto `path` (then the directory is fsynced). images: (n, c, h, w) uint8; labels: (n), each in
// [0, num_classes) (UsageError naming the file otherwise, as for unwritable paths).
void write_image_dataset(const std::string& path, const uint8_t* images, const int32_t* labels, int64_t n, int c, int h,
                         int w, int num_classes, const std::string& name, const std::string& source);

// An image dataset loaded into memory (Fashion-MNIST train: 47 MB). Movable; copies are not needed.
class ImageDataset {
 public:
  // Missing file -> UsageError naming the file and saying to run scripts/prepare_data.sh; not HDF5, missing
  // /images or /labels, wrong rank, dtype or shape, a missing or non-positive num_classes, or a label out of
  // [0, num_classes) -> UsageError naming the file and what is wrong.
  static ImageDataset open(const std::string& path);
  // The same checks of the file's structure, reading only its header (shape, num_classes, name): size() and the shape
  // are known, images() and labels() are empty (the memory plan of `train_resnet --plan`).
  static ImageDataset open_header(const std::string& path);

  int64_t size() const { return n_; }                            // N
  int channels() const { return c_; }                            // C
  int height() const { return h_; }                              // H
  int width() const { return w_; }                               // W
  int64_t image_elems() const { return int64_t{c_} * h_ * w_; }  // C*H*W
  int num_classes() const { return num_classes_; }
  const uint8_t* images() const { return images_.data(); }  // (N, C, H, W)
  const int32_t* labels() const { return labels_.data(); }  // (N)
  const uint8_t* image(int64_t i) const { return images_.data() + i * image_elems(); }
  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }

 private:
  ImageDataset() = default;
  static ImageDataset open_file(const std::string& path, bool read_images);

  std::string path_, name_, source_;
  int64_t n_ = 0;
  int c_ = 0, h_ = 0, w_ = 0;
  int num_classes_ = 0;
  std::vector<uint8_t> images_;
  std::vector<int32_t> labels_;
};

// Per-channel normalisation: mean and std of pixel / 255, one value per channel (or one value for all).
struct ImageNormalization {
  std::vector<float> mean{0.0f};
  std::vector<float> std{1.0f};
};

// Training augmentation; the default does nothing.
struct ImageAugmentation {
  int pad = 0;        // random crop with this much zero padding (0: no crop)
  bool flip = false;  // random horizontal flip
};

// Normalised images [first, first + count) of `dataset` in dataset order, without augmentation:
// images (count, C, H, W), labels (count). The evaluation path (e.g. on the test split).
void fill_images(const ImageDataset& dataset, const ImageNormalization& norm, int64_t first, int count, float* images,
                 int32_t* labels);

// The training order described at the top. Keeps a pointer to the dataset, which must outlive it. Not safe
// for concurrent calls on one object (it caches the current epoch's permutation); use one per thread.
class ImageBatchSampler {
 public:
  // global_batch in [1, N] (UsageError naming the file otherwise); norm has 1 or C values, std > 0;
  // 0 <= pad <= min(H, W).
  ImageBatchSampler(const ImageDataset& dataset, uint64_t seed, int64_t global_batch, ImageNormalization norm = {},
                    ImageAugmentation augment = {});

  int64_t global_batch() const { return global_batch_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }  // N / GB
  int64_t epoch_of(int64_t step) const;                         // (step-1) / steps_per_epoch
  // perm_e: a permutation of [0, N).
  std::vector<int64_t> permutation(int64_t epoch) const;
  // The dataset index of global sample `sample` in [0, GB) of optimizer step `step` (>= 1).
  int64_t index(int64_t step, int64_t sample) const;

  // Global samples [first, first + count) of optimizer step `step`, augmented and normalised:
  // images (count, C, H, W), labels (count), row r = global sample first + r.
  void fill(int64_t step, int64_t first, int count, float* images, int32_t* labels) const;
  // Images [first, first + count) of this sampler's dataset in dataset order, normalised, not augmented.
  void fill_eval(int64_t first, int count, float* images, int32_t* labels) const;

  const ImageDataset& dataset() const { return *dataset_; }

 private:
  const std::vector<int64_t>& cached_permutation(int64_t epoch) const;

  const ImageDataset* dataset_;
  uint64_t seed_;
  int64_t global_batch_;
  int64_t steps_per_epoch_;
  ImageNormalization norm_;  // C values each
  ImageAugmentation augment_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_perm_;
};

}  // namespace hpct::data
