#include "train/gpt_trainer.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
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
// Under pipeline parallelism (pp non-null) each micro-batch runs through the stages: a later stage receives
// its input in act (MB, T, C) from the previous one and sends its output on; only the last stage computes
// losses, so the sum is non-zero there alone (the caller reduces it over the PP group).
double evaluate(const ExecContext& ctx, gpt::Gpt& model, const data::TokenEvalSet& eval, int begin, int end,
                Tensor& in_dev, Tensor& tgt_dev, std::vector<int32_t>& in_host, std::vector<int32_t>& tgt_host,
                Tensor& sum_dev, comm::Communicator* pp = nullptr, std::vector<float>* act = nullptr) {
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
    if (!st.has_embedding) pp->recv(act->data(), n, DType::F32, pp->rank() - 1, 7, "evaluation activation");
    model.forward(ctx, in_dev.i32(), b, st.has_embedding ? nullptr : act->data());
    if (!st.has_head) {
      k::copy_to_host(ctx, act->data(), model.stage_output(), n * 4);
      k::synchronize(ctx);  // act is sent from the host
      pp->send(act->data(), n, DType::F32, pp->rank() + 1, 7, "evaluation activation");
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

// One pipeline stage of the GPT for the schedule executor (parallel/pipeline_schedule.hpp). Activations are
// not kept between a micro-batch's forward and its backward: each stage keeps its input (the tokens on the
// first stage, the received activation on the others) and recomputes its forward right before the backward
// (full recomputation per stage: one extra forward, activation memory of one micro-batch plus the inputs).
// The last stage computes the loss and the head in its backward slot.
struct GptPipelineStage : parallel::PipelineStage {
  const ExecContext& ctx;
  gpt::Gpt& model;
  const data::TokenBatchSampler& sampler;
  Tensor &in_dev, &tgt_dev, &sum_dev;
  std::vector<int32_t>& in_host;
  std::vector<int32_t>& tgt_host;
  std::vector<float> stash;  // (n_micro, MB, T, C): the stage inputs of a step (later stages)
  int64_t step = 0, rank_first = 0;
  int MB = 0;
  int64_t numel = 0;
  float dloss = 0.0f;
  double loss_sum = 0.0;

  GptPipelineStage(const ExecContext& c, gpt::Gpt& m, const data::TokenBatchSampler& smp, Tensor& in, Tensor& tgt,
                   Tensor& sum, std::vector<int32_t>& ih, std::vector<int32_t>& th, int n_micro, int mb)
      : ctx(c), model(m), sampler(smp), in_dev(in), tgt_dev(tgt), sum_dev(sum), in_host(ih), tgt_host(th), MB(mb) {
    numel = static_cast<int64_t>(mb) * m.config().seq_len * m.config().n_embd;
    if (!m.stage().has_embedding) stash.assign(static_cast<size_t>(n_micro * numel), 0.0f);
  }
  int64_t activation_numel() const override { return numel; }
  void load_batch(int micro) {
    k::synchronize(ctx);  // earlier copies from in_host / tgt_host are done before we refill them
    sampler.fill(step, rank_first + static_cast<int64_t>(micro) * MB, MB, in_host.data(), tgt_host.data());
    k::copy_from_host(ctx, in_dev.data, in_host.data(), static_cast<int64_t>(in_host.size()) * 4);
    k::copy_from_host(ctx, tgt_dev.data, tgt_host.data(), static_cast<int64_t>(tgt_host.size()) * 4);
  }
  float* stashed(int micro) { return stash.data() + static_cast<int64_t>(micro) * numel; }
  void forward(int micro, const float* in, float* out) override {
    const auto& st = model.stage();
    if (st.has_embedding) {
      load_batch(micro);
      model.forward(ctx, in_dev.i32(), MB);
    } else {
      std::copy_n(in, numel, stashed(micro));
      if (st.has_head) return;  // the last stage computes in its backward slot
      model.forward(ctx, nullptr, MB, stashed(micro));
    }
    k::copy_to_host(ctx, out, model.stage_output(), numel * 4);
    k::synchronize(ctx);  // the schedule sends `out` from the host once we return
  }
  // On return every copy between the device and the schedule's host buffers (dout read, din written by the model) has
  // completed: the schedule sends din and reuses dout's buffer.
  void backward(int micro, const float* dout, float* din) override {
    const auto& st = model.stage();
    if (st.has_embedding) {
      load_batch(micro);
      model.forward(ctx, in_dev.i32(), MB);  // recompute
      model.backward_stage(ctx, dout, nullptr, MB);
      k::synchronize(ctx);
      return;
    }
    model.forward(ctx, nullptr, MB, stashed(micro));  // recompute (the last stage: its only forward)
    if (!st.has_head) {
      model.backward_stage(ctx, dout, din, MB);
      k::synchronize(ctx);
      return;
    }
    load_batch(micro);
    const float* losses = model.loss_and_backward(ctx, tgt_dev.i32(), dloss, MB, din);
    loss_sum += sum_to_host(ctx, sum_dev, losses, static_cast<int64_t>(MB) * model.config().seq_len);  // synchronizes
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
  const ExecContext& ctx = run_device.exec();
  parallel::ParallelContext pc(tp, pp, deck.get_string("parallel.order"), copts, where, ctx);
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
  // pipeline parallelism: the schedule of this stage, its planned buffers, the stage adaptor
  const bool pipe = pp > 1;
  const parallel::ScheduleKind sched_kind = parallel::parse_schedule_kind(deck.get_string("parallel.schedule"));
  std::unique_ptr<GptPipelineStage> stage;
  std::unique_ptr<parallel::PipelineBuffers> pbufs;
  std::vector<parallel::Action> schedule;
  std::vector<float> eval_act;  // (MB, T, C): the activation passed between stages during evaluation
  if (pipe) {
    schedule = parallel::make_schedule(sched_kind, pp, pc.pp_rank(), static_cast<int>(n_micro));
    stage = std::make_unique<GptPipelineStage>(ctx, model, sampler, in_dev, tgt_dev, sum_dev, in_host, tgt_host,
                                               static_cast<int>(n_micro), MB);
    pbufs = std::make_unique<parallel::PipelineBuffers>(schedule, stage->activation_numel());
    eval_act.assign(static_cast<size_t>(stage->activation_numel()), 0.0f);
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
    for (int64_t j = 0; j < (pipe ? 0 : n_micro); ++j) {
      const int64_t first = rank_first + j * MB;  // micro-batch j: a contiguous sub-block of this rank's block
      // The previous copies from in_host / tgt_host have completed before we refill them (CUDA copies are asynchronous;
      // the stream is idle here anyway: sum_to_host below and the step's end synchronize). A no-op on the CPU.
      k::synchronize(ctx);
      sampler.fill(s, first, MB, in_host.data(), tgt_host.data());
      if (dump) dump->record_batch(s, first, MB, in_host.data(), tgt_host.data());
      k::copy_from_host(ctx, in_dev.data, in_host.data(), static_cast<int64_t>(in_host.size()) * 4);
      k::copy_from_host(ctx, tgt_dev.data, tgt_host.data(), static_cast<int64_t>(tgt_host.size()) * 4);
      if (j == n_micro - 1) grad_sync.arm();  // gradients are final during the last backward
      model.forward(ctx, in_dev.i32(), MB);
      const float* losses = model.loss_and_backward(ctx, tgt_dev.i32(), scaled_dloss, MB);
      loss_sum += sum_to_host(ctx, sum_dev, losses, static_cast<int64_t>(MB) * T);  // synchronizes
    }
    if (pipe) {
      stage->step = s;
      stage->rank_first = rank_first;
      stage->dloss = scaled_dloss;
      stage->loss_sum = 0.0;
      const parallel::PipelineStats ps = parallel::run_schedule(schedule, *stage, pc.pp_group(), *pbufs);
      bubbles.push_back(ps.measured_bubble);
      pp_wait_ms.push_back(ps.wait_ms);
      theory_bubble = ps.theoretical_bubble;
      loss_sum = stage->loss_sum;  // non-zero on the last stage only
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
    // the loss scaler sees the global sum of squares (every rank alike) and decides whether this step updates
    const optim::LossScaler::Outcome ls = scaler.update(sumsq, s);
    const double norm = ls.norm;
    const double lr = sched.at(s);
    if (!ls.skip) adamw.step(ctx, static_cast<float>(lr), optim::LossScaler::grad_scale(adamw.clip_scale(norm), ls));
    else log_skipped_step(s, ls);
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
                             pipe ? &pc.pp_group() : nullptr, &eval_act);
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
             "after the first; stage {}), theory (p-1)/(m+p-1) = {:.4f}; PP communication wait {:.2f} ms/step",
             parallel::schedule_kind_name(sched_kind), pp, n_micro, median_after_first(bubbles), pc.pp_rank(),
             theory_bubble, median_after_first(pp_wait_ms));
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
