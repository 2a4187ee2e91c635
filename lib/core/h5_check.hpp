#pragma once
// H5_CHECK(expr): HDF5 calls return a negative herr_t / hid_t on failure. The error thrown (hpct::H5Error) carries
// HDF5's own reason, the innermost entry of its error stack ("truncated file: eof = ...", "bad object header version
// number"), so that a caller can turn a failure into one line that says what looks wrong, without HDF5's stack dump.
//
// HDF5 prints its whole error stack on stderr at every failed call unless told otherwise; the apps and tools turn that
// off at start (configure_error_printing, from run_mpi_app in apps/app_main.hpp, the main() frame of every app and
// tool), because every failure is reported by our own one-line message. HPCT_HDF5_DEBUG=1 in the environment keeps HDF5's printing, for debugging.
#include <hdf5.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace hpct {

// An HDF5 call failed: cause() says which call and why, hdf5_cause() is HDF5's innermost reason alone ("" if none).
class H5Error : public Error {
 public:
  H5Error(std::string cause, std::string hdf5_cause, const char* file, int line)
      : Error(std::move(cause), file, line), hdf5_cause_(std::move(hdf5_cause)) {}
  const std::string& hdf5_cause() const { return hdf5_cause_; }

 private:
  std::string hdf5_cause_;
};

namespace h5 {

// The innermost entry of the calling thread's HDF5 error stack (where HDF5 first detected the problem): its
// description, else its minor message; "" when the stack is empty. Read it before any other HDF5 call (an API call
// clears the stack, the closes of an unwinding handle included).
inline std::string error_stack_cause() {
  std::string out;
  auto walk = [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
    if (n != 0) return 0;  // upward walk: entry 0 is the innermost
    auto* s = static_cast<std::string*>(data);
    if (e->desc != nullptr && e->desc[0] != '\0') {
      *s = e->desc;
    } else {
      char msg[256] = {0};
      if (H5Eget_msg(e->min_num, nullptr, msg, sizeof msg) > 0) *s = msg;
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &out);
  return out;
}

// HPCT_HDF5_DEBUG is set (and not "0"): HDF5 prints its error stacks, nothing of ours silences it.
inline bool debug_printing() {
  const char* debug = std::getenv("HPCT_HDF5_DEBUG");
  return debug != nullptr && debug[0] != '\0' && std::strcmp(debug, "0") != 0;
}

// Turns HDF5's automatic error-stack printing off for the process, unless debug_printing().
inline void configure_error_printing() {
  if (!debug_printing()) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

[[noreturn]] inline void throw_call_failed(const char* call, const char* file, int line) {
  std::string why = error_stack_cause();
  std::string cause = fmt::format("HDF5 call `{}` failed{}{}", call, why.empty() ? "" : ": ", why);
  throw H5Error(std::move(cause), std::move(why), file, line);
}

}  // namespace h5
}  // namespace hpct

#define H5_CHECK(expr)                                                             \
  ([&]() {                                                                         \
    auto hpct_h5_rc_ = (expr);                                                     \
    if (hpct_h5_rc_ < 0) ::hpct::h5::throw_call_failed(#expr, __FILE__, __LINE__); \
    return hpct_h5_rc_;                                                            \
  }())
