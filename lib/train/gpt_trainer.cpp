#include "train/gpt_trainer.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <numeric>

#include <omp.h>

#include "core/format.hpp"
#include "comm/communicator.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "data/token_sampler.hpp"
#include "data/token_shard.hpp"
#include "kernels/kernels.hpp"
#include "models/gpt/gpt.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/grid.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/parallel_context.hpp"
#include "train/checkpointing.hpp"
#include "train/gpt_deck.hpp"
#include "train/stop_signals.hpp"
#include "train/metrics.hpp"
#include "train/reference_dump.hpp"
#include "train/run_support.hpp"

namespace hpct::train {

namespace fs = std::filesystem;
namespace k = hpct::kernels;

namespace {

// Sum of the token losses over sequences [begin, end) of the fixed evaluation set, micro_batch at a time.
// Under pipeline parallelism (pp non-null) each micro-batch runs through the stages over the training's transport: a
// later stage receives its input in act (MB, T, C, on the transport's device = ctx.device) from the previous one and
// sends its output on, straight from stage_output(); only the last stage computes losses, so the sum is non-zero
// there alone (the caller reduces it over the PP group). With NCCL the waits are stream-ordered: the send's wait()
// keeps the next forward from overwriting stage_output() before it has gone, the receive into act is queued after the
// forward that copied act in. Every micro-batch passes micro 0 to the transport: evaluation runs between steps, when
// no training transfer is in flight, and each link carries it in order (MPI: tag 0, matched in order like NCCL).
double evaluate(const ExecContext& ctx, gpt::Gpt& model, const data::TokenEvalSet& eval, int begin, int end,
                Tensor& in_dev, Tensor& tgt_dev, std::vector<int32_t>& in_host, std::vector<int32_t>& tgt_host,
                Tensor& sum_dev, parallel::PipelineTransport* pp = nullptr, float* act = nullptr) {
  const int T = model.config().seq_len, MB = model.micro_batch();
  const gpt::StagePlan& st = model.stage();
  double total = 0.0;
  for (int first = begin; first < end; first += MB) {
    const int b = std::min(MB, end - first);
    k::synchronize(ctx);  // the last micro-batch's copies from in_host / tgt_host are done before we refill them
    eval.fill(first, b, in_host.data(), tgt_host.data());
    k::copy_from_host(ctx, in_dev.data, in_host.data(), static_cast<int64_t>(b) * T * 4);
    k::copy_from_host(ctx, tgt_dev.data, tgt_host.data(), static_cast<int64_t>(b) * T * 4);
    const int64_t n = static_cast<int64_t>(b) * T * model.config().n_embd;  // the stage boundary activation
    if (!st.has_embedding) pp->recv_activation(act, n, 0, "evaluation activation")->wait();
    model.forward(ctx, in_dev.i32(), b, st.has_embedding ? nullptr : act);
    if (!st.has_head) {
      pp->send_activation(model.stage_output(), n, 0, "evaluation activation")->wait();
      continue;
    }
    total += sum_to_host(ctx, sum_dev, model.loss(ctx, tgt_dev.i32(), b), static_cast<int64_t>(b) * T);
  }
  return total;
}

// Autoregressive sampling with temperature and top-k; the context slides when it exceeds seq_len.
std::string generate(const ExecContext& ctx, gpt::Gpt& model, const Config& deck, Tensor& in_dev, uint64_t seed) {
  const auto& c = model.config();
  const int T = c.seq_len, V = c.vocab_size, Vp = c.padded_vocab;
  const int n_new = static_cast<int>(deck.get_int("sample.tokens"));
  const double temperature = deck.get_float("sample.temperature");
  const int top_k = static_cast<int>(deck.get_int("sample.top_k"));
  std::vector<int32_t> tokens;
  for (unsigned char ch : deck.get_string("sample.prompt")) tokens.push_back(std::min<int32_t>(ch, V - 1));
  if (tokens.empty()) tokens.push_back(0);
  const size_t prompt_len = tokens.size();
  std::vector<int32_t> window(static_cast<size_t>(T), 0);
  std::vector<float> row(static_cast<size_t>(Vp));
  std::vector<std::pair<float, int>> cand(static_cast<size_t>(V));
  for (int i = 0; i < n_new; ++i) {
    const size_t start = tokens.size() > static_cast<size_t>(T) ? tokens.size() - T : 0;
    const int len = static_cast<int>(tokens.size() - start);
    std::fill(window.begin(), window.end(), 0);
    std::copy(tokens.begin() + static_cast<int64_t>(start), tokens.end(), window.begin());
    k::copy_from_host(ctx, in_dev.data, window.data(), static_cast<int64_t>(T) * 4);
    model.forward(ctx, in_dev.i32(), 1);  // causal: position len-1 sees only the real tokens
    k::copy_to_host(ctx, row.data(), model.logits() + static_cast<int64_t>(len - 1) * Vp, static_cast<int64_t>(Vp) * 4);
    k::synchronize(ctx);  // row is read now, window rewritten next
    for (int v = 0; v < V; ++v) cand[v] = {row[v], v};
    const int kk = top_k > 0 ? std::min(top_k, V) : V;
    std::partial_sort(cand.begin(), cand.begin() + kk, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
    double z = 0.0;
    std::vector<double> p(static_cast<size_t>(kk));
    for (int j = 0; j < kk; ++j) z += p[j] = std::exp((cand[j].first - cand[0].first) / temperature);
    double u = rng::uniform(seed, rng::stream_of("sample"), static_cast<uint64_t>(i)) * z;
    int pick = cand[kk - 1].second;
    for (int j = 0; j < kk; ++j) {
      if ((u -= p[j]) <= 0.0) {
        pick = cand[j].second;
        break;
      }
    }
    tokens.push_back(pick);
  }
  std::string text;
  for (size_t i = prompt_len; i < tokens.size(); ++i) text += static_cast<char>(tokens[i]);
  return text;
}

// One training step's batch of this rank on ctx.device: n_micro micro-batches of MB sequences (micro-batch j = the
// rank's sequences [rank_first + j MB, rank_first + (j+1) MB)), their tokens and/or targets filled from the sampler and
// staged with one copy each, and one loss sum per micro-batch, which stays on the device until read_loss_sums() reads
// them all with one copy and one synchronize: the micro-batch loop never blocks the host.
struct StepBatch {
  const ExecContext& ctx;
  int n_micro = 0, MB = 0, T = 0;
  Slab bufs;
  Tensor* tokens = nullptr;  // (n_micro, MB, T) i32
  Tensor* targets = nullptr;  // (n_micro, MB, T) i32
  Tensor* sums = nullptr;     // (n_micro) f32
  std::vector<int32_t> tok_host, tgt_host;  // (n_micro, MB, T): the sampler fills both
  std::vector<float> sums_host;             // (n_micro)

  StepBatch(const ExecContext& c, int n_micro_, int mb, int t, bool with_tokens, bool with_targets)
      : ctx(c), n_micro(n_micro_), MB(mb), T(t), bufs("step batch", c.device) {
    if (with_tokens) tokens = &bufs.add("tokens", {n_micro, MB, T}, DType::I32);
    if (with_targets) {
      targets = &bufs.add("targets", {n_micro, MB, T}, DType::I32);
      sums = &bufs.add("loss sums", {n_micro});
      sums_host.assign(static_cast<size_t>(n_micro), 0.0f);
    }
    bufs.allocate();
    if (with_tokens || with_targets) {
      tok_host.assign(static_cast<size_t>(n_micro) * MB * T, 0);
      tgt_host.assign(tok_host.size(), 0);
    }
  }
  const int32_t* tok(int micro) const { return tokens->i32() + static_cast<int64_t>(micro) * MB * T; }
  const int32_t* tgt(int micro) const { return targets->i32() + static_cast<int64_t>(micro) * MB * T; }
  // Adds the sum of micro-batch `micro`'s n token losses to its slot (on the device).
  void add_loss(int micro, const float* losses) { k::sum(ctx, sums->f32() + micro, losses, static_cast<int64_t>(MB) * T); }

  void load(const data::TokenBatchSampler& sampler, int64_t step, int64_t rank_first, ReferenceDump* dump) {
    if (tok_host.empty()) return;
    k::synchronize(ctx);  // the last step's copies from tok_host / tgt_host are done (the stream is idle here anyway)
    for (int j = 0; j < n_micro; ++j) {
      const int64_t first = rank_first + static_cast<int64_t>(j) * MB, off = static_cast<int64_t>(j) * MB * T;
      sampler.fill(step, first, MB, tok_host.data() + off, tgt_host.data() + off);
      if (dump) dump->record_batch(step, first, MB, tok_host.data() + off, tgt_host.data() + off);
    }
    if (tokens) k::copy_from_host(ctx, tokens->data, tok_host.data(), static_cast<int64_t>(tok_host.size()) * 4);
    if (targets) k::copy_from_host(ctx, targets->data, tgt_host.data(), static_cast<int64_t>(tgt_host.size()) * 4);
  }
  // The per-micro-batch loss sums (CUDA: one copy, then a synchronize bounded by the sync guard).
  const std::vector<float>& read_loss_sums() {
    k::copy_to_host(ctx, sums_host.data(), sums->data, static_cast<int64_t>(n_micro) * 4);
    k::synchronize(ctx);  // sums_host is read now
    return sums_host;
  }
};

// One pipeline stage of the GPT for the schedule executor (parallel/pipeline_schedule.hpp). Activations are
// not kept between a micro-batch's forward and its backward: each stage keeps its input (the tokens on the
// first stage, the received activation on the others) and recomputes its forward right before the backward
// (full recomputation per stage: one extra forward, activation memory of one micro-batch plus the inputs).
// The last stage computes the loss and the head in its backward slot.
// Everything lives on ctx.device, the transport's device (the CPU: host memory and MPI; CUDA: device memory and the
// NCCL links), so nothing in forward() or backward() blocks the host: begin_step() stages the step's tokens (first
// stage) and targets (last stage) as a StepBatch, the stage inputs are stashed with copy_device, the last stage's
// loss sum of each micro-batch stays on the device until end_step() reads them with one copy and one synchronize, and
// the transfers are ordered with the kernels on the compute stream (pipeline_transport.hpp).
struct GptPipelineStage : parallel::PipelineStage {
  const ExecContext& ctx;
  gpt::Gpt& model;
  const data::TokenBatchSampler& sampler;
  const std::vector<parallel::Action>& schedule;
  int MB = 0, T = 0, n_micro = 0;
  int64_t numel = 0;
  StepBatch batch;  // tokens: first stage; targets and loss sums: last stage
  Slab bufs;
  Tensor* stash = nullptr;  // (n_micro, MB, T, C): the stage inputs of a step (later stages)
  float dloss = 0.0f;

  GptPipelineStage(const ExecContext& c, gpt::Gpt& m, const data::TokenBatchSampler& smp,
                   const std::vector<parallel::Action>& sched, int n_micro_, int mb)
      : ctx(c), model(m), sampler(smp), schedule(sched), MB(mb), T(m.config().seq_len), n_micro(n_micro_),
        batch(c, n_micro_, mb, m.config().seq_len, m.stage().has_embedding, m.stage().has_head),
        bufs("pipeline stage", c.device) {
    numel = static_cast<int64_t>(mb) * T * m.config().n_embd;
    if (!m.stage().has_embedding) stash = &bufs.add("stash", {n_micro, MB, T, m.config().n_embd});
    bufs.allocate();
  }
  int64_t activation_numel() const override { return numel; }
  float* stashed(int micro) { return stash->f32() + static_cast<int64_t>(micro) * numel; }

  // The step's tokens, micro-batch j = the rank's sequences [rank_first + j MB, rank_first + (j+1) MB).
  void begin_step(int64_t step, int64_t rank_first, float dloss_) {
    dloss = dloss_;
    batch.load(sampler, step, rank_first, nullptr);
  }
  // The sum of the step's token losses (the last stage; 0 elsewhere), added in backward order (as micro-batches finish).
  double end_step() {
    if (!model.stage().has_head) return 0.0;
    const std::vector<float>& sums_host = batch.read_loss_sums();
    double sum = 0.0;
    for (const parallel::Action& a : schedule)
      if (a.op == parallel::Action::Backward) sum += sums_host[static_cast<size_t>(a.micro)];
    return sum;
  }
  void forward(int micro, const float* in, float* out) override {
    const auto& st = model.stage();
    if (st.has_embedding) {
      model.forward(ctx, batch.tok(micro), MB);
    } else {
      k::copy_device(ctx, stashed(micro), in, numel * 4);  // `in` is valid during this call only
      if (st.has_head) return;  // the last stage computes in its backward slot
      model.forward(ctx, nullptr, MB, stashed(micro));
    }
    k::copy_device(ctx, out, model.stage_output(), numel * 4);  // the executor sends `out` (stream-ordered after this)
  }
  void backward(int micro, const float* dout, float* din) override {
    const auto& st = model.stage();
    if (st.has_embedding) {
      model.forward(ctx, batch.tok(micro), MB);  // recompute
      model.backward_stage(ctx, dout, nullptr, MB);
      return;
    }
    model.forward(ctx, nullptr, MB, stashed(micro));  // recompute (the last stage: its only forward)
    if (!st.has_head) {
      model.backward_stage(ctx, dout, din, MB);
      return;
    }
    batch.add_loss(micro, model.loss_and_backward(ctx, batch.tgt(micro), dloss, MB, din));
  }
};

}  // namespace

int plan_gpt(const Config& deck, int world) {
  const gpt::GptConfig cfg = gpt::GptConfig::from_deck(deck);
  const int tp = static_cast<int>(deck.get_int("parallel.tp")), pp = static_cast<int>(deck.get_int("parallel.pp"));
  const std::string where = fmt::format("deck {}", deck.deck_path());
  const parallel::Grid grid(world, tp, pp, deck.get_string("parallel.order"), where);
  gpt::validate_model_parallel(cfg, tp, pp, where);
  const int MB = static_cast<int>(deck.get_int("train.micro_batch"));
  const int zero = static_cast<int>(deck.get_int("parallel.zero"));
  const int dp = grid.dp();
  // the backend's buffer sizes (attention: T x T probabilities on the CPU, a log-sum-exp per row on CUDA); "auto"
  // is planned as the CPU, where it falls back without a GPU
  const Device plan_device = deck.get_string("train.device") == "cuda" ? Device::CUDA : Device::CPU;
  const gpt::MemoryPlan serial = gpt::memory_plan(cfg, MB, plan_device);
  std::printf("plan: %s | %s | micro_batch %d | ZeRO-%d | device %s | model %lld parameters (padded vocabulary %d)\n",
              deck.deck_path().c_str(), grid.describe().c_str(), MB, zero, device_name(plan_device),
              static_cast<long long>(serial.num_params), cfg.padded_vocab);
  std::printf("%8s %8s %8s | %12s %12s %12s %12s %12s\n", "pp_rank", "tp_rank", "layers", "params", "grads",
              "optimizer", "activations", "total");
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) {
      const gpt::ModelParallel mp{tp, t, pp, p};
      gpt::MemoryPlan m = gpt::memory_plan(cfg, mp, MB, plan_device);
      if (zero) m.optim_bytes = (m.optim_bytes + dp - 1) / dp;  // sharded over DP (to within a bucket's rounding)
      const gpt::StagePlan st = gpt::stage_plan(cfg, pp, p);
      std::printf("%8d %8d %3d..%-4d | %12s %12s %12s %12s %12s\n", p, t, st.first_layer, st.end_layer - 1,
                  human_bytes(m.param_bytes).c_str(), human_bytes(m.grad_bytes).c_str(),
                  human_bytes(m.optim_bytes).c_str(),
                  human_bytes(m.activation_bytes + m.activation_grad_bytes).c_str(), human_bytes(m.total()).c_str());
    }
  std::printf("(activations: one micro-batch; a pipeline stage also keeps its inputs of the step's micro-batches)\n");
  return 0;
}

int run_gpt(const Config& deck, const RunOptions& opts) {
  // ---- configuration, validated before any work ---------------------------------------------
  const gpt::GptConfig cfg = gpt::GptConfig::from_deck(deck);
  const int64_t steps = deck.get_int("train.steps");
  const uint64_t seed = static_cast<uint64_t>(deck.get_int("train.seed"));
  const int64_t GB = deck.get_int("train.global_batch");
  const int MB = static_cast<int>(deck.get_int("train.micro_batch"));
  const int T = cfg.seq_len;
  const std::string where = fmt::format("deck {}", deck.deck_path());
  const int tp = static_cast<int>(deck.get_int("parallel.tp")), pp = static_cast<int>(deck.get_int("parallel.pp"));
  gpt::validate_model_parallel(cfg, tp, pp, where);
  comm::CommOptions copts;
  copts.timeout_s = deck.get_float("comm.timeout_s");
  // Slurm / launcher facts and the node-local rank (the CUDA backend's GPU choice), before the ParallelContext: srun
  // tasks that did not wire up into one MPI job stop here (run_support.hpp)
  const parallel::LaunchEnv launch = read_launch(copts);
  // train.device, agreed by every rank; on CUDA the GPU (local_rank % devices) and the compute stream. Before the
  // ParallelContext, which builds its NCCL groups on that GPU; declared first, so it outlives everything that computes.
  const RunDevice run_device(deck, launch, copts);
  parallel::ParallelContext pc(tp, pp, deck.get_string("parallel.order"), copts, where, run_device.exec());
  // the compute context, with the ParallelContext's bounded synchronize on CUDA (NCCL work is queued on the stream)
  const ExecContext& ctx = pc.exec();
  const int dp = pc.dp_size(), dr = pc.dp_rank();
  HPCT_USAGE_CHECK(GB % (static_cast<int64_t>(dp) * MB) == 0,
                   "deck {}: train.global_batch={} is not divisible by DP x train.micro_batch = {} x {}; choose a "
                   "global batch that is a multiple of {}",
                   deck.deck_path(), GB, dp, MB, static_cast<int64_t>(dp) * MB);
  HPCT_USAGE_CHECK(opts.dump_path.empty() || pc.world_size() == 1,
                   "--dump writes the serial reference state: run it on one rank (world size is {})",
                   pc.world_size());
  const int64_t n_micro = GB / (dp * MB);
  const int64_t rank_first = dr * (GB / dp);  // DP rank d takes the contiguous block d of the global batch

  optim::LrSchedule sched;
  sched.lr = deck.get_float("optim.lr");
  sched.final_lr_frac = deck.get_float("optim.final_lr_frac");
  sched.warmup_steps = deck.get_int("optim.warmup_steps");
  sched.decay_steps = deck.get_int("optim.decay_steps") > 0 ? deck.get_int("optim.decay_steps") : steps;
  HPCT_USAGE_CHECK(sched.decay_steps >= sched.warmup_steps || steps == 0,
                   "deck {}: optim.decay_steps={} is before the end of optim.warmup_steps={}", deck.deck_path(),
                   sched.decay_steps, sched.warmup_steps);
  optim::AdamWConfig ocfg;
  ocfg.beta1 = static_cast<float>(deck.get_float("optim.beta1"));
  ocfg.beta2 = static_cast<float>(deck.get_float("optim.beta2"));
  ocfg.eps = static_cast<float>(deck.get_float("optim.eps"));
  ocfg.weight_decay = static_cast<float>(deck.get_float("optim.weight_decay"));
  ocfg.grad_clip = static_cast<float>(deck.get_float("optim.grad_clip"));
  const int64_t log_every = deck.get_int("log.every");
  const int64_t eval_every = deck.get_int("train.eval_every");
  const double peak_tflops = deck.get_float("log.peak_tflops");
  const int ckpt_keep = static_cast<int>(deck.get_int("checkpoint.keep"));
  check_deadline(deck);

  // ---- data ------------------------------------------------------------------------------
  const data::TokenShard train_shard = data::TokenShard::open(resolve_data_path(deck.get_string("data.train")));
  const data::TokenShard val_shard = data::TokenShard::open(resolve_data_path(deck.get_string("data.val")));
  const data::TokenBatchSampler sampler(train_shard, T, seed);
  const data::TokenEvalSet eval_set(val_shard, T, static_cast<int>(deck.get_int("data.eval_sequences")));
  auto check_vocab = [&](const data::TokenShard& s) {
    int max_tok = 0;
    const uint16_t* t = s.tokens();
    for (int64_t i = 0; i < s.size(); ++i) max_tok = std::max<int>(max_tok, t[i]);
    HPCT_USAGE_CHECK(max_tok < cfg.vocab_size,
                     "data file {} holds token {} but model.vocab_size = {}; raise model.vocab_size or re-tokenise",
                     s.path(), max_tok, cfg.vocab_size);
  };
  check_vocab(train_shard);
  check_vocab(val_shard);

  // ---- output directory ---------------------------------------------------------------------
  const std::string ckpt_root = prepare_output(pc, opts.out_dir);

  // ---- model, gradient sync, optimizer, planned buffers (nothing allocates in the step loop) -----
  const gpt::ModelParallel mp{tp, pc.tp_rank(), pp, pc.pp_rank()};
  gpt::Gpt model(cfg, MB, ctx.device, mp, &pc.device_tp_group());
  model.init_parameters(ctx, seed);
  const parallel::GradSyncOptions gso = grad_sync_options(deck);
  parallel::GradSync grad_sync(pc.device_dp_group(), model.params(), model.grads(), gso);
  model.set_grad_ready_hook([&grad_sync](int first, int end) { grad_sync.on_ready(first, end); });
  optim::AdamW adamw(model.params(), owned_segments(grad_sync), decay_flags(model.layout()), ocfg);
  optim::LossScaler scaler(loss_scale_config(deck, ctx.precision));
  // where each local tensor sits in the serial one, which replica counts (grad norm) and is written (checkpoint)
  std::vector<TensorPlacement> placements;
  std::vector<bool> counted, tp_replicated, is_wte;
  for (const gpt::ShardSpec& sh : gpt::parameter_layout(cfg, mp)) {
    placements.push_back({sh.global_shape, sh.offset, sh.split_axis, gpt::is_primary_replica(sh, mp)});
    counted.push_back(gpt::is_primary_replica(sh, mp));
    tp_replicated.push_back(sh.replicated_in_tp);
    is_wte.push_back(sh.spec.name == "wte");
  }
  // what checkpoints and replica checks read, as host memory (on the CPU: the model's own tensors, zero-copy)
  CheckpointStaging staging(ctx, model.params(), optimizer_state(adamw));
  // replicas must stay bitwise equal (DESIGN.md §6): whole parameters over DP, replicated tensors over TP
  auto check_all_replicas = [&](const std::string& when) {  // after staging.to_host()
    Slab& params = staging.params();
    check_replicas(pc.dp_group(), params, when);
    check_replicas(pc.tp_group(), params, when + ", TP-replicated tensors", &tp_replicated);
    if (pc.has_embedding_group() && pc.embedding_group().size() > 1)  // the tied embedding's two copies
      check_replicas(pc.embedding_group(), params, when + ", tied embedding (first and last stage)", &is_wte);
  };
  Slab io("batch", ctx.device);
  Tensor& in_dev = io.add("inputs", {MB, T}, DType::I32);
  Tensor& tgt_dev = io.add("targets", {MB, T}, DType::I32);
  Tensor& sum_dev = io.add("loss_sum", {1});
  io.allocate();
  std::vector<int32_t> in_host(static_cast<size_t>(MB) * T), tgt_host(in_host.size());
  // without pipeline parallelism, a training step's batch of this rank (the pipeline stage holds its own)
  std::optional<StepBatch> step_batch;
  if (pp == 1) step_batch.emplace(ctx, static_cast<int>(n_micro), MB, T, true, true);
  // pipeline parallelism: the schedule of this stage, its planned buffers, the stage adaptor
  const bool pipe = pp > 1;
  const parallel::ScheduleKind sched_kind = parallel::parse_schedule_kind(deck.get_string("parallel.schedule"));
  std::unique_ptr<GptPipelineStage> stage;
  std::unique_ptr<parallel::PipelineBuffers> pbufs;
  std::vector<parallel::Action> schedule;
  Slab eval_io("pipeline evaluation", ctx.device);
  Tensor* eval_act = nullptr;  // (MB, T, C): the activation passed between stages during evaluation
  if (pipe) {
    schedule = parallel::make_schedule(sched_kind, pp, pc.pp_rank(), static_cast<int>(n_micro));
    stage = std::make_unique<GptPipelineStage>(ctx, model, sampler, schedule, static_cast<int>(n_micro), MB);
    pbufs = std::make_unique<parallel::PipelineBuffers>(schedule, stage->activation_numel(),
                                                        pc.pipeline_transport().device());
    eval_act = &eval_io.add("activation", {MB, T, cfg.n_embd});
    eval_io.allocate();
  }

  gpt::MemoryPlan plan = gpt::memory_plan(cfg, mp, MB, ctx.device);
  plan.optim_bytes = adamw.state_bytes();  // 1/DP of the unsharded figure under ZeRO-1
  const double flops_tok = gpt::flops_per_token(cfg);
  log_info("hpctrain train_gpt | deck {} | out {}", deck.deck_path(), opts.out_dir);
  parallel::log_launch_env(launch);
  run_device.log();  // the GPU, or auto's fallback to the CPU (nothing for train.device = cpu)
  log_info("model: L={} NH={} C={} T={} V={} (padded {}) bias={} | {} parameters ({:.3f} M)", cfg.n_layer,
           cfg.n_head, cfg.n_embd, T, cfg.vocab_size, cfg.padded_vocab, cfg.bias, plan.num_params,
           plan.num_params / 1e6);
  log_info("layout: ranks {} = dp {} x tp {} x pp {} ({}) | device {} | OpenMP threads {} | global_batch {} = {} x {} "
           "micro-batches of {} | {} tokens/step",
           pc.world_size(), dp, tp, pp, pc.grid().order(), device_name(ctx.device), omp_get_max_threads(), GB, dp,
           n_micro, MB, GB * T);
  log_info("gradient sync: {}", grad_sync.describe());
  log_precision(ctx, scaler);
  if (ctx.device != Device::CPU)
    log_info("communicators: {} | checkpoint host staging {}", pc.describe_device_groups(),
             human_bytes(static_cast<double>(staging.host_bytes())));
  log_info("memory per rank: params {} | grads {} | optimizer {} (unsharded {}) | activations {} | activation grads {} "
           "| total {}",
           human_bytes(plan.param_bytes), human_bytes(plan.grad_bytes), human_bytes(plan.optim_bytes),
           human_bytes(2.0 * plan.param_bytes), human_bytes(plan.activation_bytes),
           human_bytes(plan.activation_grad_bytes), human_bytes(plan.total()));
  {
    double worst[2] = {static_cast<double>(plan.param_bytes), static_cast<double>(plan.total())};
    pc.world().allreduce(worst, 2, DType::F64, comm::ReduceOp::Max, "memory report");
    log_info("memory, max over the {} ranks: params {} | total {} (every rank: train_gpt DECK --plan {})",
             pc.world_size(), human_bytes(worst[0]), human_bytes(worst[1]), pc.world_size());
  }
  log_info("data: train {} ({} tokens) | val {} ({} tokens, eval set {} x {} tokens)", train_shard.path(),
           train_shard.size(), val_shard.path(), val_shard.size(), eval_set.num_sequences(), T);

  // ---- resume --------------------------------------------------------------------------------
  const ResumePoint resumed = open_resume(pc, deck, gpt_deck_schema(), ckpt_root, steps);
  const int64_t start = resumed.step;
  if (resumed.reader) {
    Timer t;
    load_checkpoint(*resumed.reader, staging.params(), placements, staging.optimizer());
    staging.to_device();  // CUDA: host views -> device tensors (the CPU loaded in place)
    adamw.set_step_count(resumed.reader->attrs().ints.at("optim.step"));
    restore_loss_scaler(scaler, resumed.reader->attrs());
    log_info("resumed at step {}: loaded in {:.2f} s (verified in {:.2f} s)", start, t.seconds(), resumed.seconds);
  }
  std::unique_ptr<MetricsWriter> metrics;
  if (pc.rank() == 0)
    metrics = std::make_unique<MetricsWriter>((fs::path(opts.out_dir) / "metrics.jsonl").string(),
                                              resumed.reader ? start : -1);
  install_stop_signal_handlers();

  std::unique_ptr<ReferenceDump> dump;
  if (!opts.dump_path.empty()) {
    dump = std::make_unique<ReferenceDump>(opts.dump_path, deck, cfg, steps, GB);
    dump->record_params(ctx, model, "init");
  }

  auto layout_str = [&] {
    return fmt::format("world={} dp={} tp={} pp={} zero={} order={}", pc.world_size(), dp, tp, pp, gso.zero,
                       pc.grid().order());
  };
  CheckpointCadence cadence(deck);
  auto save = [&](int64_t s, const char* why) {
    staging.to_host();  // CUDA: device -> host views, synchronized (the CPU writes its tensors in place)
    check_all_replicas(fmt::format("step {}", s));
    ckpt::Attrs a;
    a.ints["step"] = s;
    a.ints["tokens_seen"] = s * GB * T;
    a.ints["sequences_seen"] = s * GB;
    a.ints["optim.step"] = adamw.step_count();
    add_loss_scaler_attrs(a, ctx, scaler);
    a.ints["data.next_step"] = s + 1;  // the sampler is keyed by (seed, step): the step is the loader state
    a.ints["rng.seed"] = static_cast<int64_t>(seed);
    a.ints["layout.world"] = pc.world_size();
    a.ints["layout.dp"] = dp;
    a.ints["layout.tp"] = tp;
    a.ints["layout.pp"] = pp;
    a.ints["layout.zero"] = gso.zero;
    a.ints["model.vocab_size"] = cfg.vocab_size;
    a.ints["model.padded_vocab"] = cfg.padded_vocab;
    a.floats["lr"] = sched.at(s);
    a.floats["lr_next"] = sched.at(s + 1);
    a.strings["layout"] = layout_str();
    a.strings["deck"] = deck.effective_toml();
    a.strings["deck_path"] = deck.deck_path();
    a.strings["rng.algorithm"] = "philox4x32-10 keyed by (train.seed, stream name, counter); streams are functions "
                                 "of the step, so rng.seed and step are the whole state";
    a.strings["app"] = "train_gpt";
    add_launch_attrs(a, launch);
    const SaveResult r = save_checkpoint(pc, ckpt_root, ckpt_keep, staging.params(), placements, staging.optimizer(), a);
    cadence.saved(r.seconds);
    int64_t bytes = r.bytes_written;
    pc.world().allreduce(&bytes, 1, DType::I64, comm::ReduceOp::Sum, "checkpoint size");
    log_info("checkpoint ({}) step {} -> {} | {} in {:.2f} s ({:.1f} MiB/s; rank 0: shards {:.2f} s, manifests {:.2f} s, "
             "index + commit {:.2f} s)",
             why, s, r.dir, human_bytes(static_cast<double>(bytes)), r.seconds,
             bytes / 1048576.0 / std::max(r.seconds, 1e-9), r.shard_s, r.manifests_s, r.commit_s);
  };

  // ---- training loop --------------------------------------------------------------------------
  const float dloss = static_cast<float>(1.0 / (static_cast<double>(GB) * T));  // 1 / global loss terms
  std::vector<double> step_ms, exposed_ms, tp_ms, bubbles, pp_wait_ms;
  double theory_bubble = 0.0;
  step_ms.reserve(static_cast<size_t>(std::max<int64_t>(steps - start, 0)));
  exposed_ms.reserve(step_ms.capacity());
  tp_ms.reserve(step_ms.capacity());
  double last_loss = NAN, last_val = NAN;
  int exit_code = 0;
  for (int64_t s = start + 1; s <= steps; ++s) {
    Timer timer;
    model.zero_grad(ctx);
    model.reset_tp_comm_ms();
    // the loss gradient times the loss scale S (1 without scaling; exact for power-of-two S)
    const float scaled_dloss = scaled_loss_gradient(dloss, scaler, s, dr);
    double loss_sum = 0.0;
    if (!pipe) {
      step_batch->load(sampler, s, rank_first, dump.get());
      for (int j = 0; j < static_cast<int>(n_micro); ++j) {
        if (j == n_micro - 1) grad_sync.arm();  // gradients are final during the last backward
        model.forward(ctx, step_batch->tok(j), MB);
        step_batch->add_loss(j, model.loss_and_backward(ctx, step_batch->tgt(j), scaled_dloss, MB));
      }
      for (float v : step_batch->read_loss_sums()) loss_sum += v;  // in micro-batch order, in double, as before
    }
    if (pipe) {
      stage->begin_step(s, rank_first, scaled_dloss);
      const parallel::PipelineStats ps = parallel::run_schedule(schedule, *stage, pc.pipeline_transport(), *pbufs);
      bubbles.push_back(ps.measured_bubble);
      pp_wait_ms.push_back(ps.wait_ms);
      theory_bubble = ps.theoretical_bubble;
      loss_sum = stage->end_step();  // non-zero on the last stage only
      pc.pp_group().allreduce(&loss_sum, 1, DType::F64, comm::ReduceOp::Sum, "loss sum (pipeline)");
      if (pc.has_embedding_group() && pc.embedding_group().size() > 1) {  // tied embedding: first + last stage
        Tensor& dwte = model.grads().get("wte");  // device memory: the NCCL embedding group on CUDA
        pc.device_embedding_group().allreduce(dwte.data, dwte.numel(), DType::F32, comm::ReduceOp::Sum,
                                              "tied embedding gradient");
      }
      grad_sync.arm();  // no overlap under PP: the buckets start after the embedding sum
    }
    grad_sync.finish();
    pc.dp_group().allreduce(&loss_sum, 1, DType::F64, comm::ReduceOp::Sum, "loss sum");
    const double loss = loss_sum / (static_cast<double>(GB) * T);
    HPCT_USAGE_CHECK(std::isfinite(loss),
                     "loss is {} at step {}: training diverged; lower optim.lr (now {}) or check the data", loss, s,
                     sched.lr);
    if (dump && s == 1) dump->record_grads(ctx, model);
    double sumsq = adamw.grad_sumsq(ctx, &counted);
    if (gso.zero && dp > 1) pc.dp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm");
    if (tp > 1) pc.tp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm (TP)");
    if (pp > 1) pc.pp_group().allreduce(&sumsq, 1, DType::F64, comm::ReduceOp::Sum, "gradient norm (PP)");
    const double lr = sched.at(s);
    const optim::LossScaler::Outcome ls = scaled_optimizer_step(ctx, adamw, scaler, sumsq, s, lr);
    const double norm = ls.norm;
    grad_sync.gather_params();
    k::synchronize(ctx);
    const double ms = timer.ms();
    step_ms.push_back(ms);
    exposed_ms.push_back(grad_sync.last_exposed_ms() + grad_sync.last_gather_ms());
    tp_ms.push_back(model.tp_comm_ms());
    last_loss = loss;
    if (dump) dump->record_step(s, loss, lr, norm);

    const double tok_s = static_cast<double>(GB) * T / (ms / 1e3);
    std::optional<double> mfu;
    if (peak_tflops > 0) mfu = flops_tok * tok_s / (peak_tflops * 1e12);
    std::optional<double> val_loss;
    if ((eval_every > 0 && s % eval_every == 0) || s == steps) {
      // the fixed evaluation set, split over the DP ranks (contiguous blocks), summed
      const int n_eval = eval_set.num_sequences();
      const int e0 = static_cast<int>(static_cast<int64_t>(n_eval) * dr / dp);
      const int e1 = static_cast<int>(static_cast<int64_t>(n_eval) * (dr + 1) / dp);
      double part = evaluate(ctx, model, eval_set, e0, e1, in_dev, tgt_dev, in_host, tgt_host, sum_dev,
                             pipe ? &pc.pipeline_transport() : nullptr, eval_act ? eval_act->f32() : nullptr);
      if (pipe) pc.pp_group().allreduce(&part, 1, DType::F64, comm::ReduceOp::Sum, "validation loss (pipeline)");
      pc.dp_group().allreduce(&part, 1, DType::F64, comm::ReduceOp::Sum, "validation loss");
      val_loss = part / (static_cast<double>(n_eval) * T);
      last_val = *val_loss;
    }
    if (metrics) {
      std::vector<std::pair<std::string, std::optional<double>>> rec = {
          {"step", static_cast<double>(s)}, {"loss", loss},    {"lr", lr},
          {"grad_norm", ls.skip ? std::nullopt : std::optional<double>(norm)},
          {"ms", ms},                       {"tokens_per_s", tok_s}, {"mfu", mfu},
          {"comm_exposed_ms", exposed_ms.back()}, {"tp_comm_ms", model.tp_comm_ms()}};
      add_loss_scale_metrics(rec, scaler, ls);
      if (val_loss) rec.push_back({"val_loss", *val_loss});
      metrics->write(rec);
    }
    if (s % log_every == 0 || s == steps || val_loss) {
      log_info("step {:>6}/{} | loss {:.6f} | lr {:.3e} | grad norm {:.4f} | {:.1f} ms (comm exposed {:.1f}{}) | {:.0f} "
               "tok/s | mfu {}{}{}",
               s, steps, loss, lr, norm, ms, exposed_ms.back(),
               tp > 1 ? fmt::format(", TP {:.1f}", model.tp_comm_ms()) : std::string(), tok_s,
               mfu ? fmt::format("{:.2f}%", *mfu * 100) : "n/a",
               val_loss ? fmt::format(" | val loss {:.6f}", *val_loss) : "", loss_scale_suffix(scaler, ls));
    }

    // ---- checkpoint and stop, decided collectively (one allreduce(MAX) per step) -------------
    const CheckpointCadence::Decision dec = cadence.decide(pc.world(), s, steps, ms);
    const bool stop = dec.stop;
    const char* why = dec.why;
    if (dec.save) save(s, why);
    if (stop) {
      log_info("stopping after step {} ({}): checkpoint written; exit code 3 asks to be requeued and resumed with "
               "--set checkpoint.resume=latest",
               s, why);
      exit_code = 3;
      break;
    }
  }
  staging.to_host();
  check_all_replicas("end of training");
  if (dump) {
    dump->record_params(ctx, model, "final");
    dump->write();
    log_info("reference dump written to {}", opts.dump_path);
  }

  // ---- sample and summary ---------------------------------------------------------------------
  if (exit_code == 0 && deck.get_int("sample.tokens") > 0 && (tp > 1 || pp > 1))
    log_info("sample: skipped (generation with tensor parallelism is not implemented; the checkpoint can be sampled "
             "at tp = 1)");
  if (exit_code == 0 && deck.get_int("sample.tokens") > 0 && pc.rank() == 0 && tp == 1 && pp == 1) {
    const std::string text = generate(ctx, model, deck, in_dev, seed);
    log_info("sample (temperature {}, top-k {}):\n{}\n--- end of sample ---", deck.get_float("sample.temperature"),
             deck.get_int("sample.top_k"), text);
  }
  // steady-state step time: median over the steps after the first (warm-up)
  const double med = median_after_first(step_ms), med_exposed = median_after_first(exposed_ms);
  const double med_tp = median_after_first(tp_ms);
  if (pipe && !bubbles.empty())
    log_info("pipeline: schedule {}, {} stages, {} micro-batches per step: measured bubble {:.4f} (median over steps "
             "after the first; stage {}), theory (p-1)/(m+p-1) = {:.4f}; PP communication wait {:.2f} ms/step{}",
             parallel::schedule_kind_name(sched_kind), pp, n_micro, median_after_first(bubbles), pc.pp_rank(),
             theory_bubble, median_after_first(pp_wait_ms),
             ctx.device == Device::CPU ? ""
                                       : " (host times: over NCCL the host only queues the work and the waits are "
                                         "stream-ordered, so these do not measure the GPU's bubble)");
  const double tok_s = static_cast<double>(GB) * T / (med / 1e3);
  const std::string mfu_s = peak_tflops > 0 ? fmt::format("{:.2f}%", 100 * flops_tok * tok_s / (peak_tflops * 1e12))
                                            : std::string("n/a");
  log_info("PERFORMANCE ranks dp tp pp | ms/step tokens/s tokens/s/rank MFU | loss val_loss | comm_exposed_ms "
           "comm_exposed_frac tp_comm_ms");
  log_info("PERFORMANCE {} {} {} {} | {:.2f} {:.0f} {:.0f} {} | {:.6f} {:.6f} | {:.2f} {:.4f} {:.2f}", pc.world_size(), dp,
           tp, pp, med, tok_s, tok_s / pc.world_size(), mfu_s, last_loss, last_val, med_exposed, med_exposed / med,
           med_tp);
  set_log_file("");
  return exit_code;
}

}  // namespace hpct::train
