#pragma once
// What the CPU backend's NCHW layers (cpu_conv.cpp) and their channels-last twins (cpu_conv_nhwc.cpp) share: the
// parallel threshold and BatchNorm's per-channel formulas, written once so that both layouts
// compute every statistic and factor alike.
#include <cmath>
#include <cstdint>

namespace hpct::kernels::cpu {

inline constexpr int64_t kMinParallel = 1 << 14;  // below this many elements a loop stays serial

// The float stats row (count, mean, M2) of a channel from its double sums over N*HW values.
inline void store_stats(float* st /*(3)*/, double mean, double m2, int N, int HW) {
  st[0] = static_cast<float>(static_cast<double>(N) * HW);
  st[1] = static_cast<float>(mean);
  st[2] = static_cast<float>(m2);
}

// 1 / sqrt(var + eps) of a training stats row (biased variance M2 / count), and of a running variance (evaluation).
inline float bn_rstd(const float* st /*(3)*/, float eps) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(st[2]) / st[0] + eps));
}
inline float bn_eval_rstd(float running_var, float eps) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var) + eps));
}

}  // namespace hpct::kernels::cpu
