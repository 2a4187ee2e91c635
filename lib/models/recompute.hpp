#pragma once
// Activation recomputation (train.recompute): what a model keeps between a micro-batch's forward and its backward, and
// what its backward recomputes instead. Trading compute for activation memory, as Megatron-LM's selective and full
// recomputation (Korthikanti et al. 2022) and llm.c's recompute of GELU and LayerNorm do. Every mode runs the same
// kernels on the same inputs in the same order, so losses, gradients and checkpoints are bitwise equal whatever the
// mode (docs/parallelism.md, "Activation memory").
//   none       keep every activation backward reads (fastest)
//   selective  GPT: recompute the GELU output from its stored input and the LayerNorm outputs from their stored inputs
//              in backward (a few percent of the step's compute, 2 x 4C/t + ... of the per-token storage saved)
//   full       keep each block's input only and recompute the block's forward right before its backward (one extra
//              forward: about a third of the step's compute); the block's activations exist once, for the block
//              being differentiated
#include <string>

namespace hpct::models {

enum class Recompute { None, Selective, Full };

// "none" | "selective" | "full"; anything else is a UsageError naming the accepted values (`where` names the deck).
Recompute parse_recompute(const std::string& s, const std::string& where);
const char* recompute_name(Recompute r);

}  // namespace hpct::models
