#pragma once
// NCCL_CHECK(expr): throws hpct::Error with ncclGetErrorString and NCCL's last error text (the same generic check
// as CUDA_CHECK in core/cuda_check.hpp). Only for translation units built with NCCL (HPCT_HAVE_NCCL).
#include <nccl.h>

#include "core/error.hpp"

#define NCCL_CHECK(expr)                                                                                \
  do {                                                                                                  \
    ncclResult_t hpct_nccl_rc_ = (expr);                                                                \
    if (hpct_nccl_rc_ != ncclSuccess)                                                                   \
      ::hpct::throw_error(__FILE__, __LINE__,                                                           \
                          fmt::format("`{}` failed: {} ({})", #expr, ncclGetErrorString(hpct_nccl_rc_), \
                                      ncclGetLastError(nullptr)));                                      \
  } while (0)
