#include "optim/adamw.hpp"

#include <cmath>

#include "kernels/kernels.hpp"

namespace hpct::optim {

namespace k = hpct::kernels;

AdamW::AdamW(Slab& params, Slab& grads, std::vector<bool> decay, const AdamWConfig& cfg)
    : params_(params),
      grads_(grads),
      decay_(std::move(decay)),
      cfg_(cfg),
      m_("exp_avg", params.device()),
      v_("exp_avg_sq", params.device()),
      norm_("grad_norm", params.device()) {
  HPCT_CHECK(decay_.size() == params_.tensors().size(), "decay flags: {} for {} tensors", decay_.size(),
             params_.tensors().size());
  HPCT_CHECK(grads_.tensors().size() == params_.tensors().size(), "grads and params differ in count");
  for (const auto& t : params_.tensors()) {
    m_.add(t.name, t.shape);
    v_.add(t.name, t.shape);
  }
  norm_.add("sumsq", {1}, DType::F64);
  m_.allocate();
  v_.allocate();
  norm_.allocate();
  const ExecContext host_ctx{params.device(), nullptr};
  k::fill_zero(host_ctx, m_.base(), static_cast<int64_t>(m_.bytes()));
  k::fill_zero(host_ctx, v_.base(), static_cast<int64_t>(v_.bytes()));
}

double AdamW::grad_norm(const ExecContext& ctx) {
  double* acc = norm_.tensors()[0].f64();
  k::fill_zero(ctx, acc, sizeof(double));
  for (auto& g : grads_.tensors()) k::sum_squares_accumulate(ctx, acc, g.f32(), g.numel());
  double host = 0.0;
  k::copy_to_host(ctx, &host, acc, sizeof(double));
  return std::sqrt(host);
}

float AdamW::clip_scale(double norm) const {
  if (cfg_.grad_clip <= 0.0f) return 1.0f;
  // torch: clip_coef = max_norm / (total_norm + 1e-6), applied when < 1 (computed in float32 there)
  const float coef = cfg_.grad_clip / (static_cast<float>(norm) + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

void AdamW::step(const ExecContext& ctx, float lr, float grad_scale) {
  ++t_;
  auto& ps = params_.tensors();
  auto& gs = grads_.tensors();
  for (size_t i = 0; i < ps.size(); ++i) {
    k::adamw_update(ctx, ps[i].f32(), gs[i].f32(), m_.tensors()[i].f32(), v_.tensors()[i].f32(), ps[i].numel(), lr,
                    cfg_.beta1, cfg_.beta2, cfg_.eps, decay_[i] ? cfg_.weight_decay : 0.0f, grad_scale,
                    static_cast<int>(t_));
  }
}

}  // namespace hpct::optim
