#pragma once
// The full-grid column reductions of the CUDA backend (LayerNorm's dweight and dbias in cuda_core_kernels.cuh, the
// Linear bias gradient in cuda_gpt_kernels.cuh): how the rows are cut into groups, and the second stage that adds
// the groups' partials. Device code compiled by nvcc through the .cu files that launch it (cuda_core.cu, cuda_gpt.cu)
// and, as plain C++, by the host emulation (tests/cuda_emu), like every *_kernels.cuh.
#include <cstdint>

#include "kernels/cuda/cuda_device_common.cuh"

namespace hpct::kernels::cuda {
namespace {  // internal linkage: each includer (the .cu, the emulated test) compiles its own copy

// ---- full-grid column reductions --------------------------------------------------------------------------------
// A column sum over many rows (LayerNorm's dweight and dbias, the Linear bias gradient) runs in two stages, so that
// the whole GPU works on it and no atomics decide the order: the rows are cut into groups (partial_row_groups), a
// kernel of the op writes each group's double partial of every column into the device's partials buffer
// (reduce_partials(), cuda_common.cuh; kernels.hpp kCudaReducePartialsBytes), and column_partials_kernel
// (below) adds each column's partials in group order onto the float result. Every order depends on the shapes and the buffer's size.
constexpr int kPartialMaxGroups = 512;  // row groups at most: enough blocks for any GPU, few partials to finish
constexpr int kPartialThreads = 128;    // column_partials_kernel: threads per block at most (one block per column)

struct RowGroups {
  int64_t groups = 1;          // row groups: rows of the partials matrix
  int64_t rows_per_group = 0;  // every group but the last has this many rows
};
// N rows cut into groups of at least min_rows rows, at most kPartialMaxGroups of them and no more than
// capacity_bytes of partials hold at `width` doubles per group (the caller checks that one group fits).
inline RowGroups partial_row_groups(int64_t N, int64_t width, int64_t min_rows, int64_t capacity_bytes) {
  int64_t max_groups = capacity_bytes / (width * static_cast<int64_t>(sizeof(double)));
  if (max_groups > kPartialMaxGroups) max_groups = kPartialMaxGroups;
  if (max_groups < 1) max_groups = 1;
  int64_t rows = (N + max_groups - 1) / max_groups;
  if (rows < min_rows) rows = min_rows;
  if (rows < 1) rows = 1;
  return {N == 0 ? 0 : (N + rows - 1) / rows, rows};
}

// out0[c] += sum_g partials[c, g] for the columns c < split, out1[c - split] += ... for the others (skipped when out1
// is null), in double. The partials are column-major (column c's groups contiguous from partials + c groups: the
// first stage writes them so, each block its group of every column), so that one block per column reads its groups
// coalesced: thread t sums the groups t, t + kPartialThreads, ... in order, then a fixed tree over the block
// (block_sum). Wide for any width: one block per column.
__global__ void column_partials_kernel(float* __restrict__ out0, float* __restrict__ out1,
                                       const double* __restrict__ partials, int64_t groups, int cols, int split) {
  HPCT_SHARED(double, shared, [32]);
  const int c = blockIdx.x;
  const double* p = partials + static_cast<int64_t>(c) * groups;
  double acc = 0.0;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) acc += p[g];
  const double total = block_sum(acc, shared);
  if (threadIdx.x != 0 || c >= cols) return;
  if (c < split) out0[c] += static_cast<float>(total);
  else if (out1)
    out1[c - split] += static_cast<float>(total);
}

// One block per column, of a thread per group up to kPartialThreads (whole warps: block_sum needs them).
inline LaunchShape column_partials_shape(int cols, int64_t groups) {
  int64_t threads = (groups + 31) / 32 * 32;
  threads = threads < 32 ? 32 : (threads > kPartialThreads ? kPartialThreads : threads);
  return {{static_cast<unsigned>(cols), 1, 1}, {static_cast<unsigned>(threads), 1, 1}, 0};
}

}  // namespace
}  // namespace hpct::kernels::cuda
