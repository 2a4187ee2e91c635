#pragma once
// Logging: log_info prints on rank 0 only (stdout); log_rank prints on every rank with a [rank r] prefix
// (stderr); log_warn prints on rank 0 to stderr. All flush, so mpirun interleaves whole lines.
#include <fmt/format.h>

#include <string>

namespace hpct {

// Also append rank 0's lines to this file (the run's log in the output directory); "" closes it.
void set_log_file(const std::string& path);
void log_line_rank0(const std::string& line);
void log_line_any_rank(const std::string& line);
void log_warn_rank0(const std::string& line);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_line_rank0(fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_rank(fmt::format_string<Args...> f, Args&&... args) {
  log_line_any_rank(fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  log_warn_rank0(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace hpct
