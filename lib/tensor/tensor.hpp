#pragma once
// Tensor: a named, shaped, typed view of contiguous memory on one device. Tensors do not own memory:
// a Slab does (docs/invariants.md, invariant 7: parameters, gradients, optimizer state and activations live in
// slabs planned before the first step; nothing allocates in the step loop).
#include <cstdint>
#include <deque>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "tensor/bf16.hpp"
#include "tensor/device.hpp"
#include "tensor/fp16.hpp"

namespace hpct {

// BF16: bf16.hpp (activations under train.precision = bf16; never parameters, gradients or optimizer state).
// F16: fp16.hpp (activations under train.precision = fp16, CUDA only; likewise never parameters, gradients or
// optimizer state).
enum class DType { F32, I32, F64, I64, U8, BF16, F16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "i32", "f64", "i64", "u8", "bf16", "f16"

// A type as a value, for the visitors below: f(type_tag<float>{}) lets a generic lambda name the type.
template <typename T>
struct type_tag {
  using type = T;
};

// Calls f(type_tag<A>{}) with the activation storage type A of `act` (kernels.hpp, "Storage types"): float for F32,
// bf16 for BF16, fp16 for F16; returns what f returns. The one place where a run-time DType becomes the template
// argument of the precision-generic model code (models, stages, the sampler); any other dtype is an error.
template <typename F>
decltype(auto) with_activation_type(DType act, F&& f) {
  switch (act) {
    case DType::F32: return f(type_tag<float>{});
    case DType::BF16: return f(type_tag<bf16>{});
    case DType::F16: return f(type_tag<fp16>{});
    default: break;
  }
  HPCT_FAIL("{} is not an activation storage type (f32, bf16 or f16)", dtype_name(act));
}

// The DType of an activation storage type A (float, bf16 or fp16), for the precision-generic code that passes it on
// as a value (collectives, cuDNN descriptors): with_activation_type's inverse.
template <typename A>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, bf16> || std::is_same_v<A, fp16>,
                "dtype_of: an activation storage type (float, bf16 or fp16)");
  return std::is_same_v<A, bf16> ? DType::BF16 : std::is_same_v<A, fp16> ? DType::F16 : DType::F32;
}

// n elements of a floating-point storage type t (F32, BF16 or F16) at src, widened exactly to float into dst (host
// memory; a host copy of 16-bit logits, for instance). src == dst is allowed for F32.
void widen_to_f32(DType t, const void* src, float* dst, int64_t n);

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  void* data = nullptr;

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string shape_str() const;  // "(3, 4, 16, 64)"

  float* f32() { return typed<float>(DType::F32); }
  const float* f32() const { return const_cast<Tensor*>(this)->typed<float>(DType::F32); }
  int32_t* i32() { return typed<int32_t>(DType::I32); }
  const int32_t* i32() const { return const_cast<Tensor*>(this)->typed<int32_t>(DType::I32); }
  double* f64() { return typed<double>(DType::F64); }
  bf16* b16() { return typed<bf16>(DType::BF16); }
  const bf16* b16() const { return const_cast<Tensor*>(this)->typed<bf16>(DType::BF16); }
  fp16* f16() { return typed<fp16>(DType::F16); }
  const fp16* f16() const { return const_cast<Tensor*>(this)->typed<fp16>(DType::F16); }
  // The storage as A (float, bf16 or fp16), checked against dtype: the precision-generic model code reads activations
  // so.
  template <typename A>
  A* as() {
    if constexpr (std::is_same_v<A, float>) return f32();
    else if constexpr (std::is_same_v<A, bf16>)
      return b16();
    else {
      static_assert(std::is_same_v<A, fp16>, "Tensor::as<A>: A is float, bf16 or fp16");
      return f16();
    }
  }
  template <typename A>
  const A* as() const {
    return const_cast<Tensor*>(this)->as<A>();
  }

 private:
  template <typename T>
  T* typed(DType want) {
    HPCT_CHECK(dtype == want, "tensor {} is {}, read as {}", name, dtype_name(dtype), dtype_name(want));
    HPCT_CHECK(data != nullptr, "tensor {} has no memory yet (Slab::allocate not called)", name);
    return static_cast<T*>(data);
  }
};

// The bytes a slab reserves for a tensor of `bytes` bytes: every tensor starts 64-byte aligned.
constexpr size_t slab_aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

// A slab: plan tensors with add(), then allocate() once; every tensor is 64-byte aligned in one block.
// References returned by add() stay valid for the slab's lifetime. A slab that is never allocated is a plan: bytes()
// and planned_offset() are known without memory (the memory plans of `--plan` build such slabs).
class Slab {
 public:
  Slab(std::string name, Device device) : name_(std::move(name)), device_(device) {}
  ~Slab();
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;

  Tensor& add(std::string name, std::vector<int64_t> shape, DType dtype = DType::F32);
  void allocate();
  bool allocated() const { return base_ != nullptr || bound_; }
  // Instead of allocate(): tensor i lives at data[i], memory the slab does not own (ZeRO-2 places gradients in the
  // gradient sync's buckets, parallel/grad_sync.hpp). base() is then null and the tensors are not one block.
  void bind(const std::vector<void*>& data);
  bool bound() const { return bound_; }

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  size_t bytes() const { return bytes_; }  // planned size, alignment padding included
  void* base() { return base_; }
  std::deque<Tensor>& tensors() { return tensors_; }
  const std::deque<Tensor>& tensors() const { return tensors_; }
  Tensor& get(const std::string& name);
  // Byte offset of tensor i's storage from base(), known from add() on (allocated or not).
  size_t planned_offset(size_t i) const { return offsets_[i]; }
  // Byte offset of a tensor's storage from base() (after allocate()).
  size_t offset_of(const Tensor& t) const {
    return static_cast<size_t>(static_cast<const char*>(t.data) - static_cast<const char*>(base_));
  }

 private:
  std::string name_;
  Device device_;
  std::deque<Tensor> tensors_;
  std::vector<size_t> offsets_;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  bool bound_ = false;
};

}  // namespace hpct
