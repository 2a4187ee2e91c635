#include "optim/sgd.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/kernels.hpp"
#include "kernels/optim_kernels.hpp"

namespace hpct::optim {

namespace k = hpct::kernels;

Sgd::Sgd(Slab& params, Slab& grads, std::vector<bool> decay, const SgdConfig& cfg)
    : Sgd(params, whole_tensor_segments(params, grads), std::move(decay), cfg) {}

Sgd::Sgd(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, const SgdConfig& cfg)
    : params_(params),
      segs_(std::move(segments)),
      decay_(std::move(decay)),
      cfg_(cfg),
      state_("sgd_state", params.device()),
      norm_("grad_norm", params.device()) {
  HPCT_CHECK(decay_.size() == params_.tensors().size(), "decay flags: {} for {} tensors", decay_.size(),
             params_.tensors().size());
  HPCT_USAGE_CHECK(cfg_.momentum >= 0.0f && cfg_.dampening >= 0.0f && cfg_.weight_decay >= 0.0f,
                   "SGD: momentum={}, dampening={} and weight_decay={} must not be negative", cfg_.momentum,
                   cfg_.dampening, cfg_.weight_decay);
  HPCT_USAGE_CHECK(!cfg_.nesterov || (cfg_.momentum > 0.0f && cfg_.dampening == 0.0f),
                   "SGD: nesterov needs momentum > 0 and dampening = 0 (momentum={}, dampening={}), as in "
                   "torch.optim.SGD",
                   cfg_.momentum, cfg_.dampening);
  plan_state();
}

void Sgd::plan_state() {
  const int64_t off = plan_segment_state(params_, segs_);
  norm_.add("sumsq", {1}, DType::F64);
  norm_.allocate();
  if (cfg_.momentum == 0.0f) return;  // plain SGD keeps no state (neither does torch)
  state_numel_ = off;
  buf_ = &state_.add("momentum", {std::max<int64_t>(off, 1)});
  state_.allocate();
  // not needed by the update (the first step assigns the buffers), but a checkpoint written before it is defined
  const ExecContext ctx{params_.device(), nullptr};
  k::fill_zero(ctx, state_.base(), static_cast<int64_t>(state_.bytes()));
}

double Sgd::grad_sumsq(const ExecContext& ctx, const std::vector<bool>* counted) {
  return segments_grad_sumsq(ctx, segs_, norm_.tensors()[0].f64(), counted);
}

double Sgd::grad_norm(const ExecContext& ctx) { return std::sqrt(grad_sumsq(ctx)); }

float Sgd::clip_scale(double norm) const { return clip_coefficient(cfg_.grad_clip, norm); }

void Sgd::step(const ExecContext& ctx, float lr, float grad_scale) {
  ++t_;
  auto& ps = params_.tensors();
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Segment& s = segs_[i];
    if (s.numel() == 0) continue;
    const size_t ti = static_cast<size_t>(s.tensor);
    k::sgd_update(ctx, ps[ti].f32() + s.begin, s.grad, momentum(i), s.numel(), lr, cfg_.momentum, cfg_.dampening,
                  decay_[ti] ? cfg_.weight_decay : 0.0f, cfg_.nesterov, grad_scale, t_ == 1);
  }
}

}  // namespace hpct::optim
