// safetensors: round trip of several dtypes and shapes (a scalar, an empty tensor), the byte layout the format
// prescribes (header length, 8-byte aligned buffer, back-to-back offsets), bf16 / f16 widening, and the errors
// for a missing file, a header that does not fit the file and a truncated buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.hpp"
#include "core/error.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"

namespace hpct::ckpt {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("hpct_safetensors_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Safetensors, RoundTripAndLayout) {
  const fs::path path = temp_dir() / "model.safetensors";
  std::mt19937 gen(7);
  std::normal_distribution<float> nd;
  std::vector<float> w(3 * 5);
  for (float& x : w) x = nd(gen);
  std::vector<bf16> wb(4);
  std::vector<fp16> wh(4);
  for (int i = 0; i < 4; ++i) wb[i] = to_bf16(nd(gen)), wh[i] = to_fp16(nd(gen));
  const int64_t count = 123456789012;
  std::vector<SafetensorsEntry> entries = {
      {"a.weight", DType::F32, {3, 5}, [&](void* d) { std::memcpy(d, w.data(), w.size() * 4); }},
      {"b", DType::BF16, {2, 2}, [&](void* d) { std::memcpy(d, wb.data(), 8); }},
      {"c", DType::F16, {4}, [&](void* d) { std::memcpy(d, wh.data(), 8); }},
      {"num_batches_tracked", DType::I64, {}, [&](void* d) { std::memcpy(d, &count, 8); }},
      {"empty", DType::F32, {0, 7}, [](void*) {}},
  };
  write_safetensors(path.string(), entries, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

  // The bytes as the format prescribes them.
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["a.weight"]["data_offsets"], nlohmann::json({0, 60}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({60, 68}));
  EXPECT_EQ(header["num_batches_tracked"]["shape"], nlohmann::json::array());
  EXPECT_EQ(header["num_batches_tracked"]["dtype"], "I64");
  EXPECT_EQ(bytes.size(), 8 + n + 60 + 8 + 8 + 8);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, w.data(), 60), 0);

  const SafetensorsFile f = SafetensorsFile::open(path.string());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.weight", "b", "c", "empty", "num_batches_tracked"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.info("a.weight").shape, (std::vector<int64_t>{3, 5}));
  std::vector<float> back(15);
  f.read_f32("a.weight", back.data());
  EXPECT_EQ(back, w);
  std::vector<float> b4(4);
  f.read_f32("b", b4.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b4[i], to_f32(wb[i]));
  f.read_f32("c", b4.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b4[i], to_f32(wh[i]));
  EXPECT_EQ(f.info("num_batches_tracked").numel, 1);
  EXPECT_EQ(*static_cast<const int64_t*>(f.info("num_batches_tracked").data), count);
  EXPECT_EQ(f.info("empty").numel, 0);
  EXPECT_THROW(f.read_f32("num_batches_tracked", b4.data()), UsageError);
  try {
    (void)f.info("missing");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor named missing"), std::string::npos);
  }
  fs::remove_all(path.parent_path());
}

TEST(Safetensors, BadFilesAreClearErrors) {
  const fs::path dir = temp_dir();
  auto expect_error = [](const std::string& path, const std::string& part) {
    try {
      (void)SafetensorsFile::open(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error((dir / "none.safetensors").string(), "cannot open");

  const fs::path good = dir / "good.safetensors";
  std::vector<float> w(10, 1.5f);
  write_safetensors(good.string(), {{"w", DType::F32, {10}, [&](void* d) { std::memcpy(d, w.data(), 40); }}});
  const std::string bytes = read_bytes(good);

  const fs::path cut = dir / "cut.safetensors";  // the last tensor's bytes cut short
  std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 4));
  expect_error(cut.string(), "truncated or corrupt: tensor w");

  const fs::path huge = dir / "huge.safetensors";  // a header length beyond the file
  std::string h = bytes;
  const uint64_t bogus = 1 << 20;
  std::memcpy(h.data(), &bogus, 8);
  std::ofstream(huge, std::ios::binary).write(h.data(), static_cast<std::streamsize>(h.size()));
  expect_error(huge.string(), "is not a safetensors file: its header length");

  const fs::path nojson = dir / "nojson.safetensors";
  std::string j = bytes;
  j[8] = '#';
  std::ofstream(nojson, std::ios::binary).write(j.data(), static_cast<std::streamsize>(j.size()));
  expect_error(nojson.string(), "its header is not JSON");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hpct::ckpt
