// train_gpt as a TrainTask (train/loop/train_task.hpp): the GPT, its token data, AdamW, evaluation on the fixed validation
// set, a text sample at the end. The loop is train/loop/training_loop.cpp.
#include "train/tasks/gpt/gpt_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "core/format.hpp"
#include "core/log.hpp"
#include "data/token_sampler.hpp"
#include "data/token_dataset.hpp"
#include "interop/hf_gpt2.hpp"
#include "kernels/kernels.hpp"
#include "models/gpt/gpt.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "models/gpt/gpt_sample.hpp"
#include "models/gpt/gpt_stage.hpp"
#include "optim/adamw.hpp"
#include "train/checkpoint/protocol.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"
#include "train/plan/memory_plan.hpp"
#include "train/tasks/registry.hpp"
#include "train/tasks/gpt/gpt_auto_plan.hpp"
#include "train/tasks/gpt/gpt_plan.hpp"
#include "train/loop/metrics.hpp"
#include "train/tasks/reference_dump.hpp"
#include "train/checkpoint/resume.hpp"
#include "train/loop/run_device.hpp"
#include "train/loop/training_loop.hpp"

namespace hpct::train {

namespace k = hpct::kernels;

namespace {

// The grid's model-parallel place with the deck's sequence parallelism (the grid does not know the model's keys).
gpt::ModelParallel with_sp(gpt::ModelParallel mp, bool sp) {
  mp.sp = sp;
  return mp;
}

// The run's context with the deck's kernel choices: train.gelu_epilogue, and train.attention as this device and
// storage type get it (kernels::effective_attention; the model plans its attention buffers for the same choice).
ExecContext with_kernel_choices(ExecContext ctx, const GptDeck& d) {
  ctx.gelu_epilogue = d.gelu_epilogue;
  ctx.attention = kernels::effective_attention(d.attention, ctx.device, activation_dtype(ctx.precision));
  HPCT_USAGE_CHECK(ctx.attention != AttentionImpl::Cudnn || kernels::cudnn_attention_built(),
                   "train.attention = cudnn: this build has no cuDNN frontend (its headers were not found when it was "
                   "configured): run scripts/setup.sh, which installs them, then configure and build again; or set "
                   "train.attention = own");
  return ctx;
}

class GptTask final : public TrainTask {
 public:
  GptTask(RunSession& run, const GptDeck& d)
      : run_(run),
        ctx_(with_kernel_choices(run.ctx(), d)),
        d_(d),
        cfg_(d_.model),
        T_(d.model.seq_len),
        GB_(run.cfg.train.global_batch),
        // every shard's header and size, on every rank, before step 1; the tokens are checked against the
        // vocabulary as windows are read (data/token_sampler.hpp), the small evaluation set here
        train_data_(data::TokenDataset::open(d.train_paths, "data.train")),
        val_data_(data::TokenDataset::open(d.val_paths, "data.val")),
        sampler_(train_data_, T_, run.cfg.train.seed, d.model.vocab_size, data::parse_token_order(d.order), GB_),
        eval_set_(val_data_, T_, d.eval_sequences, d.model.vocab_size),
        mp_(with_sp(run.pc.model_parallel(), run.cfg.parallel.sp)),
        // ZeRO-2 places the gradients in its buckets: the model only plans its gradient slab
        model_(
            d.model, run.cfg.train.micro_batch, ctx_.device, mp_, &run.pc.device_tp_group(),
            activation_dtype(ctx_.precision), model_allocates_grads(run.cfg.parallel.sync, run.dp()),
            model_shards_params(run.cfg.parallel.sync, run.dp()),
            {run.cfg.train.recompute,
             gpt::GptStage::kept_sets(run.schedule, gpt::chunk_plans(d.model, mp_.pp, mp_.pp_rank, mp_.virtual_stages)),
             ctx_.attention}),
        evaluator_(ctx_, model_, mp_.pp > 1 ? &run.pc.pipeline_transport() : nullptr),
        // DP rank d takes the contiguous block d of the global batch
        rank_first_(run.dp_rank() * (GB_ / run.dp())) {
    shape_ = {static_cast<double>(GB_) * T_, "tokens", "tok", 0,
              gpt::flops_per_token(cfg_) * static_cast<double>(GB_) * T_};
    if (!model_.params_sharded()) model_.init_parameters(ctx_, run.cfg.train.seed);  // else the loop's (ZeRO-3)
    for (const gpt::ShardSpec& sh : gpt::parameter_layout(cfg_, mp_)) {
      placements_.push_back({sh.global_shape, sh.offset, sh.split_axis, gpt::is_primary_replica(sh, mp_)});
      counted_.push_back(gpt::is_primary_replica(sh, mp_));
      tp_replicated_.push_back(sh.replicated_in_tp);
      is_wte_.push_back(sh.spec.name == "wte");
    }
    if (!run.opts.dump_path.empty())
      dump_ = std::make_unique<ReferenceDump>(run.opts.dump_path, cfg_, d.adamw, run.cfg.train.micro_batch,
                                              run.deck.effective_toml(), run.cfg.train.steps, GB_);
    stage_ = std::make_unique<gpt::GptStage>(ctx_, model_, run.schedule, static_cast<int>(run.n_micro),
                                             [this](int64_t step, int64_t first, int count, int32_t* tok,
                                                    int32_t* tgt) {
                                               sampler_.fill(step, first, count, tok, tgt);
                                               if (dump_) dump_->record_batch(step, first, count, tok, tgt);
                                             });
  }

  parallel::DataParallelModel& model() override { return model_; }
  std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<optim::Segment> segments) override {
    return std::make_unique<optim::AdamW>(model_.params(), std::move(segments), decay_flags(model_.layout()), d_.adamw);
  }
  Slab* compute_copy() override {
    return model_.params_sharded() || model_.activation_dtype() == DType::F32 ? nullptr : &model_.compute_params();
  }
  void set_compute_copy_kept() override { model_.set_compute_copy_kept(); }
  std::vector<TensorPlacement> placements() const override { return placements_; }
  std::string init_from() const override { return d_.init_from; }
  std::unique_ptr<ckpt::TensorSource> open_init_source() override {
    auto src = std::make_unique<interop::HfGpt2Source>(d_.init_from, cfg_);  // checks config.json and every tensor
    log_info("model.init_from: {} ({}): {} tensors, {} parameters{}; vocabulary {} padded to {} with zero rows",
             src->describe(), fmt::join(src->files(), ", "), src->num_tensors(), src->num_parameters(),
             src->n_positions() > T_ ? fmt::format(" (positions: the first {} of {})", T_, src->n_positions()) : "",
             cfg_.vocab_size, cfg_.padded_vocab);
    return src;
  }
  const std::vector<bool>* counted_in_norm() const override { return &counted_; }

  const StepShape& shape() const override { return shape_; }
  int64_t steps() const override { return run_.cfg.train.steps; }
  const optim::LrSchedule& lr_schedule() const override { return d_.lr; }
  std::string layout_axes() const override {
    return fmt::format("dp {} x tp {} x pp {}{} ({})", run_.dp(), mp_.tp, mp_.pp,
                       mp_.virtual_stages > 1 ? fmt::format(" (virtual stages {})", mp_.virtual_stages) : "",
                       run_.pc.grid().order());
  }
  std::string layout_tail() const override { return fmt::format(" | {} tokens/step", GB_ * T_); }
  void log_setup(const optim::Optimizer& opt) override {
    gpt::MemoryPlan plan = gpt::memory_plan(cfg_, mp_, model_.micro_batch(), ctx_.device, model_.activation_dtype(),
                                            model_.kept());
    plan.optim_bytes = opt.state_bytes();  // 1/DP of the unsharded figure under ZeRO-1
    log_info("model: L={} NH={} C={} T={} V={} (padded {}) bias={} | {} parameters ({:.3f} M)", cfg_.n_layer,
             cfg_.n_head, cfg_.n_embd, T_, cfg_.vocab_size, cfg_.padded_vocab, cfg_.bias, plan.num_params,
             plan.num_params / 1e6);
    log_info(
        "memory per rank: params {} | grads {} | optimizer {} (unsharded {}) | 16-bit compute copy {} | activations "
        "{} ({}) | activation grads {} | total {}",
        human_bytes(plan.param_bytes), human_bytes(plan.grad_bytes), human_bytes(plan.optim_bytes),
        human_bytes(2.0 * plan.param_bytes), human_bytes(plan.compute_param_bytes), human_bytes(plan.activation_bytes),
        dtype_name(model_.activation_dtype()), human_bytes(plan.activation_grad_bytes), human_bytes(plan.total()));
    double worst[2] = {static_cast<double>(plan.param_bytes), static_cast<double>(plan.total())};
    run_.pc.world().allreduce(worst, 2, DType::F64, comm::ReduceOp::Max, "memory report");
    log_info("memory, max over the {} ranks: params {} | total {} (every rank: train_gpt DECK --plan {})",
             run_.pc.world_size(), human_bytes(worst[0]), human_bytes(worst[1]), run_.pc.world_size());
    if (ctx_.device == Device::CUDA) {
      const bool half_storage = model_.activation_dtype() != DType::F32;  // the two keys' condition besides CUDA
      log_info("attention: {}{} | MLP GELU: {}",
               ctx_.attention == AttentionImpl::Cudnn ? "cuDNN's fused attention (train.attention = cudnn)"
                                                      : "the own flash kernels",
               d_.attention != ctx_.attention ? " (train.attention = cudnn needs bf16 or fp16 storage)" : "",
               !d_.gelu_epilogue ? "the own kernels (train.gelu_epilogue = false)"
               : half_storage    ? "in cuBLASLt's GEMM epilogues (train.gelu_epilogue = true)"
                                 : "the own kernels (train.gelu_epilogue needs bf16 or fp16 storage)");
    }
    log_info("data: train {} | order {} ({} windows{}) | val {} (eval set {} x {} tokens)", train_data_.describe(),
             d_.order, sampler_.num_windows(), sampler_.order() == data::TokenOrder::Epoch ? " per epoch" : "",
             val_data_.describe(), eval_set_.num_sequences(), T_);
  }
  MemoryKinds model_memory() const override {
    return gpt_model_kinds(model_.memory(), stage_->bytes() + evaluator_.bytes(),
                           kernels::device_workspace_bytes(ctx_.device, model_.activation_dtype()));
  }
  void before_first_step() override {
    if (!dump_) return;
    dump_->record_params(ctx_, model_, "init");
    // the logits of hpctrain's forward at the starting weights on step 1's first micro-batch (the interop tests
    // compare them with transformers'); fp32 activations only (the dump is one rank: no TP, PP or ZeRO-3)
    if (model_.activation_dtype() != DType::F32) return;
    const int b = model_.micro_batch();
    std::vector<int32_t> tok(static_cast<size_t>(b) * T_), tgt(tok.size());
    sampler_.fill(1, 0, b, tok.data(), tgt.data());
    Tensor& in = evaluator_.tokens();  // (MB, T) i32 on the device
    k::copy_from_host(ctx_, in.data, tok.data(), static_cast<int64_t>(tok.size() * sizeof(int32_t)));
    model_.forward(ctx_, static_cast<const int32_t*>(in.data), b);
    std::vector<float> logits(static_cast<size_t>(b) * T_ * cfg_.padded_vocab);  // (b, T, Vp)
    k::copy_to_host(ctx_, logits.data(), model_.logits().data, static_cast<int64_t>(logits.size() * sizeof(float)));
    k::synchronize(ctx_);
    dump_->record_logits(tok, std::move(logits), b);
  }

  void begin_step(int64_t step, float dloss) override {
    model_.zero_grad(ctx_);
    model_.reset_tp_comm_ms();
    stage_->begin_step(step, rank_first_, dloss);
  }
  parallel::PipelineStage& stage() override { return *stage_; }
  // the tied embedding's gradient is summed over the first and last stage after the schedule, before the DP sync
  bool gradients_final_in_last_backward() const override { return mp_.pp == 1; }
  std::vector<double> end_step() override {
    double loss_sum = stage_->end_step();  // non-zero on the stage with the head only
    parallel::ParallelContext& pc = run_.pc;
    if (mp_.pp > 1) pc.pp_group().allreduce(&loss_sum, 1, DType::F64, comm::ReduceOp::Sum, "loss sum (pipeline)");
    if (pc.has_embedding_group() && pc.embedding_group().size() > 1) {  // tied embedding: first + last stage
      Tensor& dwte = model_.grads().get("wte");  // device memory: the NCCL embedding group on CUDA
      pc.device_embedding_group().allreduce(dwte.data, dwte.numel(), DType::F32, comm::ReduceOp::Sum,
                                            "tied embedding gradient");
    }
    return {loss_sum};
  }
  void after_gradients(int64_t step) override {
    if (dump_ && step == 1) dump_->record_grads(ctx_, model_);
  }
  StepReport report_step(int64_t, const std::vector<double>&) override {
    StepReport r;
    tp_ms_.push_back(model_.tp_comm_ms());
    r.perf = {{"tp_comm_ms", model_.tp_comm_ms()}};
    if (mp_.tp > 1) r.comm_text = fmt::format(", TP {:.1f}", model_.tp_comm_ms());
    return r;
  }
  void record_step(int64_t step, double loss, double lr, double norm) override {
    if (dump_) dump_->record_step(step, loss, lr, norm);
  }

  EvalResult evaluate() override {
    // the fixed evaluation set, split over the DP ranks (contiguous blocks), summed
    const int n_eval = eval_set_.num_sequences(), dp = run_.dp(), dr = run_.dp_rank();
    const int e0 = static_cast<int>(static_cast<int64_t>(n_eval) * dr / dp);
    const int e1 = static_cast<int>(static_cast<int64_t>(n_eval) * (dr + 1) / dp);
    const auto forwards = static_cast<int>(
        evaluation_forwards(model_.params_sharded(), n_eval, dp, model_.micro_batch()));
    double part = evaluator_.loss_sum(eval_set_, e0, e1, forwards);
    if (mp_.pp > 1)
      run_.pc.pp_group().allreduce(&part, 1, DType::F64, comm::ReduceOp::Sum, "validation loss (pipeline)");
    run_.pc.dp_group().allreduce(&part, 1, DType::F64, comm::ReduceOp::Sum, "validation loss");
    EvalResult r;
    r.loss = part / (static_cast<double>(n_eval) * T_);
    r.text = fmt::format(" | val loss {:.6f}", r.loss);
    return r;
  }

  void checkpoint_attrs(ckpt::Attrs& a, int64_t s) const override {
    a.ints["tokens_seen"] = s * GB_ * T_;
    a.ints["sequences_seen"] = s * GB_;
    a.ints["model.vocab_size"] = cfg_.vocab_size;
    a.ints["model.padded_vocab"] = cfg_.padded_vocab;
    a.strings["layout"] = fmt::format("world={} dp={} tp={} pp={} virtual_stages={} zero={} order={}",
                                      run_.pc.world_size(), run_.dp(), mp_.tp, mp_.pp, mp_.virtual_stages,
                                      run_.cfg.parallel.sync.zero, run_.pc.grid().order());
    a.strings["data.order"] = d_.order;
    a.strings["data.train.shards"] = shard_list_json(train_data_.info());
    a.strings["data.val.shards"] = shard_list_json(val_data_.info());
    a.strings["rng.algorithm"] = "philox4x32-10 keyed by (train.seed, stream name, counter); streams are functions "
                                 "of the step, so rng.seed and step are the whole state";
  }
  void check_resume(const ckpt::Reader& reader) override {
    check_token_data_resume(reader.attrs(), reader.dir(), run_.deck.deck_path(), d_.order, train_data_.info(),
                            val_data_.info(), d_.allow_changed);
  }
  // whole parameters over DP, replicated tensors over TP, the tied embedding's two copies (first and last stage)
  void check_replicas(CheckpointStaging& staging, const std::string& when) override {
    if (model_.params_sharded()) return;  // ZeRO-3: each rank holds its shares of the masters only, no replica
    parallel::ParallelContext& pc = run_.pc;
    Slab& params = staging.params();
    train::check_replicas(pc.dp_group(), params, when);
    train::check_replicas(pc.tp_group(), params, when + ", TP-replicated tensors", &tp_replicated_);
    if (pc.has_embedding_group() && pc.embedding_group().size() > 1)
      train::check_replicas(pc.embedding_group(), params, when + ", tied embedding (first and last stage)", &is_wte_);
  }

  void finish(int exit_code) override {
    if (dump_) {
      dump_->record_params(ctx_, model_, "final");
      dump_->write();
      log_info("reference dump written to {}", run_.opts.dump_path);
    }
    if (exit_code == 0 && d_.sample.tokens > 0 && (mp_.tp > 1 || mp_.pp > 1))
      log_info("sample: skipped (generation with tensor parallelism is not implemented; the checkpoint can be sampled "
               "at tp = 1)");
    else if (exit_code == 0 && d_.sample.tokens > 0 && model_.params_sharded())
      log_info("sample: skipped (the parameters are sharded under ZeRO-3; the checkpoint can be sampled on one "
               "rank)");
    else if (exit_code == 0 && d_.sample.tokens > 0 && run_.pc.rank() == 0 && mp_.tp == 1 && mp_.pp == 1)
      log_info("sample (temperature {}, top-k {}):\n{}\n--- end of sample ---", d_.sample.temperature, d_.sample.top_k,
               gpt::generate(ctx_, model_, d_.sample, evaluator_.tokens(), run_.cfg.train.seed));
  }
  PerfColumns perf_columns(double last_loss, const std::optional<EvalResult>& eval) const override {
    return {"dp tp pp",      fmt::format("{} {} {}", run_.dp(), mp_.tp, mp_.pp),
            "loss val_loss", fmt::format("{:.6f} {:.6f}", last_loss, eval ? eval->loss : NAN),
            "tp_comm_ms",    fmt::format("{:.2f}", median_after_first(tp_ms_))};
  }

 private:
  RunSession& run_;
  const ExecContext ctx_;  // the run's, with the deck's kernel choices (train.gelu_epilogue, train.attention)
  const GptDeck d_;
  const gpt::GptConfig& cfg_;
  int T_;
  int64_t GB_;
  StepShape shape_;
  const data::TokenDataset train_data_, val_data_;
  const data::TokenBatchSampler sampler_;
  const data::TokenEvalSet eval_set_;
  gpt::ModelParallel mp_;
  gpt::Gpt model_;
  gpt::GptEvaluator evaluator_;
  int64_t rank_first_;
  std::vector<TensorPlacement> placements_;
  std::vector<bool> counted_, tp_replicated_, is_wte_;
  std::unique_ptr<ReferenceDump> dump_;
  std::unique_ptr<gpt::GptStage> stage_;
  std::vector<double> tp_ms_;
};

}  // namespace

int run_gpt(const Config& deck, const RunOptions& opts) {
  const RunConfig cfg = read_run_config(deck);
  const GptDeck gpt_deck = read_gpt_deck(deck, cfg);  // the model against the layout, before any collective
  RunSession run("train_gpt", deck, gpt_deck_schema(), cfg, opts);
  // train.memory_limit_gb: every rank's plan on the decided device, before the model allocates
  check_memory_limit(cfg.train.memory_limit_gb,
                     plan_gpt_memory(gpt_deck.model, cfg, run.pc.world_size(),
                                     {run.ctx().device, activation_dtype(run.ctx().precision)}, gpt_deck.attention),
                     cfg.parallel.sync.zero,
                     fmt::format("train_gpt {} --plan {}", deck.deck_path(), run.pc.world_size()));
  GptTask task(run, gpt_deck);
  return run_training(run, task);
}

TrainingApp gpt_training_app() {
  return {"train_gpt",
          "hpctrain train_gpt: trains a GPT-2-family model described by a TOML deck",
          "inputs/gpt_tiny.toml",
          "write initial weights, batches, losses and step-1 gradients to this HDF5 file (for the PyTorch cross-check)",
          "validate the layout for a world of this many ranks and print every rank's memory plan by kind (the memory "
          "record's), without data or training (e.g. --plan 8 --set parallel.tp=4)",
          "with --plan: also print one JSON line {\"plan\":{...}} (parameters, FLOPs per token and per step, memory by "
          "kind, the device's peak TFLOP/s)",
          &gpt_deck_schema,
          &run_gpt,
          &plan_gpt,
          &auto_plan_gpt};
}

}  // namespace hpct::train
