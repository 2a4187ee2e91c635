#pragma once
// safetensors: the tensor file of the Hugging Face / PyTorch ecosystem (model.safetensors), written and read here
// with no dependency beyond the JSON library, so that weights travel between hpctrain and transformers /
// torchvision:
//
//   bytes [0, 8)          N, the header length, uint64 little-endian
//   bytes [8, 8+N)        a JSON object: {"<name>": {"dtype": "F32", "shape": [d0, d1, ...],
//                                                    "data_offsets": [begin, end]}, ...,
//                                         "__metadata__": {"<key>": "<string value>", ...}}   (optional)
//   bytes [8+N, end)      the data buffer: every tensor row-major, little-endian, at [begin, end) of the buffer
//
// The writer lays the tensors out in the order given, back to back (no holes, as the reference implementation
// requires), pads the header with spaces to a multiple of 8 bytes (so every tensor is 8-byte aligned) and writes
// atomically (path.tmp, fsync, rename). The reader memory-maps the file and validates the header against the
// file size (every tensor's byte range inside the buffer and equal to numel x element size) before any access.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.hpp"

namespace hpct::ckpt {

// "F32", "F16", "BF16", "F64", "I64", "I32", "U8" <-> DType; an unknown name is a UsageError naming it.
const char* safetensors_dtype_name(DType t);
DType safetensors_dtype(const std::string& name, const std::string& file);

// One tensor to write: `fill` writes its numel(shape) x dtype_size(dtype) bytes (row-major) into dst, called once,
// in order, so a writer can produce a big model one tensor at a time.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // {} is a scalar (one element)
  std::function<void(void* dst)> fill;
};

// Writes `entries` (names unique, non-empty, not "__metadata__") to `path` atomically. Errors are UsageErrors
// naming the file (cannot create, disk full, duplicate name).
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

// A read-only, memory-mapped safetensors file. Move-only; unmaps on destruction.
class SafetensorsFile {
 public:
  struct Info {
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    int64_t numel = 1;
    const void* data = nullptr;  // inside the mapping
  };

  // Missing file, a header that is not JSON or disagrees with the file size: UsageError naming the file.
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const Info& info(const std::string& name) const;  // UsageError naming the file when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The whole tensor as fp32 (F32 copied; F16, BF16 widened exactly; F64 rounded); out holds numel floats.
  void read_f32(const std::string& name, float* out) const;

 private:
  SafetensorsFile() = default;
  void release() noexcept;

  std::string path_;
  void* map_ = nullptr;
  int64_t map_bytes_ = 0;
  std::map<std::string, Info> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace hpct::ckpt
