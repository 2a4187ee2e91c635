#pragma once
// The CUDA backend of kernels.hpp (the ops of kernels/ops.inc): the same ops as cpu/cpu_kernels.hpp, each taking the
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
#include "kernels/op_table.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels::cuda {

// ---- the ops of kernels/ops.inc, each as cuda::name(ctx, parameters) ----
#define HPCT_OP_STORAGE(name, params, args, check_list) \
  template <typename A>                                 \
  void name(HPCT_WITH_CTX params);
#define HPCT_OP_STORAGE_LAYOUT(name, params, args, check_list) HPCT_OP_STORAGE(name, params, args, check_list)
#define HPCT_OP(name, params, args, check_list) void name(HPCT_WITH_CTX params);
#define HPCT_OP_STORAGE_COMPOSED(ret, name, params)
#define HPCT_OP_COMPOSED(ret, name, params)
#include "kernels/ops.inc"

// ---- what the composed ops of kernels.cpp call ----
// residual_forward and layernorm_forward in one pass over the rows (kernels.hpp's residual_layernorm_forward).
template <typename A>
void residual_layernorm_forward(const ExecContext& ctx, A* residual /*(N,C)*/, A* out /*(N,C)*/, float* mean /*(N)*/,
                                float* rstd /*(N)*/, const A* a /*(N,C)*/, const A* b /*(N,C)*/,
                                const A* weight /*(C)*/, const A* bias /*(C) or null*/, int N, int C);
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
ConvTiming conv2d_time_algorithms(const ExecContext& ctx, A* x, const A* w, A* y, A* dx, float* dw, float* workspace,
                                  int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                                  int stride, int pad, int repeats);
// The BatchNorm ops with an epilogue in their own passes, either layout (kernels.hpp, the batchnorm2d_relu and
// batchnorm2d_add_relu ops): `relu` the ReLU that follows the BatchNorm (`relu_out`, its output, in the backward),
// `residual` the residual add before that ReLU (relu then true). Without them they are the ops.inc ones.
template <typename A>
void batchnorm2d_forward_train(const ExecContext& ctx, A* out, float* stats, float* save_mean, float* save_rstd,
                               const A* inp, const A* gamma, const A* beta, int N, int C, int HW, float eps, bool relu,
                               const A* residual);
template <typename A>
void batchnorm2d_forward_apply(const ExecContext& ctx, A* out, float* save_mean, float* save_rstd, const A* inp,
                               const A* gamma, const A* beta, const float* stats, int N, int C, int HW, float eps,
                               bool relu, const A* residual);
template <typename A>
void batchnorm2d_forward_eval(const ExecContext& ctx, A* out, const A* inp, const A* gamma, const A* beta,
                              const float* running_mean, const float* running_var, int N, int C, int HW, float eps,
                              bool relu, const A* residual);
template <typename A>
void batchnorm2d_backward(const ExecContext& ctx, A* dinp, float* dgamma, float* dbeta, const A* dout, const A* inp,
                          const float* save_mean, const float* save_rstd, const A* gamma, int N, int C, int HW,
                          const A* relu_out);
template <typename A>
void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums, float* dgamma, float* dbeta, const A* dout,
                                     const A* inp, const float* save_mean, const float* save_rstd, int N, int C, int HW,
                                     const A* relu_out);
template <typename A>
void batchnorm2d_backward_apply(const ExecContext& ctx, A* dinp, const A* dout, const A* inp, const float* save_mean,
                                const float* save_rstd, const A* gamma, const float* global_sums, int64_t global_count,
                                int N, int C, int HW, const A* relu_out);
// out (N,HW,C) = images (N,C,HW) fp32 on the device, rounded to A (kernels.hpp).
template <typename A>
void images_to_channels_last(const ExecContext& ctx, A* out, const float* images, int N, int C, int HW);
void cast(const ExecContext& ctx, fp16* dst, const float* src, int64_t n);
void cast(const ExecContext& ctx, float* dst, const fp16* src, int64_t n);
void sum_squares_ranges(const ExecContext& ctx, double* acc, const SquaresChunk* table, int64_t chunks,
                        double* partials);
void adamw_update_chunks(const ExecContext& ctx, const AdamwChunk* table, int64_t chunks, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float grad_scale, int t, DType copy);

}  // namespace hpct::kernels::cuda
