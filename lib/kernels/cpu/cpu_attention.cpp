// CPU backend: causal multi-head self-attention, flash style (the T x T matrices are never stored).
// Legend: B batch, T time, C channels, NH heads, HS = C/NH head size; qkv rows hold [q | k | v], each (NH, HS).
// kernels.hpp's `stats` is L (B,NH,T) float, the log-sum-exp of each row's scaled scores; its `scratch` is
// D (B,NH,T) float = rowsum(dout * out). The same two buffers as the CUDA flash kernels (cuda_flash_attention.cuh),
// with the same meaning, so that a model plans the same attention memory on both backends.
//
// One task per (b, h), an `omp parallel for` over the B*NH tasks; inside it cblas_sgemm runs single-threaded
// (OpenBLAS's OpenMP build checks omp_in_parallel()), so the threads are used once, without oversubscription. A task
// walks its head in tiles of query rows x keys (64 x 256 forward, 64 x 64 backward); the tiles of scores S and of dP
// live in per-thread buffers (L2-resident: 64 KiB forward, 2 x 16 KiB backward), so no pass over memory is T x T.
//   forward, per query tile [r0, r1), key tiles c0 = 0, kFwdCols, .. below r1 (tiles above the diagonal are skipped,
//   the last one is cut at r1):
//     S = scale q[r0:r1] k[c0:c1]^T                                     (cblas_sgemm, alpha = scale)
//     online softmax per row t: m' = max(m, max_j S[t, j]), p = exp(S - m') for the keys j <= t (0 beyond),
//       l = l exp(m - m') + sum p, o = o exp(m - m')
//     o += p v[c0:c1]                                                   (cblas_sgemm, beta = 1)
//   then out = o / l and L = m + log l.
//   backward, per key tile [c0, c1), query tiles from the one holding row c0 to T (all rows t < c0 are masked):
//     D = rowsum(dout * out) per row, first, for the whole head
//     P = exp(scale q k^T - L)  (0 above the diagonal),  dP = dout v^T
//     dV[c0:c1] += P^T dout,  dS = P (dP - D),  dK[c0:c1] += scale dS^T q,  dQ[r0:r1] += scale dS k
//   dV and dK of a key tile are complete after its query tiles; dQ of a query tile accumulates over the key tiles in
//   ascending order, starting (beta = 0) with key tile 0, which every row sees. Every element of dqkv is assigned
//   (activation gradient), and every sum runs in an order fixed by the shapes alone: bitwise reproducible, whatever
//   the number of threads.
// Recomputing S in backward costs one more T x T x HS product than keeping the probabilities (five instead of four in
// backward), against the 2 T x T x (4 + sizeof A) bytes per head the probabilities and their gradient took in memory:
// validation/results/bench_attention_cpu.md has the timings against the previous kernel, which kept them.
//
// fp32 storage (A = float): q, k, v, dout are read in place through the GEMM leading dimension (row stride 3C or C),
// out and dqkv written in place: no copies.
// bf16 storage (A = bf16): the head's q, k, v (and out, dout in backward) are widened into per-thread fp32 buffers
// (O(T HS) floats, grown on first use and kept) and the fp32 algorithm above runs on them, with the roundings of the
// CUDA flash kernels (cuda_flash_attention_tc.cuh), which a bf16 GEMM engine makes too:
//   - the probabilities P are rounded to bf16 before they multiply v (forward) and dout (dV); the row sum l is summed
//     from the unrounded p;
//   - dS = P (dP - D), from the unrounded P, is rounded to bf16 before it multiplies k (dQ) and q (dK); the softmax
//     scale is applied to the fp32 products (GEMM alpha), as the CUDA kernels apply it when they store dQ and dK;
//   - the scores, m, l, L, D, dP and every accumulation are fp32; out and dqkv are rounded once when stored.
// bf16 attention does not go through oneDNN's bf16 matmul (the Linear layers do where the CPU has bf16 instructions):
// its products are small tiles fused with the softmax, for which the fp32 GEMMs on widened operands are used everywhere.
//
// The row loops (softmax, dS) are HPCT_WIDE_SIMD: their sums (l, D) take the 512-bit lanes' order where the CPU has
// AVX-512, the same order on every call of a given build and machine.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_math.hpp"

namespace hpct::kernels::cpu {
namespace {

// Tiles of query rows x keys, measured on the GPT-2 shape (T = 1024, HS = 64, one thread; 32 .. 256 on either side,
// validation/results/bench_attention_cpu.md). Forward: 64 x 256. Wide key tiles mean fewer, larger products and fewer
// online-softmax rescalings; 64 query rows keep the work wasted on the diagonal (key tiles are cut at the query tile's
// last row, and masked within it) small. Backward: 64 x 64, where wider tiles measured no faster (each pair of tiles
// has five products and two tiles to keep in cache).
constexpr int kFwdRows = 64, kFwdCols = 256;
constexpr int kBwdRows = 64, kBwdCols = 64;

void check_act(DType act) {
  HPCT_CHECK(act == DType::F32 || act == DType::BF16, "attention buffers: activations must be F32 or BF16");
}

// Per-thread fp32 buffers, grown on first use and kept: the steady step allocates nothing (DESIGN invariant 7).
// Tiles: at most kFwdRows (kFwdCols + HS + 2) floats; bf16 storage adds the widened head, at most 8 T HS floats.
float* thread_buffer(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// x (T, HS) with row stride ld -> dst (T, HS) contiguous, fp32
HPCT_WIDE_SIMD void widen_rows(float* dst, const bf16* x, int T, int HS, int64_t ld) {
  for (int t = 0; t < T; t++) {
    const bf16* row = x + t * ld;
    float* d = dst + static_cast<int64_t>(t) * HS;
#pragma omp simd
    for (int j = 0; j < HS; j++) d[j] = to_f32(row[j]);
  }
}
// src (T, HS) contiguous fp32 -> x (T, HS) with row stride ld, rounded once
HPCT_WIDE_SIMD void narrow_rows(bf16* x, const float* src, int T, int HS, int64_t ld) {
  for (int t = 0; t < T; t++) {
    bf16* row = x + t * ld;
    const float* s = src + static_cast<int64_t>(t) * HS;
#pragma omp simd
    for (int j = 0; j < HS; j++) row[j] = to_bf16(s[j]);
  }
}

// Keys of the tile starting at c0 (cols of them) that query t sees: j <= t, i.e. the first clamp(t - c0 + 1) ones.
inline int visible_keys(int t, int c0, int cols) { return std::clamp(t - c0 + 1, 0, cols); }

// One head, viewed in fp32: every operand (T, HS) with its row stride.
struct Head {
  const float *q, *k, *v;
  int64_t ldq;  // q, k, v
  int T, HS;
  float scale;
  bool round;  // bf16 storage: round P and dS to bf16 values before their products (file header)
};

// Online softmax step of one score row s (cols of them, the first n visible): s becomes p = exp(s - m') (rounded to a
// bf16 value if asked, 0 for the masked keys); m, l updated; returns the factor exp(m - m') for the row's output.
HPCT_WIDE_SIMD float softmax_step(float* s, int n, int cols, float& m, float& l, bool round) {
  if (n == 0) {  // no visible key in this tile: nothing changes
    std::fill(s, s + cols, 0.0f);
    return 1.0f;
  }
  float mx = m;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  const float corr = m == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m - mx);
  float sum = 0.0f;
  if (round) {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
      const float p = exp_simd(s[j] - mx);
      sum += p;
      s[j] = round_to<bf16>(p);
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
      s[j] = exp_simd(s[j] - mx);
      sum += s[j];
    }
  }
  std::fill(s + n, s + cols, 0.0f);
  l = l * corr + sum;
  m = mx;
  return corr;
}

// Forward of one head: o (T, HS) with row stride ldo, L (T).
HPCT_WIDE_SIMD void head_forward(float* o, int64_t ldo, float* L, const Head& h) {
  const int T = h.T, HS = h.HS;
  const int ldq = static_cast<int>(h.ldq);
  float* s = thread_buffer(int64_t{kFwdRows} * kFwdCols + int64_t{kFwdRows} * HS +
                           2 * kFwdRows);  // S / P (kFwdRows, kFwdCols)
  float* acc = s + kFwdRows * kFwdCols;    // o (kFwdRows, HS)
  float* m = acc + kFwdRows * HS;          // (kFwdRows)
  float* l = m + kFwdRows;                 // (kFwdRows)
  for (int r0 = 0; r0 < T; r0 += kFwdRows) {
    const int r1 = std::min(T, r0 + kFwdRows), rows = r1 - r0;
    std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
    std::fill(l, l + rows, 0.0f);
    for (int c0 = 0; c0 < r1; c0 += kFwdCols) {
      const int cols = std::min(kFwdCols, r1 - c0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, HS, h.scale, h.q + r0 * h.ldq, ldq,
                  h.k + c0 * h.ldq, ldq, 0.0f, s, kFwdCols);
      for (int i = 0; i < rows; i++) {
        const float corr = softmax_step(s + i * kFwdCols, visible_keys(r0 + i, c0, cols), cols, m[i], l[i], h.round);
        if (c0 > 0 && corr != 1.0f) {
          float* a = acc + i * HS;
#pragma omp simd
          for (int d = 0; d < HS; d++) a[d] *= corr;
        }
      }
      // the first key tile assigns o (beta = 0): every row sees key 0
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, cols, 1.0f, s, kFwdCols, h.v + c0 * h.ldq, ldq,
                  c0 == 0 ? 0.0f : 1.0f, acc, HS);
    }
    for (int i = 0; i < rows; i++) {
      const float inv = 1.0f / l[i];
      const float* a = acc + i * HS;
      float* orow = o + (r0 + i) * ldo;
#pragma omp simd
      for (int d = 0; d < HS; d++) orow[d] = a[d] * inv;
      L[r0 + i] = m[i] + std::log(l[i]);
    }
  }
}

// Backward of one head: dq, dk, dv (T, HS) with row stride lddq, assigned; d_o and o (T, HS) with row stride ldo;
// L (T) from the forward; D (T) receives rowsum(dout * out).
HPCT_WIDE_SIMD void head_backward(float* dq, float* dk, float* dv, int64_t lddq, float* D, const float* d_o,
                                  const float* o, int64_t ldo, const float* L, const Head& h) {
  const int T = h.T, HS = h.HS;
  const int ldq = static_cast<int>(h.ldq), ldd = static_cast<int>(lddq), ldout = static_cast<int>(ldo);
  for (int t = 0; t < T; t++) {
    const float *a = d_o + t * ldo, *b = o + t * ldo;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int d = 0; d < HS; d++) sum += a[d] * b[d];
    D[t] = sum;
  }
  float* s = thread_buffer(2 * int64_t{kBwdRows} * kBwdCols);  // S then P (kBwdRows, kBwdCols)
  float* dp = s + kBwdRows * kBwdCols;                         // dP then dS (kBwdRows, kBwdCols)
  for (int c0 = 0; c0 < T; c0 += kBwdCols) {
    const int c1 = std::min(T, c0 + kBwdCols), cols = c1 - c0;
    for (int r0 = c0 / kBwdRows * kBwdRows; r0 < T; r0 += kBwdRows) {
      const int rows = std::min(kBwdRows, T - r0);
      const bool first = r0 == c0 / kBwdRows * kBwdRows;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, HS, h.scale, h.q + r0 * h.ldq, ldq,
                  h.k + c0 * h.ldq, ldq, 0.0f, s, kBwdCols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, HS, 1.0f, d_o + r0 * ldo, ldout,
                  h.v + c0 * h.ldq, ldq, 0.0f, dp, kBwdCols);
      for (int i = 0; i < rows; i++) {
        const int n = visible_keys(r0 + i, c0, cols);
        float *srow = s + i * kBwdCols, *drow = dp + i * kBwdCols;
        const float Lt = L[r0 + i], Dt = D[r0 + i];
        if (h.round) {
#pragma omp simd
          for (int j = 0; j < n; j++) {
            const float p = exp_simd(srow[j] - Lt);
            drow[j] = round_to<bf16>(p * (drow[j] - Dt));
            srow[j] = round_to<bf16>(p);
          }
        } else {
#pragma omp simd
          for (int j = 0; j < n; j++) {
            const float p = exp_simd(srow[j] - Lt);
            drow[j] = p * (drow[j] - Dt);
            srow[j] = p;
          }
        }
        std::fill(srow + n, srow + cols, 0.0f);
        std::fill(drow + n, drow + cols, 0.0f);
      }
      const float beta = first ? 0.0f : 1.0f;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, rows, 1.0f, s, kBwdCols, d_o + r0 * ldo, ldout,
                  beta, dv + c0 * lddq, ldd);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, rows, h.scale, dp, kBwdCols, h.q + r0 * h.ldq, ldq,
                  beta, dk + c0 * lddq, ldd);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, cols, h.scale, dp, kBwdCols, h.k + c0 * h.ldq,
                  ldq, c0 == 0 ? 0.0f : 1.0f, dq + r0 * lddq, ldd);
    }
  }
}

}  // namespace

// L and D, one float per (batch, head, row): kernels.hpp's stats and scratch. The tiles are buffers of this file.
int64_t attention_stats_bytes(int B, int T, int /*C*/, int NH, DType act) {
  check_act(act);
  return static_cast<int64_t>(B) * NH * T * 4;
}
int64_t attention_scratch_bytes(int B, int T, int /*C*/, int NH, DType act) {
  check_act(act);
  return static_cast<int64_t>(B) * NH * T * 4;
}

template <typename A>
void attention_forward(A* out, void* stats, const A* qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int64_t C3 = 3 * int64_t{C};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  float* lse = static_cast<float*>(stats);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const A* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;  // (T, HS), row stride 3C; k, v at + C, + 2C
    A* o = out + static_cast<int64_t>(b) * T * C + h * HS;         // (T, HS), row stride C
    float* L = lse + static_cast<int64_t>(bh) * T;                 // (T)
    if constexpr (std::is_same_v<A, float>) {
      head_forward(o, C, L, Head{q, q + C, q + 2 * C, C3, T, HS, scale, false});
    } else {
      // [q | k | v | o] (T, HS) each, after the tiles of head_forward in the same thread buffer
      const int64_t ths = static_cast<int64_t>(T) * HS,
                    tiles = int64_t{kFwdRows} * kFwdCols + int64_t{kFwdRows} * HS + 2 * kFwdRows;
      float* qf = thread_buffer(tiles + 4 * ths) + tiles;
      float *kf = qf + ths, *vf = kf + ths, *of = vf + ths;
      widen_rows(qf, q, T, HS, C3);
      widen_rows(kf, q + C, T, HS, C3);
      widen_rows(vf, q + 2 * C, T, HS, C3);
      head_forward(of, HS, L, Head{qf, kf, vf, HS, T, HS, scale, true});
      narrow_rows(o, of, T, HS, C);
    }
  }
}

template <typename A>
void attention_backward(A* dqkv, void* scratch, const A* dout, const A* qkv, const A* out, const void* stats, int B,
                        int T, int C, int NH) {
  const int HS = C / NH;
  const int64_t C3 = 3 * int64_t{C};
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* lse = static_cast<const float*>(stats);
  float* dsum = static_cast<float*>(scratch);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const int64_t qkv_off = static_cast<int64_t>(b) * T * C3 + h * HS, o_off = static_cast<int64_t>(b) * T * C + h * HS;
    const A* q = qkv + qkv_off;                           // (T, HS), row stride 3C; k, v follow at + C, + 2C
    A* dq = dqkv + qkv_off;                               // (T, HS), row stride 3C; dk, dv likewise
    const A* d_o = dout + o_off;                          // (T, HS), row stride C
    const A* o = out + o_off;                             // (T, HS), row stride C
    const float* L = lse + static_cast<int64_t>(bh) * T;  // (T)
    float* D = dsum + static_cast<int64_t>(bh) * T;       // (T)
    if constexpr (std::is_same_v<A, float>) {
      head_backward(dq, dq + C, dq + 2 * C, C3, D, d_o, o, C, L, Head{q, q + C, q + 2 * C, C3, T, HS, scale, false});
    } else {
      // [q | k | v | dout | out | dq | dk | dv] (T, HS) each, after the tiles of head_backward in the thread buffer
      const int64_t ths = static_cast<int64_t>(T) * HS, tiles = 2 * int64_t{kBwdRows} * kBwdCols;
      float* qf = thread_buffer(tiles + 8 * ths) + tiles;
      float *kf = qf + ths, *vf = kf + ths, *dof = vf + ths, *of = dof + ths, *dqf = of + ths, *dkf = dqf + ths,
            *dvf = dkf + ths;
      widen_rows(qf, q, T, HS, C3);
      widen_rows(kf, q + C, T, HS, C3);
      widen_rows(vf, q + 2 * C, T, HS, C3);
      widen_rows(dof, d_o, T, HS, C);
      widen_rows(of, o, T, HS, C);
      head_backward(dqf, dkf, dvf, HS, D, dof, of, HS, L, Head{qf, kf, vf, HS, T, HS, scale, true});
      narrow_rows(dq, dqf, T, HS, C3);
      narrow_rows(dq + C, dkf, T, HS, C3);
      narrow_rows(dq + 2 * C, dvf, T, HS, C3);
    }
  }
}

template void attention_forward<float>(float*, void*, const float*, int, int, int, int);
template void attention_forward<bf16>(bf16*, void*, const bf16*, int, int, int, int);
template void attention_backward<float>(float*, void*, const float*, const float*, const float*, const void*, int, int,
                                        int, int);
template void attention_backward<bf16>(bf16*, void*, const bf16*, const bf16*, const bf16*, const void*, int, int, int,
                                       int);

}  // namespace hpct::kernels::cpu
