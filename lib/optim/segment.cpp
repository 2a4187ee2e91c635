#include "optim/segment.hpp"

#include "core/error.hpp"
#include "kernels/kernels.hpp"

namespace hpct::optim {

namespace k = hpct::kernels;

std::vector<Segment> whole_tensor_segments(Slab& params, Slab& grads) {
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

int64_t plan_segment_state(const Slab& params, std::vector<Segment>& segs) {
  int64_t off = 0;
  for (Segment& s : segs) {
    HPCT_CHECK(s.tensor >= 0 && static_cast<size_t>(s.tensor) < params.tensors().size(), "segment of tensor {}",
               s.tensor);
    const Tensor& p = params.tensors()[static_cast<size_t>(s.tensor)];
    HPCT_CHECK(0 <= s.begin && s.begin <= s.end && s.end <= p.numel(), "segment [{}, {}) of {} with {} elements",
               s.begin, s.end, p.name, p.numel());
    s.state_offset = off;
    off += s.numel();
  }
  return off;
}

std::vector<kernels::SquaresRange> grad_ranges(const std::vector<Segment>& segs, const std::vector<bool>* counted) {
  std::vector<kernels::SquaresRange> ranges;
  for (const Segment& s : segs)
    if (s.numel() > 0 && (!counted || (*counted)[static_cast<size_t>(s.tensor)])) ranges.push_back({s.grad, s.numel()});
  return ranges;
}

float clip_coefficient(float clip, double norm) {
  if (clip <= 0.0f) return 1.0f;
  // torch: clip_coef = max_norm / (total_norm + 1e-6), applied when < 1 (computed in float32 there)
  const float coef = clip / (static_cast<float>(norm) + 1e-6f);
  return coef < 1.0f ? coef : 1.0f;
}

}  // namespace hpct::optim
