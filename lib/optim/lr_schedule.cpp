#include "optim/lr_schedule.hpp"

#include <cmath>

namespace hpct::optim {

double LrSchedule::at(int64_t s) const {
  if (s <= warmup_steps) return lr * static_cast<double>(s) / static_cast<double>(warmup_steps);
  if (kind == Kind::Step) {
    double f = 1.0;  // repeated multiplication, as MultiStepLR applies gamma once per milestone passed
    for (int64_t m : milestones)
      if (m < s) f *= gamma;
    return lr * f;
  }
  const double min_lr = lr * final_lr_frac;
  if (s >= decay_steps) return min_lr;
  const double ratio = static_cast<double>(s - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

}  // namespace hpct::optim
