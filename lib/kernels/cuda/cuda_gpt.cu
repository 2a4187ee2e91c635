// CUDA backend, GPT group: Linear (cuBLAS), causal multi-head attention (flash-attention-2 style fused kernels that
// keep a log-sum-exp per row instead of the T x T probabilities), and the softmax cross-entropies (plain with
// vocabulary padding, label-smoothed, and the three vocabulary-parallel phases). Contracts: kernels.hpp; reference:
// the CPU backend (cpu_matmul.cpp, cpu_attention.cpp, cpu_loss_optim.cpp). Linear and the cross-entropies follow its
// formulas operation for operation; attention computes the same function another way (online softmax, recompute).
// This file holds the host side (cuBLAS, the checks, the launches); the kernels and their launch geometry are in
// cuda_flash_attention.cuh (attention) and cuda_gpt_kernels.cuh (the Linear bias and the cross-entropies), which the
// host emulation of tests/cuda_emu also compiles and runs (test_emu_flash_attention.cpp, test_emu_gpt.cpp).
//
// Every op is asynchronous on stream_of(ctx): no synchronisation, no allocation, no host read of device data.
// Determinism: no atomics anywhere in this group. Every reduction (the attention tiles, dbias over rows, the
// cross-entropy sums) runs in a fixed order that depends on the shapes only, and cuBLAS GEMMs are bitwise
// reproducible run to run on the same GPU model / toolkit / stream setup, so a run reproduces itself bit for bit.
// fp32 storage throughout. The Linear GEMMs' arithmetic follows ctx.precision (exec_context.hpp): fp32 runs
// CUBLAS_COMPUTE_32F with CUBLAS_DEFAULT_MATH (no TF32); tf32 / bf16 / fp16 run CUBLAS_COMPUTE_32F_FAST_TF32 / _16BF /
// _16F: cuBLAS rounds the fp32 inputs to that type for the tensor cores and accumulates in fp32, C stays fp32. The
// attention kernels and the cross-entropies compute in fp32 whatever the precision.
//
// Targets: the CPU backend checks targets on the host and throws; the device cannot (the targets live on the
// device and the op must not read them back). An out-of-range target instead makes that row's loss NaN (and its
// dlogits NaN; for the vocabulary-parallel pieces the target logit is NaN, so the reduced loss is NaN on every
// rank): loud, never an out-of-bounds read.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_flash_attention.cuh"
#include "kernels/cuda/cuda_gpt_kernels.cuh"
#include "kernels/cuda/cuda_kernels.hpp"

namespace hpct::kernels::cuda {
namespace {

// ================================================================================================================
// cuBLAS: one handle per device, created on first use and kept for the life of the process
// ================================================================================================================
constexpr int kMaxDevices = 64;

// The handle of the current device, bound to `stream`. Created once per device (cublasCreate allocates; that
// happens at the first GEMM, not in the steady state of the step) and deliberately never destroyed: destroying
// it from a static destructor may run after the CUDA runtime has been torn down. cublasSetStream is called
// before each op, since consecutive ops may use different streams. Thread-safety: creation is guarded by a
// mutex; the ops themselves assume one host thread drives a device (a cuBLAS handle must not be used by two
// threads at once).
cublasHandle_t cublas_handle(cudaStream_t stream) {
  static std::mutex mu;
  static cublasHandle_t handles[kMaxDevices] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  HPCT_CHECK(dev >= 0 && dev < kMaxDevices, "kernels::cuda: device {} is beyond the cuBLAS handle table ({})", dev,
             kMaxDevices);
  cublasHandle_t h = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!handles[dev]) {
      cublasHandle_t created = nullptr;
      CUBLAS_CHECK(cublasCreate(&created));
      // fp32 GEMMs in full fp32: the default math mode, stated explicitly (CUBLAS_TF32_TENSOR_OP_MATH would round
      // the inputs to 10-bit mantissas and break the 1e-5 agreement with the CPU backend).
      CUBLAS_CHECK(cublasSetMathMode(created, CUBLAS_DEFAULT_MATH));
      CUBLAS_CHECK(cublasSetPointerMode(created, CUBLAS_POINTER_MODE_HOST));  // alpha, beta are host floats
      handles[dev] = created;
    }
    h = handles[dev];
  }
  CUBLAS_CHECK(cublasSetStream(h, stream));
  return h;
}

// ---- row-major GEMMs on column-major cuBLAS ----------------------------------------------------------------------
// Every matrix of this code base is row-major. A row-major matrix X (r, c) with leading dimension ld (the row
// stride) occupies memory exactly as the column-major matrix X^T (c, r) with the same ld. So the row-major product
//     C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C
// is, seen column-major, the product of transposes
//     C^T (N, M) = alpha op(B)^T (N, K) op(A)^T (K, M) + beta C^T.
// cuBLAS sees B's buffer as B_rm^T (B_rm: the row-major matrix stored there). If trans_b is false, op(B) = B_rm and
// op(B)^T = B_rm^T is the buffer as cuBLAS sees it: CUBLAS_OP_N; if trans_b is true, op(B)^T = B_rm, the transpose
// of what cuBLAS sees: CUBLAS_OP_T. Likewise for A. Hence
//     cublasGemm(op_b, op_a, m = N, n = M, k = K, alpha, B, ldb, A, lda, beta, C, ldc)
// with the row-major leading dimensions unchanged. gemm_rm takes exactly the arguments of the CPU backend's
// sgemm_rowmajor / cblas_sgemm(CblasRowMajor, ...), so each call below reads like its CPU twin.
inline cublasOperation_t op_of(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The cuBLAS compute type of a precision (fp32 data in and out, fp32 accumulation in every case).
cublasComputeType_t gemm_compute(Precision p) {
  switch (p) {
    case Precision::FP32: return CUBLAS_COMPUTE_32F;
    case Precision::TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Precision::BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case Precision::FP16: return CUBLAS_COMPUTE_32F_FAST_16F;
  }
  HPCT_FAIL("kernels::cuda: unknown precision {}", static_cast<int>(p));
}

void gemm_rm(cublasHandle_t h, cublasComputeType_t compute, bool trans_a, bool trans_b, int M, int N, int K,
             float alpha, const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;  // nothing to write (K = 0 is legal: C = beta C)
  CUBLAS_CHECK(cublasGemmEx(h, op_of(trans_b), op_of(trans_a), N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda,
                            &beta, C, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
}

// ================================================================================================================
// Linear
// ================================================================================================================

void check_linear(const char* op, int N, int C, int OC) {
  HPCT_CHECK(N >= 0 && C > 0 && OC > 0, "kernels::cuda::{}: bad shape N={} C={} OC={}", op, N, C, OC);
}

// ================================================================================================================
// Attention: the flash kernels (cuda_flash_attention.cuh) and their launch helpers
// ================================================================================================================
using flash::kMaxHS;
using flash::kTile;
using flash::kWarps;
using flash::with_head_slots;

// The flash grid (x = the B*NH heads, y = the tiles of 32 rows, cuda_flash_attention.cuh) fits the launch limits.
void check_flash_grid(const char* op, int B, int T, int NH) {
  const int64_t heads = static_cast<int64_t>(B) * NH, tiles = (static_cast<int64_t>(T) + kTile - 1) / kTile;
  HPCT_CHECK(heads <= INT32_MAX && tiles <= 65535,
             "kernels::cuda::{}: B*NH={} heads and {} tiles of {} rows exceed the launch grid (2^31-1 x 65535)", op,
             heads, tiles, kTile);
}

void check_attention(const char* op, int B, int T, int C, int NH) {
  HPCT_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "kernels::cuda::{}: bad shape B={} T={} C={} NH={}", op, B, T, C, NH);
  HPCT_CHECK(C % NH == 0, "kernels::cuda::{}: C={} is not a multiple of NH={}", op, C, NH);
  HPCT_CHECK(C / NH <= kMaxHS, "kernels::cuda::{}: head size C/NH = {} exceeds the flash kernels' {} (C={}, NH={})", op,
             C / NH, kMaxHS, C, NH);
  HPCT_CHECK(static_cast<int64_t>(3) * C <= INT32_MAX, "kernels::cuda::{}: C={} too large", op, C);
}

// ================================================================================================================
// Cross-entropies: the kernels (cuda_gpt_kernels.cuh) launch one block per row
// ================================================================================================================

// Checks a vocab-parallel slice; returns Vr, the number of real (non-padded) local columns (as the CPU).
int check_vp_slice(const char* op, int v0, int Vl, int V, int N) {
  HPCT_CHECK(V > 0 && v0 >= 0 && Vl > 0 && N >= 0,
             "kernels::cuda::{}: bad vocabulary slice [v0={}, v0+Vl={}) of "
             "V={}, N={}",
             op, v0, static_cast<int64_t>(v0) + Vl, V, N);
  return static_cast<int>(std::clamp<int64_t>(static_cast<int64_t>(V) - v0, 0, Vl));
}

}  // namespace

// ================================================================================================================
// Linear (torch.nn.Linear layout), the CPU twin's sgemm_rowmajor calls through gemm_rm:
//   forward   out (N,OC) = inp (N,C) @ weight^T + bias:  out seeded with bias, then GEMM with beta = 1
//             (cuBLAS: op_a = T on weight (C,OC col-major, ld C), op_b = N on inp (C,N col-major, ld C),
//              m = OC, n = N, k = C, out (OC,N col-major, ld OC))
//   backward  dinp (N,C) = dout (N,OC) @ weight (OC,C)        beta = 0 (assigned)
//             (cuBLAS: N, N; m = C, n = N, k = OC; A = weight ld C, B = dout ld OC, C = dinp ld C)
//             dweight (OC,C) += dout^T (OC,N) @ inp (N,C)     beta = 1 (accumulated)
//             (cuBLAS: op_a = N on inp (C,N, ld C), op_b = T on dout (OC,N, ld OC); m = C, n = OC, k = N,
//              dweight (C,OC col-major, ld C))
//             dbias (OC) += sum_n dout                        bias_grad_kernel (double, fixed order)
// ================================================================================================================
void matmul_forward(const ExecContext& ctx, float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  check_linear("matmul_forward", N, C, OC);
  if (N == 0) return;
  const cudaStream_t stream = stream_of(ctx);
  cublasHandle_t h = cublas_handle(stream);
  float beta = 0.0f;
  if (bias) {
    const int64_t total = static_cast<int64_t>(N) * OC;
    HPCT_LAUNCH(bias_broadcast_kernel, bias_broadcast_shape(total), stream, out, bias, N, OC);
    HPCT_CUDA_LAUNCH_CHECK("matmul_forward");
    beta = 1.0f;
  }
  gemm_rm(h, gemm_compute(ctx.precision), false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward(const ExecContext& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  check_linear("matmul_backward", N, C, OC);
  if (N == 0) return;  // no rows: dinp is empty, the parameter gradients receive nothing
  const cudaStream_t stream = stream_of(ctx);
  cublasHandle_t h = cublas_handle(stream);
  const cublasComputeType_t compute = gemm_compute(ctx.precision);
  if (dinp) gemm_rm(h, compute, false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
  gemm_rm(h, compute, true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) {
    HPCT_LAUNCH(bias_grad_kernel, bias_grad_shape(OC), stream, dbias, dout, N, OC);
    HPCT_CUDA_LAUNCH_CHECK("matmul_backward");
  }
}

// ================================================================================================================
// Causal multi-head self-attention, flash style (the kernels: cuda_flash_attention.cuh). kernels.hpp's stats are the
// log-sum-exp L (B,NH,T) of each row's scaled scores; its scratch holds D (B,NH,T). Per head h of sequence b, with
// q, k, v read in place from qkv (row stride 3C) and out / dout at column h HS (row stride C):
//   forward   out = softmax(scale q k^T, causal) v and L, one pass over the key tiles with an online softmax
//                                                                             flash::forward_kernel
//   backward  D = rowsum(dout * out)                                          flash::rowdot_kernel
//             P = exp(scale q k^T - L) (causal), dP = dout v^T, dS = P (dP - D), recomputed tile by tile in both:
//             dk = scale dS^T q, dv = P^T dout  per key tile, over the query tiles in order  flash::backward_dkv_kernel
//             dq = scale dS k                   per query tile, over the key tiles in order  flash::backward_dq_kernel
// The score tiles are recomputed by both backward kernels (twice the forward's score work) so that each output
// element is owned by one block and summed in a fixed order: deterministic without atomics. Every element of dqkv is
// written exactly once (dq by the dq kernel; dk, dv by the dkv kernel): assigned. Above 48 KiB of dynamic shared
// memory (the backward kernels from HS = 96 on, the forward at HS = 128) the shapes opt in, and HPCT_LAUNCH raises
// the kernel's limit after checking the device's maximum (cuda_common.cuh).
// ================================================================================================================
int64_t attention_stats_floats(const ExecContext& /*ctx*/, int B, int T, int C, int NH) {
  check_attention("attention_stats_floats", B, T, C, NH);
  return static_cast<int64_t>(B) * NH * T;
}
int64_t attention_scratch_floats(const ExecContext& /*ctx*/, int B, int T, int C, int NH) {
  check_attention("attention_scratch_floats", B, T, C, NH);
  return static_cast<int64_t>(B) * NH * T;
}

void attention_forward(const ExecContext& ctx, float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  check_attention("attention_forward", B, T, C, NH);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  check_flash_grid("attention_forward", B, T, NH);
  const LaunchShape shape = flash::forward_shape(B, T, NH, HS);
  const cudaStream_t stream = stream_of(ctx);
  const bool launched = with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    HPCT_LAUNCH(flash::forward_kernel<NS>, shape, stream, out, lse, qkv, T, C, NH, scale);
    HPCT_CUDA_LAUNCH_CHECK("attention_forward");
  });
  HPCT_CHECK(launched, "kernels::cuda::attention_forward: head size {} is not in [1, {}]", HS, kMaxHS);
}

void attention_backward(const ExecContext& ctx, float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* lse, int B, int T, int C, int NH) {
  check_attention("attention_backward", B, T, C, NH);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  check_flash_grid("attention_backward", B, T, NH);
  const cudaStream_t stream = stream_of(ctx);
  float* dsum = scratch;  // D (B,NH,T)
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
  const int64_t row_blocks = (rows + kWarps - 1) / kWarps;
  HPCT_CHECK(row_blocks <= INT32_MAX, "kernels::cuda::attention_backward: {} rows exceed the launch grid", rows);
  HPCT_LAUNCH(flash::rowdot_kernel, flash::rowdot_shape(rows), stream, dsum, dout, out, rows, T, C, NH);
  HPCT_CUDA_LAUNCH_CHECK("attention_backward (D = rowsum(dout * out))");
  const LaunchShape dkv = flash::backward_dkv_shape(B, T, NH, HS), dq = flash::backward_dq_shape(B, T, NH, HS);
  const bool launched = with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    HPCT_LAUNCH(flash::backward_dkv_kernel<NS>, dkv, stream, dqkv, dout, qkv, lse, dsum, T, C, NH, scale);
    HPCT_CUDA_LAUNCH_CHECK("attention_backward (dk, dv)");
    HPCT_LAUNCH(flash::backward_dq_kernel<NS>, dq, stream, dqkv, dout, qkv, lse, dsum, T, C, NH, scale);
    HPCT_CUDA_LAUNCH_CHECK("attention_backward (dq)");
  });
  HPCT_CHECK(launched, "kernels::cuda::attention_backward: head size {} is not in [1, {}]", HS, kMaxHS);
}

// ================================================================================================================
// Cross-entropies
// ================================================================================================================
void crossentropy_forward(const ExecContext& ctx, float* losses, const float* logits, const int32_t* targets, int N,
                          int V, int Vp) {
  HPCT_CHECK(N >= 0 && V > 0 && V <= Vp, "kernels::cuda::crossentropy_forward: bad shape N={} V={} Vp={}", N, V, Vp);
  if (N == 0) return;
  HPCT_LAUNCH(crossentropy_kernel<false>, row_shape(N, V), stream_of(ctx), losses, logits, targets, 0.0f, V, Vp);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_forward");
}

void crossentropy_forward_backward(const ExecContext& ctx, float* losses, float* logits, const int32_t* targets,
                                   float dloss, int N, int V, int Vp) {
  HPCT_CHECK(N >= 0 && V > 0 && V <= Vp, "kernels::cuda::crossentropy_forward_backward: bad shape N={} V={} Vp={}", N,
             V, Vp);
  if (N == 0) return;
  HPCT_LAUNCH(crossentropy_kernel<true>, row_shape(N, V), stream_of(ctx), losses, logits, targets, dloss, V, Vp);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_forward_backward");
}

void crossentropy_smoothed_forward(const ExecContext& ctx, float* losses, const float* logits, const int32_t* targets,
                                   float eps, int N, int K) {
  HPCT_CHECK(N >= 0 && K > 0, "kernels::cuda::crossentropy_smoothed_forward: bad shape N={} K={}", N, K);
  if (N == 0) return;
  HPCT_LAUNCH(crossentropy_smoothed_kernel<false>, row_shape(N, K), stream_of(ctx), losses, logits, targets, 0.0f, eps,
              K);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_smoothed_forward");
}

void crossentropy_smoothed_forward_backward(const ExecContext& ctx, float* losses, float* logits,
                                            const int32_t* targets, float dloss, float eps, int N, int K) {
  HPCT_CHECK(N >= 0 && K > 0, "kernels::cuda::crossentropy_smoothed_forward_backward: bad shape N={} K={}", N, K);
  if (N == 0) return;
  HPCT_LAUNCH(crossentropy_smoothed_kernel<true>, row_shape(N, K), stream_of(ctx), losses, logits, targets, dloss, eps,
              K);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_smoothed_forward_backward");
}

void crossentropy_vp_local_max(const ExecContext& ctx, float* max_out, const float* logits_local, int v0, int Vl, int V,
                               int N) {
  const int Vr = check_vp_slice("crossentropy_vp_local_max", v0, Vl, V, N);
  if (N == 0) return;
  HPCT_LAUNCH(vp_local_max_kernel, row_shape(N, Vr), stream_of(ctx), max_out, logits_local, Vl, Vr);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_local_max");
}

void crossentropy_vp_local_sumexp(const ExecContext& ctx, float* sumexp_out, float* target_logit_out,
                                  const float* logits_local, const float* global_max, const int32_t* targets, int v0,
                                  int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_local_sumexp", v0, Vl, V, N);
  if (N == 0) return;
  HPCT_LAUNCH(vp_local_sumexp_kernel, row_shape(N, Vr), stream_of(ctx), sumexp_out, target_logit_out, logits_local,
              global_max, targets, v0, Vl, Vr, V);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_local_sumexp");
}

void crossentropy_vp_loss_backward(const ExecContext& ctx, float* losses, float* logits_local, const float* global_max,
                                   const float* global_sumexp, const float* global_target_logit, const int32_t* targets,
                                   float dloss, int v0, int Vl, int V, int N) {
  const int Vr = check_vp_slice("crossentropy_vp_loss_backward", v0, Vl, V, N);
  if (N == 0) return;
  HPCT_LAUNCH(vp_loss_backward_kernel, row_shape(N, Vl), stream_of(ctx), losses, logits_local, global_max,
              global_sumexp, global_target_logit, targets, dloss, v0, Vl, Vr, V);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_loss_backward");
}

void crossentropy_vp_loss(const ExecContext& ctx, float* losses, const float* global_max, const float* global_sumexp,
                          const float* global_target_logit, int N) {
  HPCT_CHECK(N >= 0, "kernels::cuda::crossentropy_vp_loss: bad N={}", N);
  if (N == 0) return;
  HPCT_LAUNCH(vp_loss_kernel, vp_loss_shape(N), stream_of(ctx), losses, global_max, global_sumexp, global_target_logit,
              N);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_loss");
}

}  // namespace hpct::kernels::cuda
