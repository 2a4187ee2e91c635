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
