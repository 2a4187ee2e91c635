#include "train/tasks/gpt/gpt_deck.hpp"

#include "core/format.hpp"
#include "data/token_dataset.hpp"
#include "models/gpt/gpt_layout.hpp"
#include "train/loop/loss_scaling.hpp"
#include "train/plan/memory_plan.hpp"
#include "train/loop/run_config.hpp"
#include "train/loop/run_environment.hpp"

namespace hpct::train {

namespace {
// How train_gpt words the shared keys (train/loop/run_config.hpp).
SharedKeyWords gpt_key_words() {
  SharedKeyWords w;
  w.unit = "sequences";
  w.steps_doc = "optimizer steps";
  w.global_batch = 8;
  w.micro_batch = 8;
  w.seeded = "data order and sampling";
  w.recompute_doc =
      "activation recompute in backward: none | selective (GELU and LayerNorm outputs) | full (each block from its "
      "input); losses and gradients are bitwise the same";
  w.recompute_choices = {"none", "selective", "full"};
  w.eval_every_doc = "evaluate the val loss every this many steps (0: only after the last step)";
  w.parallel_doc = "the DP x TP x PP layout (DP = world / (TP x PP)) and data-parallel gradient sync";
  w.tp_doc = "tensor-parallel size: attention heads, MLP and vocabulary split over this many ranks";
  w.pp_doc = "pipeline-parallel size (blocks split into stages)";
  w.order_doc = "grid order, fastest axis first: rank = tp + TP*(dp + DP*pp) for tp-dp-pp";
  w.log_every = 1;
  return w;
}
}  // namespace

const ConfigSchema& gpt_deck_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s;
    s.section("model", true, "GPT-2 architecture");
    s.int_key("model.n_layer", std::nullopt, "number of transformer blocks (L)", 1, 1024);
    s.int_key("model.n_head", std::nullopt, "attention heads (NH); must divide n_embd", 1, 1024);
    s.int_key("model.n_embd", std::nullopt, "channels (C)", 1, 65536);
    s.int_key("model.seq_len", std::nullopt, "context length (T)", 1, 65536);
    s.int_key("model.vocab_size", 256, "true vocabulary (V); padded to a multiple of 128 internally", 2, 65536);
    s.bool_key("model.bias", true, "biases in Linear and LayerNorm layers");
    s.string_key("model.init_from", "",
                 "fine-tuning: a Hugging Face GPT-2 directory (config.json + model.safetensors) whose weights a fresh "
                 "run starts from, optimizer state fresh; ignored on resume; \"\" = none");
    s.float_key("model.init_std", 0.02, "std of the normal initialisation (residual projections: / sqrt(2L))", 0.0,
                1.0);

    s.section("data", true, "token shards (llm.c format); relative paths and globs resolve against $HPCT_DATA_DIR");
    s.string_list_key("data.train", std::nullopt,
                      "training shards: a path, a glob (* ? [..], matches sorted) or a list of them, in order, e.g. "
                      "kjv_train.bin or \"kjv_shards/kjv_train_*.bin\"");
    s.string_list_key("data.val", std::nullopt, "validation shards, as data.train, e.g. kjv_val.bin");
    s.string_key("data.order", "random",
                 "random: windows drawn with replacement, keyed by (seed, step, sample) | epoch: every stride-seq_len "
                 "window once per epoch, in a seeded order (docs/contracts.md)",
                 {"random", "epoch"});
    s.bool_key("data.allow_changed", false,
               "resume although data.train's shard list (file names, token counts) or data.order differ from the "
               "checkpoint's (the batch sequence then changes; a warning is logged)");
    s.int_key("data.eval_sequences", 64, "sequences of the fixed evaluation set (>= 64 x seq_len tokens)", 64, 1 << 24);

    const SharedKeyWords words = gpt_key_words();
    add_train_keys(s, words);
    s.bool_key("train.gelu_epilogue", true,
               "CUDA with bf16 / fp16: the MLP's GELU and its backward in cuBLASLt's GEMM epilogues (GELU_AUX_BIAS, "
               "DGELU) instead of own kernels (the GPT-2 124M step 3.4% faster on an H200); within bf16 rounding of "
               "them, not bitwise, and selective recompute then recomputes GELU with the own kernel, so it is no "
               "longer bitwise equal to none (false restores that; docs/cuda.md); no effect elsewhere");
    s.string_key("train.attention", "cudnn",
                 "CUDA with bf16 / fp16: the causal self-attention's kernels, cudnn (cuDNN's fused attention with its "
                 "deterministic backward: 2.2x the own kernels on an H200; within bf16 rounding of them, not bitwise; "
                 "a larger backward scratch, docs/cuda.md) | own (the own flash kernels); the own kernels elsewhere",
                 {"own", "cudnn"});

    s.section("optim", false, "AdamW, warm-up + cosine LR, global-norm clipping");
    s.float_key("optim.lr", 6e-4, "peak learning rate", 0.0, 10.0);
    s.float_key("optim.final_lr_frac", 0.1, "lr at decay_steps as a fraction of optim.lr", 0.0, 1.0);
    s.int_key("optim.warmup_steps", 0, "linear warm-up steps", 0, 1e12);
    s.int_key("optim.decay_steps", 0, "absolute step where the cosine decay ends (0: train.steps)", 0, 1e12);
    s.float_key("optim.weight_decay", 0.1, "decoupled weight decay, 2-D weights and embeddings only", 0.0, 10.0);
    s.float_key("optim.beta1", 0.9, "AdamW beta1", 0.0, 0.999999);
    s.float_key("optim.beta2", 0.95, "AdamW beta2", 0.0, 0.999999999);
    s.float_key("optim.eps", 1e-8, "AdamW epsilon", 0.0, 1.0);
    s.float_key("optim.grad_clip", 1.0, "clip the global gradient norm to this (0: off)", 0.0, 1e9);

    add_layout_keys(s, words);
    s.string_key("parallel.schedule", "1f1b", "pipeline schedule: gpipe | 1f1b", {"gpipe", "1f1b"});
    s.int_key("parallel.virtual_stages", 1,
              "model chunks per pipeline rank (> 1: interleaved 1F1B; needs parallel.pp > 1, parallel.schedule = "
              "1f1b, model.n_layer divisible by pp x virtual_stages and micro-batches per step a multiple of pp)",
              1, 1024);
    s.bool_key("parallel.sp", false,
               "sequence parallelism (needs parallel.tp > 1 and model.seq_len divisible by it): LayerNorm, residual "
               "and embedding activations sharded by tokens over the TP group");
    add_run_keys(s);

    add_log_keys(s, words);

    s.section("sample", false, "text generated from the trained model at the end");
    s.int_key("sample.tokens", 200, "tokens to generate (0: no sample)", 0, 1 << 20);
    s.float_key("sample.temperature", 0.8, "softmax temperature", 1e-3, 100.0);
    s.int_key("sample.top_k", 40, "sample among the k most likely tokens (0: all)", 0, 65536);
    s.string_key("sample.prompt", "\n", "text the sample starts from (bytes, as the byte-level vocabulary)");
    return s;
  }();
  return schema;
}

gpt::GptConfig gpt_model_config(const Config& deck) {
  gpt::GptConfig c;
  c.n_layer = static_cast<int>(deck.get_int("model.n_layer"));
  c.n_head = static_cast<int>(deck.get_int("model.n_head"));
  c.n_embd = static_cast<int>(deck.get_int("model.n_embd"));
  c.seq_len = static_cast<int>(deck.get_int("model.seq_len"));
  c.vocab_size = static_cast<int>(deck.get_int("model.vocab_size"));
  c.padded_vocab = (c.vocab_size + 127) / 128 * 128;
  c.bias = deck.get_bool("model.bias");
  c.init_std = static_cast<float>(deck.get_float("model.init_std"));
  c.validate("deck " + deck.deck_path());
  return c;
}

AttentionImpl gpt_attention(const Config& deck) { return parse_attention_impl(deck.get_string("train.attention")); }

void validate_gpt_layout(const gpt::GptConfig& model, const RunConfig& run) {
  gpt::validate_model_parallel(model, run.parallel.tp, run.parallel.pp, fmt::format("deck {}", run.deck_path),
                               run.parallel.virtual_stages);
  HPCT_USAGE_CHECK(!run.parallel.sp || model.seq_len % run.parallel.tp == 0,
                   "deck {}: parallel.sp = true needs model.seq_len = {} divisible by parallel.tp = {} (each TP rank "
                   "holds seq_len / tp of every sequence's tokens); choose a seq_len that is a multiple of {}",
                   run.deck_path, model.seq_len, run.parallel.tp, run.parallel.tp);
}

GptDeck read_gpt_deck(const Config& deck, const RunConfig& run) {
  GptDeck d;
  d.model = gpt_model_config(deck);
  validate_gpt_layout(d.model, run);
  d.init_from = deck.get_string("model.init_from");
  d.train_paths = data::expand_token_paths(deck.get_string_list("data.train"), data_dir(), "data.train");
  d.val_paths = data::expand_token_paths(deck.get_string_list("data.val"), data_dir(), "data.val");
  d.order = deck.get_string("data.order");
  d.gelu_epilogue = deck.get_bool("train.gelu_epilogue");
  d.attention = gpt_attention(deck);
  d.allow_changed = deck.get_bool("data.allow_changed");
  d.eval_sequences = static_cast<int>(deck.get_int("data.eval_sequences"));
  d.adamw.beta1 = static_cast<float>(deck.get_float("optim.beta1"));
  d.adamw.beta2 = static_cast<float>(deck.get_float("optim.beta2"));
  d.adamw.eps = static_cast<float>(deck.get_float("optim.eps"));
  d.adamw.weight_decay = static_cast<float>(deck.get_float("optim.weight_decay"));
  d.adamw.grad_clip = static_cast<float>(deck.get_float("optim.grad_clip"));
  d.lr = read_cosine_schedule(deck, run.train.steps);
  d.sample = {static_cast<int>(deck.get_int("sample.tokens")), deck.get_float("sample.temperature"),
              static_cast<int>(deck.get_int("sample.top_k")), deck.get_string("sample.prompt")};
  return d;
}

}  // namespace hpct::train
