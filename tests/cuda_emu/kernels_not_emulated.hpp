#pragma once
// The __global__ kernels of lib/kernels/cuda/ that no emulated test launches, each with the reason. Read by
// check_kernel_coverage.py (ctest emu_kernel_coverage), which fails when a kernel is neither launched through
// EMU_LAUNCH in a tests/cuda_emu/test_emu_*.cpp nor listed here. A kernel that cannot be emulated (e.g. one built on
// an intrinsic the emulator does not model; mma.sync m16n8k16 and ldmatrix it does, cuda_emu.hpp) goes here with its
// reason, and a host twin of the same tiling covers its math.
namespace hpct::kernels::test {

struct NotEmulated {
  const char* kernel;
  const char* reason;
};

inline constexpr NotEmulated kKernelsNotEmulated[] = {
    {"saxpy_kernel",
     "the device probe (cuda_probe.cu): launched once at start-up to prove that the driver, the context and a "
     "kernel launch work on the GPU at hand; its arithmetic (y = a x + y) is not what it tests"},
};

}  // namespace hpct::kernels::test
