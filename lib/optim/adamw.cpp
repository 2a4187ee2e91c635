#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.hpp"

namespace hpct::optim {

namespace k = hpct::kernels;

AdamW::AdamW(Slab& params, Slab& grads, std::vector<bool> decay, const AdamWConfig& cfg)
    : AdamW(params, whole_tensor_segments(params, grads), std::move(decay), cfg) {}

AdamW::AdamW(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, const AdamWConfig& cfg)
    : Optimizer(params, std::move(segments), std::move(decay), cfg.grad_clip),
      cfg_(cfg),
      state_("adamw_state", params.device()) {
  m_ = &state_.add("exp_avg", {std::max<int64_t>(state_numel_, 1)});
  v_ = &state_.add("exp_avg_sq", {std::max<int64_t>(state_numel_, 1)});
  state_.allocate();
  const ExecContext ctx{params_.device(), nullptr};
  k::fill_zero(ctx, state_.base(), static_cast<int64_t>(state_.bytes()));
}

std::vector<Optimizer::StateBuffer> AdamW::state_buffers() {
  return {{"exp_avg", [this](size_t i) { return exp_avg(i); }},
          {"exp_avg_sq", [this](size_t i) { return exp_avg_sq(i); }}};
}

void AdamW::step(const ExecContext& ctx, float lr, float grad_scale) {
  ++t_;
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Segment& s = segs_[i];
    if (s.numel() == 0) continue;
    k::adamw_update(ctx, segment_param(s, params_), s.grad, exp_avg(i), exp_avg_sq(i), s.numel(), lr, cfg_.beta1,
                    cfg_.beta2, cfg_.eps, decays(s.tensor) ? cfg_.weight_decay : 0.0f, grad_scale,
                    static_cast<int>(t_));
  }
}

}  // namespace hpct::optim
