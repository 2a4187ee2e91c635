#pragma once
// What the CUDA backend's two cuDNN users share (the convolutions of cuda_resnet.cu and the fused attention of
// cuda_attention_cudnn.cpp): the status check and the per-device handle. Host code only.
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/error.hpp"
#include "core/format.hpp"

#define CUDNN_CHECK(expr)                                                                                              \
  do {                                                                                                                 \
    cudnnStatus_t hpct_cudnn_rc_ = (expr);                                                                             \
    if (hpct_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                                                        \
      ::hpct::throw_error(__FILE__, __LINE__,                                                                          \
                          fmt::format("`{}` failed: cuDNN status {} ({})", #expr, cudnnGetErrorString(hpct_cudnn_rc_), \
                                      static_cast<int>(hpct_cudnn_rc_)));                                              \
  } while (0)

namespace hpct::kernels::cuda {

// One cudnnHandle_t per (host thread, device), created on first use and set to `stream` at each call. Deliberately
// never destroyed: destroying cuDNN handles from thread_local or static destructors at process exit can run after
// the CUDA runtime has torn down (PyTorch leaks its handles for the same reason).
cudnnHandle_t cudnn_handle(cudaStream_t stream);

}  // namespace hpct::kernels::cuda
