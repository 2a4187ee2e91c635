#pragma once
// Typed errors carrying rank, host, file, line and cause (docs/invariants.md, invariant 3).
// Library code throws hpct::Error through the CHECK macros; main() catches, prints one line on the
// failing rank and aborts the job (apps/common). Library-specific checks specialise the one generic
// macro: MPI_CHECK (core/mpi_check.hpp), H5_CHECK (core/h5_check.hpp), CUDA_CHECK / CUBLAS_CHECK
// (core/cuda_check.hpp); each header is only included where its library is present.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hpct {

// The identity of this process, set once by main() after MPI_Init (rank -1 before that).
struct ProcessIdentity {
  int rank = -1;
  int world = 1;
  std::string host;
};
const ProcessIdentity& process_identity();
void set_process_identity(int rank, int world);

class Error : public std::runtime_error {
 public:
  Error(std::string cause, const char* file, int line);
  const std::string& cause() const { return cause_; }
  const char* file() const { return file_; }
  int line() const { return line_; }
  int rank() const { return rank_; }

 private:
  std::string cause_;
  const char* file_;
  int line_;
  int rank_;
};

// A user-facing error (bad deck, bad option, missing file): the message alone says what to do, so
// main() prints it without the source location.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A UsageError that one rank may meet alone (bad data found by the rank that reads it, e.g. a token beyond the
// vocabulary in its micro-batch): main() prints it on every rank that catches it, since rank 0 may never see it.
class RankUsageError : public UsageError {
 public:
  using UsageError::UsageError;
};

// A failure every rank of the job meets at the same point of the program, with the same message (e.g. a checkpoint
// write that failed on one rank: its outcome is agreed by every rank): main() prints it on rank 0 only and every rank
// ends through MPI_Finalize with exit code 1 (no abort: nothing is left waiting).
class CollectiveError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_error(const char* file, int line, std::string cause);
[[noreturn]] void throw_usage_error(const char* file, int line, std::string cause);
[[noreturn]] void throw_rank_usage_error(const char* file, int line, std::string cause);

}  // namespace hpct

// HPCT_CHECK(cond, "format {}", args...): throws hpct::Error naming the condition and the cause.
#define HPCT_CHECK(cond, ...)                                                                                      \
  do {                                                                                                             \
    if (!(cond)) ::hpct::throw_error(__FILE__, __LINE__, "check `" #cond "` failed: " + fmt::format(__VA_ARGS__)); \
  } while (0)

// HPCT_FAIL("format {}", args...): unconditional internal error.
#define HPCT_FAIL(...) ::hpct::throw_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__))

// HPCT_USAGE_CHECK(cond, ...): an error in the user's input; the message must say what to do.
#define HPCT_USAGE_CHECK(cond, ...)                                                       \
  do {                                                                                    \
    if (!(cond)) ::hpct::throw_usage_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
#define HPCT_USAGE_FAIL(...) ::hpct::throw_usage_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__))
// HPCT_RANK_USAGE_FAIL(...): the same, for a finding that may be this rank's alone (RankUsageError).
#define HPCT_RANK_USAGE_FAIL(...) ::hpct::throw_rank_usage_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__))
