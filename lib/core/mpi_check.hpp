#pragma once
// MPI_CHECK(expr): throws hpct::Error with MPI_Error_string of the failing call.
#include <mpi.h>

#include "core/error.hpp"

namespace hpct::detail {
inline std::string mpi_error_string(int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(msg, static_cast<size_t>(len));
}
}  // namespace hpct::detail

#define MPI_CHECK(expr)                                                                                           \
  do {                                                                                                            \
    int hpct_mpi_rc_ = (expr);                                                                                    \
    if (hpct_mpi_rc_ != MPI_SUCCESS)                                                                              \
      ::hpct::throw_error(__FILE__, __LINE__,                                                                     \
                          fmt::format("`{}` failed: {}", #expr, ::hpct::detail::mpi_error_string(hpct_mpi_rc_))); \
  } while (0)
