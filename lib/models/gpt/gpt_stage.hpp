#pragma once
// The GPT as a pipeline stage (parallel/pipeline_schedule.hpp): the unit every training step runs through a schedule,
// whatever the layout. At pp = 1 the one stage is the whole model and the schedule is "none" (F0 B0 F1 B1 ...); at
// pp > 1 it is this rank's layers (StagePlan) under GPipe or 1F1B, and with virtual stages (v > 1) its v model chunks
// (chunk_plans) under the interleaved 1F1B, each action naming the chunk it runs.
//
// Activations (models/recompute.hpp): a stage without the head runs each micro-batch's forward in its forward slot and
// keeps what backward needs in the model's activation set of the micro-batch's slot (one set per micro-batch in flight:
// kept_sets(), as many as the schedule holds at once, min(p - r, m) under 1F1B, m under GPipe); under full recompute a
// set is its blocks' inputs, and the backward recomputes each block. The stage that holds the head (the last, or the
// only one) computes its forward, the loss and the backward together in its backward slot, into one activation set, so
// at pp = 1 a micro-batch runs forward + loss + backward once, as plain gradient accumulation does; as a later stage it
// stashes its input (one (MB, T, C) slot per micro-batch in flight) until then. With virtual stages all of this is per
// chunk: every chunk has its own sets and slots (kept_sets and micro_slots count the schedule's actions of that chunk),
// and only the last chunk of the last rank is "the stage with the head".
//
// Everything lives on ctx.device, the transport's device (the CPU: host memory and MPI; CUDA: device memory and the
// NCCL links), so nothing in forward() or backward() blocks the host: begin_step() stages the step's tokens (first
// stage) and targets (last stage) with one copy each, the stage inputs are stashed with copy_device, and the loss sum
// of each micro-batch stays on the device until end_step() reads them all with one copy and one synchronize.
#include <cstdint>
#include <functional>
#include <vector>

#include "data/token_sampler.hpp"
#include "kernels/exec_context.hpp"
#include "models/gpt/gpt.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "tensor/tensor.hpp"

namespace hpct::gpt {

// Fills `count` sequences of step `step` starting at global sample `first`: tokens and targets, host arrays (count, T).
using BatchFill = std::function<void(int64_t step, int64_t first, int count, int32_t* tokens, int32_t* targets)>;

class GptStage final : public parallel::PipelineStage {
 public:
  // n_micro micro-batches of micro_batch sequences per step; fill supplies them (the data sampler).
  GptStage(const ExecContext& ctx, Gpt& model, const std::vector<parallel::Action>& schedule, int n_micro,
           BatchFill fill);

  // Step `step`: micro-batch j = the rank's sequences [rank_first + j MB, rank_first + (j+1) MB); dloss = the loss
  // gradient of every token (1 / global loss terms, times the loss scale).
  void begin_step(int64_t step, int64_t rank_first, float dloss);
  // The sum of the step's token losses (the stage with the head; 0 elsewhere), added in backward order (as the
  // micro-batches finish), in double. Synchronizes the host once.
  double end_step();

  // chunk: the model chunk (0 .. v - 1; always 0 without virtual stages).
  void forward(int chunk, int micro, const void* in, void* out) override;
  void backward(int chunk, int micro, const void* dout, void* din) override;
  // The activation at a stage boundary, (MB, T, C) of the model's activation type (under sequence parallelism this
  // rank's rows of it); 0 for the only stage (nothing is exchanged).
  int64_t activation_numel() const override { return numel_; }
  DType activation_dtype() const override { return model_.activation_dtype(); }
  // Bytes of the step's planned buffers (tokens, targets, loss sums, the head stage's stash of its inputs).
  size_t bytes() const { return bufs_.bytes(); }
  // What bytes() is for a stage `st` of a model with this config, micro_batch and activation type running `schedule`,
  // without a model (the memory plan of `--plan`; the constructor checks that the two agree).
  static size_t planned_bytes(const GptConfig& cfg, const ModelParallel& mp,
                              const std::vector<parallel::Action>& schedule, int micro_batch, DType act);
  // The activation sets of each chunk the model of a rank with `chunks` (chunk_plans) needs for `schedule` (Gpt's
  // ActivationPlan::sets): one per micro-batch of that chunk in flight, one for the chunk with the head.
  static std::vector<int> kept_sets(const std::vector<parallel::Action>& schedule,
                                    const std::vector<StagePlan>& chunks);
  // The slot of each (chunk, micro-batch), at chunk * n_micro + micro: taken at its forward, free again after its
  // backward, the lowest free one of its chunk first (each chunk's slots are its own).
  static std::vector<int> micro_slots(const std::vector<parallel::Action>& schedule);

 private:
  const int32_t* tokens(int micro) const { return tokens_->i32() + static_cast<int64_t>(micro) * MB_ * T_; }
  const int32_t* targets(int micro) const { return targets_->i32() + static_cast<int64_t>(micro) * MB_ * T_; }
  int slot(int chunk, int micro) const { return slot_of_[static_cast<size_t>(chunk * n_micro_ + micro)]; }
  bool is_head(int chunk) const { return model_.chunks()[static_cast<size_t>(chunk)].has_head; }
  void* stashed(int micro) {
    return static_cast<char*>(stash_->data) + static_cast<int64_t>(slot(head_chunk_, micro)) * numel_ * act_bytes_;
  }

  const ExecContext& ctx_;
  Gpt& model_;
  const std::vector<parallel::Action>& schedule_;
  BatchFill fill_;
  int n_micro_, MB_, T_;
  int head_chunk_ = 0;        // the last chunk (the one with the head on the last rank)
  std::vector<int> slot_of_;  // (chunk, micro) -> its slot (micro_slots): the model's activation set, or the stash's
  int64_t numel_ = 0;
  int64_t act_bytes_ = 4;  // bytes of one activation element
  float dloss_ = 0.0f;
  Slab bufs_;
  Tensor* tokens_ = nullptr;   // (n_micro, MB, T) i32: first stage
  Tensor* targets_ = nullptr;  // (n_micro, MB, T) i32: the stage with the head
  Tensor* sums_ = nullptr;     // (n_micro) f32: loss sum of each micro-batch (the stage with the head)
  Tensor* stash_ =
      nullptr;  // (slots, MB, T, C) of the activation type: a later stage with the head's inputs (its chunk's)
  std::vector<int32_t> tok_host_, tgt_host_;  // (n_micro, MB, T): the sampler fills both
  std::vector<float> sums_host_;              // (n_micro)
};

// The GPT's evaluation on the fixed token set (data/token_sampler.hpp), micro_batch sequences at a time. Under pipeline
// parallelism (transport non-null) each micro-batch runs through the stages over the training's transport: a later
// stage receives its input (MB, T, C, on the transport's device = ctx.device) from the previous one and sends its
// output on, straight from stage_output(); only the stage with the head computes losses, so the sum is non-zero there
// alone (the caller reduces it over the PP group). With virtual stages a micro-batch walks them all: each rank runs its
// chunks in order, chunk c after receiving chunk c's input (from rank r - 1, or across the wrap from the last rank's
// chunk c - 1 on rank 0) and sending its output on, as the training's transfers of chunk c do. With NCCL the waits are
// stream-ordered: the send's wait() keeps the next forward from overwriting stage_output() before it has gone, the
// receive is queued after the forward that copied the previous input in. Every micro-batch passes micro 0 to the
// transport: evaluation runs between steps, when no training transfer is in flight, and each link carries it in order
// (MPI: the tag of micro 0 and the chunk, matched in order like NCCL).
class GptEvaluator {
 public:
  GptEvaluator(const ExecContext& ctx, Gpt& model, parallel::PipelineTransport* transport);
  // Sum of the token losses over sequences [begin, end) of eval, in double.
  // forwards: at least this many forwards (a rank whose block runs out repeats its last sequences, not counted: under
  // ZeRO-3 every forward is collective over DP); 0: as many as [begin, end) needs.
  double loss_sum(const data::TokenEvalSet& eval, int begin, int end, int forwards = 0);
  Tensor& tokens() { return *in_dev_; }         // (MB, T) i32 on ctx.device (also the text sample's window)
  size_t bytes() const { return io_.bytes(); }  // its planned buffers
  // What bytes() is for a stage `st`, without a model (the memory plan; the constructor checks that the two agree).
  static size_t planned_bytes(const GptConfig& cfg, const ModelParallel& mp, int micro_batch, DType act);

 private:
  const ExecContext& ctx_;
  Gpt& model_;
  parallel::PipelineTransport* transport_;
  Slab io_;
  Tensor *in_dev_ = nullptr, *tgt_dev_ = nullptr, *sum_dev_ = nullptr;  // (MB, T), (MB, T), (1)
  // the stage boundary's activation received from the previous (virtual) stage (pipeline only)
  Tensor* act_ = nullptr;
  std::vector<int32_t> in_host_, tgt_host_;  // (MB, T)
};

}  // namespace hpct::gpt
