#pragma once
// The entries of the chunk tables that let one launch cover many tensors (kernels.hpp: sum_squares_ranges for the
// gradient norm, adamw_update_chunks for the optimizer step), laid out alike on the host and the device: C++17 and
// free of CUDA headers, so that the CUDA kernels (cuda/cuda_core_kernels.cuh) and their host emulation include it.
#include <cstdint>

namespace hpct::kernels {

// Tensors are cut into chunks of at most kTableChunk elements, one block's work each.
constexpr int64_t kTableChunk = int64_t{1} << 16;

// A run of at most kTableChunk floats whose squares one block sums.
struct SquaresChunk {
  const float* x;
  int64_t n;
};

// A run of at most kTableChunk elements of one tensor that AdamW updates: its parameters, gradients and two moments,
// whether weight decay applies (1) or not (0), and where the updated parameters' 16-bit compute copy goes (null: the
// table keeps none; its type is the table's, adamw_update_chunks' copy argument).
struct AdamwChunk {
  float* params;
  const float* grads;
  float* m;
  float* v;
  int64_t n;
  int64_t decays;
  void* copy;
};

}  // namespace hpct::kernels
