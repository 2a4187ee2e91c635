#pragma once
// The interface every optimizer shares (AdamW, Sgd), so that the training loop, ZeRO and checkpoints drive any of
// them alike: an update over a list of segments (optim/segment.hpp: whole tensors, or this rank's ZeRO share), the
// gradient sum of squares for the global norm, the clipping factor, the step count, and the named state buffers a
// checkpoint stores as /optim/<buffer>/<tensor> (docs/contracts.md).
//
// What is common lives here once: the segments and their state offsets, the weight-decay flags, the device double
// that accumulates the sum of squares, the step count. A subclass plans its state buffers over state_numel() and
// implements step().
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "kernels/exec_context.hpp"
#include "optim/segment.hpp"
#include "tensor/tensor.hpp"

namespace hpct::optim {

class Optimizer {
 public:
  // One state buffer: `name` in the checkpoint, of_segment(i) its segments()[i].numel() values.
  struct StateBuffer {
    std::string name;
    std::function<float*(size_t)> of_segment;
  };

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Sum of squares of the segments' gradients (this rank's share; the caller reduces it over ranks when the
  // optimizer is sharded), accumulated in double on the device, one explicit copy to the host.
  // counted (optional, by tensor index): only those tensors' segments count (a replica held by several ranks of a
  // TP group counts on one of them, docs/parallelism.md).
  // One full-grid reduction over the planned chunk table (kernels::sum_squares_ranges), the table built for `counted`
  // by plan_grad_norm: call that before the first step (a grad_sumsq with another pattern plans it then).
  double grad_sumsq(const ExecContext& ctx, const std::vector<bool>* counted = nullptr);
  // Builds the gradient norm's chunk table and partials for this counted pattern on ctx.device (allocates, copies
  // and synchronizes: planning, not a step's work).
  void plan_grad_norm(const ExecContext& ctx, const std::vector<bool>* counted = nullptr);
  // Global L2 norm of all gradients, for the unsharded optimizer.
  double grad_norm(const ExecContext& ctx);
  // Clipping factor for a given norm: torch.nn.utils.clip_grad_norm_ (1 when clipping is off or not needed).
  float clip_scale(double norm) const { return clip_coefficient(grad_clip_, norm); }
  // One update with learning rate lr; gradients are multiplied by grad_scale first. Increments step_count().
  virtual void step(const ExecContext& ctx, float lr, float grad_scale) = 0;
  // Asks the optimizer to keep `copy`, the model's 16-bit compute copy of the parameters (its tensors those of the
  // parameter slab, in the same order, each bf16 or f16), equal to the masters: every later step() then also stores
  // the updated parameters there, rounded as kernels::cast rounds them, and the model need not cast the masters again.
  // Returns whether it does: only where it updates every element of every parameter tensor (unsharded segments);
  // the default keeps none. Planning: it may allocate, copy and synchronize.
  virtual bool keep_compute_copy(const ExecContext& ctx, Slab& copy) {
    (void)ctx;
    (void)copy;
    return false;
  }

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  const std::vector<Segment>& segments() const { return segs_; }
  // The state a checkpoint stores (AdamW: exp_avg, exp_avg_sq; SGD: momentum, or none without momentum).
  virtual std::vector<StateBuffer> state_buffers() = 0;
  int64_t state_numel() const { return state_numel_; }  // per buffer: the segments' elements, back to back
  size_t state_bytes() const { return state_buffers_count() * static_cast<size_t>(state_numel_) * sizeof(float); }

 protected:
  // decay[i]: whether weight decay applies to params.tensors()[i]; grad_clip 0: no clipping.
  Optimizer(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, float grad_clip);
  virtual size_t state_buffers_count() const = 0;
  bool decays(int tensor) const { return decay_[static_cast<size_t>(tensor)]; }

  Slab& params_;
  std::vector<Segment> segs_;
  int64_t state_numel_ = 0;  // set by the constructor from the segments
  int64_t t_ = 0;

 private:
  std::vector<bool> decay_;
  float grad_clip_ = 0.0f;
  Slab norm_;  // one double on the device: the sum of squares
  // plan_grad_norm: the chunk table (SquaresChunk entries) and a partial per chunk, for the pattern norm_counted_
  std::unique_ptr<Slab> norm_plan_;
  std::vector<bool> norm_counted_;  // empty: every tensor counts
  int64_t norm_chunks_ = 0;
};

}  // namespace hpct::optim
