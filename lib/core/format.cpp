#include "core/format.hpp"

#include <fmt/format.h>

namespace hpct {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

}  // namespace hpct
