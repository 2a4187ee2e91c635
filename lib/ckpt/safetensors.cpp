#include "ckpt/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"

namespace hpct::ckpt {

// Tensors are written and read in place: the format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors are little-endian: little-endian hosts only");

namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {{DType::F32, "F32"}, {DType::F16, "F16"}, {DType::BF16, "BF16"},
                                     {DType::F64, "F64"}, {DType::I64, "I64"}, {DType::I32, "I32"},
                                     {DType::U8, "U8"}};

// The largest header the reference implementation accepts (100 MB): beyond it a file is not a safetensors file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void write_all(int fd, const void* data, size_t bytes, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      HPCT_USAGE_FAIL("cannot write {}: {}; check free space and permissions", tmp, why);
    }
    p += w;
    bytes -= static_cast<size_t>(w);
  }
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  HPCT_FAIL("dtype {} has no safetensors name", dtype_name(t));
}

DType safetensors_dtype(const std::string& name, const std::string& file) {
  for (const auto& d : kDTypeNames)
    if (name == d.name) return d.dtype;
  HPCT_USAGE_FAIL("{}: tensor dtype \"{}\" is not supported here (F32, F16, BF16, F64, I64, I32, U8)", file, name);
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  // The header: every tensor's byte range, back to back in the given order. nlohmann::ordered_json keeps that
  // order, which makes the file easy to read with a hex dump; readers do not depend on it.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    HPCT_USAGE_CHECK(!e.name.empty() && e.name != "__metadata__", "{}: invalid tensor name \"{}\"", path, e.name);
    HPCT_USAGE_CHECK(seen.insert(e.name).second, "{}: tensor {} is listed twice", path, e.name);
    HPCT_CHECK(e.fill != nullptr, "{}: tensor {} has no fill function", path, e.name);
    for (int64_t d : e.shape) HPCT_CHECK(d >= 0, "{}: tensor {} has a negative dimension", path, e.name);
    const uint64_t bytes = static_cast<uint64_t>(numel_of(e.shape)) * dtype_size(e.dtype);
    header[e.name] = {
        {"dtype", safetensors_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // 8-byte alignment of the data buffer
  const uint64_t header_len = text.size();

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    HPCT_USAGE_FAIL("cannot create {}: {}; check that the directory exists and is writable", tmp, std::strerror(errno));
  write_all(fd, &header_len, sizeof header_len, tmp);
  write_all(fd, text.data(), text.size(), tmp);
  std::vector<unsigned char> buf;
  for (const SafetensorsEntry& e : entries) {
    const size_t bytes = static_cast<size_t>(numel_of(e.shape)) * dtype_size(e.dtype);
    buf.assign(bytes, 0);
    e.fill(buf.data());
    write_all(fd, buf.data(), bytes, tmp);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    HPCT_USAGE_FAIL("cannot finish {}: {}; check free space", tmp, why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    HPCT_USAGE_FAIL("cannot rename {} to {}: {}", tmp, path, why);
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) HPCT_USAGE_FAIL("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
    ::close(fd);
    HPCT_USAGE_FAIL("{} is not a safetensors file: shorter than its 8-byte header length", path);
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  const std::string map_error = map == MAP_FAILED ? std::strerror(errno) : std::string();
  ::close(fd);
  if (map == MAP_FAILED) HPCT_USAGE_FAIL("cannot mmap {}: {}", path, map_error);
  f.map_ = map;  // from here the destructor unmaps if a check throws
  f.map_bytes_ = st.st_size;

  uint64_t header_len = 0;
  std::memcpy(&header_len, map, sizeof header_len);
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  HPCT_USAGE_CHECK(header_len <= kMaxHeaderBytes && 8 + header_len <= file_bytes,
                   "{} is not a safetensors file: its header length {} does not fit the file ({} bytes)", path,
                   header_len, file_bytes);
  const char* text = static_cast<const char*>(map) + 8;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_len);
  } catch (const nlohmann::json::exception& e) {
    HPCT_USAGE_FAIL("{} is not a safetensors file: its header is not JSON ({})", path, e.what());
  }
  HPCT_USAGE_CHECK(header.is_object(), "{} is not a safetensors file: its header is not a JSON object", path);
  const char* data = text + header_len;
  const uint64_t data_bytes = file_bytes - 8 - header_len;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      HPCT_USAGE_CHECK(v.is_object(), "{}: __metadata__ is not an object", path);
      for (const auto& [k, s] : v.items()) f.metadata_[k] = s.is_string() ? s.get<std::string>() : s.dump();
      continue;
    }
    try {
      Info info;
      info.dtype = safetensors_dtype(v.at("dtype").get<std::string>(), path);
      info.shape = v.at("shape").get<std::vector<int64_t>>();
      const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      HPCT_USAGE_CHECK(off.size() == 2, "{}: tensor {} has data_offsets of {} values, not 2", path, name, off.size());
      for (int64_t d : info.shape) HPCT_USAGE_CHECK(d >= 0, "{}: tensor {} has a negative dimension", path, name);
      info.numel = numel_of(info.shape);
      const uint64_t bytes = static_cast<uint64_t>(info.numel) * dtype_size(info.dtype);
      HPCT_USAGE_CHECK(off[0] <= off[1] && off[1] <= data_bytes && off[1] - off[0] == bytes,
                       "{} is truncated or corrupt: tensor {} ({} x {}) claims bytes [{}, {}) of a {}-byte buffer "
                       "(it needs {} bytes)",
                       path, name, info.numel, safetensors_dtype_name(info.dtype), off[0], off[1], data_bytes, bytes);
      info.data = data + off[0];
      f.tensors_[name] = std::move(info);
    } catch (const nlohmann::json::exception& e) {
      HPCT_USAGE_FAIL("{}: the header entry of tensor {} is malformed ({})", path, name, e.what());
    }
  }
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      tensors_(std::move(o.tensors_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() noexcept {
  if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(map_bytes_));
  map_ = nullptr;
  map_bytes_ = 0;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [n, i] : tensors_) out.push_back(n);
  return out;
}

const SafetensorsFile::Info& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  HPCT_USAGE_CHECK(it != tensors_.end(), "{} has no tensor named {}", path_, name);
  return it->second;
}

void SafetensorsFile::read_f32(const std::string& name, float* out) const {
  const Info& i = info(name);
  switch (i.dtype) {
    case DType::F32: std::memcpy(out, i.data, static_cast<size_t>(i.numel) * 4); return;
    case DType::BF16: {
      const auto* p = static_cast<const bf16*>(i.data);
      for (int64_t k = 0; k < i.numel; ++k) out[k] = to_f32(p[k]);
      return;
    }
    case DType::F16: {
      const auto* p = static_cast<const fp16*>(i.data);
      for (int64_t k = 0; k < i.numel; ++k) out[k] = to_f32(p[k]);
      return;
    }
    case DType::F64: {
      const auto* p = static_cast<const double*>(i.data);
      for (int64_t k = 0; k < i.numel; ++k) out[k] = static_cast<float>(p[k]);
      return;
    }
    default:
      HPCT_USAGE_FAIL("{}: tensor {} is {}, not a floating-point tensor", path_, name, safetensors_dtype_name(i.dtype));
  }
}

}  // namespace hpct::ckpt
