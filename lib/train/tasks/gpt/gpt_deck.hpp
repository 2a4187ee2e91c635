#pragma once
// The deck of train_gpt: its schema (every key, type, default, range and doc, printed by --help) and its typed
// sections, read and validated once (read_gpt_deck) next to the shared ones (train/loop/run_config.hpp).
#include <string>
#include <vector>

#include "core/config.hpp"
#include "models/gpt/gpt.hpp"
#include "models/gpt/gpt_sample.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "train/loop/run_config.hpp"

namespace hpct::train {

const ConfigSchema& gpt_deck_schema();

struct GptDeck {
  gpt::GptConfig model;       // [model]
  std::string init_from;      // model.init_from: a Hugging Face GPT-2 directory, "" = none
  int eval_sequences = 0;     // data.eval_sequences
  optim::AdamWConfig adamw;   // optim.beta1, beta2, eps, weight_decay, grad_clip
  optim::LrSchedule lr;       // optim.lr, final_lr_frac, warmup_steps, decay_steps (derived: see run_config.hpp)
  gpt::SampleOptions sample;  // [sample]
  // data.train / data.val: their items (paths, globs) expanded in order, resolved against $HPCT_DATA_DIR
  std::vector<std::string> train_paths, val_paths;
  std::string order = "random";  // data.order: "random" | "epoch"
  bool allow_changed = false;    // data.allow_changed: resume with another shard list or order
  bool gelu_epilogue = true;     // train.gelu_epilogue: the MLP's GELU in the GEMM epilogues (CUDA, 16-bit storage)
  // train.attention as asked; what a run gets on its device and storage type is kernels::effective_attention's
  AttentionImpl attention = AttentionImpl::Cudnn;
};

// The [model] section, validated (UsageError naming the key on failure).
gpt::GptConfig gpt_model_config(const Config& deck);

// train.attention, as asked (the planners read it without the rest of the GPT's sections).
AttentionImpl gpt_attention(const Config& deck);

// The model against the layout: heads, vocabulary rows, MLP width and layers divisible by TP, PP and the virtual stages;
// the sequence by TP under sequence parallelism (UsageErrors naming the keys).
void validate_gpt_layout(const gpt::GptConfig& model, const RunConfig& run);

// The app's own sections, and the model against the layout (heads and layers divisible by TP and PP).
GptDeck read_gpt_deck(const Config& deck, const RunConfig& run);

}  // namespace hpct::train
