#pragma once
// AdamW over a model's parameter slab (torch.optim.AdamW semantics: decoupled weight decay, bias
// correction), with global-norm gradient clipping as torch.nn.utils.clip_grad_norm_
// (scale = clip / (norm + 1e-6) when that is < 1). State (exp_avg, exp_avg_sq) lives in planned slabs
// with the parameters' names and shapes, so checkpoints store them as named tensors.
#include <cstdint>
#include <vector>

#include "kernels/exec_context.hpp"
#include "tensor/tensor.hpp"

namespace hpct::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_clip = 1.0f;  // 0: no clipping
};

class AdamW {
 public:
  // decay[i] says whether weight decay applies to params.tensors()[i].
  AdamW(Slab& params, Slab& grads, std::vector<bool> decay, const AdamWConfig& cfg);

  // Global L2 norm of all gradients (accumulated in double on the device, one explicit copy to the host).
  double grad_norm(const ExecContext& ctx);
  // Clipping factor for a given norm (1 when clipping is off or not needed).
  float clip_scale(double norm) const;
  // One update with learning rate lr; gradients are multiplied by grad_scale first. Increments step().
  void step(const ExecContext& ctx, float lr, float grad_scale);

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  Slab& exp_avg() { return m_; }
  Slab& exp_avg_sq() { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  Slab& params_;
  Slab& grads_;
  std::vector<bool> decay_;
  AdamWConfig cfg_;
  Slab m_, v_, norm_;  // norm_: one double on the device
  int64_t t_ = 0;
};

}  // namespace hpct::optim
