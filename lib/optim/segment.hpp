#pragma once
// What AdamW and Sgd share: the segment, a flat range of one parameter tensor that this rank updates, and the
// helpers over a list of them (whole-tensor segments, gradient sum of squares, the clipping factor).
//
// Unsharded, the segments are the whole tensors and the gradients are the model's gradient slab. Under ZeRO-1
// (parallel.zero = 1) each DP rank owns a 1/DP share of every gradient bucket, its segments are the pieces of
// tensors inside that share and their gradients live in the reduce-scattered shard buffer
// (parallel/grad_sync.hpp). An optimizer holds its state only for its segments, back to back (state_offset).
#include <cstdint>
#include <vector>

#include "kernels/exec_context.hpp"
#include "kernels/kernels.hpp"
#include "tensor/tensor.hpp"

namespace hpct::optim {

// A flat range of one parameter tensor updated by this rank.
struct Segment {
  int tensor = 0;              // index into params.tensors()
  int64_t begin = 0, end = 0;  // flat element range inside that tensor
  float* grad = nullptr;       // end - begin gradient values
  int64_t state_offset =
      0;  // where its state (exp_avg, momentum, ...) starts in the state buffers (set by the optimizer)
  // end - begin fp32 master values; null: the parameter tensor's own (params.tensors()[tensor] + begin). ZeRO-3 keeps
  // the masters in the rank's parameter shard (parallel/param_gather.hpp), the model's tensors holding only gathers.
  float* param = nullptr;
  int64_t numel() const { return end - begin; }
};

// Where segment s's master values live.
inline float* segment_param(const Segment& s, Slab& params) {
  return s.param ? s.param : params.tensors()[static_cast<size_t>(s.tensor)].f32() + s.begin;
}

// Every tensor of params whole, its gradient the same-index tensor of grads (same layout).
std::vector<Segment> whole_tensor_segments(Slab& params, Slab& grads);

// Checks every segment lies inside its tensor, sets the state offsets back to back; returns the state's numel.
int64_t plan_segment_state(const Slab& params, std::vector<Segment>& segs);

// The segments' gradients as the ranges of the gradient norm's sum of squares (kernels::squares_table), in segment
// order; counted (optional, by tensor index): only those tensors' segments.
std::vector<kernels::SquaresRange> grad_ranges(const std::vector<Segment>& segs, const std::vector<bool>* counted);

// torch.nn.utils.clip_grad_norm_: clip / (norm + 1e-6) when that is < 1, else 1; 1 when clip <= 0 (off).
float clip_coefficient(float clip, double norm);

}  // namespace hpct::optim
