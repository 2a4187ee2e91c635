#pragma once
// Learning-rate schedules over 1-based optimizer steps, all with the same linear warm-up
// (s / warmup_steps * lr for s <= warmup_steps), then by `kind`:
//   - Kind::Cosine (the default, GPT decks): cosine decay to final_lr_frac * lr at decay_steps, then flat.
//     decay_steps is absolute (docs/contracts.md), so a run stopped early and resumed follows the same schedule.
//   - Kind::Step (ResNet decks): lr * gamma^k, k = the number of milestones m with m < s, i.e. lr is multiplied by
//     gamma after m optimizer steps: torch.optim.lr_scheduler.MultiStepLR stepped once per optimizer step (the
//     caller converts epoch milestones to steps: epoch * steps_per_epoch). Milestones are absolute steps too;
//     final_lr_frac and decay_steps are unused.
// One struct with a kind rather than two classes: the trainer holds one schedule value, filled from the deck,
// and the aggregate initialisation of the cosine fields ({lr, final_lr_frac, warmup, decay}) keeps working.
#include <cstdint>
#include <vector>

namespace hpct::optim {

struct LrSchedule {
  enum class Kind { Cosine, Step };

  double lr = 6e-4;
  double final_lr_frac = 0.1;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 1;
  Kind kind = Kind::Cosine;
  std::vector<int64_t> milestones = {};  // Kind::Step: absolute optimizer steps, ascending
  double gamma = 0.1;                    // Kind::Step: factor applied at each milestone

  // lr at optimizer step s (1-based). Cosine: warm-up s/warmup * lr for s <= warmup; then
  // min + 0.5 (1 + cos(pi * (s - warmup) / (decay - warmup))) (lr - min) up to s = decay; min after.
  // Step: warm-up as above; then lr * gamma^#{m in milestones : m < s}.
  double at(int64_t step) const;
};

}  // namespace hpct::optim
