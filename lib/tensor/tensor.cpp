#include "tensor/tensor.hpp"

#include <algorithm>
#include <type_traits>

namespace hpct {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  return 0;
}
const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::F64: return "f64";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

void widen_to_f32(DType t, const void* src, float* dst, int64_t n) {
  with_activation_type(t, [&](auto type) {
    using A = typename decltype(type)::type;
    const auto* x = static_cast<const A*>(src);
    if constexpr (std::is_same_v<A, float>) {
      if (x != dst) std::copy(x, x + n, dst);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(x[i]);
    }
  });
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

Slab::~Slab() { device_free(device_, base_); }

Tensor& Slab::add(std::string name, std::vector<int64_t> shape, DType dtype) {
  HPCT_CHECK(!allocated(), "slab {}: tensor {} added after allocate()", name_, name);
  for (int64_t d : shape) HPCT_CHECK(d >= 0, "slab {}: tensor {} has a negative dimension", name_, name);
  Tensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.device = device_;
  offsets_.push_back(bytes_);
  bytes_ += slab_aligned(t.bytes());
  tensors_.push_back(std::move(t));
  return tensors_.back();
}

void Slab::allocate() {
  HPCT_CHECK(!allocated(), "slab {} allocated twice (or bound)", name_);
  base_ = device_alloc(device_, bytes_);
  for (size_t i = 0; i < tensors_.size(); ++i) tensors_[i].data = static_cast<char*>(base_) + offsets_[i];
}

void Slab::bind(const std::vector<void*>& data) {
  HPCT_CHECK(!allocated(), "slab {} bound after allocate() or bind()", name_);
  HPCT_CHECK(data.size() == tensors_.size(), "slab {}: {} pointers for {} tensors", name_, data.size(),
             tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) tensors_[i].data = data[i];
  bound_ = true;
}

Tensor& Slab::get(const std::string& name) {
  for (auto& t : tensors_)
    if (t.name == name) return t;
  HPCT_FAIL("slab {} has no tensor {}", name_, name);
}

}  // namespace hpct
