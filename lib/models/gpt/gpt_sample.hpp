#pragma once
// Text from a trained GPT: autoregressive sampling with temperature and top-k (train_gpt's sample at the end of a run).
#include <cstdint>
#include <string>

#include "kernels/exec_context.hpp"
#include "models/gpt/gpt.hpp"
#include "tensor/tensor.hpp"

namespace hpct::gpt {

struct SampleOptions {
  int tokens = 0;            // sample.tokens (0: no sample)
  double temperature = 1.0;  // sample.temperature
  int top_k = 0;             // sample.top_k (0: all)
  std::string prompt;        // sample.prompt
};

// Autoregressive sampling with temperature and top-k; the context slides when it exceeds seq_len. The model must be
// whole (tp = pp = 1); in_dev holds (1, T) tokens on ctx.device. Draws are keyed by (seed, "sample", token index).
std::string generate(const ExecContext& ctx, Gpt& model, const SampleOptions& smp, Tensor& in_dev, uint64_t seed);

}  // namespace hpct::gpt
