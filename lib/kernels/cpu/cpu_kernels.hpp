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
#include "kernels/op_table.hpp"
#include "tensor/bf16.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels::cpu {

// ---- the ops of kernels/ops.inc, each as cpu::name(parameters): no context, a CPU op completes before it returns ----
#define HPCT_OP_STORAGE(name, params, args, check_list) \
  template <typename A>                                 \
  void name(HPCT_UNPAREN params);
#define HPCT_OP_STORAGE_LAYOUT(name, params, args, check_list) HPCT_OP_STORAGE(name, params, args, check_list)
#define HPCT_OP(name, params, args, check_list) void name(HPCT_UNPAREN params);
#define HPCT_OP_STORAGE_COMPOSED(ret, name, params)
#define HPCT_OP_COMPOSED(ret, name, params)
#include "kernels/ops.inc"

// ---- what the composed ops of kernels.cpp call ----
// Flash attention (cpu_attention.cpp): kernels.hpp's stats are the row log-sum-exp L (B,NH,T) float, its scratch
// D = rowsum(dout * out) (B,NH,T) float; backward reads out.
int64_t attention_stats_bytes(int B, int T, int C, int NH, DType act);    // B*NH*T*4
int64_t attention_scratch_bytes(int B, int T, int C, int NH, DType act);  // B*NH*T*4
// The NCHW convolutions' workspace (cpu_conv.cpp); the channels-last one below.
int64_t conv2d_workspace_floats(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, DType act);
void sum_squares_ranges(double* acc, const SquaresChunk* table, int64_t chunks, double* partials);
void adamw_update_chunks(const AdamwChunk* table, int64_t chunks, float lr, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int t, DType copy);

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

}  // namespace hpct::kernels::cpu
