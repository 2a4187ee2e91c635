#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.hpp"

namespace hpct::optim {

namespace k = hpct::kernels;

namespace {
std::vector<Segment> whole_tensors(Slab& params, Slab& grads) {
  HPCT_CHECK(grads.tensors().size() == params.tensors().size(), "grads and params differ in count ({} vs {})",
             grads.tensors().size(), params.tensors().size());
  std::vector<Segment> segs;
  for (size_t i = 0; i < params.tensors().size(); ++i) {
    Tensor& g = grads.tensors()[i];
    HPCT_CHECK(g.numel() == params.tensors()[i].numel(), "gradient {} has {} elements, its parameter {}", g.name,
               g.numel(), params.tensors()[i].numel());
    segs.push_back({static_cast<int>(i), 0, g.numel(), g.f32(), 0});
  }
  return segs;
}
}  // namespace

AdamW::AdamW(Slab& params, Slab& grads, std::vector<bool> decay, const AdamWConfig& cfg)
    : AdamW(params, whole_tensors(params, grads), std::move(decay), cfg) {}

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
  int64_t off = 0;
  for (Segment& s : segs_) {
    HPCT_CHECK(s.tensor >= 0 && static_cast<size_t>(s.tensor) < params_.tensors().size(), "segment of tensor {}",
               s.tensor);
    const Tensor& p = params_.tensors()[static_cast<size_t>(s.tensor)];
    HPCT_CHECK(0 <= s.begin && s.begin <= s.end && s.end <= p.numel(), "segment [{}, {}) of {} with {} elements",
               s.begin, s.end, p.name, p.numel());
    s.state_offset = off;
    off += s.numel();
  }
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
  double* acc = norm_.tensors()[0].f64();
  k::fill_zero(ctx, acc, sizeof(double));
  for (const Segment& s : segs_)
    if (s.numel() > 0 && (!counted || (*counted)[static_cast<size_t>(s.tensor)]))
      k::sum_squares_accumulate(ctx, acc, s.grad, s.numel());
  double host = 0.0;
  k::copy_to_host(ctx, &host, acc, sizeof(double));
  return host;
}

double AdamW::grad_norm(const ExecContext& ctx) { return std::sqrt(grad_sumsq(ctx)); }

float AdamW::clip_scale(double norm) const {
  if (cfg_.grad_clip <= 0.0f) return 1.0f;
  // torch: clip_coef = max_norm / (total_norm + 1e-6), applied when < 1 (computed in float32 there)
  const float coef = cfg_.grad_clip / (static_cast<float>(norm) + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
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
