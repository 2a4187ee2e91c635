// THE PREVIOUS CPU ATTENTION KERNEL, KEPT FOR COMPARISON ONLY (validation/bench_attention.cpp times it against the
// flash kernel of lib/kernels/cpu/cpu_attention.cpp). Not part of the library and not used by any model or test: a
// verbatim copy of lib/kernels/cpu/cpu_attention.cpp as it was before flash attention replaced it, in the namespace
// hpct::kernels::cpu::previous. It keeps the softmax probabilities (B,NH,T,T) as A for backward and uses a (B,NH,T,T)
// float scratch; its own header follows unchanged.
//
// CPU backend: causal multi-head self-attention with GEMMs per (batch, head).
// Legend: B batch, T time, C channels, NH heads, HS = C/NH head size; qkv rows hold [q | k | v], each (NH, HS).
// kernels.hpp's `stats` is att here, the softmax probabilities (B,NH,T,T) as A; its `scratch` is datt (B,NH,T,T),
// float.
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
//
// bf16 storage (A = bf16): the products multiply bf16 operands with fp32 accumulation, which takes two roundings of
// intermediates that a bf16 GEMM engine makes too (the CUDA flash kernels as well): the probabilities are rounded to
// bf16 (they are stored as bf16 for backward) before they multiply v, and dpreatt is rounded to bf16 before it
// multiplies k and q. The scores, the softmax statistics and row sums stay fp32; out and dqkv are rounded once.
// Two ways to run it, the same arithmetic up to the order of the fp32 sums:
//   - native bf16 GEMMs (dnnl_gemm::bf16_native(), called outside any OpenMP region): batched oneDNN matmuls over
//     chunks of whole sequences (all their heads at once), full T x T (the causal blocks are not worth their extra
//     calls at AMX speed; att is exactly 0 above the diagonal, so the full products are the causal ones). oneDNN 2.6's
//     fast kernels want dense operands (cpu_matmul_dnnl.cpp), so each chunk's q, k, v (and dout) heads are first
//     copied into dense (nb, NH, T, HS) bf16 buffers; out is written in place, dq, dk, dv go through a (3, nb, T, C)
//     buffer and are interleaved into dqkv's rows. A chunk holds kChunkBytes of fp32 scores (one sequence at the GPT
//     bench shape, or more sequences when they are smaller): the scores, softmax and dpreatt then stay in the core's
//     L2 cache between the products (measured: 1.5x faster attention than with all of B at once). The scores and the
//     copies live in buffers of this file, grown on the first call and kept (DESIGN invariant 7: nothing allocates
//     after the first step); the backward's datt uses the scratch (fp32), its bf16 dpreatt those buffers.
//   - otherwise the per-head algorithm above on fp32 copies of the head's operands, widened into per-thread buffers,
//     rounding the probabilities and dpreatt to bf16 values in place.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_math.hpp"
#include "kernels/cpu/cpu_matmul_dnnl.hpp"
#include "kernels/cpu/cpu_profile.hpp"

namespace hpct::kernels::cpu::previous {
namespace {

// Query rows (and key columns) per causal block. 64 keeps the per-call GEMMs (64 x r1 x HS) efficient in
// OpenBLAS while skipping 3/8 of the work at T = 256; measured against 32 and 128 on the GPT shape.
constexpr int kBlock = 64;

void check_shape(const char* op, int B, int T, int C, int NH) {
  HPCT_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "{}: bad shape B={} T={} C={} NH={}", op, B, T, C, NH);
  HPCT_CHECK(C % NH == 0, "{}: C={} is not a multiple of NH={}", op, C, NH);
}

int64_t bytes_of(DType act) {
  HPCT_CHECK(act == DType::F32 || act == DType::BF16, "attention buffers: activations must be F32 or BF16");
  return act == DType::F32 ? 4 : 2;
}

// Per-thread fp32 buffers of the bf16 path (one head's operands), grown on first use and kept: the steady step
// allocates nothing (DESIGN invariant 7). At most 8 T HS + T T floats per thread.
float* thread_buffer(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// x (T, HS) with row stride ld -> dst (T, HS) contiguous, fp32
void widen_rows(float* dst, const bf16* x, int T, int HS, int64_t ld) {
  for (int t = 0; t < T; t++) {
    const bf16* row = x + t * ld;
#pragma omp simd
    for (int d = 0; d < HS; d++) dst[static_cast<int64_t>(t) * HS + d] = to_f32(row[d]);
  }
}
// src (T, HS) contiguous fp32 -> x (T, HS) with row stride ld, rounded once
void narrow_rows(bf16* x, const float* src, int T, int HS, int64_t ld) {
  for (int t = 0; t < T; t++) {
    bf16* row = x + t * ld;
#pragma omp simd
    for (int d = 0; d < HS; d++) row[d] = to_bf16(src[static_cast<int64_t>(t) * HS + d]);
  }
}

// One head's forward in fp32. q, k, v (T, HS) with row stride ldq; a (T, T) receives the probabilities (0 above the
// diagonal); o (T, HS) with row stride ldo. round_p: round the probabilities to bf16 values before they multiply v.
void head_forward(float* o, int64_t ldo, float* a, const float* q, const float* k, const float* v, int64_t ldq, int T,
                  int HS, float scale, bool round_p) {
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock), rows = r1 - r0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, HS, scale, q + r0 * ldq, static_cast<int>(ldq), k,
                static_cast<int>(ldq), 0.0f, a + static_cast<int64_t>(r0) * T, T);
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
      if (round_p) {
#pragma omp simd
        for (int j = 0; j <= t; j++) row[j] = round_to<bf16>(row[j] * inv);
      } else {
#pragma omp simd
        for (int j = 0; j <= t; j++) row[j] *= inv;
      }
      std::fill(row + t + 1, row + T, 0.0f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, r1, 1.0f, a + static_cast<int64_t>(r0) * T, T, v,
                static_cast<int>(ldq), 0.0f, o + r0 * ldo, static_cast<int>(ldo));
  }
}

// One head's backward in fp32. q, k, v (T, HS) and dq, dk, dv with row stride ldq; d_o (T, HS) with row stride ldo;
// a (T, T) the probabilities; da (T, T) scratch, ends as dpreatt. round_ds: round dpreatt to bf16 values before it
// multiplies k and q.
void head_backward(float* dq, float* dk, float* dv, int64_t lddq, float* da, const float* a, const float* d_o,
                   int64_t ldo, const float* q, const float* k, const float* v, int64_t ldq, int T, int HS, float scale,
                   bool round_ds) {
  // by query row blocks: datt, softmax backward, dq
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock), rows = r1 - r0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, HS, 1.0f, d_o + r0 * ldo, static_cast<int>(ldo), v,
                static_cast<int>(ldq), 0.0f, da + static_cast<int64_t>(r0) * T, T);
    for (int t = r0; t < r1; t++) {
      const float* arow = a + static_cast<int64_t>(t) * T;
      float* drow = da + static_cast<int64_t>(t) * T;
      // att is exactly 0 above the diagonal, so running over [0, r1) instead of [0, t] changes no sum and
      // writes the zeros of dpreatt above the diagonal that the dk GEMM below reads
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < r1; j++) s += arow[j] * drow[j];
      if (round_ds) {
#pragma omp simd
        for (int j = 0; j < r1; j++) drow[j] = round_to<bf16>(scale * arow[j] * (drow[j] - s));
      } else {
#pragma omp simd
        for (int j = 0; j < r1; j++) drow[j] = scale * arow[j] * (drow[j] - s);
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, r1, 1.0f, da + static_cast<int64_t>(r0) * T, T, k,
                static_cast<int>(ldq), 0.0f, dq + r0 * lddq, static_cast<int>(lddq));
  }
  // by key column blocks: dv and dk see only the query rows t >= c0 (the same block grid, so every
  // dpreatt[t, c0:c1) read here was written by the row-block loop above)
  for (int c0 = 0; c0 < T; c0 += kBlock) {
    const int c1 = std::min(T, c0 + kBlock), cols = c1 - c0;
    const int64_t diag = static_cast<int64_t>(c0) * T + c0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, T - c0, 1.0f, a + diag, T, d_o + c0 * ldo,
                static_cast<int>(ldo), 0.0f, dv + c0 * lddq, static_cast<int>(lddq));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, T - c0, 1.0f, da + diag, T, q + c0 * ldq,
                static_cast<int>(ldq), 0.0f, dk + c0 * lddq, static_cast<int>(lddq));
  }
}

// ---- bf16 through oneDNN -----------------------------------------------------------------------------------------
constexpr int64_t kChunkBytes = int64_t{1} << 20;  // fp32 scores of one chunk: 1 MiB

// The buffers of the oneDNN path (see the top of the file): grown, never shrunk; one host thread at a time.
struct DnnlBuffers {
  std::mutex mu;
  std::vector<bf16> q, k, v, d_o;  // dense (nb, NH, T, HS) copies
  std::vector<bf16> ds;            // dpreatt (nb, NH, T, T)
  std::vector<bf16> dqkv;          // (3, nb, T, C): dq, dk, dv before they are interleaved into dqkv
  std::vector<float> scores;       // (nb, NH, T, T)
};
DnnlBuffers& dnnl_buffers() {
  static DnnlBuffers b;
  return b;
}
template <typename T>
T* grown(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Sequences per chunk: as many as keep the chunk's fp32 scores within kChunkBytes, at least one.
int chunk_sequences(int B, int T, int NH) {
  const int64_t per_sequence = int64_t{NH} * T * T * 4;
  return static_cast<int>(std::clamp<int64_t>(kChunkBytes / per_sequence, 1, B));
}

// Dense copies of the heads of nb sequences, for each of the n (dst, src, ld): dst[(b, h, t, :)] =
// src[b T ld + t ld + h HS + :], i.e. src rows of ld elements holding the NH heads side by side from column 0.
// One parallel region for all of them.
struct HeadCopy {
  bf16* dst;
  const bf16* src;
  int64_t ld;
};
void gather_heads(std::initializer_list<HeadCopy> copies, int nb, int T, int NH, int HS) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < nb; b++)
    for (int t = 0; t < T; t++)
      for (const HeadCopy& c : copies) {
        const bf16* row = c.src + (static_cast<int64_t>(b) * T + t) * c.ld;
        for (int h = 0; h < NH; h++)
          std::copy_n(row + h * HS, HS, c.dst + ((static_cast<int64_t>(b) * NH + h) * T + t) * HS);
      }
}

// A (batch0 = nb, batch1 = NH) operand: dense (nb, NH, rows, cols) rows x cols matrices, read as is or transposed.
dnnl_gemm::Operand dense(int NH, int rows, int cols, bool transposed, bool is_bf16 = true) {
  const int64_t m = static_cast<int64_t>(rows) * cols;
  return transposed ? dnnl_gemm::Operand{is_bf16, NH * m, m, 1, cols} : dnnl_gemm::Operand{is_bf16, NH * m, m, cols, 1};
}
// The (T, HS) head h of sequence b inside a (B, T, ld) activation whose heads sit side by side from column 0.
dnnl_gemm::Operand strided_heads(int T, int HS, int64_t ld) { return {true, T * ld, HS, ld, 1}; }

dnnl_gemm::Product batched(int nb, int NH, int M, int N, int K) {
  dnnl_gemm::Product p;
  p.batch0 = nb;
  p.batch1 = NH;
  p.M = M;
  p.N = N;
  p.K = K;
  return p;
}

HPCT_WIDE_SIMD void forward_bf16_dnnl(bf16* out, bf16* att, const bf16* qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int64_t C3 = 3 * int64_t{C}, TT = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int nbmax = chunk_sequences(B, T, NH);
  DnnlBuffers& buf = dnnl_buffers();
  const std::lock_guard<std::mutex> lock(buf.mu);
  const int64_t heads = int64_t{nbmax} * NH;
  bf16* q = grown(buf.q, heads * T * HS);
  bf16* k = grown(buf.k, heads * T * HS);
  bf16* v = grown(buf.v, heads * T * HS);
  float* scores = grown(buf.scores, heads * TT);
  for (int b0 = 0; b0 < B; b0 += nbmax) {
    const int nb = std::min(nbmax, B - b0);
    const bf16* src = qkv + static_cast<int64_t>(b0) * T * C3;
    {
      const ProfileScope ps("attention_forward/gather");
      gather_heads({{q, src, C3}, {k, src + C, C3}, {v, src + 2 * C, C3}}, nb, T, NH, HS);
    }
    // scores (nb, NH, T, T) = scale q k^T, fp32
    dnnl_gemm::Product s = batched(nb, NH, T, T, HS);
    s.a = dense(NH, T, HS, false);
    s.b = dense(NH, T, HS, true);  // k (T, HS) read as (HS, T)
    s.c = dense(NH, T, T, false, false);
    s.alpha = scale;
    {
      const ProfileScope ps("attention_forward/scores");
      dnnl_gemm::run(s, q, k, scores);
    }
    // causal softmax of each row over its prefix [0, t], rounded once into att; 0 above the diagonal
    bf16* a = att + static_cast<int64_t>(b0) * NH * TT;
    {
      const ProfileScope ps("attention_forward/softmax");
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < int64_t{nb} * NH * T; r++) {
        const int t = static_cast<int>(r % T);
        float* row = scores + r * T;  // exponentials in place (a buffer of ours), then normalised and rounded
        bf16* p = a + r * T;
        // head_forward's softmax, written again on purpose: here under HPCT_WIDE_SIMD, whose 512-bit reductions sum
        // in another order than the fp32 path's (a shared helper would change the bits of one of them)
        float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
        for (int j = 0; j <= t; j++) m = row[j] > m ? row[j] : m;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= t; j++) {
          row[j] = exp_simd(row[j] - m);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j <= t; j++) p[j] = to_bf16(row[j] * inv);
        std::fill(p + t + 1, p + T, bf16{0});
      }
    }
    // out (nb, T, C) head by head = P v
    dnnl_gemm::Product o = batched(nb, NH, T, HS, T);
    o.a = dense(NH, T, T, false);
    o.b = dense(NH, T, HS, false);
    o.c = strided_heads(T, HS, C);
    const ProfileScope ps("attention_forward/pv");
    dnnl_gemm::run(o, a, v, out + static_cast<int64_t>(b0) * T * C);
  }
}

HPCT_WIDE_SIMD void backward_bf16_dnnl(bf16* dqkv, float* datt, const bf16* dout, const bf16* qkv, const bf16* att,
                                       int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int64_t C3 = 3 * int64_t{C}, TT = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int nbmax = chunk_sequences(B, T, NH);  // dpreatt of a chunk fits the scratch: nbmax <= B
  DnnlBuffers& buf = dnnl_buffers();
  const std::lock_guard<std::mutex> lock(buf.mu);
  const int64_t heads = int64_t{nbmax} * NH;
  bf16* q = grown(buf.q, heads * T * HS);
  bf16* k = grown(buf.k, heads * T * HS);
  bf16* v = grown(buf.v, heads * T * HS);
  bf16* d_o = grown(buf.d_o, heads * T * HS);
  bf16* ds = grown(buf.ds, heads * TT);
  const int64_t part = int64_t{nbmax} * T * C;  // one of dq, dk, dv of a chunk
  bf16* dparts = grown(buf.dqkv, 3 * part);
  for (int b0 = 0; b0 < B; b0 += nbmax) {
    const int nb = std::min(nbmax, B - b0);
    const bf16* src = qkv + static_cast<int64_t>(b0) * T * C3;
    {
      const ProfileScope ps("attention_backward/gather");
      gather_heads({{q, src, C3}, {k, src + C, C3}, {v, src + 2 * C, C3}, {d_o, dout + int64_t{b0} * T * C, C}}, nb, T,
                   NH, HS);
    }
    const bf16* a = att + static_cast<int64_t>(b0) * NH * TT;  // (nb, NH, T, T)
    // datt (nb, NH, T, T) = dout v^T, fp32, in the scratch
    dnnl_gemm::Product dp = batched(nb, NH, T, T, HS);
    dp.a = dense(NH, T, HS, false);
    dp.b = dense(NH, T, HS, true);
    dp.c = dense(NH, T, T, false, false);
    {
      const ProfileScope ps("attention_backward/datt");
      dnnl_gemm::run(dp, d_o, v, datt);
    }
    // dpreatt = scale att (datt - rowsum(att datt)), rounded once to bf16; 0 above the diagonal (att is 0 there)
    {
      const ProfileScope ps("attention_backward/dpreatt");
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < int64_t{nb} * NH * T; r++) {
        const bf16* arow = a + r * T;
        const float* drow = datt + r * T;
        bf16* srow = ds + r * T;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < T; j++) sum += to_f32(arow[j]) * drow[j];
#pragma omp simd
        for (int j = 0; j < T; j++) srow[j] = to_bf16(scale * to_f32(arow[j]) * (drow[j] - sum));
      }
    }
    // dq = dpreatt k, dk = dpreatt^T q, dv = att^T dout, each (nb, T, C) head by head: rows of exactly C elements,
    // which oneDNN's fast kernels write (rows of dqkv, 3C, they do not)
    dnnl_gemm::Product pq = batched(nb, NH, T, HS, T);
    pq.a = dense(NH, T, T, false);
    pq.b = dense(NH, T, HS, false);
    pq.c = strided_heads(T, HS, C);
    dnnl_gemm::Product pk = pq;
    pk.a = dense(NH, T, T, true);
    {
      const ProfileScope ps("attention_backward/dqkv");
      dnnl_gemm::run(pq, ds, k, dparts);
      dnnl_gemm::run(pk, ds, q, dparts + part);
      dnnl_gemm::run(pk, a, d_o, dparts + 2 * part);
    }
    // interleave: dqkv row n = [dq row n | dk row n | dv row n]
    bf16* dst = dqkv + static_cast<int64_t>(b0) * T * C3;
    const ProfileScope ps("attention_backward/interleave");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < int64_t{nb} * T; n++)
      for (int j = 0; j < 3; j++) std::copy_n(dparts + j * part + n * C, C, dst + n * C3 + j * C);
  }
}

bool attention_through_dnnl() { return dnnl_gemm::bf16_native() && !omp_in_parallel(); }

}  // namespace

// The probabilities (as A) and their gradient (float), T x T per (batch, head): kernels.hpp's stats and scratch.
int64_t attention_stats_bytes(int B, int T, int C, int NH, DType act) {
  check_shape("attention_stats_bytes", B, T, C, NH);
  return static_cast<int64_t>(B) * NH * T * T * bytes_of(act);
}
int64_t attention_scratch_bytes(int B, int T, int C, int NH, DType act) {
  check_shape("attention_scratch_bytes", B, T, C, NH);
  bytes_of(act);
  return static_cast<int64_t>(B) * NH * T * T * 4;
}

template <typename A>
void attention_forward(A* out, void* stats, const A* qkv, int B, int T, int C, int NH) {
  check_shape("attention_forward", B, T, C, NH);
  const int HS = C / NH;
  const int64_t C3 = 3 * int64_t{C}, TT = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  A* att = static_cast<A*>(stats);
  if constexpr (std::is_same_v<A, bf16>) {
    if (attention_through_dnnl()) {
      forward_bf16_dnnl(out, att, qkv, B, T, C, NH);
      return;
    }
  }
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const A* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;  // (T, HS), row stride 3C
    A* o = out + static_cast<int64_t>(b) * T * C + h * HS;         // (T, HS), row stride C
    A* a = att + bh * TT;                                          // (T, T)
    if constexpr (std::is_same_v<A, float>) {
      head_forward(o, C, a, q, q + C, q + 2 * C, C3, T, HS, scale, false);
    } else {
      const int64_t ths = static_cast<int64_t>(T) * HS;
      float* qf = thread_buffer(4 * ths + TT);  // [q | k | v | o] (T, HS) each, then the probabilities (T, T)
      float *kf = qf + ths, *vf = kf + ths, *of = vf + ths, *af = of + ths;
      widen_rows(qf, q, T, HS, C3);
      widen_rows(kf, q + C, T, HS, C3);
      widen_rows(vf, q + 2 * C, T, HS, C3);
      head_forward(of, HS, af, qf, kf, vf, HS, T, HS, scale, true);
      narrow_rows(o, of, T, HS, C);
#pragma omp simd
      for (int64_t i = 0; i < TT; i++) a[i] = to_bf16(af[i]);  // exact: af holds bf16 values
    }
  }
}

template <typename A>
void attention_backward(A* dqkv, void* scratch, const A* dout, const A* qkv, const A* /*out*/, const void* stats, int B,
                        int T, int C, int NH) {
  check_shape("attention_backward", B, T, C, NH);
  const int HS = C / NH;
  const int64_t C3 = 3 * int64_t{C}, TT = static_cast<int64_t>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const A* att = static_cast<const A*>(stats);
  float* datt = static_cast<float*>(scratch);
  if constexpr (std::is_same_v<A, bf16>) {
    if (attention_through_dnnl()) {
      backward_bf16_dnnl(dqkv, datt, dout, qkv, att, B, T, C, NH);
      return;
    }
  }
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const int64_t qkv_off = static_cast<int64_t>(b) * T * C3 + h * HS;
    const A* q = qkv + qkv_off;                                      // (T, HS), row stride 3C; k, v follow at + C, + 2C
    A* dq = dqkv + qkv_off;                                          // (T, HS), row stride 3C; dk, dv likewise
    const A* a = att + bh * TT;                                      // (T, T)
    float* da = datt + bh * TT;                                      // (T, T) scratch, ends as dpreatt
    const A* d_o = dout + static_cast<int64_t>(b) * T * C + h * HS;  // (T, HS), row stride C
    if constexpr (std::is_same_v<A, float>) {
      head_backward(dq, dq + C, dq + 2 * C, C3, da, a, d_o, C, q, q + C, q + 2 * C, C3, T, HS, scale, false);
    } else {
      const int64_t ths = static_cast<int64_t>(T) * HS;
      // [q | k | v | dout | dq | dk | dv] (T, HS) each, then the probabilities (T, T)
      float* qf = thread_buffer(7 * ths + TT);
      float *kf = qf + ths, *vf = kf + ths, *dof = vf + ths, *dqf = dof + ths, *dkf = dqf + ths, *dvf = dkf + ths;
      float* af = dvf + ths;
      widen_rows(qf, q, T, HS, C3);
      widen_rows(kf, q + C, T, HS, C3);
      widen_rows(vf, q + 2 * C, T, HS, C3);
      widen_rows(dof, d_o, T, HS, C);
#pragma omp simd
      for (int64_t i = 0; i < TT; i++) af[i] = to_f32(a[i]);
      head_backward(dqf, dkf, dvf, HS, da, af, dof, HS, qf, kf, vf, HS, T, HS, scale, true);
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

}  // namespace hpct::kernels::cpu::previous
