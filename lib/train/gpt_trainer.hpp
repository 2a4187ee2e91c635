#pragma once
// The GPT training loop: data -> micro-batches -> forward/backward -> clip -> AdamW -> metrics,
// evaluation and a generated sample (DESIGN.md §3). Serial in this version (one rank).
#include <string>

#include "core/config.hpp"

namespace hpct::train {

struct RunOptions {
  std::string out_dir;    // receives train.log and metrics.jsonl
  std::string dump_path;  // optional: write the ReferenceDump there
};

// Resolves a data.* path: absolute paths stay; relative ones resolve against $HPCT_DATA_DIR
// (default <repository>/data).
std::string resolve_data_path(const std::string& path);

// Runs the whole training job described by the deck. Returns the process exit code (0: finished).
int run_gpt(const Config& deck, const RunOptions& opts);

}  // namespace hpct::train
