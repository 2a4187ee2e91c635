#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/kernels.hpp"

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

void Optimizer::plan_grad_norm(const ExecContext& ctx, const std::vector<bool>* counted) {
  const std::vector<kernels::SquaresChunk> table = kernels::squares_table(grad_ranges(segs_, counted));
  static_assert(sizeof(kernels::SquaresChunk) == 2 * sizeof(int64_t), "a chunk is a pointer and a count");
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(table.size()));
  norm_plan_ = std::make_unique<Slab>("grad_norm chunks", params_.device());
  norm_plan_->add("table", {2 * n}, DType::I64);
  norm_plan_->add("partials", {n}, DType::F64);
  norm_plan_->allocate();
  kernels::copy_from_host(ctx, norm_plan_->tensors()[0].data, table.data(),
                          static_cast<int64_t>(table.size() * sizeof(kernels::SquaresChunk)));
  kernels::synchronize(ctx);  // the host table may go once the copy has run
  norm_chunks_ = static_cast<int64_t>(table.size());
  norm_counted_ = counted ? *counted : std::vector<bool>{};
}

double Optimizer::grad_sumsq(const ExecContext& ctx, const std::vector<bool>* counted) {
  if (!norm_plan_ || norm_counted_ != (counted ? *counted : std::vector<bool>{})) plan_grad_norm(ctx, counted);
  double* acc = norm_.tensors()[0].f64();
  kernels::fill_zero(ctx, acc, sizeof(double));
  kernels::sum_squares_ranges(ctx, acc, static_cast<const kernels::SquaresChunk*>(norm_plan_->tensors()[0].data),
                              norm_chunks_, norm_plan_->tensors()[1].f64());
  double host = 0.0;
  kernels::copy_to_host(ctx, &host, acc, sizeof(double));
  kernels::synchronize(ctx);  // the copy is asynchronous on CUDA: host is valid only now (a no-op on the CPU)
  return host;
}

double Optimizer::grad_norm(const ExecContext& ctx) { return std::sqrt(grad_sumsq(ctx)); }

}  // namespace hpct::optim
