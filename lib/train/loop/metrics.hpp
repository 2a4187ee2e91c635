#pragma once
// metrics.jsonl (docs/contracts.md): one JSON object per optimizer step, floats printed with %.9g.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hpct::train {

class MetricsWriter {
 public:
  // keep_through_step < 0: a fresh run, truncates. Otherwise (a resumed run) the records with a step
  // greater than keep_through_step are dropped first and the file is appended (docs/contracts.md).
  explicit MetricsWriter(const std::string& path, int64_t keep_through_step = -1);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  using Fields = std::vector<std::pair<std::string, std::optional<double>>>;
  // fields in order; a nullopt value is written as null; then each of `objects` as a nested object of its fields
  // (comm_bytes, the memory record), in order.
  using Objects = std::vector<std::pair<std::string, Fields>>;
  void write(const Fields& fields, const Objects& objects = {});

 private:
  FILE* f_ = nullptr;
};

// "%.9g" of v, or "null" (also for NaN / inf, which JSON cannot hold)
std::string json_number(std::optional<double> v);

// Median of x without its first element (the warm-up step); NaN when empty.
double median_after_first(const std::vector<double>& x);

}  // namespace hpct::train
