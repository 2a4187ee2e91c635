#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.hpp"

namespace hpct::optim {

namespace k = hpct::kernels;

AdamW::AdamW(Slab& params, Slab& grads, std::vector<bool> decay, const AdamWConfig& cfg)
    : AdamW(params, whole_tensor_segments(params, grads), std::move(decay), cfg) {}

AdamW::AdamW(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, const AdamWConfig& cfg)
    : params_(params),
      segs_(std::move(segments)),
      decay_(std::move(decay)),
      cfg_(cfg),
      state_("adamw_state", params.device()),
      norm_("grad_norm", params.device()) {
  HPCT_CHECK(decay_.size() == params_.tensors().size(), "decay flags: {} for {} tensors", decay_.size(),
             params_.tensors().size());
  plan_state();
}

void AdamW::plan_state() {
  const int64_t off = plan_segment_state(params_, segs_);
  state_numel_ = off;
  m_ = &state_.add("exp_avg", {std::max<int64_t>(off, 1)});
  v_ = &state_.add("exp_avg_sq", {std::max<int64_t>(off, 1)});
  norm_.add("sumsq", {1}, DType::F64);
  state_.allocate();
  norm_.allocate();
  const ExecContext ctx{params_.device(), nullptr};
  k::fill_zero(ctx, state_.base(), static_cast<int64_t>(state_.bytes()));
}

double AdamW::grad_sumsq(const ExecContext& ctx, const std::vector<bool>* counted) {
  return segments_grad_sumsq(ctx, segs_, norm_.tensors()[0].f64(), counted);
}

double AdamW::grad_norm(const ExecContext& ctx) { return std::sqrt(grad_sumsq(ctx)); }

float AdamW::clip_scale(double norm) const {
  return clip_coefficient(cfg_.grad_clip, norm);
}

void AdamW::step(const ExecContext& ctx, float lr, float grad_scale) {
  ++t_;
  auto& ps = params_.tensors();
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Segment& s = segs_[i];
    if (s.numel() == 0) continue;
    const size_t ti = static_cast<size_t>(s.tensor);
    k::adamw_update(ctx, ps[ti].f32() + s.begin, s.grad, exp_avg(i), exp_avg_sq(i), s.numel(), lr, cfg_.beta1,
                    cfg_.beta2, cfg_.eps, decay_[ti] ? cfg_.weight_decay : 0.0f, grad_scale, static_cast<int>(t_));
  }
}

}  // namespace hpct::optim
