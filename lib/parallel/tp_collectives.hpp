#pragma once
// Tensor-parallel collectives: Megatron-LM's conjugate pairs (megatron/core/tensor_parallel/mappings.py), one named
// function per direction, over the TP group (docs/parallelism.md, "Tensor parallelism (GPT)" and its rules).
//
// The algebra, t ranks, weights as (in, out) matrices in the products below:
//
//   ColumnParallelLinear   Y = X A + b,  A = [A_1 ... A_t] split by columns, b = [b_1 ... b_t]
//     rank r computes Y_r = X A_r + b_r (its columns of Y): no communication forward, X is replicated.
//     dX = sum_r dY_r A_r^T: every rank holds one term, so backward allreduces dX over the group.
//     -> X enters through copy_to_tp_region: forward identity, backward allreduce(SUM).
//
//   RowParallelLinear      Y = X A + b,  A = [A_1; ...; A_t] split by rows, X = [X_1 ... X_t] by columns
//     rank r computes the partial Y_r = X_r A_r; Y = sum_r Y_r (+ b once): forward allreduces Y.
//     dX_r = dY A_r^T needs only dY, which every rank holds after the forward allreduce: nothing backward.
//     -> Y leaves through reduce_from_tp_region: forward allreduce(SUM), backward identity.
//     The conjugate of the column-parallel layer: a column-parallel layer feeding a row-parallel one (QKV ->
//     proj, fc -> mlp.proj) communicates once forward and once backward.
//
//   VocabParallelEmbedding wte = [wte_1; ...; wte_t] split by rows (vocabulary)
//     out = sum_r out_r, out_r the rows of tokens in rank r's range (zero elsewhere): reduce_from_tp_region.
//
//   Split along the last dimension (sequence parallelism, layers whose output stays sharded):
//     scatter_to_tp_region:   forward keeps this rank's slice of the last dimension; backward all-gathers it.
//     gather_from_tp_region:  forward all-gathers the slices into the full last dimension; backward keeps
//                             this rank's slice. Each is the other's dual: scatter's backward is gather's
//                             forward and gather's backward is scatter's forward.
//
//   Sequence parallelism (Korthikanti et al. 2022): outside the column- and row-parallel pairs (LayerNorm, residual,
//   embedding) the activations are sharded by token rows: rank r holds rows [r n, (r + 1) n) of the (rows, C) stream.
//     gather_from_sequence_parallel_region:  the input of a column-parallel layer. Forward all-gathers the row
//       shards (rank order); backward reduce-scatters the partial dX (sum), each rank keeping its rows.
//     reduce_scatter_to_sequence_parallel_region: the output of a row-parallel layer. Forward reduce-scatters the
//       partial Y (sum) into row shards; backward all-gathers the shards of dY.
//   Each is the other's dual, and together they replace the allreduce pair of copy_to / reduce_from (an allreduce is a
//   reduce-scatter followed by an all-gather: the same bytes).
//
//   Vocabulary-parallel cross-entropy: not a conjugate pair. Its forward needs the row max (allreduce MAX)
//   and two row sums (sum of exp, target logit: allreduce SUM) over the vocabulary shards; its backward is
//   local (softmax - onehot over this rank's columns, from the reduced statistics). allreduce_tp_stats names
//   those reductions.
//
// Storage type. The functions marked `template <typename A>` exist for A = float, A = bf16 (tensor/bf16.hpp) and A =
// fp16 (tensor/fp16.hpp, CUDA runs: NCCL's ncclFloat16, reduced like ncclBfloat16; the activation type of
// train.precision, kernels.hpp): they move and reduce activations and activation gradients in their storage type, so a
// 16-bit model sends half the bytes. A bf16 sum is widened to fp32 and rounded to nearest even at each
// pairwise combination the communicator's algorithm makes (comm/mpi_communicator.hpp; NCCL: ncclBfloat16), so over t
// ranks it rounds t - 1 times: reproducible for a fixed t, within a few bf16 roundings of the fp32 sum. The float
// forms are the fp32 behaviour, unchanged. allreduce_tp_stats stays float: the cross-entropy's row statistics are
// fp32 under every precision (docs/invariants.md, "How the scale features compose").
//
// Conventions. Buffers are on comm.device() (host for MpiCommunicator, device for NcclCommunicator) and in place
// where the shape does not change. `what` labels the collective in timeout and error messages. Every function
// returns the host milliseconds it spent in communication (0 for the identities and the local slicing), which the
// caller sums into its TP-communication figure (Gpt::tp_comm_ms); on CUDA the waits are stream-ordered, so that is
// the time to issue them. Every rank of the group calls the same functions in the same order with the same counts
// (the Communicator contract). At t = 1 the communicating sides are allreduces / allgathers over one rank: the
// identity on the data.
#include <cstdint>

#include "comm/communicator.hpp"
#include "kernels/exec_context.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"

namespace hpct::parallel {

// ---- copy_to_tp_region: the input of a column-parallel layer -------------------------------------------------
// Forward: identity (X is replicated over the group). Dual: copy_to_tp_region_backward.
template <typename A>
double copy_to_tp_region_forward(comm::Communicator& tp, A* x, int64_t n, const char* what);
// Backward: dx (n) becomes the sum over the group of every rank's partial dX. Dual: copy_to_tp_region_forward.
template <typename A>
double copy_to_tp_region_backward(comm::Communicator& tp, A* dx, int64_t n, const char* what);

// ---- reduce_from_tp_region: the output of a row-parallel layer, or of the vocabulary-parallel embedding --------
// Forward: y (n) becomes the sum over the group of the partial outputs. Dual: reduce_from_tp_region_backward.
template <typename A>
double reduce_from_tp_region_forward(comm::Communicator& tp, A* y, int64_t n, const char* what);
// Backward: identity (dY is already whole on every rank). Dual: reduce_from_tp_region_forward.
template <typename A>
double reduce_from_tp_region_backward(comm::Communicator& tp, A* dy, int64_t n, const char* what);

// ---- scatter_to_tp_region / gather_from_tp_region: split along the last dimension -----------------------------
// A (rows, cols) row-major tensor, cols % tp.size() == 0, cl = cols / tp.size(); rank r holds columns
// [r cl, (r + 1) cl) as a (rows, cl) tensor. The local slicing runs on ctx (ctx.device == tp.device()).
//
// scatter_to_tp_region forward: y (rows, cl) = this rank's columns of x (rows, cols). No communication.
// Dual: scatter_to_tp_region_backward.
template <typename A>
double scatter_to_tp_region_forward(const ExecContext& ctx, comm::Communicator& tp, const A* x, A* y, int64_t rows,
                                    int64_t cols, const char* what);
// scatter_to_tp_region backward: dx (rows, cols) = the concatenation over ranks of dy (rows, cl), which is
// gather_from_tp_region_forward; scratch holds rows * cols elements of A on the device. Dual:
// scatter_to_tp_region_forward.
template <typename A>
double scatter_to_tp_region_backward(const ExecContext& ctx, comm::Communicator& tp, const A* dy, A* dx, A* scratch,
                                     int64_t rows, int64_t cols, const char* what);
// gather_from_tp_region forward: y (rows, cols) = the concatenation over ranks of x (rows, cl), in rank order along
// the last dimension: an allgather into scratch (rows * cols elements of A, rank-major), then a local interleave.
// Dual: gather_from_tp_region_backward.
template <typename A>
double gather_from_tp_region_forward(const ExecContext& ctx, comm::Communicator& tp, const A* x, A* y, A* scratch,
                                     int64_t rows, int64_t cols, const char* what);
// gather_from_tp_region backward: dx (rows, cl) = this rank's columns of dy (rows, cols), which is
// scatter_to_tp_region_forward. No communication. Dual: gather_from_tp_region_forward.
template <typename A>
double gather_from_tp_region_backward(const ExecContext& ctx, comm::Communicator& tp, const A* dy, A* dx, int64_t rows,
                                      int64_t cols, const char* what);

// ---- sequence parallelism: the residual stream sharded by rows --------------------------------------------
// n: the elements of one rank's shard (its rows x C); the whole tensor holds tp.size() n elements, shard r at r n.
// gather_from_sequence_parallel_region forward: full (t n) = the shards x (n) of every rank, in rank order.
template <typename A>
double gather_from_sequence_parallel_region_forward(comm::Communicator& tp, const A* x, A* full, int64_t n,
                                                    const char* what);
// ... backward: dfull (t n) holds this rank's partial dX of every row; dx (n) becomes the sum over the group of
// the partials of this rank's rows. dx may be dfull + rank n (in place). Dual: the forward.
template <typename A>
double gather_from_sequence_parallel_region_backward(comm::Communicator& tp, const A* dfull, A* dx, int64_t n,
                                                     const char* what);
// reduce_scatter_to_sequence_parallel_region forward: y (n) = the sum over the group of the partial outputs full
// (t n), this rank's rows. y may be full + rank n (in place). Dual: its backward.
template <typename A>
double reduce_scatter_to_sequence_parallel_region_forward(comm::Communicator& tp, const A* full, A* y, int64_t n,
                                                          const char* what);
// ... backward: dfull (t n) = the shards dy (n) of every rank. Dual: the forward.
template <typename A>
double reduce_scatter_to_sequence_parallel_region_backward(comm::Communicator& tp, const A* dy, A* dfull, int64_t n,
                                                           const char* what);
// The gradients of parameters that sequence-parallel rows make partial (the LayerNorms' weights and biases): buf (n)
// becomes their sum over the group, the same on every rank (the replicated parameter's gradient).
double allreduce_sequence_parallel_grads(comm::Communicator& tp, float* buf, int64_t n, const char* what);

// ---- the vocabulary-parallel cross-entropy's statistics ----------------------------------------------------
// In place: buf (n) becomes its reduction (op: Max for the row max, Sum for the sums of exp and the target logit)
// over the group. Not a conjugate pair: the cross-entropy's backward is local to each rank's columns.
double allreduce_tp_stats(comm::Communicator& tp, float* buf, int64_t n, comm::ReduceOp op, const char* what);

}  // namespace hpct::parallel
