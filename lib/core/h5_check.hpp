#pragma once
// H5_CHECK(expr): HDF5 calls return a negative herr_t / hid_t on failure.
#include <hdf5.h>

#include "core/error.hpp"

#define H5_CHECK(expr)                                                                                         \
  ([&]() {                                                                                                     \
    auto hpct_h5_rc_ = (expr);                                                                                 \
    if (hpct_h5_rc_ < 0) ::hpct::throw_error(__FILE__, __LINE__, fmt::format("HDF5 call `{}` failed", #expr)); \
    return hpct_h5_rc_;                                                                                        \
  }())
