#include "train/metrics.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace hpct::train {

std::string json_number(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "null";
  return fmt::format("{:.9g}", *v);
}

MetricsWriter::MetricsWriter(const std::string& path) {
  f_ = std::fopen(path.c_str(), "w");
  HPCT_USAGE_CHECK(f_ != nullptr, "cannot create {} (is the output directory writable?)", path);
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const std::vector<std::pair<std::string, std::optional<double>>>& fields) {
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i)
    line += fmt::format("{}\"{}\": {}", i ? ", " : "", fields[i].first, json_number(fields[i].second));
  line += "}\n";
  std::fputs(line.c_str(), f_);
  std::fflush(f_);
}

}  // namespace hpct::train
