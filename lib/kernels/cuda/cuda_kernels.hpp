#pragma once
// The CUDA backend of kernels.hpp and optim_kernels.hpp: the same ops as cpu/cpu_kernels.hpp, each taking the
// ExecContext (its stream: a cudaStream_t, or null for the default stream). Every op is asynchronous on ctx.stream
// (kernels.hpp: Work::wait means stream-ordered, synchronize() blocks the host), checks its launches
// (HPCT_CUDA_LAUNCH_CHECK, cuda_common.cuh) and never allocates in the step: scratch comes from the caller.
// Plain C++ (no CUDA types): included by kernels.cpp's dispatch, compiled by g++; defined in the .cu files
//   cuda_core.cu    memory helpers, reductions, scale, AdamW, SGD, residual, GELU, ReLU, embedding, LayerNorm
//   cuda_gpt.cu     Linear (cuBLAS, cuBLASLt for bf16), attention, the cross-entropies (plain, smoothed, vocab-par.)
//   cuda_resnet.cu  Conv2d (cuDNN), BatchNorm2d (train / SyncBN pieces / eval), max and global-average pooling
// Storage types: the ops templated on A are instantiated for A = float, A = bf16 and A = fp16 in the .cu files
// (kernels.hpp, "Storage types"; docs/cuda.md, "bf16 storage on CUDA": fp16 storage is the same scheme in __half).
// Reference: each op must equal the CPU backend within the tolerances of tests/unit/kernels/test_cuda_*.cpp (fp32 and
// bf16; ctest label cuda), and every own kernel runs on the host emulation in tests/cuda_emu (label emu).
#include <cstdint>

#include "kernels/exec_context.hpp"
#include "kernels/chunk_tables.hpp"
#include "kernels/conv_algorithms.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels::cuda {

template <typename A>
void encoder_forward(const ExecContext& ctx, A* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, const A* wte /*(Vp,C)*/,
                     const A* wpe /*(T,C)*/, int B, int T, int C);
template <typename A>
void encoder_backward(const ExecContext& ctx, float* dwte /*(Vp,C) +=*/, float* dwpe /*(T,C) +=*/,
                      const A* dout /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, int B, int T, int C);

template <typename A>
void layernorm_forward(const ExecContext& ctx, A* out /*(N,C)*/, float* mean /*(N)*/, float* rstd /*(N)*/,
                       const A* inp /*(N,C)*/, const A* weight /*(C)*/, const A* bias /*(C) or null*/, int N, int C);
template <typename A>
void layernorm_backward(const ExecContext& ctx, A* dinp /*(N,C) +=*/, float* dweight /*(C) +=*/,
                        float* dbias /*(C) += or null*/, const A* dout /*(N,C)*/, const A* inp /*(N,C)*/,
                        const A* weight /*(C)*/, const float* mean /*(N)*/, const float* rstd /*(N)*/, int N, int C);

template <typename A>
void residual_layernorm_forward(const ExecContext& ctx, A* residual /*(N,C)*/, A* out /*(N,C)*/, float* mean /*(N)*/,
                                float* rstd /*(N)*/, const A* a /*(N,C)*/, const A* b /*(N,C)*/,
                                const A* weight /*(C)*/, const A* bias /*(C) or null*/, int N, int C);

template <typename A>
void matmul_forward(const ExecContext& ctx, A* out /*(N,OC)*/, const A* inp /*(N,C)*/, const A* weight /*(OC,C)*/,
                    const A* bias /*(OC) or null*/, int N, int C, int OC);
template <typename A>
void matmul_backward(const ExecContext& ctx, A* dinp /*(N,C) or null*/, float* dweight /*(OC,C) +=*/,
                     float* dbias /*(OC) += or null*/, const A* dout /*(N,OC)*/, const A* inp /*(N,C)*/,
                     const A* weight /*(OC,C)*/, int N, int C, int OC);
// The GELU epilogues (cuda_gpt.cu): true when cuBLASLt did the work, false where kernels.cpp composes the two ops.
template <typename A>
bool try_matmul_gelu_forward(const ExecContext& ctx, A* out, A* pre, const A* inp, const A* weight, const A* bias,
                             int N, int C, int OC);
template <typename A>
bool try_matmul_dgelu_backward(const ExecContext& ctx, A* dpre, const A* dout, const A* pre, const A* weight, int N,
                               int C, int OC);

// Flash attention (cuda_gpt.cu): stats is the log-sum-exp L (B,NH,T), scratch holds D = rowsum(dout * out) (B,NH,T).
// The two size queries are pure host arithmetic (no device call).
int64_t attention_stats_bytes(const ExecContext& ctx, int B, int T, int C, int NH, DType act);    // B*NH*T*4
int64_t attention_scratch_bytes(const ExecContext& ctx, int B, int T, int C, int NH, DType act);  // B*NH*T*4
template <typename A>
void attention_forward(const ExecContext& ctx, A* out /*(B,T,C)*/, void* stats /*lse (B,NH,T) float*/,
                       const A* qkv /*(B,T,3C)*/, int B, int T, int C, int NH);
template <typename A>
void attention_backward(const ExecContext& ctx, A* dqkv /*(B,T,3C)*/, void* scratch /*(B,NH,T)*/,
                        const A* dout /*(B,T,C)*/, const A* qkv /*(B,T,3C)*/, const A* out /*(B,T,C)*/,
                        const void* stats /*lse (B,NH,T) float*/, int B, int T, int C, int NH);

template <typename A>
void gelu_forward(const ExecContext& ctx, A* out, const A* inp, int64_t n);
template <typename A>
void gelu_backward(const ExecContext& ctx, A* dinp, const A* inp, const A* dout, int64_t n);

template <typename A>
void residual_forward(const ExecContext& ctx, A* out, const A* a, const A* b, int64_t n);

template <typename A>
void crossentropy_forward(const ExecContext& ctx, float* losses /*(N)*/, const A* logits /*(N,Vp)*/,
                          const int32_t* targets /*(N)*/, int N, int V, int Vp);
template <typename A>
void crossentropy_forward_backward(const ExecContext& ctx, float* losses /*(N)*/, A* logits /*(N,Vp) in/out*/,
                                   const int32_t* targets /*(N)*/, float dloss, int N, int V, int Vp);

// Vocabulary parallelism (kernels.hpp): this rank holds the global rows/columns [v0, v0+Vl) of the padded Vp.
template <typename A>
void encoder_forward_vocab_parallel(const ExecContext& ctx, A* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                                    const A* wte_local /*(Vl,C)*/, const A* wpe /*(T,C) or null*/, int v0, int Vl,
                                    int B, int T, int C);
template <typename A>
void encoder_backward_vocab_parallel(const ExecContext& ctx, float* dwte_local /*(Vl,C) +=*/,
                                     float* dwpe /*(T,C) += or null*/, const A* dout /*(B,T,C)*/,
                                     const int32_t* inp /*(B,T)*/, int v0, int Vl, int B, int T, int C);
template <typename A>
void crossentropy_smoothed_forward(const ExecContext& ctx, float* losses /*(N)*/, const A* logits /*(N,K)*/,
                                   const int32_t* targets /*(N)*/, float eps, int N, int K);
template <typename A>
void crossentropy_smoothed_forward_backward(const ExecContext& ctx, float* losses /*(N)*/, A* logits /*(N,K) in/out*/,
                                            const int32_t* targets /*(N)*/, float dloss, float eps, int N, int K);
template <typename A>
void crossentropy_vp_local_max(const ExecContext& ctx, float* max_out /*(N)*/, const A* logits_local /*(N,Vl)*/, int v0,
                               int Vl, int V, int N);
template <typename A>
void crossentropy_vp_local_sumexp(const ExecContext& ctx, float* sumexp_out /*(N)*/, float* target_logit_out /*(N)*/,
                                  const A* logits_local /*(N,Vl)*/, const float* global_max /*(N)*/,
                                  const int32_t* targets /*(N)*/, int v0, int Vl, int V, int N);
template <typename A>
void crossentropy_vp_loss_backward(const ExecContext& ctx, float* losses /*(N)*/, A* logits_local /*(N,Vl) in/out*/,
                                   const float* global_max /*(N)*/, const float* global_sumexp /*(N)*/,
                                   const float* global_target_logit /*(N)*/, const int32_t* targets /*(N)*/,
                                   float dloss, int v0, int Vl, int V, int N);
void crossentropy_vp_loss(const ExecContext& ctx, float* losses /*(N)*/, const float* global_max /*(N)*/,
                          const float* global_sumexp /*(N)*/, const float* global_target_logit /*(N)*/, int N);

// ---- convolutional layers (ResNet): see kernels.hpp for the contracts (cpu_conv.cpp). NCHW, or channels-last under
// ctx.channels_last (every activation (N,H,W,C); the shape comments below are NCHW's). BatchNorm's `relu` / `relu_out`:
// the ReLU that follows it, in the BatchNorm's own passes (kernels.hpp, the batchnorm2d_relu ops), in both layouts;
// `residual` (forward): the residual add before that ReLU (the batchnorm2d_add_relu ops; relu then true). ----
template <typename A>
void conv2d_forward(const ExecContext& ctx, A* out /*(N,OC,OH,OW)*/, const A* inp /*(N,C,H,W)*/,
                    const A* weight /*(OC,C,KH,KW)*/, const A* bias /*(OC) or null*/,
                    float* workspace /*(workspace_floats)*/, int64_t workspace_floats, int N, int C, int H, int W,
                    int OC, int KH, int KW, int stride, int pad);
template <typename A>
void conv2d_backward(const ExecContext& ctx, A* dinp /*(N,C,H,W) or null*/, float* dweight /*(OC,C,KH,KW) +=*/,
                     float* dbias /*(OC) += or null*/, const A* dout /*(N,OC,OH,OW)*/, const A* inp /*(N,C,H,W)*/,
                     const A* weight /*(OC,C,KH,KW)*/, float* workspace /*(workspace_floats)*/,
                     int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);
template <typename A>
ConvTiming conv2d_time_algorithms(const ExecContext& ctx, A* x, const A* w, A* y, A* dx, float* dw, float* workspace,
                                  int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                                  int stride, int pad, int repeats);

template <typename A>
void batchnorm2d_forward_train(const ExecContext& ctx, A* out /*(N,C,HW)*/, float* stats /*(C,3) assigned*/,
                               float* save_mean /*(C)*/, float* save_rstd /*(C)*/, const A* inp /*(N,C,HW)*/,
                               const A* gamma /*(C)*/, const A* beta /*(C)*/, int N, int C, int HW, float eps,
                               bool relu = false, const A* residual = nullptr);
template <typename A>
void batchnorm2d_local_stats(const ExecContext& ctx, float* stats /*(C,3) assigned*/, const A* inp /*(N,C,HW)*/, int N,
                             int C, int HW);
void batchnorm2d_merge_stats(const ExecContext& ctx, float* merged /*(C,3) assigned*/,
                             const float* gathered /*(R,C,3)*/, int R, int C);
template <typename A>
void batchnorm2d_forward_apply(const ExecContext& ctx, A* out /*(N,C,HW)*/, float* save_mean /*(C)*/,
                               float* save_rstd /*(C)*/, const A* inp /*(N,C,HW)*/, const A* gamma /*(C)*/,
                               const A* beta /*(C)*/, const float* stats /*(C,3) global*/, int N, int C, int HW,
                               float eps, bool relu = false, const A* residual = nullptr);
void batchnorm2d_update_running(const ExecContext& ctx, float* running_mean /*(C)*/, float* running_var /*(C)*/,
                                const float* stats /*(C,3) global*/, int C, float momentum);
template <typename A>
void batchnorm2d_forward_eval(const ExecContext& ctx, A* out /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                              const A* gamma /*(C)*/, const A* beta /*(C)*/, const float* running_mean /*(C)*/,
                              const float* running_var /*(C)*/, int N, int C, int HW, float eps, bool relu = false,
                              const A* residual = nullptr);
template <typename A>
void batchnorm2d_backward(const ExecContext& ctx, A* dinp /*(N,C,HW) assigned*/, float* dgamma /*(C) +=*/,
                          float* dbeta /*(C) +=*/, const A* dout /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                          const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, const A* gamma /*(C)*/, int N,
                          int C, int HW, const A* relu_out = nullptr);
template <typename A>
void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums /*(C,2) assigned*/, float* dgamma /*(C) +=*/,
                                     float* dbeta /*(C) +=*/, const A* dout /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                                     const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, int N, int C,
                                     int HW, const A* relu_out = nullptr);
template <typename A>
void batchnorm2d_backward_apply(const ExecContext& ctx, A* dinp /*(N,C,HW) assigned*/, const A* dout /*(N,C,HW)*/,
                                const A* inp /*(N,C,HW)*/, const float* save_mean /*(C)*/,
                                const float* save_rstd /*(C)*/, const A* gamma /*(C)*/,
                                const float* global_sums /*(C,2)*/, int64_t global_count, int N, int C, int HW,
                                const A* relu_out = nullptr);

template <typename A>
void relu_forward(const ExecContext& ctx, A* out, const A* inp, int64_t n);
template <typename A>
void residual_relu_forward(const ExecContext& ctx, A* out, const A* a, const A* b, int64_t n);
template <typename A>
void relu_backward(const ExecContext& ctx, A* dinp, const A* dout, const A* out, int64_t n);
template <typename A>
void residual_relu_backward(const ExecContext& ctx, A* dinp, const A* a, const A* b, const A* out, int64_t n);

template <typename A>
void maxpool2d_forward(const ExecContext& ctx, A* out /*(N,C,OH,OW)*/, int32_t* idx /*(N,C,OH,OW)*/,
                       const A* inp /*(N,C,H,W)*/, int N, int C, int H, int W, int K, int stride, int pad);
template <typename A>
void maxpool2d_backward(const ExecContext& ctx, A* dinp /*(N,C,H,W)*/, const A* dout /*(N,C,OH,OW)*/,
                        const int32_t* idx /*(N,C,OH,OW)*/, int N, int C, int H, int W, int K, int stride, int pad);

template <typename A>
void global_avgpool_forward(const ExecContext& ctx, A* out /*(N,C)*/, const A* inp /*(N,C,HW)*/, int N, int C, int HW);
template <typename A>
void global_avgpool_backward(const ExecContext& ctx, A* dinp /*(N,C,HW)*/, const A* dout /*(N,C)*/, int N, int C,
                             int HW);
// out (N,HW,C) = images (N,C,HW) fp32 on the device, rounded to A (kernels.hpp).
template <typename A>
void images_to_channels_last(const ExecContext& ctx, A* out, const float* images, int N, int C, int HW);

void sum(const ExecContext& ctx, float* out, const float* x, int64_t n);
void sum_squares_accumulate(const ExecContext& ctx, double* out, const float* x, int64_t n);
void scale(const ExecContext& ctx, float* x, float s, int64_t n);
void adamw_update(const ExecContext& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);

void cast(const ExecContext& ctx, bf16* dst, const float* src, int64_t n);
void cast(const ExecContext& ctx, float* dst, const bf16* src, int64_t n);
void cast(const ExecContext& ctx, fp16* dst, const float* src, int64_t n);
void cast(const ExecContext& ctx, float* dst, const fp16* src, int64_t n);

void fill_zero(const ExecContext& ctx, void* dst, int64_t bytes);
void copy_to_host(const ExecContext& ctx, void* host_dst, const void* src, int64_t bytes);
void copy_from_host(const ExecContext& ctx, void* dst, const void* host_src, int64_t bytes);
void copy_device(const ExecContext& ctx, void* dst, const void* src, int64_t bytes);
void synchronize(const ExecContext& ctx);
void sum_squares_ranges(const ExecContext& ctx, double* acc, const SquaresChunk* table, int64_t chunks,
                        double* partials);
void adamw_update_chunks(const ExecContext& ctx, const AdamwChunk* table, int64_t chunks, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float grad_scale, int t, DType copy);
void host_register(const ExecContext& ctx, void* host, int64_t bytes);
void host_unregister(const ExecContext& ctx, void* host);

// optim_kernels.hpp
void sgd_update(const ExecContext& ctx, float* params, const float* grads, float* momentum_buf, int64_t n, float lr,
                float momentum, float dampening, float weight_decay, bool nesterov, float grad_scale, bool first_step);

}  // namespace hpct::kernels::cuda
