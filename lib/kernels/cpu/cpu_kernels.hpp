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

#include "kernels/chunk_tables.hpp"
#include "tensor/bf16.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels::cpu {

template <typename A>
void encoder_forward(A* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, const A* wte /*(Vp,C)*/, const A* wpe /*(T,C)*/,
                     int B, int T, int C);
template <typename A>
void encoder_backward(float* dwte /*(Vp,C) +=*/, float* dwpe /*(T,C) +=*/, const A* dout /*(B,T,C)*/,
                      const int32_t* inp /*(B,T)*/, int B, int T, int C);

template <typename A>
void layernorm_forward(A* out /*(N,C)*/, float* mean /*(N)*/, float* rstd /*(N)*/, const A* inp /*(N,C)*/,
                       const A* weight /*(C)*/, const A* bias /*(C) or null*/, int N, int C);
template <typename A>
void layernorm_backward(A* dinp /*(N,C) +=*/, float* dweight /*(C) +=*/, float* dbias /*(C) += or null*/,
                        const A* dout /*(N,C)*/, const A* inp /*(N,C)*/, const A* weight /*(C)*/,
                        const float* mean /*(N)*/, const float* rstd /*(N)*/, int N, int C);

template <typename A>
void matmul_forward(A* out /*(N,OC)*/, const A* inp /*(N,C)*/, const A* weight /*(OC,C)*/,
                    const A* bias /*(OC) or null*/, int N, int C, int OC);
template <typename A>
void matmul_backward(A* dinp /*(N,C) or null*/, float* dweight /*(OC,C) +=*/, float* dbias /*(OC) += or null*/,
                     const A* dout /*(N,OC)*/, const A* inp /*(N,C)*/, const A* weight /*(OC,C)*/, int N, int C,
                     int OC);

// Flash attention (cpu_attention.cpp): kernels.hpp's stats are the row log-sum-exp L (B,NH,T) float, its scratch
// D = rowsum(dout * out) (B,NH,T) float; backward reads out.
int64_t attention_stats_bytes(int B, int T, int C, int NH, DType act);    // B*NH*T*4
int64_t attention_scratch_bytes(int B, int T, int C, int NH, DType act);  // B*NH*T*4
template <typename A>
void attention_forward(A* out /*(B,T,C)*/, void* lse /*(B,NH,T) float*/, const A* qkv /*(B,T,3C)*/, int B, int T, int C,
                       int NH);
template <typename A>
void attention_backward(A* dqkv /*(B,T,3C)*/, void* dsum /*(B,NH,T) float scratch*/, const A* dout /*(B,T,C)*/,
                        const A* qkv /*(B,T,3C)*/, const A* out /*(B,T,C)*/, const void* lse /*(B,NH,T) float*/, int B,
                        int T, int C, int NH);

template <typename A>
void gelu_forward(A* out, const A* inp, int64_t n);
template <typename A>
void gelu_backward(A* dinp, const A* inp, const A* dout, int64_t n);

template <typename A>
void residual_forward(A* out, const A* a, const A* b, int64_t n);

template <typename A>
void crossentropy_forward(float* losses /*(N)*/, const A* logits /*(N,Vp)*/, const int32_t* targets /*(N)*/, int N,
                          int V, int Vp);
template <typename A>
void crossentropy_forward_backward(float* losses /*(N)*/, A* logits /*(N,Vp) in/out*/, const int32_t* targets /*(N)*/,
                                   float dloss, int N, int V, int Vp);

// Vocabulary parallelism (kernels.hpp): this rank holds the global rows/columns [v0, v0+Vl) of the padded Vp.
template <typename A>
void encoder_forward_vocab_parallel(A* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, const A* wte_local /*(Vl,C)*/,
                                    const A* wpe /*(T,C) or null*/, int v0, int Vl, int B, int T, int C);
template <typename A>
void encoder_backward_vocab_parallel(float* dwte_local /*(Vl,C) +=*/, float* dwpe /*(T,C) += or null*/,
                                     const A* dout /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, int v0, int Vl, int B,
                                     int T, int C);
template <typename A>
void crossentropy_smoothed_forward(float* losses /*(N)*/, const A* logits /*(N,K)*/, const int32_t* targets /*(N)*/,
                                   float eps, int N, int K);
template <typename A>
void crossentropy_smoothed_forward_backward(float* losses /*(N)*/, A* logits /*(N,K) in/out*/,
                                            const int32_t* targets /*(N)*/, float dloss, float eps, int N, int K);
template <typename A>
void crossentropy_vp_local_max(float* max_out /*(N)*/, const A* logits_local /*(N,Vl)*/, int v0, int Vl, int V, int N);
template <typename A>
void crossentropy_vp_local_sumexp(float* sumexp_out /*(N)*/, float* target_logit_out /*(N)*/,
                                  const A* logits_local /*(N,Vl)*/, const float* global_max /*(N)*/,
                                  const int32_t* targets /*(N)*/, int v0, int Vl, int V, int N);
template <typename A>
void crossentropy_vp_loss_backward(float* losses /*(N)*/, A* logits_local /*(N,Vl) in/out*/,
                                   const float* global_max /*(N)*/, const float* global_sumexp /*(N)*/,
                                   const float* global_target_logit /*(N)*/, const int32_t* targets /*(N)*/,
                                   float dloss, int v0, int Vl, int V, int N);
void crossentropy_vp_loss(float* losses /*(N)*/, const float* global_max /*(N)*/, const float* global_sumexp /*(N)*/,
                          const float* global_target_logit /*(N)*/, int N);

// ---- convolutional layers (ResNet), NCHW: see kernels.hpp for the contracts (cpu_conv.cpp) ----
int64_t conv2d_workspace_floats(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, DType act);
template <typename A>
void conv2d_forward(A* out /*(N,OC,OH,OW)*/, const A* inp /*(N,C,H,W)*/, const A* weight /*(OC,C,KH,KW)*/,
                    const A* bias /*(OC) or null*/, float* workspace /*(workspace_floats)*/, int64_t workspace_floats,
                    int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);
template <typename A>
void conv2d_backward(A* dinp /*(N,C,H,W) or null*/, float* dweight /*(OC,C,KH,KW) +=*/,
                     float* dbias /*(OC) += or null*/, const A* dout /*(N,OC,OH,OW)*/, const A* inp /*(N,C,H,W)*/,
                     const A* weight /*(OC,C,KH,KW)*/, float* workspace /*(workspace_floats)*/,
                     int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);

template <typename A>
void batchnorm2d_forward_train(A* out /*(N,C,HW)*/, float* stats /*(C,3) assigned*/, float* save_mean /*(C)*/,
                               float* save_rstd /*(C)*/, const A* inp /*(N,C,HW)*/, const A* gamma /*(C)*/,
                               const A* beta /*(C)*/, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_local_stats(float* stats /*(C,3) assigned*/, const A* inp /*(N,C,HW)*/, int N, int C, int HW);
void batchnorm2d_merge_stats(float* merged /*(C,3) assigned*/, const float* gathered /*(R,C,3)*/, int R, int C);
template <typename A>
void batchnorm2d_forward_apply(A* out /*(N,C,HW)*/, float* save_mean /*(C)*/, float* save_rstd /*(C)*/,
                               const A* inp /*(N,C,HW)*/, const A* gamma /*(C)*/, const A* beta /*(C)*/,
                               const float* stats /*(C,3) global*/, int N, int C, int HW, float eps);
void batchnorm2d_update_running(float* running_mean /*(C)*/, float* running_var /*(C)*/,
                                const float* stats /*(C,3) global*/, int C, float momentum);
template <typename A>
void batchnorm2d_forward_eval(A* out /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/, const A* gamma /*(C)*/,
                              const A* beta /*(C)*/, const float* running_mean /*(C)*/,
                              const float* running_var /*(C)*/, int N, int C, int HW, float eps);
template <typename A>
void batchnorm2d_backward(A* dinp /*(N,C,HW) assigned*/, float* dgamma /*(C) +=*/, float* dbeta /*(C) +=*/,
                          const A* dout /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/, const float* save_mean /*(C)*/,
                          const float* save_rstd /*(C)*/, const A* gamma /*(C)*/, int N, int C, int HW);
template <typename A>
void batchnorm2d_backward_local_sums(float* sums /*(C,2) assigned*/, float* dgamma /*(C) +=*/, float* dbeta /*(C) +=*/,
                                     const A* dout /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                                     const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, int N, int C,
                                     int HW);
template <typename A>
void batchnorm2d_backward_apply(A* dinp /*(N,C,HW) assigned*/, const A* dout /*(N,C,HW)*/, const A* inp /*(N,C,HW)*/,
                                const float* save_mean /*(C)*/, const float* save_rstd /*(C)*/, const A* gamma /*(C)*/,
                                const float* global_sums /*(C,2)*/, int64_t global_count, int N, int C, int HW);

template <typename A>
void relu_forward(A* out, const A* inp, int64_t n);
template <typename A>
void residual_relu_forward(A* out, const A* a, const A* b, int64_t n);
template <typename A>
void relu_backward(A* dinp, const A* dout, const A* out, int64_t n);
template <typename A>
void residual_relu_backward(A* dinp, const A* a, const A* b, const A* out, int64_t n);

template <typename A>
void maxpool2d_forward(A* out /*(N,C,OH,OW)*/, int32_t* idx /*(N,C,OH,OW)*/, const A* inp /*(N,C,H,W)*/, int N, int C,
                       int H, int W, int K, int stride, int pad);
template <typename A>
void maxpool2d_backward(A* dinp /*(N,C,H,W)*/, const A* dout /*(N,C,OH,OW)*/, const int32_t* idx /*(N,C,OH,OW)*/, int N,
                        int C, int H, int W, int K, int stride, int pad);

template <typename A>
void global_avgpool_forward(A* out /*(N,C)*/, const A* inp /*(N,C,HW)*/, int N, int C, int HW);
template <typename A>
void global_avgpool_backward(A* dinp /*(N,C,HW)*/, const A* dout /*(N,C)*/, int N, int C, int HW);

// ---- the same layers on channels-last activations (N,H,W,C): kernels.hpp's ExecContext::channels_last ----
// The convolutions run only through oneDNN (cpu_conv.cpp; conv2d_workspace_floats_nhwc is -1 where it does not run);
// BatchNorm and the pools in cpu_conv_nhwc.cpp. Arguments as the NCHW functions', HW = H*W; BatchNorm's `relu` /
// `relu_out`: the ReLU that follows it, in the same passes (kernels.hpp, the batchnorm2d_relu ops); `residual`: the
// residual add before that ReLU (the batchnorm2d_add_relu ops).
int64_t conv2d_workspace_floats_nhwc(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad,
                                     DType act);
template <typename A>
void conv2d_forward_nhwc(A* out /*(N,OH,OW,OC)*/, const A* inp /*(N,H,W,C)*/, const A* weight /*(OC,C,KH,KW)*/,
                         const A* bias /*(OC) or null*/, float* workspace, int64_t workspace_floats, int N, int C,
                         int H, int W, int OC, int KH, int KW, int stride, int pad);
template <typename A>
void conv2d_backward_nhwc(A* dinp /*(N,H,W,C) or null*/, float* dweight /*(OC,C,KH,KW) +=*/,
                          float* dbias /*(OC) += or null*/, const A* dout /*(N,OH,OW,OC)*/, const A* inp /*(N,H,W,C)*/,
                          const A* weight /*(OC,C,KH,KW)*/, float* workspace, int64_t workspace_floats, int N, int C,
                          int H, int W, int OC, int KH, int KW, int stride, int pad);
template <typename A>
void batchnorm2d_forward_train_nhwc(A* out, float* stats, float* save_mean, float* save_rstd, const A* inp,
                                    const A* gamma, const A* beta, int N, int C, int HW, float eps, bool relu = false,
                                    const A* residual = nullptr);
template <typename A>
void batchnorm2d_local_stats_nhwc(float* stats, const A* inp, int N, int C, int HW);
template <typename A>
void batchnorm2d_forward_apply_nhwc(A* out, float* save_mean, float* save_rstd, const A* inp, const A* gamma,
                                    const A* beta, const float* stats, int N, int C, int HW, float eps,
                                    bool relu = false, const A* residual = nullptr);
template <typename A>
void batchnorm2d_forward_eval_nhwc(A* out, const A* inp, const A* gamma, const A* beta, const float* running_mean,
                                   const float* running_var, int N, int C, int HW, float eps, bool relu = false,
                                   const A* residual = nullptr);
template <typename A>
void batchnorm2d_backward_nhwc(A* dinp, float* dgamma, float* dbeta, const A* dout, const A* inp,
                               const float* save_mean, const float* save_rstd, const A* gamma, int N, int C, int HW,
                               const A* relu_out = nullptr);
template <typename A>
void batchnorm2d_backward_local_sums_nhwc(float* sums, float* dgamma, float* dbeta, const A* dout, const A* inp,
                                          const float* save_mean, const float* save_rstd, int N, int C, int HW,
                                          const A* relu_out = nullptr);
template <typename A>
void batchnorm2d_backward_apply_nhwc(A* dinp, const A* dout, const A* inp, const float* save_mean,
                                     const float* save_rstd, const A* gamma, const float* global_sums,
                                     int64_t global_count, int N, int C, int HW, const A* relu_out = nullptr);
template <typename A>
void maxpool2d_forward_nhwc(A* out /*(N,OH,OW,C)*/, int32_t* idx /*(N,OH,OW,C)*/, const A* inp /*(N,H,W,C)*/, int N,
                            int C, int H, int W, int K, int stride, int pad);
template <typename A>
void maxpool2d_backward_nhwc(A* dinp /*(N,H,W,C)*/, const A* dout /*(N,OH,OW,C)*/, const int32_t* idx, int N, int C,
                             int H, int W, int K, int stride, int pad);
template <typename A>
void global_avgpool_forward_nhwc(A* out /*(N,C)*/, const A* inp /*(N,HW,C)*/, int N, int C, int HW);
template <typename A>
void global_avgpool_backward_nhwc(A* dinp /*(N,HW,C)*/, const A* dout /*(N,C)*/, int N, int C, int HW);
// out (N,HW,C) = inp (N,C,HW) rounded to A: fp32 NCHW images into channels-last activations
template <typename A>
void images_to_nhwc(A* out, const float* inp, int N, int C, int HW);

void sum(float* out, const float* x, int64_t n);
void sum_squares_accumulate(double* out, const float* x, int64_t n);
void scale(float* x, float s, int64_t n);
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, float grad_scale, int t);

void cast(bf16* dst, const float* src, int64_t n);
void cast(float* dst, const bf16* src, int64_t n);

void fill_zero(void* dst, int64_t bytes);
void copy_to_host(void* host_dst, const void* src, int64_t bytes);
void copy_from_host(void* dst, const void* host_src, int64_t bytes);
void copy_device(void* dst, const void* src, int64_t bytes);
void synchronize();
void sum_squares_ranges(double* acc, const SquaresChunk* table, int64_t chunks, double* partials);
void adamw_update_chunks(const AdamwChunk* table, int64_t chunks, float lr, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int t, DType copy);
void host_register(void* host, int64_t bytes);
void host_unregister(void* host);

}  // namespace hpct::kernels::cpu
