#include "optim/lr_schedule.hpp"

#include <cmath>

namespace hpct::optim {

double LrSchedule::at(int64_t s) const {
  const double min_lr = lr * final_lr_frac;
  if (s <= warmup_steps) return lr * static_cast<double>(s) / static_cast<double>(warmup_steps);
  if (s >= decay_steps) return min_lr;
  const double ratio = static_cast<double>(s - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

}  // namespace hpct::optim
