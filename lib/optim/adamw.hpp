#pragma once
// AdamW over a model's parameter slab (torch.optim.AdamW semantics: decoupled weight decay, bias
// correction), with global-norm gradient clipping as torch.nn.utils.clip_grad_norm_
// (scale = clip / (norm + 1e-6) when that is < 1).
//
// The optimizer updates a list of segments (optim/segment.hpp): flat element ranges [begin, end) of parameter
// tensors, each with the place its gradient lives. Unsharded, the segments are the whole tensors and the gradients
// are the model's gradient slab. Under ZeRO-1 (parallel.zero = 1) each DP rank owns a 1/DP share of
// every gradient bucket, its segments are the pieces of tensors inside that share and their gradients
// live in the reduce-scattered shard buffer (parallel/grad_sync.hpp). The state (exp_avg, exp_avg_sq)
// is held only for the segments, back to back, so its memory is 1/DP of the unsharded figure; the
// checkpoint stores it per named tensor (segment -> hyperslab pieces, ckpt/checkpoint.hpp).
#include <cstdint>
#include <vector>

#include "kernels/exec_context.hpp"
#include "optim/optimizer.hpp"
#include "optim/segment.hpp"
#include "tensor/tensor.hpp"

namespace hpct::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_clip = 1.0f;  // 0: no clipping
};

class AdamW final : public Optimizer {
 public:
  // Unsharded: every tensor whole, gradients in `grads` (same layout as params).
  // decay[i] says whether weight decay applies to params.tensors()[i].
  AdamW(Slab& params, Slab& grads, std::vector<bool> decay, const AdamWConfig& cfg);
  // Sharded: only the given segments (e.g. this rank's ZeRO-1 share).
  AdamW(Slab& params, std::vector<Segment> segments, std::vector<bool> decay, const AdamWConfig& cfg);

  void step(const ExecContext& ctx, float lr, float grad_scale) override;
  // Optimizer::keep_compute_copy: the chunk table then carries the copy's pointers (adamw_update_chunks stores each
  // updated parameter there too), where the segments are every tensor whole and the copy matches the slab.
  bool keep_compute_copy(const ExecContext& ctx, Slab& copy) override;
  std::vector<StateBuffer> state_buffers() override;

  // exp_avg / exp_avg_sq of segment i: segments()[i].numel() values.
  float* exp_avg(size_t i) { return m_->f32() + segs_[i].state_offset; }
  float* exp_avg_sq(size_t i) { return v_->f32() + segs_[i].state_offset; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  size_t state_buffers_count() const override { return 2; }
  // Builds the table of every segment's chunks (with `copy`'s pointers when set) and copies it to the device.
  void upload_table(const ExecContext& ctx, Slab* copy);
  AdamWConfig cfg_;
  Slab state_;  // exp_avg (state_numel_) then exp_avg_sq
  // the segments cut into chunks (kernels::AdamwChunk entries on the device, planned at construction): step()'s one
  // launch; beside the state, outside the memory record's kinds as the gradient norm's table is
  Slab table_;
  int64_t chunks_ = 0;
  DType copy_dtype_ = DType::F32;  // the compute copy the table's chunks also write (F32: none)
  Tensor *m_ = nullptr, *v_ = nullptr;
};

}  // namespace hpct::optim
