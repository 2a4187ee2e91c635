#pragma once
// Reference twins of every op in kernels.hpp: plain, obviously-correct loops (llm.c style), serial, with the same
// names and argument order minus the ExecContext. Templates on the scalar Real (float and double are
// instantiated in reference.cpp) so that tests can check the backends in float and the backward passes
// against finite differences in double. Token and target arrays stay int32_t.
//
// Legend: B batch, T time, C channels, OC output channels, NH heads, HS = C/NH, V vocabulary,
//         Vp padded vocabulary, N = B*T rows.
// Gradient convention as in kernels.hpp: parameter grads +=, activation grads =, layernorm_backward's dinp +=.
// Not here: the memory helpers (fill_zero, copies, synchronize), which compute nothing.
#include <cstdint>

namespace hpct::kernels::reference {

template <typename Real>
void encoder_forward(Real* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, const Real* wte /*(Vp,C)*/,
                     const Real* wpe /*(T,C)*/, int B, int T, int C);
template <typename Real>
void encoder_backward(Real* dwte /*(Vp,C) +=*/, Real* dwpe /*(T,C) +=*/, const Real* dout /*(B,T,C)*/,
                      const int32_t* inp /*(B,T)*/, int B, int T, int C);

template <typename Real>
void layernorm_forward(Real* out /*(N,C)*/, Real* mean /*(N)*/, Real* rstd /*(N)*/, const Real* inp /*(N,C)*/,
                       const Real* weight /*(C)*/, const Real* bias /*(C) or null*/, int N, int C);
template <typename Real>
void layernorm_backward(Real* dinp /*(N,C) +=*/, Real* dweight /*(C) +=*/, Real* dbias /*(C) += or null*/,
                        const Real* dout /*(N,C)*/, const Real* inp /*(N,C)*/, const Real* weight /*(C)*/,
                        const Real* mean /*(N)*/, const Real* rstd /*(N)*/, int N, int C);

template <typename Real>
void matmul_forward(Real* out /*(N,OC)*/, const Real* inp /*(N,C)*/, const Real* weight /*(OC,C)*/,
                    const Real* bias /*(OC) or null*/, int N, int C, int OC);
template <typename Real>
void matmul_backward(Real* dinp /*(N,C) or null*/, Real* dweight /*(OC,C) +=*/, Real* dbias /*(OC) += or null*/,
                     const Real* dout /*(N,OC)*/, const Real* inp /*(N,C)*/, const Real* weight /*(OC,C)*/, int N,
                     int C, int OC);

template <typename Real>
void attention_forward(Real* out /*(B,T,C)*/, Real* att /*(B,NH,T,T)*/, const Real* qkv /*(B,T,3C)*/, int B, int T,
                       int C, int NH);
// att: kernels.hpp's stats in the CPU backend's form (the probabilities); out is not read (kernels.hpp passes it for
// backends that keep a log-sum-exp instead).
template <typename Real>
void attention_backward(Real* dqkv /*(B,T,3C)*/, Real* datt /*(B,NH,T,T) scratch*/, const Real* dout /*(B,T,C)*/,
                        const Real* qkv /*(B,T,3C)*/, const Real* out /*(B,T,C) unused*/,
                        const Real* att /*(B,NH,T,T)*/, int B, int T, int C, int NH);

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t n);
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n);

template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, int64_t n);

template <typename Real>
void crossentropy_forward(Real* losses /*(N)*/, const Real* logits /*(N,Vp)*/, const int32_t* targets /*(N)*/, int N,
                          int V, int Vp);
template <typename Real>
void crossentropy_forward_backward(Real* losses /*(N)*/, Real* logits /*(N,Vp) in/out*/, const int32_t* targets /*(N)*/,
                                   Real dloss, int N, int V, int Vp);

// Vocabulary parallelism (kernels.hpp): this rank holds the global rows/columns [v0, v0+Vl) of the padded Vp.
template <typename Real>
void encoder_forward_vocab_parallel(Real* out /*(B,T,C)*/, const int32_t* inp /*(B,T)*/,
                                    const Real* wte_local /*(Vl,C)*/, const Real* wpe /*(T,C) or null*/, int v0, int Vl,
                                    int B, int T, int C);
template <typename Real>
void encoder_backward_vocab_parallel(Real* dwte_local /*(Vl,C) +=*/, Real* dwpe /*(T,C) += or null*/,
                                     const Real* dout /*(B,T,C)*/, const int32_t* inp /*(B,T)*/, int v0, int Vl, int B,
                                     int T, int C);
template <typename Real>
void crossentropy_smoothed_forward(Real* losses /*(N)*/, const Real* logits /*(N,K)*/, const int32_t* targets /*(N)*/,
                                   Real eps, int N, int K);
template <typename Real>
void crossentropy_smoothed_forward_backward(Real* losses /*(N)*/, Real* logits /*(N,K) in/out*/,
                                            const int32_t* targets /*(N)*/, Real dloss, Real eps, int N, int K);
template <typename Real>
void crossentropy_vp_local_max(Real* max_out /*(N)*/, const Real* logits_local /*(N,Vl)*/, int v0, int Vl, int V,
                               int N);
template <typename Real>
void crossentropy_vp_local_sumexp(Real* sumexp_out /*(N)*/, Real* target_logit_out /*(N)*/,
                                  const Real* logits_local /*(N,Vl)*/, const Real* global_max /*(N)*/,
                                  const int32_t* targets /*(N)*/, int v0, int Vl, int V, int N);
template <typename Real>
void crossentropy_vp_loss_backward(Real* losses /*(N)*/, Real* logits_local /*(N,Vl) in/out*/,
                                   const Real* global_max /*(N)*/, const Real* global_sumexp /*(N)*/,
                                   const Real* global_target_logit /*(N)*/, const int32_t* targets /*(N)*/, Real dloss,
                                   int v0, int Vl, int V, int N);
template <typename Real>
void crossentropy_vp_loss(Real* losses /*(N)*/, const Real* global_max /*(N)*/, const Real* global_sumexp /*(N)*/,
                          const Real* global_target_logit /*(N)*/, int N);

// ---- convolutional layers (ResNet), NCHW (reference_conv.cpp) ----
// Legend: N images, C/OC input/output channels, H W input size, KH KW kernel, OH OW output size, HW = H*W.
// Direct loops: conv2d needs no workspace (the backend's workspace arguments are absent here).
// BatchNorm statistics are (C,3) rows of (count, mean, M2), two-pass; merge_stats folds ranks with Chan's formula.
template <typename Real>
void conv2d_forward(Real* out /*(N,OC,OH,OW)*/, const Real* inp /*(N,C,H,W)*/, const Real* weight /*(OC,C,KH,KW)*/,
                    const Real* bias /*(OC) or null*/, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                    int pad);
template <typename Real>
void conv2d_backward(Real* dinp /*(N,C,H,W) or null*/, Real* dweight /*(OC,C,KH,KW) +=*/,
                     Real* dbias /*(OC) += or null*/, const Real* dout /*(N,OC,OH,OW)*/, const Real* inp /*(N,C,H,W)*/,
                     const Real* weight /*(OC,C,KH,KW)*/, int N, int C, int H, int W, int OC, int KH, int KW,
                     int stride, int pad);
template <typename Real>
void batchnorm2d_forward_train(Real* out /*(N,C,HW)*/, Real* stats /*(C,3)*/, Real* save_mean /*(C)*/,
                               Real* save_rstd /*(C)*/, const Real* inp /*(N,C,HW)*/, const Real* gamma /*(C)*/,
                               const Real* beta /*(C)*/, int N, int C, int HW, Real eps);
template <typename Real>
void batchnorm2d_local_stats(Real* stats /*(C,3)*/, const Real* inp /*(N,C,HW)*/, int N, int C, int HW);
template <typename Real>
void batchnorm2d_merge_stats(Real* merged /*(C,3)*/, const Real* gathered /*(R,C,3)*/, int R, int C);
template <typename Real>
void batchnorm2d_forward_apply(Real* out /*(N,C,HW)*/, Real* save_mean /*(C)*/, Real* save_rstd /*(C)*/,
                               const Real* inp /*(N,C,HW)*/, const Real* gamma /*(C)*/, const Real* beta /*(C)*/,
                               const Real* stats /*(C,3)*/, int N, int C, int HW, Real eps);
template <typename Real>
void batchnorm2d_update_running(Real* running_mean /*(C)*/, Real* running_var /*(C)*/, const Real* stats /*(C,3)*/,
                                int C, Real momentum);
template <typename Real>
void batchnorm2d_forward_eval(Real* out /*(N,C,HW)*/, const Real* inp /*(N,C,HW)*/, const Real* gamma /*(C)*/,
                              const Real* beta /*(C)*/, const Real* running_mean /*(C)*/,
                              const Real* running_var /*(C)*/, int N, int C, int HW, Real eps);
template <typename Real>
void batchnorm2d_backward(Real* dinp /*(N,C,HW) =*/, Real* dgamma /*(C) +=*/, Real* dbeta /*(C) +=*/,
                          const Real* dout /*(N,C,HW)*/, const Real* inp /*(N,C,HW)*/, const Real* save_mean /*(C)*/,
                          const Real* save_rstd /*(C)*/, const Real* gamma /*(C)*/, int N, int C, int HW);
template <typename Real>
void batchnorm2d_backward_local_sums(Real* sums /*(C,2)*/, Real* dgamma /*(C) +=*/, Real* dbeta /*(C) +=*/,
                                     const Real* dout /*(N,C,HW)*/, const Real* inp /*(N,C,HW)*/,
                                     const Real* save_mean /*(C)*/, const Real* save_rstd /*(C)*/, int N, int C,
                                     int HW);
template <typename Real>
void batchnorm2d_backward_apply(Real* dinp /*(N,C,HW) =*/, const Real* dout /*(N,C,HW)*/, const Real* inp /*(N,C,HW)*/,
                                const Real* save_mean /*(C)*/, const Real* save_rstd /*(C)*/, const Real* gamma /*(C)*/,
                                const Real* global_sums /*(C,2)*/, int64_t global_count, int N, int C, int HW);
template <typename Real>
void relu_forward(Real* out, const Real* inp, int64_t n);
template <typename Real>
void relu_backward(Real* dinp, const Real* dout, const Real* out, int64_t n);
template <typename Real>
void maxpool2d_forward(Real* out /*(N,C,OH,OW)*/, int32_t* idx /*(N,C,OH,OW)*/, const Real* inp /*(N,C,H,W)*/, int N,
                       int C, int H, int W, int K, int stride, int pad);
template <typename Real>
void maxpool2d_backward(Real* dinp /*(N,C,H,W)*/, const Real* dout /*(N,C,OH,OW)*/, const int32_t* idx /*(N,C,OH,OW)*/,
                        int N, int C, int H, int W, int K, int stride, int pad);
template <typename Real>
void global_avgpool_forward(Real* out /*(N,C)*/, const Real* inp /*(N,C,HW)*/, int N, int C, int HW);
template <typename Real>
void global_avgpool_backward(Real* dinp /*(N,C,HW)*/, const Real* dout /*(N,C)*/, int N, int C, int HW);

template <typename Real>
void sum(Real* out, const Real* x, int64_t n);
template <typename Real>
void sum_squares_accumulate(double* out, const Real* x, int64_t n);
template <typename Real>
void scale(Real* x, Real s, int64_t n);
template <typename Real>
void adamw_update(Real* params, const Real* grads, Real* m, Real* v, int64_t n, Real lr, Real beta1, Real beta2,
                  Real eps, Real weight_decay, Real grad_scale, int t);

}  // namespace hpct::kernels::reference
