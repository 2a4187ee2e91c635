#include "models/gpt/gpt_stage.hpp"

#include <algorithm>

#include "core/test_fault.hpp"
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
      head_chunk_(model.num_chunks() - 1),
      slot_of_(micro_slots(schedule)),
      bufs_("pipeline stage", ctx.device) {
  HPCT_CHECK(parallel::schedule_micro_batches(schedule) == n_micro, "a schedule of {} micro-batches for a stage of {}",
             parallel::schedule_micro_batches(schedule), n_micro);
  HPCT_CHECK(parallel::schedule_virtual_stages(schedule) == model.num_chunks(),
             "GPT stage {}: a schedule of {} chunks for a model of {}", model.model_parallel().pp_rank,
             parallel::schedule_virtual_stages(schedule), model.num_chunks());
  const std::vector<int> need = kept_sets(schedule, model.chunks());
  for (size_t c = 0; c < need.size(); ++c)
    HPCT_CHECK(model.kept().sets[c] >= need[c],
               "GPT stage {} chunk {}: its schedule keeps {} micro-batches' activations, the model was planned for {}",
               model.model_parallel().pp_rank, c, need[c], model.kept().sets[c]);
  const bool only_stage = model.has_embedding() && model.has_head();
  numel_ = only_stage ? 0 : model.boundary_numel(MB_);
  act_bytes_ = static_cast<int64_t>(dtype_size(model.activation_dtype()));
  if (model.has_embedding()) tokens_ = &bufs_.add("tokens", {n_micro_, MB_, T_}, DType::I32);
  if (model.has_head()) {
    targets_ = &bufs_.add("targets", {n_micro_, MB_, T_}, DType::I32);
    sums_ = &bufs_.add("loss sums", {n_micro_});
    sums_host_.assign(static_cast<size_t>(n_micro_), 0.0f);
  }
  if (!only_stage && model.has_head())
    stash_ = &bufs_.add("stash", {parallel::max_in_flight(schedule, head_chunk_), numel_}, model.activation_dtype());
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
  const bool embedding = mp.pp_rank == 0, head = mp.pp_rank == mp.pp - 1;  // the rank's ends of the model
  const int n_micro = parallel::schedule_micro_batches(schedule);
  const size_t tokens = static_cast<size_t>(n_micro) * micro_batch * cfg.seq_len;  // of one (n_micro, MB, T) buffer
  size_t n = 0;
  if (embedding) n += slab_aligned(tokens * sizeof(int32_t));
  if (head) n += slab_aligned(tokens * sizeof(int32_t)) + slab_aligned(static_cast<size_t>(n_micro) * 4);
  if (!embedding && head)
    n += slab_aligned(
        static_cast<size_t>(parallel::max_in_flight(schedule, parallel::schedule_virtual_stages(schedule) - 1)) *
        static_cast<size_t>(boundary_numel(cfg, mp, micro_batch)) * dtype_size(act));
  return n;
}

std::vector<int> GptStage::kept_sets(const std::vector<parallel::Action>& schedule,
                                     const std::vector<StagePlan>& chunks) {
  HPCT_CHECK(parallel::schedule_virtual_stages(schedule) == static_cast<int>(chunks.size()),
             "a schedule of {} chunks for a stage of {}", parallel::schedule_virtual_stages(schedule), chunks.size());
  std::vector<int> sets;
  for (size_t c = 0; c < chunks.size(); ++c)
    sets.push_back(chunks[c].has_head ? 1 : parallel::max_in_flight(schedule, static_cast<int>(c)));
  return sets;
}

std::vector<int> GptStage::micro_slots(const std::vector<parallel::Action>& schedule) {
  const int m = parallel::schedule_micro_batches(schedule), v = parallel::schedule_virtual_stages(schedule);
  std::vector<int> slot_of(static_cast<size_t>(m) * v, -1);
  std::vector<std::vector<bool>> busy(static_cast<size_t>(v));  // per chunk
  for (const parallel::Action& a : schedule) {
    int& slot = slot_of[static_cast<size_t>(a.chunk) * m + a.micro];
    std::vector<bool>& b = busy[static_cast<size_t>(a.chunk)];
    if (a.op == parallel::Action::Backward) {
      b[static_cast<size_t>(slot)] = false;
      continue;
    }
    slot = static_cast<int>(std::find(b.begin(), b.end(), false) - b.begin());
    if (slot == static_cast<int>(b.size())) b.push_back(false);
    b[static_cast<size_t>(slot)] = true;
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
  for (const parallel::Action& a : schedule_)  // a micro-batch's loss: at the backward of the chunk with the head
    if (a.op == parallel::Action::Backward && a.chunk == head_chunk_) sum += sums_host_[static_cast<size_t>(a.micro)];
  return sum;
}

void GptStage::forward(int chunk, int micro, const void* in, void* out) {
  const bool embedding = model_.chunks()[static_cast<size_t>(chunk)].has_embedding;
  if (is_head(chunk)) {  // the chunk with the head computes in its backward slot; `in` is valid during this call only
    if (!embedding) k::copy_device(ctx_, stashed(micro), in, numel_ * act_bytes_);
    return;
  }
  // the model copies `in` into the micro-batch's activation set (stream-ordered, before `in` is reused)
  const int set = slot(chunk, micro);
  model_.forward(ctx_, embedding ? tokens(micro) : nullptr, MB_, embedding ? nullptr : in, set, chunk);
  // the executor sends `out` (stream-ordered after this)
  k::copy_device(ctx_, out, model_.stage_output(set, chunk), numel_ * act_bytes_);
}

void GptStage::backward(int chunk, int micro, const void* dout, void* din) {
  if (!is_head(chunk)) {
    model_.backward_stage(ctx_, dout, din, MB_, slot(chunk, micro), chunk);
    return;
  }
  // the chunk with the head: its only forward, then the loss and the backward
  if (model_.has_embedding()) model_.forward(ctx_, tokens(micro), MB_, nullptr, 0, chunk);
  else
    model_.forward(ctx_, nullptr, MB_, stashed(micro), 0, chunk);
  // test hook (core/test_fault.hpp, pp_loss_twice): the last pipeline stage counts micro-batch 0's loss twice
  const float twice = micro == 0 && model_.model_parallel().pp > 1 && fault_active(FaultKind::PpLossTwice) ? 2.0f
                                                                                                           : 1.0f;
  const float* losses = model_.loss_and_backward(ctx_, targets(micro), twice * dloss_, MB_, din);
  k::sum(ctx_, sums_->f32() + micro, losses, static_cast<int64_t>(MB_) * T_);
  if (twice != 1.0f) k::scale(ctx_, sums_->f32() + micro, twice, 1);
}

size_t GptEvaluator::planned_bytes(const GptConfig& cfg, const ModelParallel& mp, int micro_batch, DType act) {
  const size_t tokens = static_cast<size_t>(micro_batch) * cfg.seq_len;
  size_t n = 2 * slab_aligned(tokens * sizeof(int32_t)) + slab_aligned(sizeof(float));
  // rank 0 receives too with virtual stages (its chunks > 0, across the wrap)
  if (mp.pp_rank > 0 || (mp.pp > 1 && mp.virtual_stages > 1))
    n += slab_aligned(static_cast<size_t>(boundary_numel(cfg, mp, micro_batch)) * dtype_size(act));
  return n;
}

GptEvaluator::GptEvaluator(const ExecContext& ctx, Gpt& model, parallel::PipelineTransport* transport)
    : ctx_(ctx), model_(model), transport_(transport), io_("evaluation batch", ctx.device) {
  const int MB = model.micro_batch(), T = model.config().seq_len;
  in_dev_ = &io_.add("inputs", {MB, T}, DType::I32);
  tgt_dev_ = &io_.add("targets", {MB, T}, DType::I32);
  sum_dev_ = &io_.add("loss_sum", {1});
  if (!model.has_embedding() || model.num_chunks() > 1)
    act_ = &io_.add("activation", {model.boundary_numel(MB)}, model.activation_dtype());
  io_.allocate();
  HPCT_CHECK(io_.bytes() == planned_bytes(model.config(), model.model_parallel(), MB, model.activation_dtype()),
             "evaluation buffers of {} bytes differ from their plan", io_.bytes());
  in_host_.assign(static_cast<size_t>(MB) * T, 0);
  tgt_host_.assign(in_host_.size(), 0);
}

double GptEvaluator::loss_sum(const data::TokenEvalSet& eval, int begin, int end, int forwards) {
  const int T = model_.config().seq_len, MB = model_.micro_batch();
  const DType act = model_.activation_dtype();
  const int v = model_.num_chunks();
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
    for (int c = 0; c < v; ++c) {                // this rank's virtual stages, in model order
      const StagePlan& plan = model_.chunks()[static_cast<size_t>(c)];
      const bool embedding = plan.has_embedding, head = plan.has_head;
      if (!embedding) transport_->recv_activation(act_->data, n, act, c, 0, "evaluation activation")->wait();
      model_.forward(ctx_, in_dev_->i32(), b, embedding ? nullptr : act_->data, 0, c);
      if (!head) {
        transport_->send_activation(model_.stage_output(0, c), n, act, c, 0, "evaluation activation")->wait();
        continue;
      }
      const double sum = k::sum_to_host(ctx_, sum_dev_->f32(), model_.loss(ctx_, tgt_dev_->i32(), b),
                                        static_cast<int64_t>(b) * T);
      if (!extra) total += sum;
    }
  }
  return total;
}

}  // namespace hpct::gpt
