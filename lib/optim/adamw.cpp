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
      state_("adamw_state", params.device()),
      table_("adamw_chunks", params.device()) {
  m_ = &state_.add("exp_avg", {std::max<int64_t>(state_numel_, 1)});
  v_ = &state_.add("exp_avg_sq", {std::max<int64_t>(state_numel_, 1)});
  state_.allocate();
  const ExecContext ctx{params_.device(), nullptr};
  k::fill_zero(ctx, state_.base(), static_cast<int64_t>(state_.bytes()));
  // every segment's chunks in one table on the device: one launch per step (adamw_update_chunks)
  std::vector<k::AdamwRange> ranges;
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Segment& s = segs_[i];
    if (s.numel() > 0)
      ranges.push_back({segment_param(s, params_), s.grad, exp_avg(i), exp_avg_sq(i), s.numel(), decays(s.tensor)});
  }
  const std::vector<k::AdamwChunk> table = k::adamw_table(ranges);
  static_assert(sizeof(k::AdamwChunk) == 6 * sizeof(int64_t), "four pointers and two counts");
  chunks_ = static_cast<int64_t>(table.size());
  table_.add("chunks", {6 * std::max<int64_t>(chunks_, 1)}, DType::I64);
  table_.allocate();
  k::copy_from_host(ctx, table_.base(), table.data(), static_cast<int64_t>(table.size() * sizeof(k::AdamwChunk)));
  k::synchronize(ctx);  // the host table may go once the copy has run
}

std::vector<Optimizer::StateBuffer> AdamW::state_buffers() {
  return {{"exp_avg", [this](size_t i) { return exp_avg(i); }},
          {"exp_avg_sq", [this](size_t i) { return exp_avg_sq(i); }}};
}

void AdamW::step(const ExecContext& ctx, float lr, float grad_scale) {
  ++t_;
  k::adamw_update_chunks(ctx, static_cast<const k::AdamwChunk*>(table_.base()), chunks_, lr, cfg_.beta1, cfg_.beta2,
                         cfg_.eps, cfg_.weight_decay, grad_scale, static_cast<int>(t_));
}

}  // namespace hpct::optim
