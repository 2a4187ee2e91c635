// CPU backend: Linear layer (torch.nn.Linear layout). Legend: N rows (B*T), C input, OC output channels.
//   forward   out (N,OC) = inp (N,C) @ weight^T (C,OC) + bias
//   backward  dinp (N,C) = dout (N,OC) @ weight (OC,C)         (assigned)
//             dweight (OC,C) += dout^T (OC,N) @ inp (N,C)       (accumulated: beta = 1)
//             dbias (OC) += sum_n dout (N,OC)                   (accumulated)
// GEMMs through sgemm_rowmajor (cpu_gemm.hpp): one slab of rows per OpenMP thread, single-threaded OpenBLAS.
#include <algorithm>

#include "kernels/cpu/cpu_gemm.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace hpct::kernels::cpu {
namespace {
constexpr int kColBlock = 64;  // columns of dbias per task: a fixed summation order over the N rows
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
  if (!bias) {
    sgemm_rowmajor(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
    return;
  }
  if (omp_in_parallel() || !gemm_worth_splitting(N, OC, C)) {
    // one call, and no parallel region around it: OpenBLAS called from an inactive (1-thread) region believes it
    // may thread, and its nested team then spin-waits (measured: 4 ms instead of 0.03 ms for 128x64x192)
    for (int64_t n = 0; n < N; n++) std::copy(bias, bias + OC, out + n * OC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
    return;
  }
  // each thread seeds its own rows of out with the bias and accumulates its GEMM slab onto them (beta = 1)
  // while those rows are still in its cache: one write pass, no read-modify-write pass after the GEMM
#pragma omp parallel
  {
    int64_t lo, hi;
    gemm_slab(N, omp_get_thread_num(), omp_get_num_threads(), lo, hi);
    if (hi > lo) {
      for (int64_t n = lo; n < hi; n++) std::copy(bias, bias + OC, out + n * OC);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(hi - lo), OC, C, 1.0f, inp + lo * C, C,
                  weight, C, 1.0f, out + lo * OC, OC);
    }
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  if (dinp) sgemm_rowmajor(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
  sgemm_rowmajor(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) {
    const int nblocks = (OC + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int o0 = blk * kColBlock, w = std::min(OC - o0, kColBlock);
      double acc[kColBlock] = {};  // double over the N rows, as the other parameter-gradient sums
      for (int n = 0; n < N; n++) {
        const float* d = dout + static_cast<int64_t>(n) * OC + o0;
#pragma omp simd
        for (int o = 0; o < w; o++) acc[o] += d[o];
      }
      for (int o = 0; o < w; o++) dbias[o0 + o] += static_cast<float>(acc[o]);
    }
  }
}

}  // namespace hpct::kernels::cpu
