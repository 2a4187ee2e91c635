#pragma once
// The minimal CUDA translation unit of this stage (cuda_probe.cu): device discovery and a self-test that runs
// one hand-written kernel and one cuBLAS call on the device. Plain C++: usable from .cpp files, and only
// compiled and linked when HPCT_HAVE_CUDA (the targets hpct_kernels_cuda / hpct_kernels define it).

namespace hpct::kernels {

// Number of usable CUDA devices; 0 (never an exception) when cudaGetDeviceCount fails, e.g. with
// "CUDA driver version is insufficient for CUDA runtime version" on a machine without a GPU, so callers and
// tests can fall back or skip at run time.
int cuda_device_count();

// Runs on the current device: y = a x + y (a kernel of ours) and C = A B (cublasSgemm, 64 x 48 x 80), copies the
// results back and compares them with the same computations on the host. Throws hpct::Error (CUDA_CHECK /
// CUBLAS_CHECK, or a mismatch naming the element) on any failure. Requires cuda_device_count() > 0.
void cuda_selftest();

}  // namespace hpct::kernels
