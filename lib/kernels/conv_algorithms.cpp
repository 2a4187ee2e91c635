#include "kernels/conv_algorithms.hpp"

#include <tuple>

#include "core/error.hpp"

namespace hpct::kernels {

namespace {
auto as_tuple(const ConvAlgoKey& k) {
  return std::make_tuple(k.N, k.C, k.H, k.W, k.OC, k.KH, k.KW, k.stride, k.pad, static_cast<int>(k.storage),
                         static_cast<int>(k.precision), k.channels_last);
}
}  // namespace

bool ConvAlgoKey::operator<(const ConvAlgoKey& o) const { return as_tuple(*this) < as_tuple(o); }
bool ConvAlgoKey::operator==(const ConvAlgoKey& o) const { return as_tuple(*this) == as_tuple(o); }

std::string ConvAlgoKey::describe() const {
  return fmt::format("N={} C={} H={} W={} OC={} {}x{} stride {} pad {}, {} storage, {} math, {}", N, C, H, W, OC, KH,
                     KW, stride, pad, dtype_name(storage), precision_name(precision),
                     channels_last ? "channels-last" : "NCHW");
}

ConvAlgoKey conv_algo_key(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                          int pad, DType storage) {
  HPCT_CHECK(storage == DType::F32 || storage == DType::BF16 || storage == DType::F16,
             "conv_algo_key: storage type {} is not an activation type; pass DType::F32, BF16 or F16",
             dtype_name(storage));
  const Precision math = storage == DType::BF16  ? Precision::BF16
                         : storage == DType::F16 ? Precision::FP16
                                                 : ctx.precision;
  return ConvAlgoKey{N, C, H, W, OC, KH, KW, stride, pad, storage, math, ctx.channels_last};
}

const char* conv_phase_name(ConvPhase phase) {
  switch (phase) {
    case ConvPhase::Forward: return "forward";
    case ConvPhase::BackwardData: return "backward_data";
    case ConvPhase::BackwardFilter: return "backward_filter";
  }
  return "?";
}

int choose_algorithm(const std::vector<AlgoTime>& heuristic_order, double margin) {
  HPCT_CHECK(margin >= 0.0 && margin < 1.0, "choose_algorithm: margin {} is outside [0, 1)", margin);
  const AlgoTime* heuristic = nullptr;
  const AlgoTime* fastest = nullptr;
  for (const AlgoTime& a : heuristic_order) {
    if (a.ms < 0.0) continue;
    if (!heuristic) heuristic = &a;
    if (!fastest || a.ms < fastest->ms) fastest = &a;
  }
  if (!heuristic) return -1;
  return fastest->ms < (1.0 - margin) * heuristic->ms ? fastest->algo : heuristic->algo;
}

void ConvAlgorithms::add(const ConvTiming& timing, double margin) {
  Choice choice{};
  for (int p = 0; p < kConvPhases; p++)
    choice[static_cast<size_t>(p)] = choose_algorithm(timing.phases[static_cast<size_t>(p)], margin);
  set(timing.key, choice, &timing);
}

void ConvAlgorithms::set(const ConvAlgoKey& key, const Choice& choice, const ConvTiming* timing) {
  Entry e;
  e.choice = choice;
  e.timing.key = key;
  if (timing) e.timing.phases = timing->phases;
  entries_[key] = std::move(e);
}

int ConvAlgorithms::find(const ConvAlgoKey& key, ConvPhase phase) const {
  const auto it = entries_.find(key);
  return it == entries_.end() ? -1 : it->second.choice[static_cast<size_t>(phase)];
}

std::string ConvAlgorithms::summary() const {
  std::string out;
  for (int p = 0; p < kConvPhases; p++) {
    int changed = 0, timed = 0;
    double chosen_ms = 0.0, heuristic_ms = 0.0;
    for (const auto& [key, e] : entries_) {
      const std::vector<AlgoTime>& list = e.timing.phases[static_cast<size_t>(p)];
      const AlgoTime* first = nullptr;
      const AlgoTime* chosen = nullptr;
      for (const AlgoTime& a : list) {
        if (a.ms < 0.0) continue;
        if (!first) first = &a;
        if (a.algo == e.choice[static_cast<size_t>(p)]) chosen = &a;
      }
      if (!first || !chosen) continue;
      timed++;
      changed += chosen != first;
      chosen_ms += chosen->ms;
      heuristic_ms += first->ms;
    }
    out += fmt::format("{}{} {:.3f} ms against {:.3f} ms for cuDNN's first choices ({} of {} replaced)", p ? "; " : "",
                       conv_phase_name(static_cast<ConvPhase>(p)), chosen_ms, heuristic_ms, changed, timed);
  }
  return out;
}

}  // namespace hpct::kernels
