#pragma once
// CUDA_CHECK(expr), CUBLAS_CHECK(expr), CUDA_CHECK_LAUNCH(): only for translation units that see CUDA.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.hpp"

#define CUDA_CHECK(expr)                                                                                \
  do {                                                                                                  \
    cudaError_t hpct_cuda_rc_ = (expr);                                                                 \
    if (hpct_cuda_rc_ != cudaSuccess)                                                                   \
      ::hpct::throw_error(__FILE__, __LINE__,                                                           \
                          fmt::format("`{}` failed: {} ({})", #expr, cudaGetErrorString(hpct_cuda_rc_), \
                                      cudaGetErrorName(hpct_cuda_rc_)));                                \
  } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(expr)                                                                                         \
  do {                                                                                                             \
    cublasStatus_t hpct_cublas_rc_ = (expr);                                                                       \
    if (hpct_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                                  \
      ::hpct::throw_error(__FILE__, __LINE__,                                                                      \
                          fmt::format("`{}` failed: cuBLAS status {}", #expr, static_cast<int>(hpct_cublas_rc_))); \
  } while (0)
