#include "core/log.hpp"

#include <cstdio>

#include "core/error.hpp"

namespace hpct {

namespace {
bool is_rank0() { return process_identity().rank <= 0; }
}  // namespace

void log_line_rank0(const std::string& line) {
  if (!is_rank0()) return;
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void log_line_any_rank(const std::string& line) {
  std::fprintf(stderr, "[rank %d] %s\n", process_identity().rank < 0 ? 0 : process_identity().rank, line.c_str());
  std::fflush(stderr);
}

void log_warn_rank0(const std::string& line) {
  if (!is_rank0()) return;
  std::fprintf(stderr, "warning: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace hpct
