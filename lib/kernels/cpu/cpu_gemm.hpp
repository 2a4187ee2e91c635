#pragma once
// Row-major sgemm for the CPU backend: C (M,N) = alpha op(A) op(B) + beta C, op(A) (M,K), op(B) (K,N).
//
// Why not a plain cblas_sgemm: on the GPT step's shapes (2048 rows, 256..1024 columns, K 256..2048) on 2 cores,
// splitting C into one contiguous slab per OpenMP thread, each computed by a single-threaded OpenBLAS call,
// takes 270-290 ms for the 51 GEMMs of a step where OpenBLAS's own threading takes 280-320 ms
// (validation/results/bench_gemm_cpu.md). Inside an active `omp parallel` region OpenBLAS (OpenMP build) sees
// omp_in_parallel() and runs single-threaded, so the threads are not oversubscribed (verified: a 1024^3 call from
// one thread of a 2-thread region takes the single-thread 27-31 ms, not the 2-thread 17 ms).
// Never call OpenBLAS from an *inactive* region (`omp parallel if(false)`, a team of 1): there it believes it may
// thread, and its nested team spin-waits (measured: 4 ms instead of 0.03 ms for a 128x192x64 product, and a
// tiny GPT step 12x slower). Hence the plain call, outside any region, for small products.
// The slab is taken along the longer of M and N. Small products stay a single call.
#include <cblas.h>
#include <omp.h>

#include <cstdint>

namespace hpct::kernels::cpu {

// The slab [lo, hi) of [0, extent) that thread id of nt owns; boundaries are multiples of 16 (whole micro-kernel
// tiles), the last slab takes the remainder.
inline void gemm_slab(int extent, int id, int nt, int64_t& lo, int64_t& hi) {
  lo = (static_cast<int64_t>(extent) * id / nt) / 16 * 16;
  hi = id == nt - 1 ? extent : (static_cast<int64_t>(extent) * (id + 1) / nt) / 16 * 16;
}

// Whether a product is worth a parallel region of our own (< ~50 us of work is not).
inline bool gemm_worth_splitting(int M, int N, int K) { return 2.0 * M * N * K >= 4e6; }

inline void sgemm_rowmajor(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || !gemm_worth_splitting(M, N, K)) {  // one call (OpenBLAS decides its own threading)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_rows = M >= N;
  const int extent = split_rows ? M : N;
#pragma omp parallel num_threads(threads)
  {
    int64_t lo, hi;
    gemm_slab(extent, omp_get_thread_num(), omp_get_num_threads(), lo, hi);
    if (hi > lo) {
      if (split_rows) {
        // rows [lo, hi) of C: rows of op(A), i.e. rows of A, or columns of A when transposed
        const float* a = trans_a ? A + lo : A + lo * lda;
        cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(hi - lo), N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc,
                    ldc);
      } else {
        // columns [lo, hi) of C: columns of op(B), i.e. columns of B, or rows of B when transposed
        const float* b = trans_b ? B + lo * ldb : B + lo;
        cblas_sgemm(CblasRowMajor, ta, tb, M, static_cast<int>(hi - lo), K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
      }
    }
  }
}

}  // namespace hpct::kernels::cpu
