#pragma once
// SGD with momentum over a model's parameter slab (torch.optim.SGD semantics: L2 weight decay added to the
// gradient, momentum buffer = the first gradient, optional dampening and Nesterov), with global-norm gradient
// clipping as torch.nn.utils.clip_grad_norm_ (scale = clip / (norm + 1e-6) when that is < 1). The update is
// kernels/ops.inc's sgd_update.
//
// The same segment design as AdamW (optim/adamw.hpp, optim/segment.hpp), so that the trainer's ZeRO-1 and
// checkpoint code drive either optimizer alike: unsharded, the segments are the whole tensors and the gradients
// the model's gradient slab; under ZeRO-1 they are this rank's share and its reduce-scattered gradients. The state
// (one momentum buffer) is held only for the segments, back to back, so it is 1/DP of the unsharded figure; the
// checkpoint stores it per named tensor as /optim/momentum/<name> (docs/contracts.md). With momentum = 0 there is no
// state at all (torch keeps no buffer): has_momentum() is false and state_numel() is 0.
#include <cstdint>
#include <vector>

#include "kernels/exec_context.hpp"
#include "optim/optimizer.hpp"
#include "optim/segment.hpp"
#include "tensor/tensor.hpp"

namespace hpct::optim {

struct SgdConfig {
  float momentum = 0.9f;
  float dampening = 0.0f;     // torch's default; must be 0 with nesterov
  bool nesterov = false;      // needs momentum > 0
  float weight_decay = 0.0f;  // L2, added to the gradient of the tensors whose decay flag is set
  float grad_clip = 0.0f;     // 0: no clipping
};

class Sgd final : public Optimizer {
 public:
  // Unsharded: every tensor whole, gradients in `grads` (same layout as params).
  // decay[i] says whether weight decay applies to params.tensors()[i] (the caller's choice: e.g. none on
  // BatchNorm parameters and biases).
  Sgd(Slab& params, Slab& grads, std::vector<bool> decay, const SgdConfig& cfg);
  // Sharded: only the given segments (e.g. this rank's ZeRO-1 share).
  Sgd(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, const SgdConfig& cfg);

  // The step that makes step_count() 1 initialises the momentum buffers to the gradients (torch: buffer created
  // then), so a run resumed with set_step_count(t > 0) and its buffers restored continues exactly.
  void step(const ExecContext& ctx, float lr, float grad_scale) override;
  std::vector<StateBuffer> state_buffers() override;

  bool has_momentum() const { return buf_ != nullptr; }
  // Momentum buffer of segment i: segments()[i].numel() values; null when has_momentum() is false.
  float* momentum(size_t i) { return buf_ ? buf_->f32() + segs_[i].state_offset : nullptr; }
  const SgdConfig& config() const { return cfg_; }

 private:
  size_t state_buffers_count() const override { return buf_ ? 1 : 0; }
  SgdConfig cfg_;
  Slab state_;  // the momentum buffers (state_numel_)
  Tensor* buf_ = nullptr;
};

}  // namespace hpct::optim
