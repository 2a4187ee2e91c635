#pragma once
// The compute interface of hpctrain: every op the models use, dispatched on ctx.device to a backend
// (cpu/: OpenMP + OpenBLAS; cuda/: CUDA, cuBLAS, cuDNN). Every op has a plain reference twin in reference/reference.hpp
// with the same signature minus the context; tests compare the two on random data.
//
// Legend: B batch, T time (sequence), C channels, OC output channels, NH heads, HS = C/NH head size,
//         V true vocabulary, Vp padded vocabulary (multiple of 128), N = B*T rows.
// All tensors are contiguous, row-major, on ctx.device.
//
// Storage types (train.precision, docs/precision.md). The ops marked `template <typename A>` exist for A = float,
// A = bf16 (tensor/bf16.hpp) and A = fp16 (tensor/fp16.hpp, CUDA only: the CPU backend has no fp16 storage, and an
// op called with A = fp16 on the CPU throws, naming the fix); A is the type of everything a model stores between
// forward and backward and of the
// parameters the op reads (under bf16: the compute copy, cast once per step from the fp32 masters by cast()):
//   A      activations, activation gradients, logits, parameters read (weights, biases, LayerNorm/BatchNorm gains)
//   float  parameter gradients (accumulated in fp32 across micro-batches: +=), per-row or per-channel statistics
//          (LayerNorm mean and rstd, BatchNorm statistics, running averages), losses, every reduction's result
// Arithmetic inside an op is fp32 for all three: 16-bit loads widen to fp32, and each output is rounded once, to
// nearest even, when stored. GEMMs and convolutions multiply 16-bit inputs with fp32 accumulation (oneDNN on the CPU,
// cuBLASLt / cuDNN on CUDA). ctx.precision names the arithmetic of float-storage products on CUDA (tf32, below); with
// A = bf16 it is BF16, with A = fp16 FP16. The CPU backend accepts FP32 (A = float) and BF16 (A = bf16) and refuses
// TF32, FP16 and A = fp16.
//
// Gradient convention (say it once):
//   - parameter gradients (dweight, dbias, dw, db, dwte, dwpe) are ACCUMULATED (+=), so micro-batches
//     accumulate for free; the trainer zeroes them once per optimizer step;
//   - activation gradients are ASSIGNED (=), except layernorm_backward's dinp, which ACCUMULATES (+=)
//     because a LayerNorm input is always the residual stream, whose gradient also flows around it.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/exec_context.hpp"
#include "kernels/chunk_tables.hpp"
#include "kernels/conv_algorithms.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels {

// The cuBLASLt workspace of the CUDA backend's 16-bit GEMMs: one buffer per device, allocated at the first bf16 or fp16
// GEMM and kept (32 MiB, cuBLAS's recommendation for Hopper). The memory record and plan count it as `workspace`.
constexpr size_t kCudaGemmWorkspaceBytes = size_t{32} << 20;
// What a run on `device` with activations of type `act` holds of it: the workspace on CUDA under 16-bit storage, else 0.
constexpr size_t gemm_workspace_bytes(Device device, DType act) {
  return device == Device::CUDA && act != DType::F32 ? kCudaGemmWorkspaceBytes : 0;
}

// The block partials of the CUDA backend's full-grid column reductions (LayerNorm's dweight and dbias, the Linear
// bias gradient): one buffer of doubles per device, allocated at the first such reduction and kept, like the cuBLASLt
// workspace. Its size bounds how many row groups a reduction splits into (cuda_core_kernels.cuh, partial_rows), so
// the order of every sum depends on the shapes and this constant only. Counted as `workspace`.
constexpr size_t kCudaReducePartialsBytes = size_t{8} << 20;

// Every device-wide buffer the CUDA backend keeps for a run whose activations are of type `act` (the memory record's
// and the plan's `workspace` besides the model's own): the cuBLASLt workspace under 16-bit storage and the reduction
// partials; 0 on the CPU.
constexpr size_t device_workspace_bytes(Device device, DType act) {
  return gemm_workspace_bytes(device, act) + (device == Device::CUDA ? kCudaReducePartialsBytes : 0);
}

// The CUDA backend's convolution workspace (cuDNN): the 16-bit filter-gradient scratch of the layer (cuda_resnet.cu
// says why it exists; none under fp32 storage), then a budget for cuDNN's algorithms computed from the shape: twice the
// larger of the layer's input and output tensors (bytes of the storage type), at least 32 MiB. Each convolution runs
// the first deterministic algorithm, in cuDNN's order of preference, whose workspace fits. A formula and not "what the
// preferred algorithm asks": that depends on the GPU model and the cuDNN version, which a plan made on a login node
// (--plan, train.memory_limit_gb) cannot ask, and the plan must be the run's size. Measured on an H100 (cuDNN 9,
// ResNet-50 at micro-batch 256 in bf16): the preferred algorithms ask up to 1.5x the larger tensor, the leanest
// backward-filter algorithm of a strided 1x1 layer 1.6x its input; a fixed 256 MiB made that layer fail.
constexpr size_t kCudnnConvMinAlgoWorkspaceBytes = size_t{32} << 20;
constexpr int kCudnnConvAlgoWorkspacePerTensor = 2;
// The filter scratch: OC*C*KH*KW elements of the storage type, rounded up to 256 bytes so that the algorithms' part
// keeps the workspace's alignment, for the 16-bit filter gradient; with channels-last activations and a spatial kernel
// (KH*KW > 1) twice that for every storage type (the gradient in cuDNN's (OC,KH,KW,C) order, and the filter reordered
// to it); 0 under float storage otherwise.
size_t cuda_conv_filter_scratch_bytes(int C, int OC, int KH, int KW, DType act, bool channels_last = false);

// ---- embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] --------------------------------------
template <typename A>
void encoder_forward(const ExecContext& ctx, A* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, const A* wte /*(Vp,C)*/,
                     const A* wpe /*(T,C)*/, int B, int T, int C);
template <typename A>
void encoder_backward(const ExecContext& ctx, float* dwte /*(Vp,C) +=*/, float* dwpe /*(T,C) +=*/,
                      const A* dout /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, int B, int T, int C);

// ---- LayerNorm over the last axis, eps = 1e-5 (as torch.nn.LayerNorm) --------------------------
template <typename A>
void layernorm_forward(const ExecContext& ctx, A* out /*(N,C)*/, float* mean /*(N)*/, float* rstd /*(N)*/,
                       const A* inp /*(N,C)*/, const A* weight /*(C)*/, const A* bias /*(C) or null*/, int N, int C);
template <typename A>
void layernorm_backward(const ExecContext& ctx, A* dinp /*(N,C) +=*/, float* dweight /*(C) +=*/,
                        float* dbias /*(C) += or null*/, const A* dout /*(N,C)*/, const A* inp /*(N,C)*/,
                        const A* weight /*(C)*/, const float* mean /*(N)*/, const float* rstd /*(N)*/, int N, int C);

// residual = a + b (as residual_forward), then layernorm_forward of residual into out, mean and rstd: the same
// results, bit for bit, as the two calls (which is what the CPU backend runs); CUDA fuses them into one pass over the
// rows where the pointers allow the LayerNorm's packs, so the residual stream is not read back by a second kernel.
template <typename A>
void residual_layernorm_forward(const ExecContext& ctx, A* residual /*(N,C)*/, A* out /*(N,C)*/, float* mean /*(N)*/,
                                float* rstd /*(N)*/, const A* a /*(N,C)*/, const A* b /*(N,C)*/,
                                const A* weight /*(C)*/, const A* bias /*(C) or null*/, int N, int C);

// ---- Linear: out = inp @ weight^T + bias (torch.nn.Linear layout) -----------------------------
template <typename A>
void matmul_forward(const ExecContext& ctx, A* out /*(N,OC)*/, const A* inp /*(N,C)*/, const A* weight /*(OC,C)*/,
                    const A* bias /*(OC) or null*/, int N, int C, int OC);
// dinp = dout @ weight (assigned; skipped when dinp is null), dweight += dout^T @ inp, dbias += sum_n dout.
template <typename A>
void matmul_backward(const ExecContext& ctx, A* dinp /*(N,C) or null*/, float* dweight /*(OC,C) +=*/,
                     float* dbias /*(OC) += or null*/, const A* dout /*(N,OC)*/, const A* inp /*(N,C)*/,
                     const A* weight /*(OC,C)*/, int N, int C, int OC);

// ---- the MLP's Linear and GELU together, so that a backend may fuse them -----------------------------------------
// pre = inp @ weight^T + bias, out = gelu(pre) (both kept for the backward): matmul_forward then gelu_forward, bit for
// bit, except on CUDA with 16-bit storage and ctx.gelu_epilogue, where one cuBLASLt call with the GELU_AUX_BIAS
// epilogue writes both (its GELU rounds once from the fp32 accumulator: within bf16 rounding of the two ops).
template <typename A>
void matmul_gelu_forward(const ExecContext& ctx, A* out /*(N,OC)*/, A* pre /*(N,OC)*/, const A* inp /*(N,C)*/,
                         const A* weight /*(OC,C)*/, const A* bias /*(OC) or null*/, int N, int C, int OC);
// The backward of a Linear whose input is out = gelu(pre): dpre = gelu'(pre) * (dout @ weight) (assigned), dweight +=
// dout^T @ out, dbias += sum_n dout: matmul_backward into dgelu (N,C scratch, contents unspecified on return) then
// gelu_backward, bit for bit, except on CUDA with 16-bit storage and ctx.gelu_epilogue (cuBLASLt's DGELU epilogue:
// dpre from the fp32 product in one rounding; dgelu untouched).
template <typename A>
void matmul_dgelu_backward(const ExecContext& ctx, A* dpre /*(N,C)*/, A* dgelu /*(N,C)*/, float* dweight /*(OC,C) +=*/,
                           float* dbias /*(OC) += or null*/, const A* dout /*(N,OC)*/, const A* out /*(N,C)*/,
                           const A* pre /*(N,C)*/, const A* weight /*(OC,C)*/, int N, int C, int OC);

// ---- causal multi-head self-attention -------------------------------------------------------
// qkv rows hold [q (NH,HS) | k (NH,HS) | v (NH,HS)], the (3, NH, HS) row order of the fused QKV weight; out (B,T,C)
// holds head h in columns [h HS, (h+1) HS). Scale 1/sqrt(HS); query t attends to the keys j <= t.
//
// What forward keeps for backward (`stats`) and what backward needs as scratch are the backend's choice (docs/cuda.md:
// activation and workspace sizes come from the backend); the model plans them once with the two size queries
// for the same shape and storage type, per layer for stats and one scratch shared by all layers:
//   CPU and CUDA alike (flash attention: the T x T matrix is never stored; backward recomputes
//   P = exp(q k^T scale - L) tile by tile):
//         stats   = the log-sum-exp L (B,NH,T) of each row's scaled scores, float, whatever A   -> B*NH*T*4
//         scratch = D (B,NH,T) = rowsum(dout * out) per head, float                           -> B*NH*T*4
//   The CPU's tile buffers (a few score tiles per thread, and for bf16 storage the head's operands widened to
//   fp32) are its own, grown on the first call and kept (cpu_attention.cpp).
// A buffer of at least that many bytes, 16-byte aligned, on ctx.device; stats must survive from forward to backward;
// the scratch contents on entry and on return are unspecified. A smaller micro-batch b <= B may use the buffers
// planned for B. act: the storage type A of the calls (DType::F32, DType::BF16 or, on CUDA, DType::F16).
int64_t attention_stats_bytes(const ExecContext& ctx, int B, int T, int C, int NH, DType act = DType::F32);
int64_t attention_scratch_bytes(const ExecContext& ctx, int B, int T, int C, int NH, DType act = DType::F32);
template <typename A>
void attention_forward(const ExecContext& ctx, A* out /*(B,T,C)*/, void* stats /*(stats_floats)*/,
                       const A* qkv /*(B,T,3C)*/, int B, int T, int C, int NH);
// dqkv assigned. out is the forward's output for this qkv (both backends compute D = rowsum(dout * out) from it).
template <typename A>
void attention_backward(const ExecContext& ctx, A* dqkv /*(B,T,3C)*/, void* scratch /*(scratch_floats)*/,
                        const A* dout /*(B,T,C)*/, const A* qkv /*(B,T,3C)*/, const A* out /*(B,T,C)*/,
                        const void* stats /*(stats_floats)*/, int B, int T, int C, int NH);

// ---- GELU, tanh approximation (torch approximate="tanh") ------------------------------------
template <typename A>
void gelu_forward(const ExecContext& ctx, A* out, const A* inp, int64_t n);
template <typename A>
void gelu_backward(const ExecContext& ctx, A* dinp /*assigned*/, const A* inp, const A* dout, int64_t n);

// ---- residual: out = a + b --------------------------------------------------------------------
template <typename A>
void residual_forward(const ExecContext& ctx, A* out, const A* a, const A* b, int64_t n);

// ---- fused softmax cross-entropy over the first V of Vp logits (padded logits masked out) --------
// losses[n] = -log softmax(logits[n, :V])[targets[n]]   (assigned). Targets must lie in [0, V).
template <typename A>
void crossentropy_forward(const ExecContext& ctx, float* losses /*(N)*/, const A* logits /*(N,Vp)*/,
                          const int32_t* targets /*(N)*/, int N, int V, int Vp);
// Forward and backward fused, in place: on return logits holds
//   dlogits[n, v] = dloss * (softmax(logits[n, :V])[v] - [v == targets[n]]) for v < V, and 0 for v >= V;
// losses[n] as crossentropy_forward. dloss is the scale of each loss term (e.g. 1 / global loss terms).
template <typename A>
void crossentropy_forward_backward(const ExecContext& ctx, float* losses /*(N)*/, A* logits /*(N,Vp) in/out*/,
                                   const int32_t* targets /*(N)*/, float dloss, int N, int V, int Vp);

// ---- label-smoothed softmax cross-entropy (classifiers: K classes, no padding; torch's label_smoothing = eps) -----
// The target distribution is (1 - eps) one-hot(y) + eps / K, so with p = softmax(z) and lse = logsumexp(z):
//   losses[n] = (1 - eps) (-log p[y_n]) + eps mean_k (-log p[k]) = lse - (1 - eps) z[y_n] - eps mean_k z[k]  (assigned);
// eps = 0 gives crossentropy_forward. The fused backward leaves in logits
//   dlogits[n, k] = dloss * (p[k] - (1 - eps) [k == y_n] - eps / K).
template <typename A>
void crossentropy_smoothed_forward(const ExecContext& ctx, float* losses /*(N)*/, const A* logits /*(N,K)*/,
                                   const int32_t* targets /*(N)*/, float eps, int N, int K);
template <typename A>
void crossentropy_smoothed_forward_backward(const ExecContext& ctx, float* losses /*(N)*/, A* logits /*(N,K) in/out*/,
                                            const int32_t* targets /*(N)*/, float dloss, float eps, int N, int K);

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
template <typename A>
void encoder_forward_vocab_parallel(const ExecContext& ctx, A* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                                    const A* wte_local /*(Vl,C)*/, const A* wpe /*(T,C) or null*/, int v0, int Vl,
                                    int B, int T, int C);
template <typename A>
void encoder_backward_vocab_parallel(const ExecContext& ctx, float* dwte_local /*(Vl,C) +=*/,
                                     float* dwpe /*(T,C) += or null*/, const A* dout /*(B,T,C)*/,
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
template <typename A>
void crossentropy_vp_local_max(const ExecContext& ctx, float* max_out /*(N)*/, const A* logits_local /*(N,Vl)*/, int v0,
                               int Vl, int V, int N);
// sumexp_out[n] = sum over the real local columns of exp(logits_local[n, j] - global_max[n]);
// target_logit_out[n] = logits_local[n, targets[n] - v0] if targets[n] is in [v0, v0+Vl), else 0 (assigned).
template <typename A>
void crossentropy_vp_local_sumexp(const ExecContext& ctx, float* sumexp_out /*(N)*/, float* target_logit_out /*(N)*/,
                                  const A* logits_local /*(N,Vl)*/, const float* global_max /*(N)*/,
                                  const int32_t* targets /*(N)*/, int v0, int Vl, int V, int N);
// In place: on return logits_local holds, for the real local columns,
//   dlogits[n, j] = dloss * (exp(logits[n, j] - global_max[n]) / global_sumexp[n] - [v0 + j == targets[n]]),
// and 0 for the padded ones; losses[n] as above (assigned). The local slice of crossentropy_forward_backward.
template <typename A>
void crossentropy_vp_loss_backward(const ExecContext& ctx, float* losses /*(N)*/, A* logits_local /*(N,Vl) in/out*/,
                                   const float* global_max /*(N)*/, const float* global_sumexp /*(N)*/,
                                   const float* global_target_logit /*(N)*/, const int32_t* targets /*(N)*/,
                                   float dloss, int v0, int Vl, int V, int N);
// Forward only (evaluation): losses[n] from the three reduced statistics; the logits are not needed any more.
void crossentropy_vp_loss(const ExecContext& ctx, float* losses /*(N)*/, const float* global_max /*(N)*/,
                          const float* global_sumexp /*(N)*/, const float* global_target_logit /*(N)*/, int N);

// ---- convolutional layers (ResNet) ---------------------------------------------------------------
// Legend: N images, C input channels, H W input height/width, OC output channels, KH KW kernel, OH OW output
//         height/width with OH = (H + 2 pad - KH) / stride + 1 (floor, as torch), HW = H*W. Layout NCHW, or
//         channels-last under ExecContext::channels_last (below, after the pools).
// Gradients follow the convention above: dweight, dbias, dgamma, dbeta +=; dinp assigned (=).
// The classifier head uses matmul_forward/backward (N, C) -> (N, classes) and crossentropy_forward_backward with
// V = Vp = classes (no padding: every column is real).
//
// Conv2d (torch.nn.Conv2d, groups = 1, dilation = 1): out[n,oc] = bias[oc] + sum_c weight[oc,c] (*) inp[n,c].
// The CPU backend runs oneDNN's convolution primitives when built with oneDNN (cpu/cpu_conv_dnnl.hpp; `workspace`
// then holds the blocked-layout copies and the primitives' scratchpad), else im2col + sgemm, one image per OpenMP
// thread (`workspace` holds per-thread column and partial-dweight buffers). Planned once by the model (DESIGN
// invariant 7: nothing allocates in the step loop): pass workspace_floats = conv2d_workspace_floats(...) of the
// same shape and ExecContext (channels-last activations size it for their primitives alone: no im2col fallback, so a
// smaller workspace is an error there). A smaller workspace falls back to im2col, on fewer threads if need be; less than one thread's im2col
// share is an error. One workspace may serve every conv layer in turn (size it for the largest); its contents
// between calls are unspecified. HPCT_CONV=im2col in the environment forces the im2col path.
// On CUDA the size is cuda_conv_filter_scratch_bytes and the algorithms' budget above, computed on the host (no GPU
// needed: a plan for CUDA made anywhere is the run's size).
// act: the storage type A of the calls (DType::F32, DType::BF16 or, on CUDA, DType::F16).
int64_t conv2d_workspace_floats(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                                int pad, DType act = DType::F32);
template <typename A>
void conv2d_forward(const ExecContext& ctx, A* out /*(N,OC,OH,OW)*/, const A* inp /*(N,C,H,W)*/,
                    const A* weight /*(OC,C,KH,KW)*/, const A* bias /*(OC) or null*/,
                    float* workspace /*(workspace_floats)*/, int64_t workspace_floats, int N, int C, int H, int W,
                    int OC, int KH, int KW, int stride, int pad);
// dinp = conv_transpose(dout, weight) (assigned; skipped when null, e.g. the first layer), dweight += dout (*) inp,
// dbias += sum over (n, oh, ow) of dout (skipped when null).
template <typename A>
void conv2d_backward(const ExecContext& ctx, A* dinp /*(N,C,H,W) or null*/, float* dweight /*(OC,C,KH,KW) +=*/,
                     float* dbias /*(OC) += or null*/, const A* dout /*(N,OC,OH,OW)*/, const A* inp /*(N,C,H,W)*/,
                     const A* weight /*(OC,C,KH,KW)*/, float* workspace /*(workspace_floats)*/,
                     int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);
// CUDA: times cuDNN's deterministic algorithms of the convolution's three phases (kernels/conv_algorithms.hpp), in
// cuDNN's heuristic order: each candidate whose workspace fits workspace_floats (the model's, as conv2d gets it) runs
// once to warm up and then `repeats` times between CUDA events on the context's stream; its time is the median. Buffers
// of the shape whose contents are overwritten and whose values do not matter: x (N,C,H,W), y (N,OC,OH,OW; the forward
// writes it, the backward passes read it as dout), dx (N,C,H,W); w: a filter (read); dw: a float (OC,C,KH,KW) buffer
// that the backward-filter runs write where the filter gradient goes straight to dweight (float storage without a
// filter reorder: conv2d_backward's beta = 1 path), null to leave that phase untimed there. Start-up only: it
// synchronizes the host (kernels::synchronize) after each candidate; the CPU backend has nothing to choose (an error).
template <typename A>
ConvTiming conv2d_time_algorithms(const ExecContext& ctx, A* x, const A* w, A* y, A* dx, float* dw, float* workspace,
                                  int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                                  int stride, int pad, int repeats);

// BatchNorm2d (torch.nn.BatchNorm2d semantics): training normalises with the batch's BIASED variance
// var = M2 / count, count = N*HW per channel; running_var is updated with the UNBIASED M2 / (count - 1).
// Statistics are never computed as E[x^2] - mean^2 (cancellation): per-channel (count, mean, M2) triples, two-pass
// in double within a rank, merged across ranks with Chan's parallel formula (kernels/batchnorm_stats.hpp).
// stats buffers are (C,3) rows of (count, mean, M2), float.
//
// Single process (or model.sync_bn = false): batchnorm2d_forward_train, batchnorm2d_backward.
// SyncBN over the DP group of R ranks (the same code runs at R = 1), forward:
//   1. batchnorm2d_local_stats(local (C,3))           this rank's images
//   2. allgather of local over DP -> gathered (R,C,3), rank order
//   3. batchnorm2d_merge_stats(global (C,3), gathered, R)   Chan's formula, folded in rank order (so every rank
//      gets bitwise the same global stats)
//   4. batchnorm2d_forward_apply(..., global)  and  batchnorm2d_update_running(..., global)
// backward (the conjugate: the forward's allgather of statistics becomes an allreduce of gradient sums):
//   1. batchnorm2d_backward_local_sums(local_sums (C,2) = (sum dout, sum dout*xhat) over this rank's images;
//      also dgamma += sum dout*xhat, dbeta += sum dout of the LOCAL sums: gamma and beta are replicated
//      parameters whose gradients the DP gradient allreduce sums like any other)
//   2. allreduce(SUM) of local_sums over DP -> global_sums (C,2)
//   3. batchnorm2d_backward_apply(dinp, ..., global_sums, global_count = sum over ranks of N_r*HW)
//   dinp = gamma rstd (dout - global_sum_dout / count - xhat global_sum_dout_xhat / count).
template <typename A>
void batchnorm2d_forward_train(const ExecContext& ctx, A* out /*(N,C,HW)*/, float* stats /*(C,3) assigned*/,
                               float* save_mean /*(C)*/, float* save_rstd /*(C)*/, const A* inp /*(N,C,HW)*/,
                               const A* gamma /*(C)*/, const A* beta /*(C)*/, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_local_stats(const ExecContext& ctx, float* stats /*(C,3) assigned*/, const A* inp /*(N,C,HW)*/, int N,
                             int C, int HW);
void batchnorm2d_merge_stats(const ExecContext& ctx, float* merged /*(C,3) assigned*/,
                             const float* gathered /*(R,C,3)*/, int R, int C);
// out = (inp - mean) * rstd * gamma + beta with mean = stats mean, rstd = 1 / sqrt(M2 / count + eps);
// save_mean, save_rstd (assigned) are what the backward needs.
template <typename A>
void batchnorm2d_forward_apply(const ExecContext& ctx, A* out /*(N,C,HW)*/, float* save_mean /*(C)*/,
                               float* save_rstd /*(C)*/, const A* inp /*(N,C,HW)*/, const A* gamma /*(C)*/,
                               const A* beta /*(C)*/, const float* stats /*(C,3) global*/, int N, int C, int HW,
                               float eps);
// running_mean = (1 - momentum) running_mean + momentum mean; running_var likewise with M2 / (count - 1).
void batchnorm2d_update_running(const ExecContext& ctx, float* running_mean /*(C)*/, float* running_var /*(C)*/,
                                const float* stats /*(C,3) global*/, int C, float momentum);
// Evaluation: out = (inp - running_mean) / sqrt(running_var + eps) * gamma + beta.
template <typename A>
void batchnorm2d_forward_eval(const ExecContext& ctx, A* out /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                              const A* gamma /*(C)*/, const A* beta /*(C)*/, const float* running_mean /*(C)*/,
                              const float* running_var /*(C)*/, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_backward(const ExecContext& ctx, A* dinp /*(N,C,HW) assigned*/, float* dgamma /*(C) +=*/,
                          float* dbeta /*(C) +=*/, const A* dout /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                          const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, const A* gamma /*(C)*/, int N,
                          int C, int HW);
template <typename A>
void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums /*(C,2) assigned*/, float* dgamma /*(C) +=*/,
                                     float* dbeta /*(C) +=*/, const A* dout /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                                     const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, int N, int C,
                                     int HW);
template <typename A>
void batchnorm2d_backward_apply(const ExecContext& ctx, A* dinp /*(N,C,HW) assigned*/, const A* dout /*(N,C,HW)*/,
                                const A* inp /*(N,C,HW)*/, const float* save_mean /*(C)*/,
                                const float* save_rstd /*(C)*/, const A* gamma /*(C)*/,
                                const float* global_sums /*(C,2)*/, int64_t global_count, int N, int C, int HW);

// ReLU. In place allowed (out == inp; dinp == dout). The backward reads the forward's OUTPUT (out > 0 exactly where
// inp > 0), so an in-place forward loses nothing: dinp = dout * (out > 0) (assigned).
template <typename A>
void relu_forward(const ExecContext& ctx, A* out, const A* inp, int64_t n);
template <typename A>
void relu_backward(const ExecContext& ctx, A* dinp, const A* dout, const A* out, int64_t n);
// out = relu(a + b), the sum rounded once to A as residual_forward's: residual_forward then relu_forward in one pass,
// bit for bit (a ResNet block's end). In place allowed (out == a or b).
template <typename A>
void residual_relu_forward(const ExecContext& ctx, A* out, const A* a, const A* b, int64_t n);
// dinp = relu_backward(residual_forward(a, b)) through the ReLU whose output is `out`: the sum rounded once as
// residual_forward's, kept where out > 0, bit for bit the two ops in one pass (a ResNet block input's gradient, its main
// branch's plus its shortcut's, taken through the previous block's final ReLU). In place allowed (dinp == a or b).
template <typename A>
void residual_relu_backward(const ExecContext& ctx, A* dinp, const A* a, const A* b, const A* out, int64_t n);

// MaxPool2d (torch semantics: padding counts as -inf, floor mode, the first maximum in row-major window order wins).
// idx[n,c,oh,ow] = ih*W + iw of the maximum within its (H,W) plane; the backward scatters dout there (dinp assigned:
// zeroed first, overlapping windows add up).
template <typename A>
void maxpool2d_forward(const ExecContext& ctx, A* out /*(N,C,OH,OW)*/, int32_t* idx /*(N,C,OH,OW)*/,
                       const A* inp /*(N,C,H,W)*/, int N, int C, int H, int W, int K, int stride, int pad);
template <typename A>
void maxpool2d_backward(const ExecContext& ctx, A* dinp /*(N,C,H,W)*/, const A* dout /*(N,C,OH,OW)*/,
                        const int32_t* idx /*(N,C,OH,OW)*/, int N, int C, int H, int W, int K, int stride, int pad);

// Global average pooling (N,C,H,W) -> (N,C); backward dinp = dout / HW broadcast (assigned).
template <typename A>
void global_avgpool_forward(const ExecContext& ctx, A* out /*(N,C)*/, const A* inp /*(N,C,HW)*/, int N, int C, int HW);
template <typename A>
void global_avgpool_backward(const ExecContext& ctx, A* dinp /*(N,C,HW)*/, const A* dout /*(N,C)*/, int N, int C,
                             int HW);

// BatchNorm followed by ReLU (a residual block's inner units and the stem): bit for bit the BatchNorm op, then
// relu_forward on its output in place; backward, relu_backward of dout through the ReLU's output relu_out (the
// forward's out), then the BatchNorm backward. On CUDA (either layout) and channels-last on the CPU they run in the
// BatchNorm's own passes (one pass over the activation fewer each way); elsewhere as the two ops. dout: the gradient of relu_out; the two-op path masks
// it in place, so its contents are unspecified on return. The SyncBN pair takes the same dout and relu_out, local sums
// first (the apply reads the dout they masked where they masked it).
template <typename A>
void batchnorm2d_relu_forward_train(const ExecContext& ctx, A* out, float* stats, float* save_mean, float* save_rstd,
                                    const A* inp, const A* gamma, const A* beta, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_relu_forward_apply(const ExecContext& ctx, A* out, float* save_mean, float* save_rstd, const A* inp,
                                    const A* gamma, const A* beta, const float* stats, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_relu_forward_eval(const ExecContext& ctx, A* out, const A* inp, const A* gamma, const A* beta,
                                   const float* running_mean, const float* running_var, int N, int C, int HW,
                                   float eps);
template <typename A>
void batchnorm2d_relu_backward(const ExecContext& ctx, A* dinp, float* dgamma, float* dbeta, A* dout, const A* relu_out,
                               const A* inp, const float* save_mean, const float* save_rstd, const A* gamma, int N,
                               int C, int HW);
template <typename A>
void batchnorm2d_relu_backward_local_sums(const ExecContext& ctx, float* sums, float* dgamma, float* dbeta, A* dout,
                                          const A* relu_out, const A* inp, const float* save_mean,
                                          const float* save_rstd, int N, int C, int HW);
template <typename A>
void batchnorm2d_relu_backward_apply(const ExecContext& ctx, A* dinp, const A* dout, const A* relu_out, const A* inp,
                                     const float* save_mean, const float* save_rstd, const A* gamma,
                                     const float* global_sums, int64_t global_count, int N, int C, int HW);

// A residual block's last BatchNorm with the block's end (the residual add and the ReLU): out = relu(BN(inp) + residual),
// bit for bit the BatchNorm op into out, then residual_relu_forward(out, out, residual) (the BatchNorm's output rounded
// to A, the sum rounded once, the ReLU exact). On CUDA (either layout) and channels-last on the CPU in the BatchNorm's
// own pass, which then neither writes the BatchNorm's output nor reads it back; elsewhere as the two ops. The
// backward needs no fused twin: the block's backward masks dout by out once (relu_backward), the result feeds both the
// BatchNorm backward and the shortcut. residual does not alias out.
template <typename A>
void batchnorm2d_add_relu_forward_train(const ExecContext& ctx, A* out, float* stats, float* save_mean,
                                        float* save_rstd, const A* inp, const A* gamma, const A* beta,
                                        const A* residual, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_add_relu_forward_apply(const ExecContext& ctx, A* out, float* save_mean, float* save_rstd,
                                        const A* inp, const A* gamma, const A* beta, const A* residual,
                                        const float* stats, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_add_relu_forward_eval(const ExecContext& ctx, A* out, const A* inp, const A* gamma, const A* beta,
                                       const A* residual, const float* running_mean, const float* running_var, int N,
                                       int C, int HW, float eps);

// Channels-last activations (ExecContext::channels_last): every 4-D activation and activation gradient of the ops
// above (conv2d_*, batchnorm2d_*, maxpool2d_* with its idx, global_avgpool_*) is (N,H,W,C) instead of (N,C,H,W), with
// the same arguments and the same semantics; the weights stay (OC,C,KH,KW), the statistics (C,3) and the pooled
// features (N,C). The pointwise ops (relu_*, residual_*) take either layout. The CPU backend runs the convolutions
// through oneDNN's nxc primitives on the tensors themselves (no reorder of the activations, which NCHW pays on every
// call); BatchNorm's statistics sum per channel over fixed slabs of positions (the same double arithmetic as NCHW, in
// another order: the layouts agree to rounding, and each is independent of the thread count). The CUDA backend runs
// cuDNN's NHWC convolutions (the filter reordered to (OC,KH,KW,C) in the workspace, conv2d_workspace_floats sizes it)
// and its own channels-last kernels (column reductions over positions, passes in packs of channels), every storage type.
// Whether every convolution of this shape runs channels-last under ctx (CUDA: always; the CPU with oneDNN taking the
// shape in nxc for this storage type, false with HPCT_CONV=im2col): a model decides its layout from it before it plans.
bool conv2d_channels_last_runs(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                               int pad, DType act);
// out (N,H,W,C) = images (N,C,H,W) fp32, rounded to A: the data pipeline's NCHW images into channels-last activations.
template <typename A>
void images_to_channels_last(const ExecContext& ctx, A* out, const float* images, int N, int C, int HW);

// ---- reductions and optimizer ---------------------------------------------------------------
// *out = sum of x[i] (accumulated in double, written as float) on ctx.device.
void sum(const ExecContext& ctx, float* out /*(1)*/, const float* x, int64_t n);
// The same sum as a host float: sum() into `scratch` (one float on ctx.device), one explicit copy, then
// synchronize(ctx) (the host reads the copy): all work queued on ctx.stream before has completed on return.
float sum_to_host(const ExecContext& ctx, float* scratch /*(1)*/, const float* x, int64_t n);
// *out += sum of x[i]^2 (accumulated in double) on ctx.device; out is a double on the device.
void sum_squares_accumulate(const ExecContext& ctx, double* out /*(1)*/, const float* x, int64_t n);
// The sum of squares of many float ranges in one full-grid reduction (the global gradient norm), planned once:
//   squares_table(ranges) cuts each range, in order, into chunks of kTableChunk elements (its last one shorter;
//     an empty range gives none): the chunk table, which the caller copies to ctx.device while planning;
//   sum_squares_ranges adds, in double, every chunk's sum of squares into *acc: chunk c's in a fixed order into
//     partials[c] (chunks doubles on ctx.device), then the partials in chunk order. On CUDA one block per chunk and one
//     block for the partials (two launches instead of one single-block reduction per tensor); on the CPU the chunks
//     in parallel, each in increasing index order. Deterministic on each: the order depends on the ranges' lengths
//     (and, on CUDA, the chunks' 16-byte alignment) only, never on timing.
struct SquaresRange {
  const float* x;
  int64_t n;
};
std::vector<SquaresChunk> squares_table(const std::vector<SquaresRange>& ranges);
void sum_squares_ranges(const ExecContext& ctx, double* acc /*(1)*/, const SquaresChunk* table, int64_t chunks,
                        double* partials /*(chunks)*/);
void scale(const ExecContext& ctx, float* x, float s, int64_t n);
// AdamW (torch.optim.AdamW semantics): p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). t is the 1-based step. g is multiplied by
// grad_scale first (e.g. the clipping factor).
void adamw_update(const ExecContext& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
// adamw_update over many tensors in one launch, planned once: adamw_table cuts each range, in order, into chunks of
// kTableChunk elements (an empty range gives none), the table the caller copies to ctx.device while planning;
// adamw_update_chunks applies adamw_update's arithmetic to every element of every chunk, weight_decay to the chunks
// whose range decays and none to the others: bit for bit what adamw_update per tensor gives. On CUDA one block per
// chunk (one launch instead of one per tensor); on the CPU adamw_update per chunk.
// With a compute copy (copy = DType::BF16, or F16 on CUDA; every range's `copy` set: n elements of that type) each
// updated parameter is also stored there rounded once to nearest even, the bits cast() would give: the optimizer then
// keeps the model's 16-bit copy current and the step's separate cast pass goes (copy = DType::F32: no copy, every
// range's `copy` null).
struct AdamwRange {
  float* params;
  const float* grads;
  float* m;
  float* v;
  int64_t n;
  bool decays;
  void* copy = nullptr;
};
std::vector<AdamwChunk> adamw_table(const std::vector<AdamwRange>& ranges, DType copy = DType::F32);
void adamw_update_chunks(const ExecContext& ctx, const AdamwChunk* table, int64_t chunks, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float grad_scale, int t, DType copy = DType::F32);

// ---- storage-type conversions on ctx.device (the 16-bit compute copy of the parameters; tests) --------------
// dst[i] = src[i] rounded to nearest even (bf16.hpp, fp16.hpp); the other way exactly. fp16: CUDA only.
void cast(const ExecContext& ctx, bf16* dst, const float* src, int64_t n);
void cast(const ExecContext& ctx, float* dst, const bf16* src, int64_t n);
void cast(const ExecContext& ctx, fp16* dst, const float* src, int64_t n);
void cast(const ExecContext& ctx, float* dst, const fp16* src, int64_t n);

// How the CPU backend multiplies bf16, in one sentence for the run log (e.g. "bf16 GEMMs with fp32 accumulation
// through oneDNN ... (brg:avx512_core_amx_bf16)", or fp32 GEMMs on bf16 storage and why): cpu/cpu_matmul_dnnl.hpp.
std::string cpu_bf16_arithmetic();

// ---- memory helpers on ctx.device ------------------------------------------------------------
void fill_zero(const ExecContext& ctx, void* dst, int64_t bytes);
void copy_to_host(const ExecContext& ctx, void* host_dst, const void* src, int64_t bytes);
void copy_from_host(const ExecContext& ctx, void* dst, const void* host_src, int64_t bytes);
// dst and src both on ctx.device, not overlapping (CUDA: device-to-device, stream-ordered on ctx.stream).
void copy_device(const ExecContext& ctx, void* dst, const void* src, int64_t bytes);
// The host blocks until all work on ctx.stream is done. CUDA: through ctx.sync_guard when set (bounded by
// comm.timeout_s, with the NCCL communicators watched: exec_context.hpp), else cudaStreamSynchronize. With a guard,
// copy_to_host / copy_from_host with pageable host memory also drain the stream through it first (cuda_core.cu).
void synchronize(const ExecContext& ctx);
// Page-locks the host range [host, host + bytes) for ctx.device's copies, so that copy_to_host / copy_from_host with it
// are asynchronous on ctx.stream (CUDA: cudaHostRegister; without it a copy into pageable memory returns only once it
// is done, after draining the stream: see synchronize above). The memory stays the caller's: host_unregister before
// freeing it. A no-op on the CPU, where every copy is a memcpy that has completed when it returns. Registering a range
// twice, or one of 0 bytes, is an error naming it.
void host_register(const ExecContext& ctx, void* host, int64_t bytes);
void host_unregister(const ExecContext& ctx, void* host);

// ---- per-op wall-clock profile (off by default; validation/bench_resnet --profile) -------------
// When on, every dispatched op, and named phases inside some ops (e.g. "conv2d_backward/weight 3x3s1 16>16 @28"),
// add their wall time to a table keyed by name. For a single host thread driving the ops (the step loop); a CPU op
// returns only when its work is done, so wall time is its time. Off, it costs one branch per op.
struct ProfileRow {
  std::string name;
  double ms;
  int64_t calls;
};
void profile_enable(bool on);
std::vector<ProfileRow> profile_take();  // the rows since the last take, in first-seen order; clears the table

}  // namespace hpct::kernels
