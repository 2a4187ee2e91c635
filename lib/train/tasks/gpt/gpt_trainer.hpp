#pragma once
// train_gpt: the GPT as a task of the one training loop (train/loop/training_loop.hpp): token shards -> this DP rank's
// micro-batches -> the GPT's pipeline stage (TP and PP inside) -> AdamW; validation loss and a text sample
// (docs/architecture.md).
#include <string>

#include "core/config.hpp"
#include "train/loop/run_environment.hpp"

namespace hpct::train {

// Runs the whole training job described by the deck. Returns the process exit code (0: finished).
int run_gpt(const Config& deck, const RunOptions& opts);
// Its entry in the registry (train/tasks/registry.hpp).
struct TrainingApp;
TrainingApp gpt_training_app();

}  // namespace hpct::train
