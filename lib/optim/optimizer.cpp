#include "optim/optimizer.hpp"

#include <cmath>

#include "core/error.hpp"

namespace hpct::optim {

Optimizer::Optimizer(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, float grad_clip)
    : params_(params),
      segs_(std::move(segments)),
      decay_(std::move(decay)),
      grad_clip_(grad_clip),
      norm_("grad_norm", params.device()) {
  HPCT_CHECK(decay_.size() == params_.tensors().size(), "decay flags: {} for {} tensors", decay_.size(),
             params_.tensors().size());
  state_numel_ = plan_segment_state(params_, segs_);
  norm_.add("sumsq", {1}, DType::F64);
  norm_.allocate();
}

double Optimizer::grad_sumsq(const ExecContext& ctx, const std::vector<bool>* counted) {
  return segments_grad_sumsq(ctx, segs_, norm_.tensors()[0].f64(), counted);
}

double Optimizer::grad_norm(const ExecContext& ctx) { return std::sqrt(grad_sumsq(ctx)); }

}  // namespace hpct::optim
