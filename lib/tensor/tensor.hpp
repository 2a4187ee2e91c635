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

namespace hpct {

// BF16: bf16.hpp (activations under train.precision = bf16; never parameters, gradients or optimizer state).
enum class DType { F32, I32, F64, I64, U8, BF16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

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
  // The storage as A (float or bf16), checked against dtype: the precision-generic model code reads activations so.
  template <typename A>
  A* as() {
    if constexpr (std::is_same_v<A, float>) return f32();
    else
      return b16();
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

// A slab: plan tensors with add(), then allocate() once; every tensor is 64-byte aligned in one block.
// References returned by add() stay valid for the slab's lifetime.
class Slab {
 public:
  Slab(std::string name, Device device) : name_(std::move(name)), device_(device) {}
  ~Slab();
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;

  Tensor& add(std::string name, std::vector<int64_t> shape, DType dtype = DType::F32);
  void allocate();
  bool allocated() const { return base_ != nullptr; }

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  size_t bytes() const { return bytes_; }  // planned size, alignment padding included
  void* base() { return base_; }
  std::deque<Tensor>& tensors() { return tensors_; }
  const std::deque<Tensor>& tensors() const { return tensors_; }
  Tensor& get(const std::string& name);
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
};

}  // namespace hpct
