#pragma once
// GPT-2 parameter layout of one rank of a TP x PP grid: which blocks a pipeline stage holds, which
// hyperslab of each logical tensor a tensor-parallel rank holds, its initialisation and its slab sizes.
// The forward/backward over these shards lives elsewhere; this file is the bookkeeping they share with
// the checkpoint writer (docs/invariants.md, invariant 4), the grad-norm (docs/parallelism.md) and the memory report
// (invariant 7).
//
// Legend: L layers, B micro-batch, T seq_len, C n_embd, NH heads, HS = C/NH, Vp padded vocab (a multiple
// of 128, independent of TP, docs/parallelism.md), t = parallel.tp, p = parallel.pp, r = tp_rank.
//
// Tensor-parallel rules (Megatron-LM; each layer states its split axis once; weights are (out, in)):
//   wte (Vp, C)              VocabParallelEmbedding: split on axis 0 (rows = vocabulary); rank r holds
//                            tokens [r Vp/t, (r+1) Vp/t). The tied head is then a column-parallel
//                            logits GEMM over the same rows (vocab-parallel cross-entropy).
//   wpe (T, C)               replicated.
//   ln1, ln2, lnf (C)        replicated (they act on the full residual stream).
//   attn.qkv (3, NH, HS, C)  ColumnParallelLinear, Y = X A + b, A = [A_1 ... A_t] split by output columns,
//                            here the NH axis (axis 1): rank r holds heads [r NH/t, (r+1) NH/t), a
//                            hyperslab of the serial tensor (docs/parallelism.md). bias (3, NH, HS): axis 1.
//                            Forward: copy (identity) in, no communication; backward: allreduce of dX.
//   attn.proj (C, C)         RowParallelLinear, Y = X A + b, A = [A_1; ...; A_t] split by input rows,
//                            i.e. axis 1 of the stored (out, in) weight: rank r holds the input channels
//                            of its heads, [r C/t, (r+1) C/t). Forward: allreduce of the partial Y;
//                            backward: copy. Its bias is replicated, added once after the allreduce.
//   mlp.fc (4C, C)           ColumnParallelLinear: axis 0 (output features); bias (4C): axis 0.
//   mlp.proj (C, 4C)         RowParallelLinear: axis 1 (input features); bias (C) replicated.
//
// Pipeline rules: stage s holds blocks [first_layer, end_layer) (stage_plan); the first stage also holds
// wte and wpe, the last stage also holds lnf and a tied copy of wte for the head (docs/parallelism.md). At p = 1
// the single stage holds wte once (no copy). With v virtual stages per rank (mp.virtual_stages) the blocks are cut
// into p v contiguous virtual stages of L / (p v) blocks, and rank r holds virtual stages r, p + r, .., (v-1) p + r
// (chunk_plans): its layout is wte, wpe (rank 0), the blocks of chunk 0, .., chunk v-1 (the serial order restricted to
// them), then lnf and the tied wte on rank p - 1, whose last chunk has the head. Names stay the logical ones, so a
// checkpoint restores across any p x v.
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt/gpt.hpp"

namespace hpct::gpt {

// ModelParallel (this rank's place in the TP x PP part of the grid) is defined in gpt.hpp.

// UsageError unless the model splits into tp x pp with virtual_stages chunks per pipeline rank: n_head % tp, Vp % tp,
// 4C % tp, n_layer >= pp (every stage holds at least one block); virtual_stages > 1 needs pp > 1 and n_layer % (pp x
// virtual_stages) == 0 (every chunk holds as many blocks). Each message names the failed constraint and the values
// that work.
void validate_model_parallel(const GptConfig& cfg, int tp, int pp, const std::string& where, int virtual_stages = 1);

// Blocks of pipeline stage pp_rank: [first_layer, end_layer), contiguous, counts differ by at most 1.
// With L % p = r != 0 the r extra blocks go first to the interior stages 1..p-2 (they carry neither
// embedding nor head), then to stage 0 (the embedding lookup is cheap; only its memory weighs), and to
// the last stage only when every other stage already has one (its head GEMM, 2 C Vp flops per token,
// is worth ~5 blocks of GPT-2 small). Megatron-LM requires L % p == 0 by default; this is a superset.
// StagePlan (defined in gpt.hpp): the blocks [first_layer, end_layer) of a stage, with embedding / head flags.
StagePlan stage_plan(const GptConfig& cfg, int pp, int pp_rank);
// The model chunks of pipeline rank pp_rank with virtual_stages chunks per rank: chunk c is virtual stage c pp + pp_rank
// of the pp x virtual_stages, stage_plan(cfg, pp v, c pp + pp_rank) (one chunk, stage_plan(cfg, pp, pp_rank), when
// virtual_stages = 1). Chunk 0 of rank 0 has the embedding, chunk v - 1 of rank pp - 1 the head.
std::vector<StagePlan> chunk_plans(const GptConfig& cfg, int pp, int pp_rank, int virtual_stages = 1);

// One tensor as a rank holds it: spec.name is the global name, spec.shape the local shape; the local
// tensor is the hyperslab [offset, offset + spec.shape) of the global tensor (row-major, contiguous).
struct ShardSpec {
  ParamSpec spec;
  std::vector<int64_t> global_shape, offset;
  int split_axis = -1;            // the layer's TP split axis; -1: not split (every TP rank holds it whole)
  bool replicated_in_tp = false;  // split_axis == -1 (LayerNorms, wpe, row-parallel biases)
  bool is_tied_copy = false;      // the last stage's wte when pp > 1 (the first stage's is the primary)
};

// The shards this rank holds, in the serial parameter_layout order restricted to what the rank holds (its chunks'
// blocks, in chunk order).
// At tp = pp = 1 the specs equal parameter_layout(cfg) (offsets zero).
std::vector<ShardSpec> parameter_layout(const GptConfig& cfg, const ModelParallel& mp);

// True for the one replica of each global element that counts in the gradient norm and is written to
// checkpoints: not the tied copy of wte, and for TP-replicated tensors only tp_rank 0 (docs/parallelism.md).
bool is_primary_replica(const ShardSpec& shard, const ModelParallel& mp);

// Fills the local tensor (numel(shard.spec.shape) floats, host memory) with exactly the values that
// Gpt::init_parameters puts at those global positions: rng stream of the global name, counter = global
// flat element index, padding rows of wte zero, residual projections with std init_std / sqrt(2 L).
void init_shard(float* out, const ShardSpec& shard, const GptConfig& cfg, uint64_t seed);

// Slab sizes of one rank (invariant 7). Parameters, gradients and AdamW state from the sharded layout
// (num_params counts what this rank stores, replicas and the tied copy included; num_params_no_wpe
// excludes wpe and this shard's wte padding rows). Activations are for one micro-batch of B sequences
// through this stage's blocks with TP-local widths, times the activation sets of `kept` (a pipeline schedule keeps
// several micro-batches in flight, GptStage::kept_sets; with virtual stages each set is one chunk's blocks):
//   stage input (B,T,C): the embedding output on the first stage, the received activation elsewhere;
//   per block: ln1, residual2, ln2, residual3 (B,T,C) full width (the residual stream is replicated in
//   TP), ln mean/rstd (B,T), qkv (B,T,3C/t), atty (B,T,C/t), attention stats (the backend's
//   attention_stats_bytes: the log-sum-exp (B,NH/t,T) float on both backends), fch,
//   fch_gelu (B,T,4C/t);
//   last stage: lnf (B,T,C) + mean/rstd, logits (B,T,Vp/t) (vocab-parallel), losses (B,T);
//   every stage: scratch (B,T,C) for the row-parallel partial sums before their allreduce.
// Backward scratch (one block at a time): dresidual, dln (B,T,C), dqkv (B,T,3C/t), datty (B,T,C/t), attention
// scratch (attention_scratch_bytes: (B,NH/t,T,T) on the CPU, (B,NH/t,T) on CUDA), dfch, dfch_gelu (B,T,4C/t).
// device: the backend the sizes are for (the CPU's by default). At tp = pp = 1 this equals
// memory_plan(cfg, B, device, act). act: the activation storage type (activations at their stored size; statistics
// and losses fp32; under bf16 and fp16 the parameters' compute copy counts in compute_param_bytes). kept: the recompute
// mode and the activation sets (gpt.hpp, ActivationPlan).
MemoryPlan memory_plan(const GptConfig& cfg, const ModelParallel& mp, int micro_batch, Device device = Device::CPU,
                       DType act = DType::F32, const ActivationPlan& kept = {});

}  // namespace hpct::gpt
