#pragma once
// The CUDA backend of kernels.hpp and optim_kernels.hpp: the same ops as cpu/cpu_kernels.hpp, each taking the
// ExecContext (its stream: a cudaStream_t, or null for the default stream). Every op is asynchronous on ctx.stream
// (kernels.hpp: Work::wait means stream-ordered, synchronize() blocks the host), checks its launches
// (HPCT_CUDA_LAUNCH_CHECK, cuda_common.cuh) and never allocates in the step: scratch comes from the caller.
// Plain C++ (no CUDA types): included by kernels.cpp's dispatch, compiled by g++; defined in the .cu files
//   cuda_core.cu    memory helpers, reductions, scale, AdamW, SGD, residual, GELU, ReLU, embedding, LayerNorm
//   cuda_gpt.cu     Linear (cuBLAS), attention, the cross-entropies (plain, smoothed, vocabulary-parallel)
//   cuda_resnet.cu  Conv2d (cuDNN), BatchNorm2d (train / SyncBN pieces / eval), max and global-average pooling
// Reference: each op must equal the CPU backend within the tolerances of tests/unit/kernels/test_cuda_*.cpp (fp32;
// ctest label cuda).
#include <cstdint>

#include "kernels/exec_context.hpp"

namespace hpct::kernels::cuda {

void encoder_forward(const ExecContext& ctx, float* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                     const float* wte /*(Vp,C)*/, const float* wpe /*(T,C)*/, int B, int T, int C);
void encoder_backward(const ExecContext& ctx, float* dwte /*(Vp,C) +=*/, float* dwpe /*(T,C) +=*/,
                      const float* dout /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, int B, int T, int C);

void layernorm_forward(const ExecContext& ctx, float* out /*(N,C)*/, float* mean /*(N)*/, float* rstd /*(N)*/,
                       const float* inp /*(N,C)*/, const float* weight /*(C)*/, const float* bias /*(C) or null*/,
                       int N, int C);
void layernorm_backward(const ExecContext& ctx, float* dinp /*(N,C) +=*/, float* dweight /*(C) +=*/,
                        float* dbias /*(C) += or null*/, const float* dout /*(N,C)*/, const float* inp /*(N,C)*/,
                        const float* weight /*(C)*/, const float* mean /*(N)*/, const float* rstd /*(N)*/, int N,
                        int C);

void matmul_forward(const ExecContext& ctx, float* out /*(N,OC)*/, const float* inp /*(N,C)*/,
                    const float* weight /*(OC,C)*/, const float* bias /*(OC) or null*/, int N, int C, int OC);
void matmul_backward(const ExecContext& ctx, float* dinp /*(N,C) or null*/, float* dweight /*(OC,C) +=*/,
                     float* dbias /*(OC) += or null*/, const float* dout /*(N,OC)*/, const float* inp /*(N,C)*/,
                     const float* weight /*(OC,C)*/, int N, int C, int OC);

// Flash attention (cuda_gpt.cu): stats is the log-sum-exp L (B,NH,T), scratch holds D = rowsum(dout * out) (B,NH,T).
// The two size queries are pure host arithmetic (no device call).
int64_t attention_stats_floats(const ExecContext& ctx, int B, int T, int C, int NH);    // B*NH*T
int64_t attention_scratch_floats(const ExecContext& ctx, int B, int T, int C, int NH);  // B*NH*T
void attention_forward(const ExecContext& ctx, float* out /*(B,T,C)*/, float* lse /*(B,NH,T)*/,
                       const float* qkv /*(B,T,3C)*/, int B, int T, int C, int NH);
void attention_backward(const ExecContext& ctx, float* dqkv /*(B,T,3C)*/, float* scratch /*(B,NH,T)*/,
                        const float* dout /*(B,T,C)*/, const float* qkv /*(B,T,3C)*/, const float* out /*(B,T,C)*/,
                        const float* lse /*(B,NH,T)*/, int B, int T, int C, int NH);

void gelu_forward(const ExecContext& ctx, float* out, const float* inp, int64_t n);
void gelu_backward(const ExecContext& ctx, float* dinp, const float* inp, const float* dout, int64_t n);

void residual_forward(const ExecContext& ctx, float* out, const float* a, const float* b, int64_t n);

void crossentropy_forward(const ExecContext& ctx, float* losses /*(N)*/, const float* logits /*(N,Vp)*/,
                          const int32_t* targets /*(N)*/, int N, int V, int Vp);
void crossentropy_forward_backward(const ExecContext& ctx, float* losses /*(N)*/, float* logits /*(N,Vp) in/out*/,
                                   const int32_t* targets /*(N)*/, float dloss, int N, int V, int Vp);

// Vocabulary parallelism (kernels.hpp): this rank holds the global rows/columns [v0, v0+Vl) of the padded Vp.
void encoder_forward_vocab_parallel(const ExecContext& ctx, float* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                                    const float* wte_local /*(Vl,C)*/, const float* wpe /*(T,C) or null*/, int v0,
                                    int Vl, int B, int T, int C);
void encoder_backward_vocab_parallel(const ExecContext& ctx, float* dwte_local /*(Vl,C) +=*/,
                                     float* dwpe /*(T,C) += or null*/, const float* dout /*(B,T,C)*/,
                                     const int32_t* inp /*(B,T)*/, int v0, int Vl, int B, int T, int C);
void crossentropy_smoothed_forward(const ExecContext& ctx, float* losses /*(N)*/, const float* logits /*(N,K)*/,
                                   const int32_t* targets /*(N)*/, float eps, int N, int K);
void crossentropy_smoothed_forward_backward(const ExecContext& ctx, float* losses /*(N)*/,
                                            float* logits /*(N,K) in/out*/, const int32_t* targets /*(N)*/, float dloss,
                                            float eps, int N, int K);
void crossentropy_vp_local_max(const ExecContext& ctx, float* max_out /*(N)*/, const float* logits_local /*(N,Vl)*/,
                               int v0, int Vl, int V, int N);
void crossentropy_vp_local_sumexp(const ExecContext& ctx, float* sumexp_out /*(N)*/, float* target_logit_out /*(N)*/,
                                  const float* logits_local /*(N,Vl)*/, const float* global_max /*(N)*/,
                                  const int32_t* targets /*(N)*/, int v0, int Vl, int V, int N);
void crossentropy_vp_loss_backward(const ExecContext& ctx, float* losses /*(N)*/, float* logits_local /*(N,Vl) in/out*/,
                                   const float* global_max /*(N)*/, const float* global_sumexp /*(N)*/,
                                   const float* global_target_logit /*(N)*/, const int32_t* targets /*(N)*/,
                                   float dloss, int v0, int Vl, int V, int N);
void crossentropy_vp_loss(const ExecContext& ctx, float* losses /*(N)*/, const float* global_max /*(N)*/,
                          const float* global_sumexp /*(N)*/, const float* global_target_logit /*(N)*/, int N);

// ---- convolutional layers (ResNet), NCHW: see kernels.hpp for the contracts (cpu_conv.cpp) ----
int64_t conv2d_workspace_floats(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                                int pad);
void conv2d_forward(const ExecContext& ctx, float* out /*(N,OC,OH,OW)*/, const float* inp /*(N,C,H,W)*/,
                    const float* weight /*(OC,C,KH,KW)*/, const float* bias /*(OC) or null*/,
                    float* workspace /*(workspace_floats)*/, int64_t workspace_floats, int N, int C, int H, int W,
                    int OC, int KH, int KW, int stride, int pad);
void conv2d_backward(const ExecContext& ctx, float* dinp /*(N,C,H,W) or null*/, float* dweight /*(OC,C,KH,KW) +=*/,
                     float* dbias /*(OC) += or null*/, const float* dout /*(N,OC,OH,OW)*/,
                     const float* inp /*(N,C,H,W)*/, const float* weight /*(OC,C,KH,KW)*/,
                     float* workspace /*(workspace_floats)*/, int64_t workspace_floats, int N, int C, int H, int W,
                     int OC, int KH, int KW, int stride, int pad);

void batchnorm2d_forward_train(const ExecContext& ctx, float* out /*(N,C,HW)*/, float* stats /*(C,3) assigned*/,
                               float* save_mean /*(C)*/, float* save_rstd /*(C)*/, const float* inp /*(N,C,HW)*/,
                               const float* gamma /*(C)*/, const float* beta /*(C)*/, int N, int C, int HW, float eps);
void batchnorm2d_local_stats(const ExecContext& ctx, float* stats /*(C,3) assigned*/, const float* inp /*(N,C,HW)*/,
                             int N, int C, int HW);
void batchnorm2d_merge_stats(const ExecContext& ctx, float* merged /*(C,3) assigned*/,
                             const float* gathered /*(R,C,3)*/, int R, int C);
void batchnorm2d_forward_apply(const ExecContext& ctx, float* out /*(N,C,HW)*/, float* save_mean /*(C)*/,
                               float* save_rstd /*(C)*/, const float* inp /*(N,C,HW)*/, const float* gamma /*(C)*/,
                               const float* beta /*(C)*/, const float* stats /*(C,3) global*/, int N, int C, int HW,
                               float eps);
void batchnorm2d_update_running(const ExecContext& ctx, float* running_mean /*(C)*/, float* running_var /*(C)*/,
                                const float* stats /*(C,3) global*/, int C, float momentum);
void batchnorm2d_forward_eval(const ExecContext& ctx, float* out /*(N,C,HW)*/, const float* inp /*(N,C,HW)*/,
                              const float* gamma /*(C)*/, const float* beta /*(C)*/, const float* running_mean /*(C)*/,
                              const float* running_var /*(C)*/, int N, int C, int HW, float eps);
void batchnorm2d_backward(const ExecContext& ctx, float* dinp /*(N,C,HW) assigned*/, float* dgamma /*(C) +=*/,
                          float* dbeta /*(C) +=*/, const float* dout /*(N,C,HW)*/, const float* inp /*(N,C,HW)*/,
                          const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, const float* gamma /*(C)*/,
                          int N, int C, int HW);
void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums /*(C,2) assigned*/, float* dgamma /*(C) +=*/,
                                     float* dbeta /*(C) +=*/, const float* dout /*(N,C,HW)*/,
                                     const float* inp /*(N,C,HW)*/, const float* save_mean /*(C)*/,
                                     const float* save_rstd /*(C)*/, int N, int C, int HW);
void batchnorm2d_backward_apply(const ExecContext& ctx, float* dinp /*(N,C,HW) assigned*/,
                                const float* dout /*(N,C,HW)*/, const float* inp /*(N,C,HW)*/,
                                const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/,
                                const float* gamma /*(C)*/, const float* global_sums /*(C,2)*/, int64_t global_count,
                                int N, int C, int HW);

void relu_forward(const ExecContext& ctx, float* out, const float* inp, int64_t n);
void relu_backward(const ExecContext& ctx, float* dinp, const float* dout, const float* out, int64_t n);

void maxpool2d_forward(const ExecContext& ctx, float* out /*(N,C,OH,OW)*/, int32_t* idx /*(N,C,OH,OW)*/,
                       const float* inp /*(N,C,H,W)*/, int N, int C, int H, int W, int K, int stride, int pad);
void maxpool2d_backward(const ExecContext& ctx, float* dinp /*(N,C,H,W)*/, const float* dout /*(N,C,OH,OW)*/,
                        const int32_t* idx /*(N,C,OH,OW)*/, int N, int C, int H, int W, int K, int stride, int pad);

void global_avgpool_forward(const ExecContext& ctx, float* out /*(N,C)*/, const float* inp /*(N,C,HW)*/, int N, int C,
                            int HW);
void global_avgpool_backward(const ExecContext& ctx, float* dinp /*(N,C,HW)*/, const float* dout /*(N,C)*/, int N,
                             int C, int HW);

void sum(const ExecContext& ctx, float* out, const float* x, int64_t n);
void sum_squares_accumulate(const ExecContext& ctx, double* out, const float* x, int64_t n);
void scale(const ExecContext& ctx, float* x, float s, int64_t n);
void adamw_update(const ExecContext& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);

void fill_zero(const ExecContext& ctx, void* dst, int64_t bytes);
void copy_to_host(const ExecContext& ctx, void* host_dst, const void* src, int64_t bytes);
void copy_from_host(const ExecContext& ctx, void* dst, const void* host_src, int64_t bytes);
void copy_device(const ExecContext& ctx, void* dst, const void* src, int64_t bytes);
void synchronize(const ExecContext& ctx);

// optim_kernels.hpp
void sgd_update(const ExecContext& ctx, float* params, const float* grads, float* momentum_buf, int64_t n, float lr,
                float momentum, float dampening, float weight_decay, bool nesterov, float grad_scale, bool first_step);

}  // namespace hpct::kernels::cuda
