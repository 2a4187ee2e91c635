// prepare_images: image data sets -> HDF5 image dataset files (lib/data/image_dataset.hpp, docs/contracts.md).
//
//   prepare_images fashion-mnist --src /usr/share/datasets/fashion-mnist --out-dir DIR [--subset N]
//
// reads the four IDX files of Fashion-MNIST (Debian package dataset-fashion-mnist: train-images-idx3-ubyte,
// train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each gzipped (.gz) or not),
// checks their magic numbers and counts, and writes
//   DIR/fmnist_train.h5       60000 x 1 x 28 x 28
//   DIR/fmnist_test.h5        10000 x 1 x 28 x 28
//   DIR/fmnist_train_10k.h5   the first N training images (only with --subset N; named after N: 10k, 5k, 1234)
//   prepare_images synthetic --out-dir DIR [--name imagenet_synth] [--train 256] [--val 64] [--shape 3x224x224]
//                            [--classes 1000] [--seed 1]
//
// writes DIR/<name>_train.h5 and DIR/<name>_val.h5: an ImageNet-shaped stand-in (not ImageNet) for smoke runs and
// throughput of inputs/resnet50.toml where the real data set is not at hand. Image i of class k = a class pattern
// (a colour per channel and a stripe frequency and phase, all from the class) plus per-pixel noise, so the labels
// are learnable; pixels and labels come from the counter-based RNG (seed, "synthetic.*", index): reproducible.
// scripts/prepare_data.sh calls both. Errors: one line on stderr, exit code 2.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <filesystem>
#include <string>
#include <vector>

#include "app_main.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/image_dataset.hpp"

namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions (N, rows, cols)
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension (N)

// The whole (decompressed) content of an IDX file; gzread reads plain files unchanged.
std::vector<uint8_t> read_maybe_gzipped(const std::string& path) {
  std::error_code ec;
  HPCT_USAGE_CHECK(std::filesystem::is_regular_file(path, ec),
                   "{} not found: install the Debian package dataset-fashion-mnist (scripts/setup.sh) or pass --src",
                   path);
  gzFile f = gzopen(path.c_str(), "rb");
  HPCT_USAGE_CHECK(f != nullptr, "cannot open {}", path);
  std::vector<uint8_t> data;
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    const int got = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (got < 0) {
      int errnum = 0;
      const std::string why = gzerror(f, &errnum);
      gzclose(f);
      HPCT_USAGE_FAIL("cannot read {}: {} (damaged download? reinstall dataset-fashion-mnist)", path, why);
    }
    if (got == 0) break;
    data.insert(data.end(), buf.begin(), buf.begin() + got);
  }
  gzclose(f);
  return data;
}

uint32_t be32(const std::vector<uint8_t>& d, size_t at) {
  return (uint32_t{d[at]} << 24) | (uint32_t{d[at + 1]} << 16) | (uint32_t{d[at + 2]} << 8) | uint32_t{d[at + 3]};
}

struct IdxImages {
  int64_t n = 0;
  int rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // (n, rows, cols)
};

IdxImages read_idx_images(const std::string& path, int64_t expected_n) {
  std::vector<uint8_t> d = read_maybe_gzipped(path);
  HPCT_USAGE_CHECK(d.size() >= 16 && be32(d, 0) == kIdxImagesMagic,
                   "{} is not an IDX image file (magic 0x{:08x} expected: unsigned bytes, 3 dimensions)", path,
                   kIdxImagesMagic);
  IdxImages im;
  im.n = be32(d, 4);
  im.rows = static_cast<int>(be32(d, 8));
  im.cols = static_cast<int>(be32(d, 12));
  HPCT_USAGE_CHECK(im.n == expected_n, "{} holds {} images, Fashion-MNIST has {}", path, im.n, expected_n);
  HPCT_USAGE_CHECK(im.rows == 28 && im.cols == 28, "{} holds {}x{} images, Fashion-MNIST's are 28x28", path, im.rows,
                   im.cols);
  const size_t bytes = static_cast<size_t>(im.n) * im.rows * im.cols;
  HPCT_USAGE_CHECK(d.size() == 16 + bytes, "{} has {} bytes of pixels, its header says {} (truncated?)", path,
                   d.size() - 16, bytes);
  im.pixels.assign(d.begin() + 16, d.end());
  return im;
}

std::vector<int32_t> read_idx_labels(const std::string& path, int64_t expected_n) {
  std::vector<uint8_t> d = read_maybe_gzipped(path);
  HPCT_USAGE_CHECK(d.size() >= 8 && be32(d, 0) == kIdxLabelsMagic,
                   "{} is not an IDX label file (magic 0x{:08x} expected: unsigned bytes, 1 dimension)", path,
                   kIdxLabelsMagic);
  const int64_t n = be32(d, 4);
  HPCT_USAGE_CHECK(n == expected_n, "{} holds {} labels, Fashion-MNIST has {}", path, n, expected_n);
  HPCT_USAGE_CHECK(d.size() == 8 + static_cast<size_t>(n), "{} has {} label bytes, its header says {} (truncated?)",
                   path, d.size() - 8, n);
  std::vector<int32_t> labels(d.begin() + 8, d.end());
  for (int64_t i = 0; i < n; ++i)
    HPCT_USAGE_CHECK(labels[i] >= 0 && labels[i] < 10, "{}: label {} of image {} is not a Fashion-MNIST class (0..9)",
                     path, labels[i], i);
  return labels;
}

// "<src>/<stem>.gz" if present, else "<src>/<stem>" (already decompressed).
std::string idx_path(const std::string& src, const std::string& stem) {
  const std::string gz = src + "/" + stem + ".gz";
  std::error_code ec;
  return std::filesystem::exists(gz, ec) ? gz : src + "/" + stem;
}

// 10000 -> "10k", 2500 -> "2500".
std::string count_tag(int64_t n) { return n % 1000 == 0 ? fmt::format("{}k", n / 1000) : fmt::format("{}", n); }

int prepare_fashion_mnist(const std::string& src, const std::string& out_dir, int64_t subset) {
  constexpr int64_t kTrain = 60000, kTest = 10000;
  constexpr int kClasses = 10;
  HPCT_USAGE_CHECK(subset >= 0 && subset <= kTrain, "--subset {} must be in [1, {}]", subset, kTrain);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  HPCT_USAGE_CHECK(std::filesystem::is_directory(out_dir), "cannot create the output directory {}: {}", out_dir,
                   ec.message());

  struct Split {
    const char* idx;
    const char* name;
    int64_t n;
  };
  for (const Split& s : {Split{"train", "train", kTrain}, Split{"t10k", "test", kTest}}) {
    const std::string ipath = idx_path(src, std::string(s.idx) + "-images-idx3-ubyte");
    const std::string lpath = idx_path(src, std::string(s.idx) + "-labels-idx1-ubyte");
    const IdxImages im = read_idx_images(ipath, s.n);
    const std::vector<int32_t> labels = read_idx_labels(lpath, s.n);
    const std::string source = fmt::format("Fashion-MNIST (Zalando Research), {} + {}", ipath, lpath);
    const std::string out = fmt::format("{}/fmnist_{}.h5", out_dir, s.name);
    hpct::data::write_image_dataset(out, im.pixels.data(), labels.data(), s.n, 1, im.rows, im.cols, kClasses,
                                    fmt::format("fashion-mnist/{}", s.name), source);
    fmt::print("prepare_images: {} -> {} ({} x 1 x {} x {}, {} classes)\n", ipath, out, s.n, im.rows, im.cols,
               kClasses);
    if (subset > 0 && std::string(s.name) == "train") {
      const std::string sub = fmt::format("{}/fmnist_train_{}.h5", out_dir, count_tag(subset));
      hpct::data::write_image_dataset(sub, im.pixels.data(), labels.data(), subset, 1, im.rows, im.cols, kClasses,
                                      fmt::format("fashion-mnist/train[:{}]", subset),
                                      source + fmt::format(", first {} images", subset));
      fmt::print("prepare_images: first {} training images -> {}\n", subset, sub);
    }
  }
  return 0;
}

int prepare_synthetic(const std::string& out_dir, const std::string& name, int64_t n_train, int64_t n_val,
                      const std::string& shape, int classes, uint64_t seed) {
  int c = 0, h = 0, w = 0;
  HPCT_USAGE_CHECK(std::sscanf(shape.c_str(), "%dx%dx%d", &c, &h, &w) == 3 && c >= 1 && h >= 1 && w >= 1,
                   "--shape {}: give CxHxW, e.g. 3x224x224", shape);
  HPCT_USAGE_CHECK(classes >= 2 && n_train >= 1 && n_val >= 1, "--classes must be >= 2 and --train/--val >= 1");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  HPCT_USAGE_CHECK(!ec, "cannot create {}: {}", out_dir, ec.message());
  const int64_t elems = int64_t{c} * h * w;
  const uint64_t s_label = hpct::rng::stream_of("synthetic.label"), s_class = hpct::rng::stream_of("synthetic.class"),
                 s_noise = hpct::rng::stream_of("synthetic.noise");
  for (const auto& [split, n, offset] : {std::tuple{"train", n_train, int64_t{0}}, std::tuple{"val", n_val, n_train}}) {
    std::vector<uint8_t> images(static_cast<size_t>(n * elems));
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = offset + i;  // global image index: train and val never share noise
      const int k = static_cast<int>(hpct::rng::uniform_int(seed, s_label, static_cast<uint64_t>(g), classes));
      labels[static_cast<size_t>(i)] = k;
      const double freq = 1.0 + 7.0 * hpct::rng::uniform(seed, s_class, static_cast<uint64_t>(k) * 16 + 15);
      const double phase = 6.283185307 * hpct::rng::uniform(seed, s_class, static_cast<uint64_t>(k) * 16 + 14);
      for (int ch = 0; ch < c; ++ch) {
        const double base = 64.0 + 128.0 * hpct::rng::uniform(seed, s_class, static_cast<uint64_t>(k) * 16 + (ch % 14));
        uint8_t* dst = images.data() + i * elems + int64_t{ch} * h * w;
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x) {
            const uint64_t idx = static_cast<uint64_t>((g * c + ch) * h + y) * static_cast<uint64_t>(w) + x;
            const double v = base + 40.0 * std::sin(freq * 6.283185307 * (x + y) / w + phase) +
                             24.0 * (hpct::rng::uniform(seed, s_noise, idx) - 0.5);
            dst[int64_t{y} * w + x] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
          }
      }
    }
    const std::string path = (std::filesystem::path(out_dir) / (name + "_" + split + ".h5")).string();
    hpct::data::write_image_dataset(path, images.data(), labels.data(), n, c, h, w, classes, name + "/" + split,
                                    "prepare_images synthetic (not a real data set)");
    fmt::print("prepare_images: synthetic {} {} x {} x {} x {} ({} classes) -> {}\n", split, n, c, h, w, classes, path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hpct::run_mpi_app(argc, argv, "prepare_images", [](int ac, char** av) {
    CLI::App app{"Turn an image data set into HDF5 image dataset files (/images uint8 N x C x H x W, /labels int32)",
                 "prepare_images"};
    app.require_subcommand(1);
    std::string src = "/usr/share/datasets/fashion-mnist", out_dir;
    int64_t subset = 0;
    CLI::App* fm = app.add_subcommand(
        "fashion-mnist",
        "Fashion-MNIST (package dataset-fashion-mnist): writes OUT/fmnist_train.h5 (60000), OUT/fmnist_test.h5 "
        "(10000) and, with --subset N, OUT/fmnist_train_<N>.h5 (the first N training images; 10000 -> 10k)");
    fm->add_option("--src", src, "Directory of the (gzipped) IDX files")->capture_default_str();
    fm->add_option("--out-dir", out_dir, "Directory for the .h5 files (created if missing)")->required();
    fm->add_option("--subset", subset, "Also write the first N training images as a separate file");
    std::string syn_name = "imagenet_synth", syn_shape = "3x224x224";
    int64_t syn_train = 256, syn_val = 64;
    int syn_classes = 1000;
    uint64_t syn_seed = 1;
    CLI::App* sy = app.add_subcommand(
        "synthetic", "An ImageNet-shaped synthetic stand-in (class patterns + noise; not a real data set): writes "
                     "OUT/<name>_train.h5 and OUT/<name>_val.h5");
    sy->add_option("--out-dir", out_dir, "Directory for the .h5 files (created if missing)")->required();
    sy->add_option("--name", syn_name, "File name stem")->capture_default_str();
    sy->add_option("--train", syn_train, "Training images")->capture_default_str();
    sy->add_option("--val", syn_val, "Validation images")->capture_default_str();
    sy->add_option("--shape", syn_shape, "Image shape CxHxW")->capture_default_str();
    sy->add_option("--classes", syn_classes, "Number of classes")->capture_default_str();
    sy->add_option("--seed", syn_seed, "RNG seed")->capture_default_str();
    try {
      app.parse(ac, av);
    } catch (const CLI::Success& e) {  // --help
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      HPCT_USAGE_FAIL("{} (see prepare_images --help)", e.what());
    }
    if (sy->parsed()) return prepare_synthetic(out_dir, syn_name, syn_train, syn_val, syn_shape, syn_classes, syn_seed);
    return prepare_fashion_mnist(src, out_dir, subset);
  });
}
