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
  upload_table(ctx, nullptr);
}

void AdamW::upload_table(const ExecContext& ctx, Slab* copy) {
  // every segment's chunks in one table on the device: one launch per step (adamw_update_chunks)
  std::vector<k::AdamwRange> ranges;
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Segment& s = segs_[i];
    if (s.numel() == 0) continue;
    void* to = nullptr;  // the segment's elements of the compute copy (a whole tensor: keep_compute_copy checked)
    if (copy) to = copy->tensors()[static_cast<size_t>(s.tensor)].data;
    ranges.push_back({segment_param(s, params_), s.grad, exp_avg(i), exp_avg_sq(i), s.numel(), decays(s.tensor), to});
  }
  copy_dtype_ = copy ? copy->tensors().front().dtype : DType::F32;
  const std::vector<k::AdamwChunk> table = k::adamw_table(ranges, copy_dtype_);
  constexpr int64_t kWords = sizeof(k::AdamwChunk) / sizeof(int64_t);
  static_assert(kWords == 7, "five pointers and two counts");
  chunks_ = static_cast<int64_t>(table.size());
  if (table_.tensors().empty()) {
    table_.add("chunks", {kWords * std::max<int64_t>(chunks_, 1)}, DType::I64);
    table_.allocate();
  }
  k::copy_from_host(ctx, table_.base(), table.data(), static_cast<int64_t>(table.size() * sizeof(k::AdamwChunk)));
  k::synchronize(ctx);  // the host table may go once the copy has run
}

bool AdamW::keep_compute_copy(const ExecContext& ctx, Slab& copy) {
  const auto& masters = params_.tensors();
  const auto& to = copy.tensors();
  if (to.size() != masters.size() || segs_.size() != masters.size()) return false;
  std::vector<bool> whole(masters.size(), false);  // every tensor updated whole, once
  for (size_t i = 0; i < segs_.size(); ++i) {
    const Segment& s = segs_[i];
    if (whole[static_cast<size_t>(s.tensor)]) return false;
    whole[static_cast<size_t>(s.tensor)] = true;
    const Tensor& m = masters[static_cast<size_t>(s.tensor)];
    const Tensor& c = to[static_cast<size_t>(s.tensor)];
    if (s.param != nullptr || s.begin != 0 || s.end != m.numel()) return false;  // a share, or masters elsewhere
    if (c.numel() != m.numel() || (c.dtype != DType::BF16 && c.dtype != DType::F16) || c.dtype != to.front().dtype)
      return false;
  }
  upload_table(ctx, &copy);
  return true;
}

std::vector<Optimizer::StateBuffer> AdamW::state_buffers() {
  return {{"exp_avg", [this](size_t i) { return exp_avg(i); }},
          {"exp_avg_sq", [this](size_t i) { return exp_avg_sq(i); }}};
}

void AdamW::step(const ExecContext& ctx, float lr, float grad_scale) {
  ++t_;
  k::adamw_update_chunks(ctx, static_cast<const k::AdamwChunk*>(table_.base()), chunks_, lr, cfg_.beta1, cfg_.beta2,
                         cfg_.eps, cfg_.weight_decay, grad_scale, static_cast<int>(t_), copy_dtype_);
}

}  // namespace hpct::optim
