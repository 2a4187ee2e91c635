#pragma once
// Learning-rate schedule: linear warm-up, then cosine decay to final_lr_frac * lr at decay_steps, then flat.
// Steps are 1-based optimizer steps. decay_steps is absolute (DESIGN.md §4), so a run stopped early and
// resumed follows the same schedule.
#include <cstdint>

namespace hpct::optim {

struct LrSchedule {
  double lr = 6e-4;
  double final_lr_frac = 0.1;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 1;

  // lr at optimizer step s (1-based): warm-up s/warmup * lr for s <= warmup; then
  // min + 0.5 (1 + cos(pi * (s - warmup) / (decay - warmup))) (lr - min) up to s = decay; min after.
  double at(int64_t step) const;
};

}  // namespace hpct::optim
