#include "optim/sgd.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/kernels.hpp"

namespace hpct::optim {

namespace k = hpct::kernels;

Sgd::Sgd(Slab& params, Slab& grads, std::vector<bool> decay, const SgdConfig& cfg)
    : Sgd(params, whole_tensor_segments(params, grads), std::move(decay), cfg) {}

Sgd::Sgd(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, const SgdConfig& cfg)
    : Optimizer(params, std::move(segments), std::move(decay), cfg.grad_clip),
      cfg_(cfg),
      state_("sgd_state", params.device()) {
  HPCT_USAGE_CHECK(cfg_.momentum >= 0.0f && cfg_.dampening >= 0.0f && cfg_.weight_decay >= 0.0f,
                   "SGD: momentum={}, dampening={} and weight_decay={} must not be negative", cfg_.momentum,
                   cfg_.dampening, cfg_.weight_decay);
  HPCT_USAGE_CHECK(!cfg_.nesterov || (cfg_.momentum > 0.0f && cfg_.dampening == 0.0f),
                   "SGD: nesterov needs momentum > 0 and dampening = 0 (momentum={}, dampening={}), as in "
                   "torch.optim.SGD",
                   cfg_.momentum, cfg_.dampening);
  if (cfg_.momentum == 0.0f) {  // plain SGD keeps no state (neither does torch)
    state_numel_ = 0;
    return;
  }
  buf_ = &state_.add("momentum", {std::max<int64_t>(state_numel_, 1)});
  state_.allocate();
  // not needed by the update (the first step assigns the buffers), but a checkpoint written before it is defined
  const ExecContext ctx{params_.device(), nullptr};
  k::fill_zero(ctx, state_.base(), static_cast<int64_t>(state_.bytes()));
}

std::vector<Optimizer::StateBuffer> Sgd::state_buffers() {
  if (!buf_) return {};
  return {{"momentum", [this](size_t i) { return momentum(i); }}};
}

void Sgd::step(const ExecContext& ctx, float lr, float grad_scale) {
  ++t_;
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Segment& s = segs_[i];
    if (s.numel() == 0) continue;
    k::sgd_update(ctx, segment_param(s, params_), s.grad, momentum(i), s.numel(), lr, cfg_.momentum, cfg_.dampening,
                  decays(s.tensor) ? cfg_.weight_decay : 0.0f, cfg_.nesterov, grad_scale, t_ == 1);
  }
}

}  // namespace hpct::optim
