#include "core/log.hpp"

#include <cstdio>
#include <mutex>

#include "core/error.hpp"

namespace hpct {

namespace {
bool is_rank0() { return process_identity().rank <= 0; }
FILE*& log_file() {
  static FILE* f = nullptr;
  return f;
}
}  // namespace

void set_log_file(const std::string& path) {
  if (log_file()) std::fclose(log_file());
  log_file() = nullptr;
  if (path.empty() || !is_rank0()) return;
  log_file() = std::fopen(path.c_str(), "a");
  HPCT_CHECK(log_file() != nullptr, "cannot open log file {} for appending", path);
}

// The background checkpoint writer logs from its own thread: one line at a time.
static std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}

void log_line_rank0(const std::string& line) {
  if (!is_rank0()) return;
  const std::lock_guard<std::mutex> lock(log_mutex());
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (log_file()) {
    std::fputs(line.c_str(), log_file());
    std::fputc('\n', log_file());
    std::fflush(log_file());
  }
}

void log_line_any_rank(const std::string& line) {
  std::fprintf(stderr, "[rank %d] %s\n", process_identity().rank < 0 ? 0 : process_identity().rank, line.c_str());
  std::fflush(stderr);
}

void log_warn_rank0(const std::string& line) {
  if (!is_rank0()) return;
  const std::lock_guard<std::mutex> lock(log_mutex());
  std::fprintf(stderr, "warning: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace hpct
