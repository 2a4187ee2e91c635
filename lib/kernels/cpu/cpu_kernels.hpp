#pragma once
// The CPU backend of kernels.hpp: the same ops minus the ExecContext (a CPU op completes before it returns).
// Fused OpenMP loops; GEMMs through cblas_sgemm of the OpenMP build of OpenBLAS, always single-threaded inside our
// own `omp parallel` regions (one slab of C per thread for the Linear layers, cpu_gemm.hpp; one (batch, head) per
// task for attention): OpenBLAS detects omp_in_parallel() and does not add threads of its own. Products too
// small to split (< 4 MFLOP) are one plain call outside any region.
//
// Legend: B batch, T time, C channels, OC output channels, NH heads, HS = C/NH, V vocabulary,
//         Vp padded vocabulary, N = B*T rows. Gradient convention as in kernels.hpp: parameter grads +=,
//         activation grads =, except layernorm_backward's dinp +=.
//
// Determinism: every reduction runs in an order that depends neither on timing nor on the number of threads
// (parameter-gradient sums are split over columns, never over rows; global sums over fixed-size chunks),
// so a layout reproduces itself bit for bit. The GEMMs inherit OpenBLAS's (fixed) order for a fixed thread count.
#include <cstdint>

namespace hpct::kernels::cpu {

void encoder_forward(float* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, const float* wte /*(Vp,C)*/,
                     const float* wpe /*(T,C)*/, int B, int T, int C);
void encoder_backward(float* dwte /*(Vp,C) +=*/, float* dwpe /*(T,C) +=*/, const float* dout /*(B,T,C)*/,
                      const int32_t* inp /*(B,T)*/, int B, int T, int C);

void layernorm_forward(float* out /*(N,C)*/, float* mean /*(N)*/, float* rstd /*(N)*/, const float* inp /*(N,C)*/,
                       const float* weight /*(C)*/, const float* bias /*(C) or null*/, int N, int C);
void layernorm_backward(float* dinp /*(N,C) +=*/, float* dweight /*(C) +=*/, float* dbias /*(C) += or null*/,
                        const float* dout /*(N,C)*/, const float* inp /*(N,C)*/, const float* weight /*(C)*/,
                        const float* mean /*(N)*/, const float* rstd /*(N)*/, int N, int C);

void matmul_forward(float* out /*(N,OC)*/, const float* inp /*(N,C)*/, const float* weight /*(OC,C)*/,
                    const float* bias /*(OC) or null*/, int N, int C, int OC);
void matmul_backward(float* dinp /*(N,C) or null*/, float* dweight /*(OC,C) +=*/, float* dbias /*(OC) += or null*/,
                     const float* dout /*(N,OC)*/, const float* inp /*(N,C)*/, const float* weight /*(OC,C)*/, int N,
                     int C, int OC);

// kernels.hpp's stats are the softmax probabilities att (B,NH,T,T), its scratch datt (B,NH,T,T); out is not read.
int64_t attention_stats_floats(int B, int T, int C, int NH);    // B*NH*T*T
int64_t attention_scratch_floats(int B, int T, int C, int NH);  // B*NH*T*T
void attention_forward(float* out /*(B,T,C)*/, float* att /*(B,NH,T,T)*/, const float* qkv /*(B,T,3C)*/, int B, int T,
                       int C, int NH);
void attention_backward(float* dqkv /*(B,T,3C)*/, float* datt /*(B,NH,T,T) scratch*/, const float* dout /*(B,T,C)*/,
                        const float* qkv /*(B,T,3C)*/, const float* out /*(B,T,C) unused*/,
                        const float* att /*(B,NH,T,T)*/, int B, int T, int C, int NH);

void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

void residual_forward(float* out, const float* a, const float* b, int64_t n);

void crossentropy_forward(float* losses /*(N)*/, const float* logits /*(N,Vp)*/, const int32_t* targets /*(N)*/, int N,
                          int V, int Vp);
void crossentropy_forward_backward(float* losses /*(N)*/, float* logits /*(N,Vp) in/out*/,
                                   const int32_t* targets /*(N)*/, float dloss, int N, int V, int Vp);

// Vocabulary parallelism (kernels.hpp): this rank holds the global rows/columns [v0, v0+Vl) of the padded Vp.
void encoder_forward_vocab_parallel(float* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                                    const float* wte_local /*(Vl,C)*/, const float* wpe /*(T,C) or null*/, int v0,
                                    int Vl, int B, int T, int C);
void encoder_backward_vocab_parallel(float* dwte_local /*(Vl,C) +=*/, float* dwpe /*(T,C) += or null*/,
                                     const float* dout /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, int v0, int Vl, int B,
                                     int T, int C);
void crossentropy_smoothed_forward(float* losses /*(N)*/, const float* logits /*(N,K)*/, const int32_t* targets /*(N)*/,
                                   float eps, int N, int K);
void crossentropy_smoothed_forward_backward(float* losses /*(N)*/, float* logits /*(N,K) in/out*/,
                                            const int32_t* targets /*(N)*/, float dloss, float eps, int N, int K);
void crossentropy_vp_local_max(float* max_out /*(N)*/, const float* logits_local /*(N,Vl)*/, int v0, int Vl, int V,
                               int N);
void crossentropy_vp_local_sumexp(float* sumexp_out /*(N)*/, float* target_logit_out /*(N)*/,
                                  const float* logits_local /*(N,Vl)*/, const float* global_max /*(N)*/,
                                  const int32_t* targets /*(N)*/, int v0, int Vl, int V, int N);
void crossentropy_vp_loss_backward(float* losses /*(N)*/, float* logits_local /*(N,Vl) in/out*/,
                                   const float* global_max /*(N)*/, const float* global_sumexp /*(N)*/,
                                   const float* global_target_logit /*(N)*/, const int32_t* targets /*(N)*/,
                                   float dloss, int v0, int Vl, int V, int N);
void crossentropy_vp_loss(float* losses /*(N)*/, const float* global_max /*(N)*/, const float* global_sumexp /*(N)*/,
                          const float* global_target_logit /*(N)*/, int N);

// ---- convolutional layers (ResNet), NCHW: see kernels.hpp for the contracts (cpu_conv.cpp) ----
int64_t conv2d_workspace_floats(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);
void conv2d_forward(float* out /*(N,OC,OH,OW)*/, const float* inp /*(N,C,H,W)*/, const float* weight /*(OC,C,KH,KW)*/,
                    const float* bias /*(OC) or null*/, float* workspace /*(workspace_floats)*/,
                    int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);
void conv2d_backward(float* dinp /*(N,C,H,W) or null*/, float* dweight /*(OC,C,KH,KW) +=*/,
                     float* dbias /*(OC) += or null*/, const float* dout /*(N,OC,OH,OW)*/,
                     const float* inp /*(N,C,H,W)*/, const float* weight /*(OC,C,KH,KW)*/,
                     float* workspace /*(workspace_floats)*/, int64_t workspace_floats, int N, int C, int H, int W,
                     int OC, int KH, int KW, int stride, int pad);

void batchnorm2d_forward_train(float* out /*(N,C,HW)*/, float* stats /*(C,3) assigned*/, float* save_mean /*(C)*/,
                               float* save_rstd /*(C)*/, const float* inp /*(N,C,HW)*/, const float* gamma /*(C)*/,
                               const float* beta /*(C)*/, int N, int C, int HW, float eps);
void batchnorm2d_local_stats(float* stats /*(C,3) assigned*/, const float* inp /*(N,C,HW)*/, int N, int C, int HW);
void batchnorm2d_merge_stats(float* merged /*(C,3) assigned*/, const float* gathered /*(R,C,3)*/, int R, int C);
void batchnorm2d_forward_apply(float* out /*(N,C,HW)*/, float* save_mean /*(C)*/, float* save_rstd /*(C)*/,
                               const float* inp /*(N,C,HW)*/, const float* gamma /*(C)*/, const float* beta /*(C)*/,
                               const float* stats /*(C,3) global*/, int N, int C, int HW, float eps);
void batchnorm2d_update_running(float* running_mean /*(C)*/, float* running_var /*(C)*/,
                                const float* stats /*(C,3) global*/, int C, float momentum);
void batchnorm2d_forward_eval(float* out /*(N,C,HW)*/, const float* inp /*(N,C,HW)*/, const float* gamma /*(C)*/,
                              const float* beta /*(C)*/, const float* running_mean /*(C)*/,
                              const float* running_var /*(C)*/, int N, int C, int HW, float eps);
void batchnorm2d_backward(float* dinp /*(N,C,HW) assigned*/, float* dgamma /*(C) +=*/, float* dbeta /*(C) +=*/,
                          const float* dout /*(N,C,HW)*/, const float* inp /*(N,C,HW)*/, const float* save_mean /*(C)*/,
                          const float* save_rstd /*(C)*/, const float* gamma /*(C)*/, int N, int C, int HW);
void batchnorm2d_backward_local_sums(float* sums /*(C,2) assigned*/, float* dgamma /*(C) +=*/, float* dbeta /*(C) +=*/,
                                     const float* dout /*(N,C,HW)*/, const float* inp /*(N,C,HW)*/,
                                     const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, int N, int C,
                                     int HW);
void batchnorm2d_backward_apply(float* dinp /*(N,C,HW) assigned*/, const float* dout /*(N,C,HW)*/,
                                const float* inp /*(N,C,HW)*/, const float* save_mean /*(C)*/,
                                const float* save_rstd /*(C)*/, const float* gamma /*(C)*/,
                                const float* global_sums /*(C,2)*/, int64_t global_count, int N, int C, int HW);

void relu_forward(float* out, const float* inp, int64_t n);
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n);

void maxpool2d_forward(float* out /*(N,C,OH,OW)*/, int32_t* idx /*(N,C,OH,OW)*/, const float* inp /*(N,C,H,W)*/, int N,
                       int C, int H, int W, int K, int stride, int pad);
void maxpool2d_backward(float* dinp /*(N,C,H,W)*/, const float* dout /*(N,C,OH,OW)*/,
                        const int32_t* idx /*(N,C,OH,OW)*/, int N, int C, int H, int W, int K, int stride, int pad);

void global_avgpool_forward(float* out /*(N,C)*/, const float* inp /*(N,C,HW)*/, int N, int C, int HW);
void global_avgpool_backward(float* dinp /*(N,C,HW)*/, const float* dout /*(N,C)*/, int N, int C, int HW);

void sum(float* out, const float* x, int64_t n);
void sum_squares_accumulate(double* out, const float* x, int64_t n);
void scale(float* x, float s, int64_t n);
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, float grad_scale, int t);

void fill_zero(void* dst, int64_t bytes);
void copy_to_host(void* host_dst, const void* src, int64_t bytes);
void copy_from_host(void* dst, const void* host_src, int64_t bytes);
void copy_device(void* dst, const void* src, int64_t bytes);
void synchronize();

}  // namespace hpct::kernels::cpu
