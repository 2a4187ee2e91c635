#pragma once
// The GPT training loop: data -> micro-batches -> forward/backward -> clip -> AdamW -> metrics,
// evaluation and a generated sample (DESIGN.md §3). Serial in this version (one rank).
#include <string>

#include "core/config.hpp"
#include "train/run_support.hpp"

namespace hpct::train {

// `train_gpt DECK --plan WORLD`: validates the model and the layout (parallel.tp, parallel.pp, order) for a
// world of WORLD ranks and prints every distinct rank's memory plan (parameters, gradients, optimizer,
// activations) without data, MPI collectives or allocation. Returns the exit code.
int plan_gpt(const Config& deck, int world);

// Runs the whole training job described by the deck. Returns the process exit code (0: finished).
int run_gpt(const Config& deck, const RunOptions& opts);

}  // namespace hpct::train
