#include "train/gpt_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>

#include <omp.h>

#include "core/log.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "data/token_sampler.hpp"
#include "data/token_shard.hpp"
#include "kernels/kernels.hpp"
#include "models/gpt/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "train/metrics.hpp"
#include "train/reference_dump.hpp"

#ifndef HPCT_SOURCE_DIR
#define HPCT_SOURCE_DIR "."
#endif

namespace hpct::train {

namespace fs = std::filesystem;
namespace k = hpct::kernels;

std::string resolve_data_path(const std::string& path) {
  if (fs::path(path).is_absolute()) return path;
  const char* env = std::getenv("HPCT_DATA_DIR");
  const fs::path base = env && *env ? fs::path(env) : fs::path(HPCT_SOURCE_DIR) / "data";
  return (base / path).string();
}

namespace {

Device resolve_device(const Config& deck) {
  const std::string& d = deck.get_string("train.device");
  if (d == "cuda")
    HPCT_USAGE_FAIL("deck {}: train.device = \"cuda\": the CUDA backend of the GPT model is not implemented in this "
                    "version; use --set train.device=cpu (or auto)",
                    deck.deck_path());
  return Device::CPU;  // "cpu", and "auto" until the CUDA model backend exists
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

// Mean loss over the fixed evaluation set (all of it, micro_batch sequences at a time).
double evaluate(const ExecContext& ctx, gpt::Gpt& model, const data::TokenEvalSet& eval, Tensor& in_dev,
                Tensor& tgt_dev, std::vector<int32_t>& in_host, std::vector<int32_t>& tgt_host, Tensor& sum_dev) {
  const int T = model.config().seq_len, MB = model.micro_batch();
  double total = 0.0;
  for (int first = 0; first < eval.num_sequences(); first += MB) {
    const int b = std::min(MB, eval.num_sequences() - first);
    eval.fill(first, b, in_host.data(), tgt_host.data());
    k::copy_from_host(ctx, in_dev.data, in_host.data(), static_cast<int64_t>(b) * T * 4);
    k::copy_from_host(ctx, tgt_dev.data, tgt_host.data(), static_cast<int64_t>(b) * T * 4);
    model.forward(ctx, in_dev.i32(), b);
    const float* losses = model.loss(ctx, tgt_dev.i32(), b);
    k::sum(ctx, sum_dev.f32(), losses, static_cast<int64_t>(b) * T);
    float s = 0.0f;
    k::copy_to_host(ctx, &s, sum_dev.f32(), 4);
    total += s;
  }
  return total / (static_cast<double>(eval.num_sequences()) * T);
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

}  // namespace

int run_gpt(const Config& deck, const RunOptions& opts) {
  const auto& id = process_identity();
  HPCT_USAGE_CHECK(id.world == 1,
                   "train_gpt runs on one rank in this version (data, tensor and pipeline parallelism come next); "
                   "launch it with mpirun -np 1 or without mpirun (world size is {})",
                   id.world);

  // ---- configuration, validated before any work ---------------------------------------------
  const gpt::GptConfig cfg = gpt::GptConfig::from_deck(deck);
  const int64_t steps = deck.get_int("train.steps");
  const uint64_t seed = static_cast<uint64_t>(deck.get_int("train.seed"));
  const int64_t GB = deck.get_int("train.global_batch");
  const int MB = static_cast<int>(deck.get_int("train.micro_batch"));
  const int T = cfg.seq_len;
  const int dp = 1;
  HPCT_USAGE_CHECK(GB % (static_cast<int64_t>(dp) * MB) == 0,
                   "deck {}: train.global_batch={} is not divisible by DP x train.micro_batch = {} x {}; choose a "
                   "global batch that is a multiple of {}",
                   deck.deck_path(), GB, dp, MB, static_cast<int64_t>(dp) * MB);
  const int64_t n_micro = GB / (dp * MB);
  const ExecContext ctx{resolve_device(deck), nullptr};

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
  std::error_code ec;
  fs::create_directories(opts.out_dir, ec);
  HPCT_USAGE_CHECK(!ec, "cannot create the output directory {}: {}", opts.out_dir, ec.message());
  set_log_file((fs::path(opts.out_dir) / "train.log").string());
  MetricsWriter metrics((fs::path(opts.out_dir) / "metrics.jsonl").string());

  // ---- model, optimizer, planned buffers (nothing allocates in the step loop) ----------------
  gpt::Gpt model(cfg, MB, ctx.device);
  model.init_parameters(ctx, seed);
  std::vector<bool> decay;
  for (const auto& p : model.layout()) decay.push_back(p.decay);
  optim::AdamW adamw(model.params(), model.grads(), decay, ocfg);
  Slab io("batch", ctx.device);
  Tensor& in_dev = io.add("inputs", {MB, T}, DType::I32);
  Tensor& tgt_dev = io.add("targets", {MB, T}, DType::I32);
  Tensor& sum_dev = io.add("loss_sum", {1});
  io.allocate();
  std::vector<int32_t> in_host(static_cast<size_t>(MB) * T), tgt_host(in_host.size());

  const gpt::MemoryPlan plan = gpt::memory_plan(cfg, MB);
  const double flops_tok = gpt::flops_per_token(cfg);
  log_info("hpctrain train_gpt | deck {} | out {}", deck.deck_path(), opts.out_dir);
  log_info("model: L={} NH={} C={} T={} V={} (padded {}) bias={} | {} parameters ({:.3f} M)", cfg.n_layer,
           cfg.n_head, cfg.n_embd, T, cfg.vocab_size, cfg.padded_vocab, cfg.bias, plan.num_params,
           plan.num_params / 1e6);
  log_info("layout: ranks 1 = dp 1 x tp 1 x pp 1 | device {} | OpenMP threads {} | global_batch {} = {} micro-batches "
           "of {} | {} tokens/step",
           device_name(ctx.device), omp_get_max_threads(), GB, n_micro, MB, GB * T);
  log_info("memory per rank: params {} | grads {} | optimizer {} | activations {} | activation grads {} | total {}",
           human_bytes(plan.param_bytes), human_bytes(plan.grad_bytes), human_bytes(plan.optim_bytes),
           human_bytes(plan.activation_bytes), human_bytes(plan.activation_grad_bytes), human_bytes(plan.total()));
  log_info("data: train {} ({} tokens) | val {} ({} tokens, eval set {} x {} tokens)", train_shard.path(),
           train_shard.size(), val_shard.path(), val_shard.size(), eval_set.num_sequences(), T);

  std::unique_ptr<ReferenceDump> dump;
  if (!opts.dump_path.empty()) {
    dump = std::make_unique<ReferenceDump>(opts.dump_path, deck, cfg, steps, GB);
    dump->record_params(ctx, model, "init");
  }

  // ---- training loop --------------------------------------------------------------------------
  const float dloss = static_cast<float>(1.0 / (static_cast<double>(GB) * T));  // 1 / global loss terms
  std::vector<double> step_ms;
  step_ms.reserve(static_cast<size_t>(steps));
  double last_loss = NAN, last_val = NAN;
  for (int64_t s = 1; s <= steps; ++s) {
    Timer timer;
    model.zero_grad(ctx);
    double loss_sum = 0.0;
    for (int64_t j = 0; j < n_micro; ++j) {
      const int64_t first = j * MB;  // DP rank 0's block is the whole global batch at dp = 1
      sampler.fill(s, first, MB, in_host.data(), tgt_host.data());
      if (dump) dump->record_batch(s, first, MB, in_host.data(), tgt_host.data());
      k::copy_from_host(ctx, in_dev.data, in_host.data(), static_cast<int64_t>(in_host.size()) * 4);
      k::copy_from_host(ctx, tgt_dev.data, tgt_host.data(), static_cast<int64_t>(tgt_host.size()) * 4);
      model.forward(ctx, in_dev.i32(), MB);
      const float* losses = model.loss_and_backward(ctx, tgt_dev.i32(), dloss, MB);
      k::sum(ctx, sum_dev.f32(), losses, static_cast<int64_t>(MB) * T);
      float part = 0.0f;
      k::copy_to_host(ctx, &part, sum_dev.f32(), 4);
      loss_sum += part;
    }
    const double loss = loss_sum / (static_cast<double>(GB) * T);
    HPCT_USAGE_CHECK(std::isfinite(loss),
                     "loss is {} at step {}: training diverged; lower optim.lr (now {}) or check the data", loss, s,
                     sched.lr);
    if (dump && s == 1) dump->record_grads(ctx, model);
    const double norm = adamw.grad_norm(ctx);
    const double lr = sched.at(s);
    adamw.step(ctx, static_cast<float>(lr), adamw.clip_scale(norm));
    k::synchronize(ctx);
    const double ms = timer.ms();
    step_ms.push_back(ms);
    last_loss = loss;
    if (dump) dump->record_step(s, loss, lr, norm);

    const double tok_s = static_cast<double>(GB) * T / (ms / 1e3);
    std::optional<double> mfu;
    if (peak_tflops > 0) mfu = flops_tok * tok_s / (peak_tflops * 1e12);
    std::optional<double> val_loss;
    if ((eval_every > 0 && s % eval_every == 0) || s == steps) {
      val_loss = evaluate(ctx, model, eval_set, in_dev, tgt_dev, in_host, tgt_host, sum_dev);
      last_val = *val_loss;
    }
    std::vector<std::pair<std::string, std::optional<double>>> rec = {
        {"step", static_cast<double>(s)}, {"loss", loss},    {"lr", lr},  {"grad_norm", norm},
        {"ms", ms},                       {"tokens_per_s", tok_s}, {"mfu", mfu}};
    if (val_loss) rec.push_back({"val_loss", *val_loss});
    metrics.write(rec);
    if (s % log_every == 0 || s == steps || val_loss) {
      log_info("step {:>6}/{} | loss {:.6f} | lr {:.3e} | grad norm {:.4f} | {:.1f} ms | {:.0f} tok/s | mfu {}{}", s,
               steps, loss, lr, norm, ms, tok_s, mfu ? fmt::format("{:.2f}%", *mfu * 100) : "n/a",
               val_loss ? fmt::format(" | val loss {:.6f}", *val_loss) : "");
    }
  }
  if (dump) {
    dump->write();
    log_info("reference dump written to {}", opts.dump_path);
  }

  // ---- sample and summary ---------------------------------------------------------------------
  if (deck.get_int("sample.tokens") > 0) {
    const std::string text = generate(ctx, model, deck, in_dev, seed);
    log_info("sample (temperature {}, top-k {}):\n{}\n--- end of sample ---", deck.get_float("sample.temperature"),
             deck.get_int("sample.top_k"), text);
  }
  // steady-state step time: median over the steps after the first (warm-up)
  double med = NAN;
  if (!step_ms.empty()) {
    std::vector<double> v(step_ms.begin() + (step_ms.size() > 1 ? 1 : 0), step_ms.end());
    std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
    med = v[v.size() / 2];
  }
  const double tok_s = static_cast<double>(GB) * T / (med / 1e3);
  const std::string mfu_s = peak_tflops > 0 ? fmt::format("{:.2f}%", 100 * flops_tok * tok_s / (peak_tflops * 1e12))
                                            : std::string("n/a");
  log_info("PERFORMANCE ranks dp tp pp | ms/step tokens/s tokens/s/rank MFU | loss val_loss");
  log_info("PERFORMANCE {} {} {} {} | {:.2f} {:.0f} {:.0f} {} | {:.6f} {:.6f}", 1, 1, 1, 1, med, tok_s, tok_s, mfu_s,
           last_loss, last_val);
  set_log_file("");
  return 0;
}

}  // namespace hpct::train
