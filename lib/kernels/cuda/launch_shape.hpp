#pragma once
// Launch geometry of the CUDA backend's kernels as plain host C++ (no CUDA headers): the grid, the block and the
// dynamic shared memory of a launch, computed by host functions next to each kernel (the *_kernels.cuh headers) and
// used by both the real launch (the .cu files, through HPCT_LAUNCH in cuda_common.cuh) and the host emulation of the
// kernels (tests/cuda_emu), which therefore runs every kernel at exactly the geometry the GPU gets.
//
// launch_problem() checks a launch against a device's limits (the CUDA programming guide's "Technical
// Specifications per Compute Capability", and the H100's opt-in shared memory): the emulation checks every launch
// against kH100Limits, so a launch that a GPU would refuse fails a host test instead of a job.
#include <cstdint>
#include <string>

namespace hpct::kernels::cuda {

struct LaunchDim {
  unsigned x = 1, y = 1, z = 1;
  constexpr int64_t count() const { return int64_t{x} * y * z; }
};

// Shared memory a block may use without the opt-in attribute, on every architecture since sm_70.
inline constexpr int64_t kSharedDefaultBytes = 48 * 1024;

struct LaunchShape {
  LaunchDim grid, block;
  int64_t shared_bytes = 0;    // dynamic shared memory per block
  bool shared_opt_in = false;  // the launch first raises the kernel's dynamic shared memory limit to shared_bytes
                               // (HPCT_LAUNCH: cudaFuncSetAttribute), as a block above kSharedDefaultBytes needs
};

struct DeviceLimits {
  const char* name;
  int64_t max_threads_per_block;
  LaunchDim max_block;           // per dimension
  LaunchDim max_grid;            // per dimension
  int64_t shared_default_bytes;  // per block without the opt-in attribute (static + dynamic): kSharedDefaultBytes
  int64_t shared_optin_bytes;    // per block with cudaFuncAttributeMaxDynamicSharedMemorySize
  int64_t registers_per_block;
  int max_registers_per_thread;
};

// Compute capability 9.0 (H100 / H200): 227 KiB of shared memory per block with the opt-in, 48 KiB without.
inline constexpr DeviceLimits kH100Limits{"sm_90 (H100/H200)", 1024,
                                          {1024, 1024, 64},    {2147483647u, 65535, 65535},
                                          kSharedDefaultBytes, 227 * 1024,
                                          64 * 1024,           255};

// What a device would refuse about this launch, or "" when it is valid. static_shared_bytes and
// registers_per_thread are the kernel's own (from ptxas; 0 when unknown).
inline std::string launch_problem(const LaunchShape& s, const DeviceLimits& d, int64_t static_shared_bytes = 0,
                                  int registers_per_thread = 0) {
  const bool opt_in = s.shared_opt_in;
  auto dims = [](const LaunchDim& v) {
    return std::to_string(v.x) + " x " + std::to_string(v.y) + " x " + std::to_string(v.z);
  };
  if (s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0 || s.block.x == 0 || s.block.y == 0 || s.block.z == 0)
    return "an empty grid or block (" + dims(s.grid) + " blocks of " + dims(s.block) + ")";
  if (s.block.x > d.max_block.x || s.block.y > d.max_block.y || s.block.z > d.max_block.z)
    return "block " + dims(s.block) + " exceeds the per-dimension maximum " + dims(d.max_block);
  if (s.block.count() > d.max_threads_per_block)
    return "block of " + std::to_string(s.block.count()) + " threads exceeds " +
           std::to_string(d.max_threads_per_block);
  if (s.grid.x > d.max_grid.x || s.grid.y > d.max_grid.y || s.grid.z > d.max_grid.z)
    return "grid " + dims(s.grid) + " exceeds the per-dimension maximum " + dims(d.max_grid);
  if (s.shared_bytes < 0) return "negative dynamic shared memory";
  const int64_t shared = s.shared_bytes + static_shared_bytes;
  const int64_t limit = opt_in ? d.shared_optin_bytes : d.shared_default_bytes;
  if (shared > limit)
    return std::to_string(shared) + " bytes of shared memory per block (" + std::to_string(static_shared_bytes) +
           " static + " + std::to_string(s.shared_bytes) + " dynamic) exceed the " + std::to_string(limit) +
           (opt_in ? " of the opt-in limit" : " allowed without the opt-in attribute");
  if (registers_per_thread > d.max_registers_per_thread)
    return std::to_string(registers_per_thread) + " registers per thread exceed " +
           std::to_string(d.max_registers_per_thread);
  if (registers_per_thread > 0 && s.block.count() * registers_per_thread > d.registers_per_block)
    return std::to_string(s.block.count()) + " threads x " + std::to_string(registers_per_thread) +
           " registers exceed the " + std::to_string(d.registers_per_block) + " registers of a block";
  return "";
}

// The launch of `threads` per block covering n elements with a grid-stride loop: at least one block, at most
// max_blocks (the loop strides over the rest).
inline LaunchShape grid_stride_shape(int64_t n, int threads = 256, int64_t max_blocks = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return {{static_cast<unsigned>(b), 1, 1}, {static_cast<unsigned>(threads), 1, 1}, 0};
}

}  // namespace hpct::kernels::cuda
