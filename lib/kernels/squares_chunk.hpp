#pragma once
// One entry of sum_squares_ranges' chunk table (kernels.hpp), laid out alike on the host and the device: C++17 and
// free of CUDA headers, so that the CUDA kernels (cuda/cuda_core_kernels.cuh) and their host emulation include it.
#include <cstdint>

namespace hpct::kernels {

// A run of at most kSquaresChunk floats whose squares one block sums.
struct SquaresChunk {
  const float* x;
  int64_t n;
};
constexpr int64_t kSquaresChunk = int64_t{1} << 16;

}  // namespace hpct::kernels
