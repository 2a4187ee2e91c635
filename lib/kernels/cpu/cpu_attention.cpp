// CPU backend: causal multi-head self-attention with GEMMs per (batch, head).
// Legend: B batch, T time, C channels, NH heads, HS = C/NH head size; qkv rows hold [q | k | v], each (NH, HS).
// kernels.hpp's `stats` is att here, the softmax probabilities (B,NH,T,T); its `scratch` is datt (B,NH,T,T).
//
// One task per (b, h), an `omp parallel for` over the B*NH tasks; inside it cblas_sgemm runs single-threaded
// (OpenBLAS's OpenMP build checks omp_in_parallel()), so the threads are used once, without oversubscription.
// q, k, v are read in place through the GEMM leading dimension (row stride 3C): no packing copy.
//
// Causality is exploited by blocks of kBlock query rows: the row block [r0, r1) only needs the keys [0, r1),
// so the GEMMs do ~(1/2 + kBlock/2T) of the T x T work (62% at T = 256) instead of all of it.
//   forward   preatt[r0:r1, 0:r1] = scale q[r0:r1] k[0:r1]^T          (T x T x HS, by row blocks)
//             att = softmax over the causal prefix, 0 above the diagonal (kept for backward)
//             out[r0:r1] = att[r0:r1, 0:r1] v[0:r1]
//   backward  datt[r0:r1, 0:r1] = dout[r0:r1] v[0:r1]^T
//             dpreatt = scale att (datt - rowsum(att datt))           (in place in datt; 0 above the diagonal)
//             dq[r0:r1] = dpreatt[r0:r1, 0:r1] k[0:r1]
//             dv[c0:c1] = att[c0:T, c0:c1]^T dout[c0:T]              (rows t < c0 are 0 in those columns)
//             dk[c0:c1] = dpreatt[c0:T, c0:c1]^T q[c0:T]
// Every element of dqkv is written once with beta = 0 (activation gradient: assigned).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_math.hpp"

namespace hpct::kernels::cpu {
namespace {

// Query rows (and key columns) per causal block. 64 keeps the per-call GEMMs (64 x r1 x HS) efficient in
// OpenBLAS while skipping 3/8 of the work at T = 256; measured against 32 and 128 on the GPT shape.
constexpr int kBlock = 64;

void check_shape(const char* op, int B, int T, int C, int NH) {
  HPCT_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "{}: bad shape B={} T={} C={} NH={}", op, B, T, C, NH);
  HPCT_CHECK(C % NH == 0, "{}: C={} is not a multiple of NH={}", op, C, NH);
}

}  // namespace

// The probabilities and their gradient, T x T per (batch, head): kernels.hpp's stats and scratch of this backend.
int64_t attention_stats_floats(int B, int T, int C, int NH) {
  check_shape("attention_stats_floats", B, T, C, NH);
  return static_cast<int64_t>(B) * NH * T * T;
}
int64_t attention_scratch_floats(int B, int T, int C, int NH) {
  check_shape("attention_scratch_floats", B, T, C, NH);
  return static_cast<int64_t>(B) * NH * T * T;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  check_shape("attention_forward", B, T, C, NH);
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const float* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;  // (T, HS), row stride 3C
    const float* k = q + C;                                            // (T, HS), row stride 3C
    const float* v = q + 2 * C;                                        // (T, HS), row stride 3C
    float* a = att + static_cast<int64_t>(bh) * T * T;                 // (T, T)
    float* o = out + static_cast<int64_t>(b) * T * C + h * HS;         // (T, HS), row stride C
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), rows = r1 - r0;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, HS, scale, q + static_cast<int64_t>(r0) * C3, C3,
                  k, C3, 0.0f, a + static_cast<int64_t>(r0) * T, T);
      // causal softmax of each row over its prefix [0, t]; zero the rest of the row
      for (int t = r0; t < r1; t++) {
        float* row = a + static_cast<int64_t>(t) * T;
        float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
        for (int j = 0; j <= t; j++) m = row[j] > m ? row[j] : m;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j <= t; j++) {
          row[j] = exp_simd(row[j] - m);
          s += row[j];
        }
        const float inv = 1.0f / s;
#pragma omp simd
        for (int j = 0; j <= t; j++) row[j] *= inv;
        std::fill(row + t + 1, row + T, 0.0f);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, r1, 1.0f, a + static_cast<int64_t>(r0) * T, T, v,
                  C3, 0.0f, o + static_cast<int64_t>(r0) * C, C);
    }
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* /*out*/,
                        const float* att, int B, int T, int C, int NH) {
  check_shape("attention_backward", B, T, C, NH);
  const int HS = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const int64_t qkv_off = static_cast<int64_t>(b) * T * C3 + h * HS;
    const float* q = qkv + qkv_off;  // (T, HS), row stride 3C
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + qkv_off;  // (T, HS), row stride 3C
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* a = att + static_cast<int64_t>(bh) * T * T;             // (T, T)
    float* da = datt + static_cast<int64_t>(bh) * T * T;                 // (T, T) scratch, ends as dpreatt
    const float* d_o = dout + static_cast<int64_t>(b) * T * C + h * HS;  // (T, HS), row stride C

    // by query row blocks: datt, softmax backward, dq
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), rows = r1 - r0;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, HS, 1.0f, d_o + static_cast<int64_t>(r0) * C, C, v,
                  C3, 0.0f, da + static_cast<int64_t>(r0) * T, T);
      for (int t = r0; t < r1; t++) {
        const float* arow = a + static_cast<int64_t>(t) * T;
        float* drow = da + static_cast<int64_t>(t) * T;
        // att is exactly 0 above the diagonal, so running over [0, r1) instead of [0, t] changes no sum and
        // writes the zeros of dpreatt above the diagonal that the dk GEMM below reads
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < r1; j++) s += arow[j] * drow[j];
#pragma omp simd
        for (int j = 0; j < r1; j++) drow[j] = scale * arow[j] * (drow[j] - s);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, r1, 1.0f, da + static_cast<int64_t>(r0) * T, T,
                  k, C3, 0.0f, dq + static_cast<int64_t>(r0) * C3, C3);
    }
    // by key column blocks: dv and dk see only the query rows t >= c0 (the same block grid, so every
    // dpreatt[t, c0:c1) read here was written by the row-block loop above)
    for (int c0 = 0; c0 < T; c0 += kBlock) {
      const int c1 = std::min(T, c0 + kBlock), cols = c1 - c0;
      const int64_t diag = static_cast<int64_t>(c0) * T + c0;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, T - c0, 1.0f, a + diag, T,
                  d_o + static_cast<int64_t>(c0) * C, C, 0.0f, dv + static_cast<int64_t>(c0) * C3, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, T - c0, 1.0f, da + diag, T,
                  q + static_cast<int64_t>(c0) * C3, C3, 0.0f, dk + static_cast<int64_t>(c0) * C3, C3);
    }
  }
}

}  // namespace hpct::kernels::cpu
