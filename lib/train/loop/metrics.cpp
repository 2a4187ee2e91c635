#include "train/loop/metrics.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace hpct::train {

std::string json_number(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "null";
  return fmt::format("{:.9g}", *v);
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_through_step) {
  if (keep_through_step >= 0) {
    std::string kept;
    if (std::ifstream in(path); in) {
      for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        int64_t step = -1;
        try {
          step = nlohmann::json::parse(line).at("step").get<int64_t>();
        } catch (const std::exception&) {
          continue;  // a torn last line of a killed run
        }
        if (step <= keep_through_step) kept += line + "\n";
      }
    }
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      HPCT_USAGE_CHECK(out.good(), "cannot write {} (is the output directory writable?)", tmp);
      out << kept;
    }
    std::filesystem::rename(tmp, path);
    f_ = std::fopen(path.c_str(), "a");
  } else {
    f_ = std::fopen(path.c_str(), "w");
  }
  HPCT_USAGE_CHECK(f_ != nullptr, "cannot create {} (is the output directory writable?)", path);
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

namespace {
std::string json_members(const MetricsWriter::Fields& fields) {
  std::string s;
  for (size_t i = 0; i < fields.size(); ++i)
    s += fmt::format("{}\"{}\": {}", i ? ", " : "", fields[i].first, json_number(fields[i].second));
  return s;
}
}  // namespace

void MetricsWriter::write(const Fields& fields, const Objects& objects) {
  std::string line = "{" + json_members(fields);
  for (const auto& [key, object] : objects) line += fmt::format(", \"{}\": {{{}}}", key, json_members(object));
  line += "}\n";
  std::fputs(line.c_str(), f_);
  std::fflush(f_);
}

double median_after_first(const std::vector<double>& x) {
  if (x.empty()) return NAN;
  std::vector<double> v(x.begin() + (x.size() > 1 ? 1 : 0), x.end());
  std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace hpct::train
