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
// Storage types (kernels.hpp): every op templated on A runs for A = float, A = bf16 and A = fp16 (instantiated at the
// end of this file). The kernels compute in fp32 and round each stored output once (cuda_device_common.cuh).
//   float storage: the Linear GEMMs' arithmetic follows ctx.precision (exec_context.hpp): fp32 runs CUBLAS_COMPUTE_32F
//     with CUBLAS_DEFAULT_MATH (no TF32); tf32 / bf16 / fp16 run CUBLAS_COMPUTE_32F_FAST_TF32 / _16BF / _16F: cuBLAS
//     rounds the fp32 inputs to that type for the tensor cores and accumulates in fp32, C stays fp32.
//   bf16 and fp16 storage (the same scheme; "bf16" below stands for either, CUDA_R_16BF or CUDA_R_16F): the Linear
//     GEMMs run through cuBLASLt (lt_gemm_rm) on the 16-bit tensors as they are, with
//     CUBLAS_COMPUTE_32F (bf16 products, fp32 accumulation), whatever ctx.precision: forward out (bf16) with the bias
//     added in the epilogue (CUBLASLT_EPILOGUE_BIAS, as PyTorch's bf16 Linear). Measured on an H100 with cuBLAS 13: the
//     epilogue rounds the product to bf16 and adds the bf16 bias in bf16, two roundings where the rest of the backend
//     rounds once (test_cuda_gpt.cpp bounds both). The one-rounding alternatives are worse: an fp32 bias for a bf16
//     output is refused (CUBLAS_STATUS_INVALID_VALUE); seeding out with the bias and accumulating with beta = 1 (the
//     float path) cost about 3% of a GPT-2 124M step and its large-shape kernels still add C in bf16 (one ulp off);
//     an fp32 output and an own bias-and-round kernel would move three times the bytes. Backward dinp (bf16,
//     assigned) and dweight += in fp32 (C/D of type CUDA_R_32F with beta = 1 while A/B are bf16: the fp32 master
//     gradient accumulates without a bf16 rounding); dbias += in fp32 by bias_grad_partial_kernel (double sums, as
//     for float storage: the BGRADB epilogue would write the bias gradient in D's type, bf16, and assign it rather
//     than accumulate).
//   The attention kernels and the cross-entropies compute in fp32 for both, with the log-sum-exp L, D and the losses
//   float.
//
// Targets: the CPU backend checks targets on the host and throws; the device cannot (the targets live on the
// device and the op must not read them back). An out-of-range target instead makes that row's loss NaN (and its
// dlogits NaN; for the vocabulary-parallel pieces the target logit is NaN, so the reduced loss is NaN on every
// rank): loud, never an out-of-bounds read.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_flash_attention.cuh"
#include "kernels/cuda/cuda_flash_attention_tc.cuh"
#include "kernels/cuda/cuda_attention_cudnn.hpp"
#include "kernels/cuda/cuda_gpt_kernels.cuh"
#include "kernels/cuda/cuda_kernels.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels::cuda {
namespace {

// ================================================================================================================
// cuBLAS: one handle per device, created on first use and kept for the life of the process
// ================================================================================================================
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
// cuBLASLt: the GEMMs of 16-bit storage (bf16, fp16)
// ================================================================================================================
// The handle is the cuBLAS handle of the device (cublas_handle): a cublasHandle_t may be passed wherever cuBLASLt takes
// a cublasLtHandle_t (cuBLAS encapsulates its Lt context), so there is one handle per device to keep. The workspace is
// one buffer per device, allocated at the first bf16 GEMM (not in the steady state of the step: the step loop
// allocates nothing) and kept for the life of the process like the handle; 32 MiB is cuBLAS's recommendation for
// Hopper (split-K and stream-K algorithms need it; without one the heuristics offer fewer algorithms).
constexpr size_t kLtWorkspaceBytes = kCudaGemmWorkspaceBytes;  // kernels.hpp

void* lt_workspace() {
  static void* buffers[kMaxDevices] = {};
  return device_lifetime_buffer(buffers, kLtWorkspaceBytes, "cuBLASLt workspace");
}

// The largest power of two (at most 256) dividing a device address: the alignment cuBLASLt's heuristics must assume
// (they assume 256 bytes unless told: CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), so an algorithm chosen for aligned
// tensors is never run on a tensor that starts mid-slab.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t low = a & (~a + 1);
  return static_cast<uint32_t>(std::min<uintptr_t>(low, 256));
}

// One GEMM shape's descriptors and algorithm (the heuristics' first choice for the workspace), built once per
// (thread, device, shape, transposes, leading dimensions, output type, bias, alignments) and kept: the heuristics run
// on the host (tens of microseconds), once per distinct shape. The descriptors are host objects (no device memory),
// kept for the life of the process like the handle.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

template <typename T>
void lt_desc_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

// What a plan's epilogue does besides the product: Plain (bias or nothing, CUBLASLT_EPILOGUE_BIAS / DEFAULT), GeluAux
// (D = GELU(product [+ bias]) and aux = product [+ bias], the GELU input: CUBLASLT_EPILOGUE_GELU_AUX[_BIAS]), DGelu
// (D = product * GELU'(aux): CUBLASLT_EPILOGUE_DGELU, the GELU backward fused into the GEMM before it).
enum class LtEpilogue { Plain, GeluAux, DGelu };

// Column-major D (m, n) = op(A) op(B) [+ bias (m) per column] + beta C, A, B and the bias of type abtype (CUDA_R_16BF
// or CUDA_R_16F; lda, ldb), C = D of type ctype (ldc), CUBLAS_COMPUTE_32F, alpha and beta host floats; with
// epilogue GeluAux / DGelu the aux matrix (m, n) of type abtype, leading dimension aux_ld (a multiple of 8, >= m).
// Null where the heuristics refuse the descriptor or offer no algorithm and optional is set (with one warning; the
// caller then composes the epilogue's work from other ops); a failure otherwise.
const LtPlan* lt_plan(cublasLtHandle_t h, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                      cudaDataType_t abtype, const void* A, int lda, const void* B, int ldb, const void* C,
                      cudaDataType_t ctype, int ldc, const void* bias, LtEpilogue epilogue = LtEpilogue::Plain,
                      const void* aux = nullptr, int64_t aux_ld = 0, bool optional = false) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  using Key = std::array<int64_t, 19>;
  thread_local std::map<Key, std::unique_ptr<LtPlan>> plans;  // never destroyed (the header comment of this section)
  const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_c = alignment_of(C);
  const Key key{dev,
                op_a,
                op_b,
                m,
                n,
                k,
                lda,
                ldb,
                ldc,
                static_cast<int64_t>(ctype),
                static_cast<int64_t>(abtype),
                bias != nullptr,
                al_a,
                al_b,
                al_c,
                bias ? alignment_of(bias) : 0,
                static_cast<int64_t>(epilogue),
                aux ? alignment_of(aux) : 0,
                aux_ld};
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();  // null: no algorithm for this shape and epilogue (optional)

  auto p = std::make_unique<LtPlan>();
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (epilogue == LtEpilogue::GeluAux) epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (epilogue == LtEpilogue::DGelu) {
    HPCT_CHECK(!bias, "kernels::cuda: the DGELU epilogue takes no bias");
    epi = CUBLASLT_EPILOGUE_DGELU;
  }
  lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (bias) {
    lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, abtype);
    lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // the heuristics read its alignment
  }
  if (epilogue != LtEpilogue::Plain) {
    HPCT_CHECK(aux && aux_ld % 8 == 0 && aux_ld >= m, "kernels::cuda: the GELU epilogue's aux matrix (ld {}, {} rows)",
               aux_ld, m);
    lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, abtype);
    lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
  }
  const bool ta = op_a == CUBLAS_OP_T, tb = op_b == CUBLAS_OP_T;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, abtype, ta ? k : m, ta ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, abtype, tb ? n : k, tb ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, ctype, m, n, ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t rc = CUBLAS_STATUS_SUCCESS;
  const size_t ws = kLtWorkspaceBytes;
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> prefs[] = {
      {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c}};
  for (const auto& [attr, value] : prefs) {
    rc = cublasLtMatmulPreferenceSetAttribute(
        pref, attr, value, attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? sizeof(size_t) : sizeof(uint32_t));
    if (rc != CUBLAS_STATUS_SUCCESS) break;
  }
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatmulAlgoGetHeuristic(h, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &returned);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (optional && (rc != CUBLAS_STATUS_SUCCESS || returned == 0)) {
    // once per shape (the null plan is kept): the caller composes the epilogue's work from the own kernels
    log_warn("train.gelu_epilogue: cuBLASLt offers no {} epilogue for the {} GEMM m={} n={} k={} ({}): this GEMM "
             "runs with the own GELU kernel instead",
             epilogue == LtEpilogue::GeluAux ? "GELU_AUX" : "DGELU", abtype == CUDA_R_16F ? "fp16" : "bf16", m, n, k,
             rc == CUBLAS_STATUS_SUCCESS ? "no algorithm" : cublasGetStatusName(rc));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->c));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    return plans.emplace(key, nullptr).first->second.get();  // remembered: the heuristics are not asked again
  }
  CUBLAS_CHECK(rc);
  HPCT_CHECK(returned > 0,
             "kernels::cuda: cuBLASLt offers no algorithm for the {} GEMM m={} n={} k={} (op_a {}, op_b {}, lda {} "
             "ldb {} ldc {}, output {}, bias {}, alignments {} {} {} bytes); this GPU or cuBLAS cannot run {} "
             "storage: run with train.precision=fp32 or tf32",
             abtype == CUDA_R_16F ? "fp16" : "bf16", m, n, k, static_cast<int>(op_a), static_cast<int>(op_b), lda, ldb,
             ldc, ctype == CUDA_R_32F ? "fp32" : "16-bit", bias != nullptr, al_a, al_b, al_c,
             abtype == CUDA_R_16F ? "fp16" : "bf16");
  p->algo = result.algo;
  return plans.emplace(key, std::move(p)).first->second.get();
}

// Row-major C (M, N) = op(A) (M, K) op(B) (K, N) [+ bias (N), added to every row] + beta C: gemm_rm's arguments (the
// CPU twin's sgemm_rowmajor), on 16-bit A and B (T = bf16 or fp16), with C of type T (CUDA_R_16BF / CUDA_R_16F) or
// float (CUDA_R_32F), through cuBLASLt on
// the column-major transposes as gemm_rm explains (m = N, n = M; the row-major bias per column of C is the
// column-major bias per row of D, which is what CUBLASLT_EPILOGUE_BIAS adds).
// The cuBLAS data type of a 16-bit storage type, and of what lt_gemm_rm writes: T itself, or float.
template <typename T>
constexpr cudaDataType_t lt_data_type() {
  static_assert(kHalfPrecisionStorage<T>, "lt_gemm_rm multiplies bf16 or fp16 tensors");
  return std::is_same_v<T, bf16> ? CUDA_R_16BF : CUDA_R_16F;
}
template <typename T, typename C_t>
constexpr cudaDataType_t lt_output_type() {
  static_assert(std::is_same_v<C_t, T> || std::is_same_v<C_t, float>, "lt_gemm_rm writes T or float");
  return std::is_same_v<C_t, float> ? CUDA_R_32F : lt_data_type<T>();
}

// With a GELU epilogue (T output, beta 0): GeluAux writes C = GELU(op(A) op(B) [+ bias]) and aux = what GELU took;
// DGelu writes C = op(A) op(B) * GELU'(aux) (no bias); aux (M, N) row-major, leading dimension N. Returns false,
// having run nothing, where cuBLASLt refuses that epilogue for the shape (lt_plan warns once) or N is not a multiple
// of 8 (the aux matrix's leading dimension must be): the caller then composes the GEMM and the GELU op.
template <typename T, typename C_t>
bool lt_gemm_rm(const ExecContext& ctx, bool trans_a, bool trans_b, int M, int N, int K, const T* A, int lda,
                const T* B, int ldb, float beta, C_t* C, int ldc, const T* bias,
                LtEpilogue epilogue = LtEpilogue::Plain, const T* aux = nullptr) {
  const bool gelu = epilogue != LtEpilogue::Plain;
  if (gelu && (N % 8 != 0 || ldc != N || beta != 0.0f || !std::is_same_v<C_t, T>)) return false;
  if (M <= 0 || N <= 0) return true;
  const cudaStream_t stream = stream_of(ctx);
  const auto h = reinterpret_cast<cublasLtHandle_t>(cublas_handle(stream));
  const LtPlan* p = lt_plan(h, op_of(trans_b), op_of(trans_a), N, M, K, lt_data_type<T>(), B, ldb, A, lda, C,
                            lt_output_type<T, C_t>(), ldc, bias, epilogue, aux, gelu ? N : 0, gelu);
  if (!p) return false;
  if (bias) lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
  if (aux) lt_desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux));
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(h, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, C, p->c, &p->algo, lt_workspace(),
                              kLtWorkspaceBytes, stream));
  return true;
}

// ================================================================================================================
// Attention: the flash kernels (cuda_flash_attention.cuh, and on the tensor cores cuda_flash_attention_tc.cuh) and
// their launch helpers
// ================================================================================================================
using flash::kMaxHS;
using flash::kTile;
using flash::kWarps;
using flash::with_head_slots;
static_assert(flash_tc::kTcMaxHS == kMaxHS, "the tensor-core kernels cover head sizes within the CUDA-core kernels'");

// The flash grids (x = the B*NH heads, y = the tiles of 32 rows, cuda_flash_attention.cuh, or of 64 on the tensor
// cores: fewer) fit the launch limits.
void check_flash_grid(const char* op, int B, int T, int NH) {
  const int64_t heads = static_cast<int64_t>(B) * NH, tiles = (static_cast<int64_t>(T) + kTile - 1) / kTile;
  HPCT_CHECK(heads <= INT32_MAX && tiles <= 65535,
             "kernels::cuda::{}: B*NH={} heads and {} tiles of {} rows exceed the launch grid (2^31-1 x 65535)", op,
             heads, tiles, kTile);
}

// What the flash kernels cover, beyond the shape the dispatch checked (kernels/op_checks.hpp).
void check_attention(const char* op, int C, int NH) {
  HPCT_CHECK(C / NH <= kMaxHS, "kernels::cuda::{}: head size C/NH = {} exceeds the flash kernels' {} (C={}, NH={})", op,
             C / NH, kMaxHS, C, NH);
  HPCT_CHECK(static_cast<int64_t>(3) * C <= INT32_MAX, "kernels::cuda::{}: C={} too large", op, C);
}

// ExecContext::attention = Cudnn runs cuDNN's fused attention (cuda_attention_cudnn.cpp) on 16-bit storage; fp32
// storage has only the own kernels (kernels::effective_attention never asks for it). The size query's own check: the
// forward and backward refuse fp32 where they build the graph's key.
void check_cudnn_attention(const char* op, DType act) {
  HPCT_CHECK(act != DType::F32, "kernels::cuda::{}: cuDNN's fused attention takes bf16 or fp16 storage, not f32", op);
}

// The current device's dynamic shared memory per block with the opt-in attribute (227 KiB on sm_90): a host-side
// attribute query, as device_has_16bit_mma's.
int64_t device_shared_optin_bytes() {
  int dev = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return bytes;
}

// mma.sync m16n8k16 with bf16 / f16 inputs needs compute capability 8.0 (the kernels compiled for an older target trap,
// cuda_mma.cuh): asked of the current device at each op, a host-side attribute query (no synchronisation).
bool device_has_16bit_mma() {
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 8;
}

// The dispatch between the two flash implementations: the tensor-core kernels for a 16-bit storage type S (bf16, f16)
// with a head size that is a multiple of 16 up to 128 (flash_tc::tc_head_size), every tensor 16-byte aligned (they
// move 16-byte vectors), on an sm_80+ device; the CUDA-core kernels for float storage (unchanged, bit for bit) and
// everything else. Both keep L and D as float (B,NH,T) in the natural-log convention, so a forward of one and a
// backward of the other still pair up.
template <typename S>
bool attention_on_tensor_cores(int HS, std::initializer_list<const void*> ptrs) {
  if constexpr (sizeof(S) != 2) {
    return false;
  } else {
    return flash_tc::tc_head_size(HS) && flash_tc::tc_pointers_aligned(ptrs) && device_has_16bit_mma();
  }
}

// ================================================================================================================
// Cross-entropies: the kernels (cuda_gpt_kernels.cuh) launch one block per row
// ================================================================================================================

// Vr, the number of real (non-padded) local columns of a vocab-parallel slice (as the CPU).
int real_columns(int v0, int Vl, int V) {
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
//             dbias (OC) += sum_n dout                        bias_grad_partial_kernel, column_partials_kernel
//                                                             (double, fixed order, full grid)
// ================================================================================================================
template <typename A>
void matmul_forward(const ExecContext& ctx, A* out, const A* inp, const A* weight, const A* bias, int N, int C,
                    int OC) {
  if (N == 0) return;
  if constexpr (kHalfPrecisionStorage<A>) {
    // out (N,OC) = inp (N,C) @ weight^T + bias: the bias in the epilogue, in fp32 before the one rounding
    lt_gemm_rm(ctx, false, true, N, OC, C, inp, C, weight, C, 0.0f, out, OC, bias);
  } else {
    const cudaStream_t stream = stream_of(ctx);
    cublasHandle_t h = cublas_handle(stream);
    float beta = 0.0f;
    if (bias) {
      const int P = pack_width<float>(OC, {out, bias});
      with_pack<float>(P, [&](auto p) {
        HPCT_LAUNCH((bias_broadcast_kernel<float, decltype(p)::value>), bias_broadcast_shape(N, OC, P), stream, out,
                    bias, N, OC);
      });
      HPCT_CUDA_LAUNCH_CHECK("matmul_forward");
      beta = 1.0f;
    }
    gemm_rm(h, gemm_compute(ctx.precision), false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
  }
}

// The GELU epilogues (ctx.gelu_epilogue, 16-bit storage; kernels.hpp matmul_gelu_forward, matmul_dgelu_backward):
// true when one cuBLASLt call did the work, false (nothing run) where it cannot, and kernels.cpp composes the ops.
// cuBLASLt's GELU is its own (tanh form, fp32 on the accumulator): within bf16 rounding of gelu_forward's, and pre
// may differ from the BIAS epilogue's likewise.
// pre = inp @ weight^T + bias and out = GELU(pre) (GELU_AUX_BIAS):
template <typename A>
bool try_matmul_gelu_forward(const ExecContext& ctx, A* out, A* pre, const A* inp, const A* weight, const A* bias,
                             int N, int C, int OC) {
  if constexpr (kHalfPrecisionStorage<A>)
    return ctx.gelu_epilogue &&
           lt_gemm_rm(ctx, false, true, N, OC, C, inp, C, weight, C, 0.0f, out, OC, bias, LtEpilogue::GeluAux, pre);
  return false;
}
// dpre = GELU'(pre) * (dout @ weight) (DGELU, on the fp32 product: one rounding where the two ops round twice); the
// weight and bias gradients are the caller's matmul_backward either way:
template <typename A>
bool try_matmul_dgelu_backward(const ExecContext& ctx, A* dpre, const A* dout, const A* pre, const A* weight, int N,
                               int C, int OC) {
  if constexpr (kHalfPrecisionStorage<A>)
    return ctx.gelu_epilogue && lt_gemm_rm(ctx, false, false, N, C, OC, dout, OC, weight, C, 0.0f, dpre, C,
                                           static_cast<const A*>(nullptr), LtEpilogue::DGelu, pre);
  return false;
}

template <typename A>
void matmul_backward(const ExecContext& ctx, A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                     const A* weight, int N, int C, int OC) {
  using S = DeviceStorage<A>;
  if (N == 0) return;  // no rows: dinp is empty, the parameter gradients receive nothing
  const cudaStream_t stream = stream_of(ctx);
  if constexpr (kHalfPrecisionStorage<A>) {
    if (dinp)
      lt_gemm_rm(ctx, false, false, N, C, OC, dout, OC, weight, C, 0.0f, dinp, C, static_cast<const A*>(nullptr));
    lt_gemm_rm(ctx, true, false, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C, static_cast<const A*>(nullptr));
  } else {
    cublasHandle_t h = cublas_handle(stream);
    const cublasComputeType_t compute = gemm_compute(ctx.precision);
    if (dinp) gemm_rm(h, compute, false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
    gemm_rm(h, compute, true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias) {
    double* partials = reduce_partials("matmul_backward (dbias)", int64_t{OC} * static_cast<int64_t>(sizeof(double)));
    const int P = pack_width<S>(OC, {dout});
    const BiasGradLaunch launch = bias_grad_launch(N, OC, P, kCudaReducePartialsBytes);
    with_pack<S>(P, [&](auto p) {
      HPCT_LAUNCH((bias_grad_partial_kernel<S, decltype(p)::value>), launch.shape, stream, partials, dev_ptr(dout),
                  int64_t{N}, OC, launch.rows.rows_per_group);
    });
    HPCT_CUDA_LAUNCH_CHECK("matmul_backward");
    HPCT_LAUNCH(column_partials_kernel, column_partials_shape(OC, launch.rows.groups), stream, dbias,
                static_cast<float*>(nullptr), partials, launch.rows.groups, OC, OC);
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
// Two implementations of the same three steps (attention_on_tensor_cores chooses): for 16-bit storage (bf16, f16) with
// HS a multiple of 16 up to 128, aligned tensors and an sm_80+ device, the tensor-core kernels
// (cuda_flash_attention_tc.cuh: mma.sync m16n8k16, P and dS rounded to the storage type as mma inputs, everything else
// fp32; flash_tc::forward_tc_kernel, backward_dkv_tc_kernel, backward_dq_tc_kernel, with rowdot_kernel for D); for
// float storage and every other head size the CUDA-core kernels above (fp32 throughout).
// With ExecContext::attention = Cudnn (train.attention = cudnn; 16-bit storage) neither: cuDNN's fused attention with
// its deterministic backward (cuda_attention_cudnn.cpp), the same stats, the scratch its workspace.
// ================================================================================================================
// The two buffers are float whatever the storage type (L and D per row: kernels.hpp).
int64_t attention_stats_bytes(const ExecContext& /*ctx*/, int B, int T, int C, int NH, DType /*act*/) {
  check_attention("attention_stats_bytes", C, NH);
  return static_cast<int64_t>(B) * NH * T * static_cast<int64_t>(sizeof(float));
}
// Under ExecContext::attention = Cudnn the stats are the same log-sum-exp and the scratch is cuDNN's backward
// workspace, planned by a bound from the shape (kernels.hpp, cudnn_attention_scratch_bytes).
int64_t attention_scratch_bytes(const ExecContext& ctx, int B, int T, int C, int NH, DType act) {
  check_attention("attention_scratch_bytes", C, NH);
  if (ctx.attention == AttentionImpl::Cudnn) {
    check_cudnn_attention("attention_scratch_bytes", act);
    return cudnn_attention_scratch_bytes(B, T, NH, C / NH);
  }
  return static_cast<int64_t>(B) * NH * T * static_cast<int64_t>(sizeof(float));
}

template <typename A>
void attention_forward(const ExecContext& ctx, A* out, void* stats, const A* qkv, int B, int T, int C, int NH) {
  using S = DeviceStorage<A>;
  check_attention("attention_forward", C, NH);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  check_flash_grid("attention_forward", B, T, NH);
  const cudaStream_t stream = stream_of(ctx);
  float* lse = static_cast<float*>(stats);  // L (B,NH,T)
  if (ctx.attention == AttentionImpl::Cudnn) {
    cudnn_attention_forward(ctx, dtype_of<A>(), out, lse, qkv, B, T, C, NH, lt_workspace(),
                            static_cast<int64_t>(kLtWorkspaceBytes));
    return;
  }
  if (attention_on_tensor_cores<S>(HS, {out, qkv})) {
    if constexpr (sizeof(S) == 2) {
      const LaunchShape tc_shape = flash_tc::forward_shape(B, T, NH, HS);
      flash_tc::with_tc_head_size(HS, [&](auto head_size) {
        constexpr int kHS = decltype(head_size)::value;
        HPCT_LAUNCH((flash_tc::forward_tc_kernel<S, kHS>), tc_shape, stream, dev_ptr(out), lse, dev_ptr(qkv), T, C, NH,
                    scale);
        HPCT_CUDA_LAUNCH_CHECK("attention_forward (tensor cores)");
      });
    }
    return;
  }
  const LaunchShape shape = flash::forward_shape(B, T, NH, HS);
  const bool launched = with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    HPCT_LAUNCH((flash::forward_kernel<S, NS>), shape, stream, dev_ptr(out), lse, dev_ptr(qkv), T, C, NH, scale);
    HPCT_CUDA_LAUNCH_CHECK("attention_forward");
  });
  HPCT_CHECK(launched, "kernels::cuda::attention_forward: head size {} is not in [1, {}]", HS, kMaxHS);
}

template <typename A>
void attention_backward(const ExecContext& ctx, A* dqkv, void* scratch, const A* dout, const A* qkv, const A* out,
                        const void* stats, int B, int T, int C, int NH) {
  using S = DeviceStorage<A>;
  check_attention("attention_backward", C, NH);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  check_flash_grid("attention_backward", B, T, NH);
  const cudaStream_t stream = stream_of(ctx);
  float* dsum = static_cast<float*>(scratch);           // D (B,NH,T)
  const float* lse = static_cast<const float*>(stats);  // L (B,NH,T)
  if (ctx.attention == AttentionImpl::Cudnn) {
    cudnn_attention_backward(ctx, dtype_of<A>(), dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
    return;
  }
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
  const int64_t row_blocks = (rows + kWarps - 1) / kWarps;
  HPCT_CHECK(row_blocks <= INT32_MAX, "kernels::cuda::attention_backward: {} rows exceed the launch grid", rows);
  HPCT_LAUNCH(flash::rowdot_kernel<S>, flash::rowdot_shape(rows), stream, dsum, dev_ptr(dout), dev_ptr(out), rows, T, C,
              NH);
  HPCT_CUDA_LAUNCH_CHECK("attention_backward (D = rowsum(dout * out))");
  if (attention_on_tensor_cores<S>(HS, {dqkv, dout, qkv})) {
    if constexpr (sizeof(S) == 2) {
      const LaunchShape tc_dkv = flash_tc::backward_dkv_shape(B, T, NH, HS),
                        tc_dq = flash_tc::backward_dq_shape(B, T, NH, HS);
      flash_tc::with_tc_head_size(HS, [&](auto head_size) {
        constexpr int kHS = decltype(head_size)::value;
        HPCT_LAUNCH((flash_tc::backward_dkv_tc_kernel<S, kHS>), tc_dkv, stream, dev_ptr(dqkv), dev_ptr(dout),
                    dev_ptr(qkv), lse, dsum, T, C, NH, scale);
        HPCT_CUDA_LAUNCH_CHECK("attention_backward (dk, dv; tensor cores)");
        HPCT_LAUNCH((flash_tc::backward_dq_tc_kernel<S, kHS>), tc_dq, stream, dev_ptr(dqkv), dev_ptr(dout),
                    dev_ptr(qkv), lse, dsum, T, C, NH, scale);
        HPCT_CUDA_LAUNCH_CHECK("attention_backward (dq; tensor cores)");
      });
    }
    return;
  }
  const LaunchShape dkv = flash::backward_dkv_shape(B, T, NH, HS), dq = flash::backward_dq_shape(B, T, NH, HS);
  const bool launched = with_head_slots(HS, [&](auto slots) {
    constexpr int NS = decltype(slots)::value;
    HPCT_LAUNCH((flash::backward_dkv_kernel<S, NS>), dkv, stream, dev_ptr(dqkv), dev_ptr(dout), dev_ptr(qkv), lse, dsum,
                T, C, NH, scale);
    HPCT_CUDA_LAUNCH_CHECK("attention_backward (dk, dv)");
    HPCT_LAUNCH((flash::backward_dq_kernel<S, NS>), dq, stream, dev_ptr(dqkv), dev_ptr(dout), dev_ptr(qkv), lse, dsum,
                T, C, NH, scale);
    HPCT_CUDA_LAUNCH_CHECK("attention_backward (dq)");
  });
  HPCT_CHECK(launched, "kernels::cuda::attention_backward: head size {} is not in [1, {}]", HS, kMaxHS);
}

// ================================================================================================================
// Cross-entropies
// ================================================================================================================
template <typename A>
void crossentropy_forward(const ExecContext& ctx, float* losses, const A* logits, const int32_t* targets, int N, int V,
                          int Vp) {
  using S = DeviceStorage<A>;
  if (N == 0) return;
  with_row_pack<S>(row_pack<S>(Vp, {logits}), [&](auto pack) {
    constexpr int P = decltype(pack)::value;
    HPCT_LAUNCH((crossentropy_kernel<false, S, P>), row_shape(N, V, P), stream_of(ctx), losses, dev_ptr(logits),
                targets, 0.0f, V, Vp);
    HPCT_CUDA_LAUNCH_CHECK("crossentropy_forward");
  });
}

template <typename A>
void crossentropy_forward_backward(const ExecContext& ctx, float* losses, A* logits, const int32_t* targets,
                                   float dloss, int N, int V, int Vp) {
  using S = DeviceStorage<A>;
  if (N == 0) return;
  with_row_pack<S>(row_pack<S>(Vp, {logits}), [&](auto pack) {
    constexpr int P = decltype(pack)::value;
    if (crossentropy_holds_row(Vp, sizeof(S), device_shared_optin_bytes()))  // the row read once, held in shared
      HPCT_LAUNCH((crossentropy_kernel<true, S, P, true>), crossentropy_held_shape(N, V, Vp, P, sizeof(S)),
                  stream_of(ctx), losses, dev_ptr(logits), targets, dloss, V, Vp);
    else
      HPCT_LAUNCH((crossentropy_kernel<true, S, P>), row_shape(N, V, P), stream_of(ctx), losses, dev_ptr(logits),
                  targets, dloss, V, Vp);
    HPCT_CUDA_LAUNCH_CHECK("crossentropy_forward_backward");
  });
}

template <typename A>
void crossentropy_smoothed_forward(const ExecContext& ctx, float* losses, const A* logits, const int32_t* targets,
                                   float eps, int N, int K) {
  using S = DeviceStorage<A>;
  if (N == 0) return;
  HPCT_LAUNCH((crossentropy_smoothed_kernel<false, S>), row_shape(N, K), stream_of(ctx), losses, dev_ptr(logits),
              targets, 0.0f, eps, K);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_smoothed_forward");
}

template <typename A>
void crossentropy_smoothed_forward_backward(const ExecContext& ctx, float* losses, A* logits, const int32_t* targets,
                                            float dloss, float eps, int N, int K) {
  using S = DeviceStorage<A>;
  if (N == 0) return;
  HPCT_LAUNCH((crossentropy_smoothed_kernel<true, S>), row_shape(N, K), stream_of(ctx), losses, dev_ptr(logits),
              targets, dloss, eps, K);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_smoothed_forward_backward");
}

template <typename A>
void crossentropy_vp_local_max(const ExecContext& ctx, float* max_out, const A* logits_local, int v0, int Vl, int V,
                               int N) {
  using S = DeviceStorage<A>;
  const int Vr = real_columns(v0, Vl, V);
  if (N == 0) return;
  HPCT_LAUNCH(vp_local_max_kernel<S>, row_shape(N, Vr), stream_of(ctx), max_out, dev_ptr(logits_local), Vl, Vr);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_local_max");
}

template <typename A>
void crossentropy_vp_local_sumexp(const ExecContext& ctx, float* sumexp_out, float* target_logit_out,
                                  const A* logits_local, const float* global_max, const int32_t* targets, int v0,
                                  int Vl, int V, int N) {
  using S = DeviceStorage<A>;
  const int Vr = real_columns(v0, Vl, V);
  if (N == 0) return;
  HPCT_LAUNCH(vp_local_sumexp_kernel<S>, row_shape(N, Vr), stream_of(ctx), sumexp_out, target_logit_out,
              dev_ptr(logits_local), global_max, targets, v0, Vl, Vr, V);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_local_sumexp");
}

template <typename A>
void crossentropy_vp_loss_backward(const ExecContext& ctx, float* losses, A* logits_local, const float* global_max,
                                   const float* global_sumexp, const float* global_target_logit, const int32_t* targets,
                                   float dloss, int v0, int Vl, int V, int N) {
  using S = DeviceStorage<A>;
  const int Vr = real_columns(v0, Vl, V);
  if (N == 0) return;
  HPCT_LAUNCH(vp_loss_backward_kernel<S>, row_shape(N, Vl), stream_of(ctx), losses, dev_ptr(logits_local), global_max,
              global_sumexp, global_target_logit, targets, dloss, v0, Vl, Vr, V);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_loss_backward");
}

void crossentropy_vp_loss(const ExecContext& ctx, float* losses, const float* global_max, const float* global_sumexp,
                          const float* global_target_logit, int N) {
  if (N == 0) return;
  HPCT_LAUNCH(vp_loss_kernel, vp_loss_shape(N), stream_of(ctx), losses, global_max, global_sumexp, global_target_logit,
              N);
  HPCT_CUDA_LAUNCH_CHECK("crossentropy_vp_loss");
}

// ---- the three storage types of the templated ops (kernels.hpp) ---------------------------------------------------
#define HPCT_INSTANTIATE_GPT(A)                                                                                      \
  template void matmul_forward<A>(const ExecContext&, A*, const A*, const A*, const A*, int, int, int);              \
  template void matmul_backward<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const A*, int, int,   \
                                   int);                                                                             \
  template bool try_matmul_gelu_forward<A>(const ExecContext&, A*, A*, const A*, const A*, const A*, int, int, int); \
  template bool try_matmul_dgelu_backward<A>(const ExecContext&, A*, const A*, const A*, const A*, int, int, int);   \
  template void attention_forward<A>(const ExecContext&, A*, void*, const A*, int, int, int, int);                   \
  template void attention_backward<A>(const ExecContext&, A*, void*, const A*, const A*, const A*, const void*, int, \
                                      int, int, int);                                                                \
  template void crossentropy_forward<A>(const ExecContext&, float*, const A*, const int32_t*, int, int, int);        \
  template void crossentropy_forward_backward<A>(const ExecContext&, float*, A*, const int32_t*, float, int, int,    \
                                                 int);                                                               \
  template void crossentropy_smoothed_forward<A>(const ExecContext&, float*, const A*, const int32_t*, float, int,   \
                                                 int);                                                               \
  template void crossentropy_smoothed_forward_backward<A>(const ExecContext&, float*, A*, const int32_t*, float,     \
                                                          float, int, int);                                          \
  template void crossentropy_vp_local_max<A>(const ExecContext&, float*, const A*, int, int, int, int);              \
  template void crossentropy_vp_local_sumexp<A>(const ExecContext&, float*, float*, const A*, const float*,          \
                                                const int32_t*, int, int, int, int);                                 \
  template void crossentropy_vp_loss_backward<A>(const ExecContext&, float*, A*, const float*, const float*,         \
                                                 const float*, const int32_t*, float, int, int, int, int);
HPCT_INSTANTIATE_GPT(float)
HPCT_INSTANTIATE_GPT(bf16)
HPCT_INSTANTIATE_GPT(fp16)
#undef HPCT_INSTANTIATE_GPT

}  // namespace hpct::kernels::cuda
