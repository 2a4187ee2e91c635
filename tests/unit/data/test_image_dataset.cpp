// HDF5 image datasets and their deterministic sampling (docs/contracts.md "Images"; docs/invariants.md, invariant 1):
// round trip, malformed files rejected with clear messages, epoch permutations, layout independence, augmentation
// keyed by (seed, step, sample), exact normalisation.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <set>
#include <vector>

#include "data/image_dataset.hpp"
#include "test_util.hpp"

namespace hpct::data {
namespace {

using testing::expect_usage_error;
using testing::ScratchDir;

// n images of C x H x W; pixel value depends on (image, channel, y, x) so crops and flips show; label i % k.
struct Synthetic {
  int64_t n;
  int c, h, w, k;
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
};

Synthetic synthetic(int64_t n, int c, int h, int w, int k) {
  Synthetic s{n, c, h, w, k, std::vector<uint8_t>(static_cast<size_t>(n * c * h * w)), std::vector<int32_t>(n)};
  for (int64_t i = 0; i < n; ++i) {
    s.labels[i] = static_cast<int32_t>(i % k);
    for (int ch = 0; ch < c; ++ch)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          s.images[((i * c + ch) * h + y) * w + x] = static_cast<uint8_t>((i * 7 + ch * 50 + y * 13 + x * 3 + 1) % 256);
  }
  return s;
}

ImageDataset write_and_open(const ScratchDir& dir, const Synthetic& s, const std::string& name = "img.h5") {
  const std::string path = dir.file(name);
  write_image_dataset(path, s.images.data(), s.labels.data(), s.n, s.c, s.h, s.w, s.k, "synthetic", "unit test");
  return ImageDataset::open(path);
}

struct Filled {
  std::vector<float> images;
  std::vector<int32_t> labels;
  bool operator==(const Filled&) const = default;
};

Filled fill(const ImageBatchSampler& s, int64_t step, int64_t first, int count) {
  const int64_t e = s.dataset().image_elems();
  Filled f{std::vector<float>(static_cast<size_t>(count * e)), std::vector<int32_t>(count)};
  s.fill(step, first, count, f.images.data(), f.labels.data());
  return f;
}

// Fills [0, sum(sizes)) of a step in consecutive blocks, each into its place of one buffer.
Filled fill_blocks(const ImageBatchSampler& s, int64_t step, const std::vector<int>& sizes) {
  const int total = std::accumulate(sizes.begin(), sizes.end(), 0);
  const int64_t e = s.dataset().image_elems();
  Filled f{std::vector<float>(static_cast<size_t>(total * e), -99.0f), std::vector<int32_t>(total, -1)};
  int first = 0;
  for (int sz : sizes) {
    s.fill(step, first, sz, f.images.data() + first * e, f.labels.data() + first);
    first += sz;
  }
  return f;
}

TEST(ImageDataset, RoundTrip) {
  ScratchDir dir;
  const Synthetic s = synthetic(13, 3, 5, 4, 4);
  const ImageDataset d = write_and_open(dir, s);
  EXPECT_EQ(d.size(), 13);
  EXPECT_EQ(d.channels(), 3);
  EXPECT_EQ(d.height(), 5);
  EXPECT_EQ(d.width(), 4);
  EXPECT_EQ(d.num_classes(), 4);
  EXPECT_EQ(d.name(), "synthetic");
  EXPECT_EQ(d.source(), "unit test");
  EXPECT_EQ(std::vector<uint8_t>(d.images(), d.images() + s.images.size()), s.images);
  EXPECT_EQ(std::vector<int32_t>(d.labels(), d.labels() + s.n), s.labels);
  EXPECT_FALSE(std::filesystem::exists(dir.file("img.h5.tmp")));
}

TEST(ImageDataset, WriteRejectsBadLabels) {
  ScratchDir dir;
  Synthetic s = synthetic(4, 1, 2, 2, 3);
  s.labels[2] = 3;
  expect_usage_error([&] { write_and_open(dir, s); }, {"img.h5", "label 3", "[0, 3)"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("img.h5")));
}

// Raw HDF5 writer for malformed files: images of type `itype` and shape idims, labels of type ltype.
void write_raw(const std::string& path, hid_t itype, std::vector<hsize_t> idims, hid_t ltype,
               std::vector<hsize_t> ldims, const std::vector<int32_t>& labels, int num_classes, bool with_labels = true,
               bool with_classes = true) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hsize_t total = 1;
  for (auto d : idims) total *= d;
  std::vector<int32_t> pixels(total, 1);
  const hid_t is = H5Screate_simple(static_cast<int>(idims.size()), idims.data(), nullptr);
  const hid_t id = H5Dcreate2(f, "images", itype, is, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, pixels.data());
  H5Dclose(id);
  H5Sclose(is);
  if (with_labels) {
    const hid_t ls = H5Screate_simple(static_cast<int>(ldims.size()), ldims.data(), nullptr);
    const hid_t ld = H5Dcreate2(f, "labels", ltype, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ld, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
    H5Dclose(ld);
    H5Sclose(ls);
  }
  if (with_classes) {
    const hid_t sc = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(f, "num_classes", H5T_STD_I32LE, sc, H5P_DEFAULT, H5P_DEFAULT);
    const int32_t k = num_classes;
    H5Awrite(a, H5T_NATIVE_INT32, &k);
    H5Aclose(a);
    H5Sclose(sc);
  }
  H5Fclose(f);
}

TEST(ImageDataset, MalformedFilesRejected) {
  ScratchDir dir;
  const std::vector<int32_t> ok_labels{0, 1, 2, 1};
  // missing
  expect_usage_error([&] { ImageDataset::open(dir.file("nope.h5")); },
                     {"nope.h5", "not found", "scripts/prepare_data.sh", "prepare_images"});
  // not HDF5
  {
    std::ofstream(dir.file("text.h5")) << "hello, not HDF5\n";
    expect_usage_error([&] { ImageDataset::open(dir.file("text.h5")); }, {"text.h5", "not an HDF5 file"});
  }
  const auto p = dir.file("bad.h5");
  // a good raw file opens (so the failures below are due to the one thing changed)
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I32LE, {4}, ok_labels, 3);
  EXPECT_EQ(ImageDataset::open(p).size(), 4);
  // float images
  write_raw(p, H5T_IEEE_F32LE, {4, 1, 2, 2}, H5T_STD_I32LE, {4}, ok_labels, 3);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "/images must be uint8"});
  // rank 3 images
  write_raw(p, H5T_STD_U8LE, {4, 2, 2}, H5T_STD_I32LE, {4}, ok_labels, 3);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "(4, 2, 2)", "(N, C, H, W)"});
  // int64 labels
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I64LE, {4}, ok_labels, 3);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "/labels must be int32"});
  // label count mismatch
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I32LE, {3}, ok_labels, 3);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "/labels has shape (3)", "expected (4)"});
  // label out of range
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I32LE, {4}, {0, 1, 3, 1}, 3);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "label 3 of image 2", "num_classes = 3"});
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I32LE, {4}, {0, -1, 1, 1}, 3);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "label -1 of image 1"});
  // missing labels, missing num_classes, bad num_classes
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I32LE, {4}, ok_labels, 3, false);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "no /labels dataset"});
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I32LE, {4}, ok_labels, 3, true, false);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "no num_classes attribute"});
  write_raw(p, H5T_STD_U8LE, {4, 1, 2, 2}, H5T_STD_I32LE, {4}, ok_labels, 0);
  expect_usage_error([&] { ImageDataset::open(p); }, {"bad.h5", "num_classes = 0"});
}

TEST(ImageBatchSampler, PermutationIsPermutationAndVaries) {
  ScratchDir dir;
  const ImageDataset d = write_and_open(dir, synthetic(101, 1, 2, 2, 5));
  const ImageBatchSampler a(d, 7, 10), b(d, 8, 10);
  std::set<std::vector<int64_t>> seen;
  for (int64_t e = 0; e < 4; ++e) {
    auto p = a.permutation(e);
    seen.insert(p);
    auto sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(101);
    std::iota(iota.begin(), iota.end(), int64_t{0});
    EXPECT_EQ(sorted, iota) << "epoch " << e;
    EXPECT_NE(p, iota) << "epoch " << e << " is not shuffled";
    EXPECT_EQ(p, ImageBatchSampler(d, 7, 10).permutation(e)) << "not deterministic";
  }
  EXPECT_EQ(seen.size(), 4u) << "epochs share a permutation";
  EXPECT_NE(a.permutation(0), b.permutation(0)) << "seeds share a permutation";
}

TEST(ImageBatchSampler, EpochBoundaries) {
  ScratchDir dir;
  const ImageDataset d = write_and_open(dir, synthetic(23, 1, 2, 2, 5));
  const ImageBatchSampler s(d, 3, 5);  // 4 steps per epoch, 3 samples per epoch dropped
  EXPECT_EQ(s.steps_per_epoch(), 4);
  EXPECT_EQ(s.epoch_of(1), 0);
  EXPECT_EQ(s.epoch_of(4), 0);
  EXPECT_EQ(s.epoch_of(5), 1);
  EXPECT_EQ(s.epoch_of(9), 2);
  for (int64_t e = 0; e < 3; ++e) {
    const auto p = s.permutation(e);
    std::set<int64_t> in_epoch;
    for (int64_t step = e * 4 + 1; step <= e * 4 + 4; ++step)
      for (int64_t g = 0; g < 5; ++g) {
        const int64_t i = s.index(step, g);
        EXPECT_EQ(i, p[static_cast<size_t>(((step - 1) % 4) * 5 + g)]);
        in_epoch.insert(i);
        // the filled label is the dataset's label of that index
        EXPECT_EQ(fill(s, step, g, 1).labels[0], d.labels()[i]);
      }
    EXPECT_EQ(in_epoch.size(), 20u) << "an epoch repeats an image";
  }
  expect_usage_error([&] { ImageBatchSampler(d, 3, 24); }, {"global batch 24", "23 images"});
}

TEST(ImageBatchSampler, LayoutIndependent) {
  ScratchDir dir;
  const ImageDataset d = write_and_open(dir, synthetic(50, 2, 6, 5, 7));
  const ImageNormalization norm{{0.3f, 0.5f}, {0.2f, 0.4f}};
  for (const ImageAugmentation aug : {ImageAugmentation{}, ImageAugmentation{2, true}}) {
    const ImageBatchSampler s(d, 11, 12, norm, aug);
    for (int64_t step : {1, 4, 5, 9}) {
      const Filled all = fill(s, step, 0, 12);
      EXPECT_EQ(fill_blocks(s, step, {6, 6}), all) << "DP 2, step " << step;
      EXPECT_EQ(fill_blocks(s, step, {3, 3, 3, 3}), all) << "DP 2 x 2 micro-batches, step " << step;
      EXPECT_EQ(fill_blocks(s, step, {1, 2, 4, 5}), all) << "uneven blocks, step " << step;
      // a fresh sampler (other cache state) agrees
      const ImageBatchSampler t(d, 11, 12, norm, aug);
      EXPECT_EQ(fill(t, step, 6, 6).labels, std::vector<int32_t>(all.labels.begin() + 6, all.labels.end()));
    }
  }
}

TEST(ImageBatchSampler, NormalisationExact) {
  ScratchDir dir;
  const Synthetic syn = synthetic(8, 2, 3, 4, 3);
  const ImageDataset d = write_and_open(dir, syn);
  const ImageNormalization norm{{0.25f, 0.6f}, {0.5f, 0.3f}};
  const ImageBatchSampler s(d, 5, 8, norm);
  const Filled f = fill(s, 1, 0, 8);
  const int64_t e = d.image_elems();
  for (int r = 0; r < 8; ++r) {
    const int64_t i = s.index(1, r);
    EXPECT_EQ(f.labels[r], syn.labels[i]);
    for (int64_t k = 0; k < e; ++k) {
      const int c = static_cast<int>(k / 12);
      const float want = (static_cast<float>(syn.images[i * e + k]) / 255.0f - norm.mean[c]) / norm.std[c];
      ASSERT_EQ(f.images[r * e + k], want) << "image " << i << " element " << k;
    }
  }
  // the eval path: dataset order, same formula, no augmentation even with an augmenting sampler
  const ImageBatchSampler aug(d, 5, 8, norm, ImageAugmentation{1, true});
  Filled ev{std::vector<float>(3 * e), std::vector<int32_t>(3)};
  aug.fill_eval(4, 3, ev.images.data(), ev.labels.data());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ev.labels[r], syn.labels[4 + r]);
    for (int64_t k = 0; k < e; ++k) {
      const int c = static_cast<int>(k / 12);
      ASSERT_EQ(ev.images[r * e + k],
                (static_cast<float>(syn.images[(4 + r) * e + k]) / 255.0f - norm.mean[c]) / norm.std[c]);
    }
  }
  // one mean/std for all channels
  const ImageBatchSampler one(d, 5, 8, ImageNormalization{{0.1f}, {0.7f}});
  Filled o{std::vector<float>(e), std::vector<int32_t>(1)};
  one.fill_eval(0, 1, o.images.data(), o.labels.data());
  EXPECT_EQ(o.images[e - 1], (static_cast<float>(syn.images[e - 1]) / 255.0f - 0.1f) / 0.7f);
  expect_usage_error(
      [&] {
        ImageBatchSampler(d, 5, 8, ImageNormalization{{0.1f, 0.2f, 0.3f}, {1, 1, 1}});
      },
      {"1 or 2", "means"});
}

TEST(ImageBatchSampler, AugmentationDeterministicAndEffective) {
  ScratchDir dir;
  const Synthetic syn = synthetic(40, 1, 8, 8, 4);
  const ImageDataset d = write_and_open(dir, syn);
  const ImageAugmentation aug{2, true};
  const ImageBatchSampler plain(d, 21, 40), a(d, 21, 40, {}, aug), b(d, 21, 40, {}, aug), other(d, 22, 40, {}, aug);
  // same (seed, step, sample) -> same images; the labels and order are those of the plain sampler
  const Filled fa = fill(a, 1, 0, 40), fb = fill(b, 1, 0, 40), fp = fill(plain, 1, 0, 40);
  EXPECT_EQ(fa, fb);
  EXPECT_EQ(fa.labels, fp.labels);
  EXPECT_NE(fa.images, fp.images) << "augmentation changed nothing";
  // epoch 2 (step 2) sees image i again with other crops: compare per dataset index
  const int64_t e = d.image_elems();
  int changed = 0, flipped_or_shifted = 0;
  const Filled f2 = fill(a, 2, 0, 40);
  for (int r = 0; r < 40; ++r) {
    const int64_t i1 = a.index(1, r);
    int r2 = 0;
    while (a.index(2, r2) != i1) ++r2;
    if (!std::equal(fa.images.begin() + r * e, fa.images.begin() + (r + 1) * e, f2.images.begin() + r2 * e)) ++changed;
    if (!std::equal(fa.images.begin() + r * e, fa.images.begin() + (r + 1) * e, fp.images.begin() + r * e))
      ++flipped_or_shifted;
  }
  EXPECT_GT(changed, 20) << "augmentation does not depend on the step";
  EXPECT_GT(flipped_or_shifted, 20);
  // each augmented image is a shifted and maybe flipped copy of its original: every output pixel is either
  // padding (value 0 -> 0.0f with the default normalisation) or some pixel of the source image
  for (int r = 0; r < 40; ++r) {
    const int64_t i = a.index(1, r);
    std::set<float> src;
    for (int64_t k = 0; k < e; ++k) src.insert(static_cast<float>(syn.images[i * e + k]) / 255.0f);
    src.insert(0.0f);
    for (int64_t k = 0; k < e; ++k) ASSERT_TRUE(src.count(fa.images[r * e + k])) << "sample " << r;
  }
  // another seed: different augmentation (and order)
  EXPECT_NE(fill(other, 1, 0, 40).images, fa.images);
  // flip only: row y of the output is row y of the source, reversed or not
  const ImageBatchSampler flip_only(d, 21, 40, {}, ImageAugmentation{0, true});
  const Filled ff = fill(flip_only, 1, 0, 40);
  int flips = 0;
  for (int r = 0; r < 40; ++r) {
    const int64_t i = flip_only.index(1, r);
    bool same = true, mirrored = true;
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        const float v = ff.images[r * e + y * 8 + x];
        same &= v == static_cast<float>(syn.images[i * e + y * 8 + x]) / 255.0f;
        mirrored &= v == static_cast<float>(syn.images[i * e + y * 8 + (7 - x)]) / 255.0f;
      }
    EXPECT_TRUE(same || mirrored) << "sample " << r;
    flips += mirrored ? 1 : 0;
  }
  EXPECT_GT(flips, 5);
  EXPECT_LT(flips, 35);
}

}  // namespace
}  // namespace hpct::data
