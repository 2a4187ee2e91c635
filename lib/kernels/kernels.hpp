#pragma once
// The compute interface of hpctrain: every op the models use, dispatched on ctx.device to a backend
// (cpu/: OpenMP + OpenBLAS; cuda/: later). Every op has a plain reference twin in reference/reference.hpp
// with the same signature minus the context; tests compare the two on random data.
//
// Legend: B batch, T time (sequence), C channels, OC output channels, NH heads, HS = C/NH head size,
//         V true vocabulary, Vp padded vocabulary (multiple of 128), N = B*T rows.
// All tensors are fp32, contiguous, row-major, on ctx.device.
//
// Gradient convention (say it once):
//   - parameter gradients (dweight, dbias, dw, db, dwte, dwpe) are ACCUMULATED (+=), so micro-batches
//     accumulate for free; the trainer zeroes them once per optimizer step;
//   - activation gradients are ASSIGNED (=), except layernorm_backward's dinp, which ACCUMULATES (+=)
//     because a LayerNorm input is always the residual stream, whose gradient also flows around it.
#include <cstdint>

#include "kernels/exec_context.hpp"

namespace hpct::kernels {

// ---- embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] --------------------------------------
void encoder_forward(const ExecContext& ctx, float* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                     const float* wte /*(Vp,C)*/, const float* wpe /*(T,C)*/, int B, int T, int C);
void encoder_backward(const ExecContext& ctx, float* dwte /*(Vp,C) +=*/, float* dwpe /*(T,C) +=*/,
                      const float* dout /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, int B, int T, int C);

// ---- LayerNorm over the last axis, eps = 1e-5 (as torch.nn.LayerNorm) --------------------------
void layernorm_forward(const ExecContext& ctx, float* out /*(N,C)*/, float* mean /*(N)*/, float* rstd /*(N)*/,
                       const float* inp /*(N,C)*/, const float* weight /*(C)*/, const float* bias /*(C) or null*/,
                       int N, int C);
void layernorm_backward(const ExecContext& ctx, float* dinp /*(N,C) +=*/, float* dweight /*(C) +=*/,
                        float* dbias /*(C) += or null*/, const float* dout /*(N,C)*/, const float* inp /*(N,C)*/,
                        const float* weight /*(C)*/, const float* mean /*(N)*/, const float* rstd /*(N)*/,
                        int N, int C);

// ---- Linear: out = inp @ weight^T + bias (torch.nn.Linear layout) -----------------------------
void matmul_forward(const ExecContext& ctx, float* out /*(N,OC)*/, const float* inp /*(N,C)*/,
                    const float* weight /*(OC,C)*/, const float* bias /*(OC) or null*/, int N, int C, int OC);
// dinp = dout @ weight (assigned; skipped when dinp is null), dweight += dout^T @ inp, dbias += sum_n dout.
void matmul_backward(const ExecContext& ctx, float* dinp /*(N,C) or null*/, float* dweight /*(OC,C) +=*/,
                     float* dbias /*(OC) += or null*/, const float* dout /*(N,OC)*/, const float* inp /*(N,C)*/,
                     const float* weight /*(OC,C)*/, int N, int C, int OC);

// ---- causal multi-head self-attention -------------------------------------------------------
// qkv rows hold [q (NH,HS) | k (NH,HS) | v (NH,HS)], the (3, NH, HS) row order of the fused QKV weight.
// att keeps the softmax probabilities (zero above the diagonal) for backward. Scale 1/sqrt(HS).
void attention_forward(const ExecContext& ctx, float* out /*(B,T,C)*/, float* att /*(B,NH,T,T)*/,
                       const float* qkv /*(B,T,3C)*/, int B, int T, int C, int NH);
// dqkv assigned; datt is scratch of the same shape as att (contents on return unspecified).
void attention_backward(const ExecContext& ctx, float* dqkv /*(B,T,3C)*/, float* datt /*(B,NH,T,T) scratch*/,
                        const float* dout /*(B,T,C)*/, const float* qkv /*(B,T,3C)*/, const float* att /*(B,NH,T,T)*/,
                        int B, int T, int C, int NH);

// ---- GELU, tanh approximation (torch approximate="tanh") ------------------------------------
void gelu_forward(const ExecContext& ctx, float* out, const float* inp, int64_t n);
void gelu_backward(const ExecContext& ctx, float* dinp /*assigned*/, const float* inp, const float* dout, int64_t n);

// ---- residual: out = a + b --------------------------------------------------------------------
void residual_forward(const ExecContext& ctx, float* out, const float* a, const float* b, int64_t n);

// ---- fused softmax cross-entropy over the first V of Vp logits (padded logits masked out) --------
// losses[n] = -log softmax(logits[n, :V])[targets[n]]   (assigned). Targets must lie in [0, V).
void crossentropy_forward(const ExecContext& ctx, float* losses /*(N)*/, const float* logits /*(N,Vp)*/,
                          const int32_t* targets /*(N)*/, int N, int V, int Vp);
// Forward and backward fused, in place: on return logits holds
//   dlogits[n, v] = dloss * (softmax(logits[n, :V])[v] - [v == targets[n]]) for v < V, and 0 for v >= V;
// losses[n] as crossentropy_forward. dloss is the scale of each loss term (e.g. 1 / global loss terms).
void crossentropy_forward_backward(const ExecContext& ctx, float* losses /*(N)*/, float* logits /*(N,Vp) in/out*/,
                                   const int32_t* targets /*(N)*/, float dloss, int N, int V, int Vp);

// ---- vocabulary-parallel embedding and cross-entropy (Megatron VocabParallelEmbedding / vocab-parallel CE) ----
// Legend (in addition to the above): t TP ranks; this rank holds the global vocabulary rows/columns [v0, v0+Vl)
// of the padded Vp, with Vl = Vp / t; of those only the ones < V are real (a rank may hold only padding).
// The kernels never communicate: the model runs the allreduces named below between the calls, over the TP group.
//
// VocabParallelEmbedding, wte = [wte_1; ...; wte_t] split by rows:
//   out = sum_r out_r,  out_r[b,t,:] = (inp[b,t] in [v0_r, v0_r+Vl) ? wte_r[inp[b,t]-v0_r,:] : 0) (+ wpe[t,:]).
//   Forward: encoder_forward_vocab_parallel, then allreduce(SUM) of out over TP (conjugate: copy, i.e. backward
//   needs no communication: every rank already holds the full dout). Pass wpe on tp_rank 0 only (nullptr on the
//   others): each element of the allreduced sum then has at most two non-zero terms, wte[token] and wpe[t], whose
//   float sum is the serial encoder_forward's bit for bit, in any reduction order.
//   Backward: dwte_local += rows of dout for the tokens in [v0, v0+Vl) (in the serial encoder_backward's order, so
//   the concatenation over ranks equals its dwte bit for bit); dwpe += sum_b dout on EVERY rank (not only rank 0):
//   dout is identical on all TP ranks, so the replicated wpe gets identical gradients without an allreduce.
void encoder_forward_vocab_parallel(const ExecContext& ctx, float* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                                    const float* wte_local /*(Vl,C)*/, const float* wpe /*(T,C) or null*/, int v0,
                                    int Vl, int B, int T, int C);
void encoder_backward_vocab_parallel(const ExecContext& ctx, float* dwte_local /*(Vl,C) +=*/,
                                     float* dwpe /*(T,C) += or null*/, const float* dout /*(B,T,C)*/,
                                     const int32_t* inp /*(B,T)*/, int v0, int Vl, int B, int T, int C);

// Vocab-parallel softmax cross-entropy over logits_local (N,Vl) = the global logit columns [v0, v0+Vl); columns
// >= V are padding, masked out (treated as -inf). The full (N,Vp) logits are never gathered; three phases around
// two allreduces over TP, each of (N) floats:
//   a) crossentropy_vp_local_max        -> allreduce(MAX) of max_out               -> global_max
//   b) crossentropy_vp_local_sumexp     -> allreduce(SUM) of sumexp_out and target_logit_out
//                                          -> global_sumexp, global_target_logit (one allreduce of 2N floats when the
//                                          model lays the two buffers out adjacently)
//   c) crossentropy_vp_loss_backward (training: losses and dlogits in place) or crossentropy_vp_loss (evaluation).
// losses[n] = log(global_sumexp[n]) + global_max[n] - global_target_logit[n], the same on every TP rank (count it
// once). Targets must lie in [0, V). A rank holding only padding contributes max -inf, sumexp 0, target logit 0.
// max_out[n] = max of logits_local[n, j] over the real local columns (v0 + j < V); -inf if there are none.
void crossentropy_vp_local_max(const ExecContext& ctx, float* max_out /*(N)*/, const float* logits_local /*(N,Vl)*/,
                               int v0, int Vl, int V, int N);
// sumexp_out[n] = sum over the real local columns of exp(logits_local[n, j] - global_max[n]);
// target_logit_out[n] = logits_local[n, targets[n] - v0] if targets[n] is in [v0, v0+Vl), else 0 (assigned).
void crossentropy_vp_local_sumexp(const ExecContext& ctx, float* sumexp_out /*(N)*/, float* target_logit_out /*(N)*/,
                                  const float* logits_local /*(N,Vl)*/, const float* global_max /*(N)*/,
                                  const int32_t* targets /*(N)*/, int v0, int Vl, int V, int N);
// In place: on return logits_local holds, for the real local columns,
//   dlogits[n, j] = dloss * (exp(logits[n, j] - global_max[n]) / global_sumexp[n] - [v0 + j == targets[n]]),
// and 0 for the padded ones; losses[n] as above (assigned). The local slice of crossentropy_forward_backward.
void crossentropy_vp_loss_backward(const ExecContext& ctx, float* losses /*(N)*/,
                                   float* logits_local /*(N,Vl) in/out*/, const float* global_max /*(N)*/,
                                   const float* global_sumexp /*(N)*/, const float* global_target_logit /*(N)*/,
                                   const int32_t* targets /*(N)*/, float dloss, int v0, int Vl, int V, int N);
// Forward only (evaluation): losses[n] from the three reduced statistics; the logits are not needed any more.
void crossentropy_vp_loss(const ExecContext& ctx, float* losses /*(N)*/, const float* global_max /*(N)*/,
                          const float* global_sumexp /*(N)*/, const float* global_target_logit /*(N)*/, int N);

// ---- reductions and optimizer ---------------------------------------------------------------
// *out = sum of x[i] (accumulated in double, written as float) on ctx.device.
void sum(const ExecContext& ctx, float* out /*(1)*/, const float* x, int64_t n);
// *out += sum of x[i]^2 (accumulated in double) on ctx.device; out is a double on the device.
void sum_squares_accumulate(const ExecContext& ctx, double* out /*(1)*/, const float* x, int64_t n);
void scale(const ExecContext& ctx, float* x, float s, int64_t n);
// AdamW (torch.optim.AdamW semantics): p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). t is the 1-based step. g is multiplied by
// grad_scale first (e.g. the clipping factor).
void adamw_update(const ExecContext& ctx, float* params, const float* grads, float* m, float* v, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);

// ---- memory helpers on ctx.device ------------------------------------------------------------
void fill_zero(const ExecContext& ctx, void* dst, int64_t bytes);
void copy_to_host(const ExecContext& ctx, void* host_dst, const void* src, int64_t bytes);
void copy_from_host(const ExecContext& ctx, void* dst, const void* host_src, int64_t bytes);
void synchronize(const ExecContext& ctx);  // host blocks until all work on ctx.stream is done

}  // namespace hpct::kernels
