#pragma once
// The GPT's layout planner (`train_gpt DECK --plan WORLD --auto --machine M`, train/plan/auto_plan.hpp): every layout
// of DP x TP x PP, virtual stages, sequence parallelism, ZeRO stage and group, recompute, micro-batch and gradient
// dtype that the deck's rules accept at a world size, each one's predicted step time on a machine, ranked, with the
// memory plan deciding what fits.
#include "core/config.hpp"
#include "models/gpt/gpt.hpp"
#include "train/loop/run_config.hpp"
#include "train/plan/auto_plan.hpp"

namespace hpct::train {

// The predicted step of the GPT `cfg` trained as `run` lays it out (parallel.*, train.micro_batch, train.recompute)
// at `world` ranks on `machine`, activations stored as `act`; `work`, when given, receives the slowest stage's compute
// work per step. The terms (docs/parallelism.md "Choosing a layout"):
//   compute  per micro-batch and stage: the GEMMs of its layers (QKV, projection, MLP; the LM head on the last stage)
//            forward, and twice that backward (input and weight gradients), attention's products over the causal
//            half of the scores and its exponentials, the memory-bound kernels (LayerNorms, residuals, GELU, the
//            loss's softmax; the residual stream's sharded by TP under sequence parallelism), and recompute's extra
//            forward (full: the layers' forward again; selective: LayerNorm and GELU); the slowest stage sets the pace
//   tp_comm  4 collectives of the micro-batch's activations per layer (2 forward, 2 backward; 2 more with full
//            recompute), allreduces, or allgather + reduce-scatter under SP (the same bytes); not overlapped
//   bubble   (PP - 1) / V of the slowest stage's micro-batch time (1F1B, V virtual stages); where a node's ranks
//            share cores (the machine's slowdown > 1), the node's work at the shared rate bounds compute and bubble
//            together when it is longer: ranks waiting in the bubble leave their cores to those computing
//   p2p      2 V (m + PP - 1) boundary sends (activations forward, their gradients backward), not overlapped
//   dp       ZeRO-0 allreduce, ZeRO-1 reduce-scatter and the fp32 parameter allgather after the step, ZeRO-2
//            a reduce-scatter per micro-batch, ZeRO-3 that plus each micro-batch's parameter gathers (forward,
//            backward, recompute); hybrid sharding reduces within the group, then across the groups; the gradient
//            buckets of the last micro-batch (every micro-batch under ZeRO-2/3) overlap its backward when
//            parallel.overlap is on, the gathers its compute when parallel.prefetch is
//   optimizer the AdamW update of the rank's share (ZeRO), the gradient norm and the zeroing, memory-bound
StepTime predict_gpt_step(const gpt::GptConfig& cfg, const RunConfig& run, int world, const Machine& machine, DType act,
                          Work* work = nullptr);

// `train_gpt DECK --plan WORLD --auto ...`: rank 0 only, no MPI collective, nothing allocated; the exit code.
int auto_plan_gpt(const Config& deck, int world, const AutoPlanOptions& options);

}  // namespace hpct::train
