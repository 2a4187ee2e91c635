#include "models/gpt/gpt_stage.hpp"

#include <algorithm>

#include "kernels/kernels.hpp"
#include "models/gpt/gpt_layout.hpp"

namespace hpct::gpt {

namespace k = hpct::kernels;

GptStage::GptStage(const ExecContext& ctx, Gpt& model, const std::vector<parallel::Action>& schedule, int n_micro,
                   BatchFill fill)
    : ctx_(ctx),
      model_(model),
      schedule_(schedule),
      fill_(std::move(fill)),
      n_micro_(n_micro),
      MB_(model.micro_batch()),
      T_(model.config().seq_len),
      slot_of_(micro_slots(schedule)),
      bufs_("pipeline stage", ctx.device) {
  const StagePlan& st = model.stage();
  HPCT_CHECK(static_cast<int>(slot_of_.size()) == n_micro, "a schedule of {} micro-batches for a stage of {}",
             slot_of_.size(), n_micro);
  HPCT_CHECK(model.kept().sets >= kept_sets(schedule, st),
             "GPT stage {}: its schedule keeps {} micro-batches' activations, the model was planned for {}",
             model.model_parallel().pp_rank, kept_sets(schedule, st), model.kept().sets);
  const bool only_stage = st.has_embedding && st.has_head;
  numel_ = only_stage ? 0 : model.boundary_numel(MB_);
  act_bytes_ = static_cast<int64_t>(dtype_size(model.activation_dtype()));
  if (st.has_embedding) tokens_ = &bufs_.add("tokens", {n_micro_, MB_, T_}, DType::I32);
  if (st.has_head) {
    targets_ = &bufs_.add("targets", {n_micro_, MB_, T_}, DType::I32);
    sums_ = &bufs_.add("loss sums", {n_micro_});
    sums_host_.assign(static_cast<size_t>(n_micro_), 0.0f);
  }
  if (!st.has_embedding && st.has_head)
    stash_ = &bufs_.add("stash", {parallel::max_in_flight(schedule), numel_}, model.activation_dtype());
  bufs_.allocate();
  HPCT_CHECK(bufs_.bytes() ==
                 planned_bytes(model.config(), model.model_parallel(), schedule, MB_, model.activation_dtype()),
             "stage buffers of {} bytes differ from their plan", bufs_.bytes());
  if (tokens_ || targets_) {
    tok_host_.assign(static_cast<size_t>(n_micro_) * MB_ * T_, 0);
    tgt_host_.assign(tok_host_.size(), 0);
  }
}

size_t GptStage::planned_bytes(const GptConfig& cfg, const ModelParallel& mp,
                               const std::vector<parallel::Action>& schedule, int micro_batch, DType act) {
  const StagePlan st = stage_plan(cfg, mp.pp, mp.pp_rank);
  const int n_micro = parallel::schedule_micro_batches(schedule);
  const size_t tokens = static_cast<size_t>(n_micro) * micro_batch * cfg.seq_len;  // of one (n_micro, MB, T) buffer
  size_t n = 0;
  if (st.has_embedding) n += slab_aligned(tokens * sizeof(int32_t));
  if (st.has_head) n += slab_aligned(tokens * sizeof(int32_t)) + slab_aligned(static_cast<size_t>(n_micro) * 4);
  if (!st.has_embedding && st.has_head)
    n += slab_aligned(static_cast<size_t>(parallel::max_in_flight(schedule)) *
                      static_cast<size_t>(boundary_numel(cfg, mp, micro_batch)) * dtype_size(act));
  return n;
}

int GptStage::kept_sets(const std::vector<parallel::Action>& schedule, const StagePlan& st) {
  return st.has_head ? 1 : parallel::max_in_flight(schedule);
}

std::vector<int> GptStage::micro_slots(const std::vector<parallel::Action>& schedule) {
  std::vector<int> slot_of(static_cast<size_t>(parallel::schedule_micro_batches(schedule)), -1);
  std::vector<bool> busy;
  for (const parallel::Action& a : schedule) {
    int& slot = slot_of[static_cast<size_t>(a.micro)];
    if (a.op == parallel::Action::Backward) {
      busy[static_cast<size_t>(slot)] = false;
      continue;
    }
    slot = static_cast<int>(std::find(busy.begin(), busy.end(), false) - busy.begin());
    if (slot == static_cast<int>(busy.size())) busy.push_back(false);
    busy[static_cast<size_t>(slot)] = true;
  }
  return slot_of;
}

void GptStage::begin_step(int64_t step, int64_t rank_first, float dloss) {
  dloss_ = dloss;
  model_.refresh_compute_params(ctx_);  // the masters changed in the last optimizer step (a no-op in fp32)
  if (tok_host_.empty()) return;        // a middle stage: its inputs come from the previous stage
  k::synchronize(ctx_);  // the last step's copies from tok_host_ / tgt_host_ are done (the stream is idle here anyway)
  for (int j = 0; j < n_micro_; ++j) {
    const int64_t first = rank_first + static_cast<int64_t>(j) * MB_, off = static_cast<int64_t>(j) * MB_ * T_;
    fill_(step, first, MB_, tok_host_.data() + off, tgt_host_.data() + off);
  }
  if (tokens_) k::copy_from_host(ctx_, tokens_->data, tok_host_.data(), static_cast<int64_t>(tok_host_.size()) * 4);
  if (targets_) k::copy_from_host(ctx_, targets_->data, tgt_host_.data(), static_cast<int64_t>(tgt_host_.size()) * 4);
}

double GptStage::end_step() {
  if (!sums_) return 0.0;
  k::copy_to_host(ctx_, sums_host_.data(), sums_->data, static_cast<int64_t>(n_micro_) * 4);
  k::synchronize(ctx_);  // sums_host_ is read now (CUDA: bounded by the sync guard)
  double sum = 0.0;
  for (const parallel::Action& a : schedule_)
    if (a.op == parallel::Action::Backward) sum += sums_host_[static_cast<size_t>(a.micro)];
  return sum;
}

void GptStage::forward(int chunk, int micro, const void* in, void* out) {
  HPCT_CHECK(chunk == 0, "GptStage: model chunk {}: the GPT model holds one chunk per pipeline rank", chunk);
  const StagePlan& st = model_.stage();
  if (st.has_head) {  // the stage with the head computes in its backward slot; `in` is valid during this call only
    if (!st.has_embedding) k::copy_device(ctx_, stashed(micro), in, numel_ * act_bytes_);
    return;
  }
  // the model copies `in` into the micro-batch's activation set (stream-ordered, before `in` is reused)
  const int set = slot_of_[static_cast<size_t>(micro)];
  model_.forward(ctx_, st.has_embedding ? tokens(micro) : nullptr, MB_, st.has_embedding ? nullptr : in, set);
  // the executor sends `out` (stream-ordered after this)
  k::copy_device(ctx_, out, model_.stage_output(set), numel_ * act_bytes_);
}

void GptStage::backward(int chunk, int micro, const void* dout, void* din) {
  HPCT_CHECK(chunk == 0, "GptStage: model chunk {}: the GPT model holds one chunk per pipeline rank", chunk);
  const StagePlan& st = model_.stage();
  if (!st.has_head) {
    model_.backward_stage(ctx_, dout, din, MB_, slot_of_[static_cast<size_t>(micro)]);
    return;
  }
  // the stage with the head: its only forward, then the loss and the backward
  if (st.has_embedding) model_.forward(ctx_, tokens(micro), MB_);
  else
    model_.forward(ctx_, nullptr, MB_, stashed(micro));
  const float* losses = model_.loss_and_backward(ctx_, targets(micro), dloss_, MB_, din);
  k::sum(ctx_, sums_->f32() + micro, losses, static_cast<int64_t>(MB_) * T_);
}

size_t GptEvaluator::planned_bytes(const GptConfig& cfg, const ModelParallel& mp, int micro_batch, DType act) {
  const size_t tokens = static_cast<size_t>(micro_batch) * cfg.seq_len;
  size_t n = 2 * slab_aligned(tokens * sizeof(int32_t)) + slab_aligned(sizeof(float));
  if (mp.pp_rank > 0) n += slab_aligned(static_cast<size_t>(boundary_numel(cfg, mp, micro_batch)) * dtype_size(act));
  return n;
}

GptEvaluator::GptEvaluator(const ExecContext& ctx, Gpt& model, parallel::PipelineTransport* transport)
    : ctx_(ctx), model_(model), transport_(transport), io_("evaluation batch", ctx.device) {
  const int MB = model.micro_batch(), T = model.config().seq_len;
  in_dev_ = &io_.add("inputs", {MB, T}, DType::I32);
  tgt_dev_ = &io_.add("targets", {MB, T}, DType::I32);
  sum_dev_ = &io_.add("loss_sum", {1});
  if (!model.stage().has_embedding) act_ = &io_.add("activation", {model.boundary_numel(MB)}, model.activation_dtype());
  io_.allocate();
  HPCT_CHECK(io_.bytes() == planned_bytes(model.config(), model.model_parallel(), MB, model.activation_dtype()),
             "evaluation buffers of {} bytes differ from their plan", io_.bytes());
  in_host_.assign(static_cast<size_t>(MB) * T, 0);
  tgt_host_.assign(in_host_.size(), 0);
}

double GptEvaluator::loss_sum(const data::TokenEvalSet& eval, int begin, int end, int forwards) {
  const int T = model_.config().seq_len, MB = model_.micro_batch();
  const StagePlan& st = model_.stage();
  const DType act = model_.activation_dtype();
  model_.refresh_compute_params(ctx_);  // evaluation follows an optimizer step (a no-op in fp32)
  double total = 0.0;
  const int needed = (end - begin + MB - 1) / MB;
  for (int r = 0; r < std::max(needed, forwards); ++r) {
    // past the block: a forward of one sequence only for the collectives the other ranks' forwards run, not counted
    const bool extra = r >= needed;
    const int first = extra ? std::min(begin, std::max(0, eval.num_sequences() - 1)) : begin + r * MB;
    const int b = extra ? 1 : std::min(MB, end - first);
    k::synchronize(ctx_);  // the last micro-batch's copies from in_host_ / tgt_host_ are done before we refill them
    eval.fill(first, b, in_host_.data(), tgt_host_.data());
    k::copy_from_host(ctx_, in_dev_->data, in_host_.data(), static_cast<int64_t>(b) * T * 4);
    k::copy_from_host(ctx_, tgt_dev_->data, tgt_host_.data(), static_cast<int64_t>(b) * T * 4);
    const int64_t n = model_.boundary_numel(b);  // the stage boundary activation
    if (!st.has_embedding) transport_->recv_activation(act_->data, n, act, 0, 0, "evaluation activation")->wait();
    model_.forward(ctx_, in_dev_->i32(), b, st.has_embedding ? nullptr : act_->data);
    if (!st.has_head) {
      transport_->send_activation(model_.stage_output(), n, act, 0, 0, "evaluation activation")->wait();
      continue;
    }
    const double sum = k::sum_to_host(ctx_, sum_dev_->f32(), model_.loss(ctx_, tgt_dev_->i32(), b),
                                      static_cast<int64_t>(b) * T);
    if (!extra) total += sum;
  }
  return total;
}

}  // namespace hpct::gpt
