#pragma once
// Flash attention on the tensor cores for the 16-bit storage types (S = __nv_bfloat16 or __half): FlashAttention-2-style
// forward and backward kernels built on mma.sync m16n8k16 (16-bit inputs, fp32 accumulation) and ldmatrix
// (cuda_mma.cuh), and the host functions that give their launch geometry. cuda_gpt.cu launches them
// (attention_forward / attention_backward) for 16-bit storage with a head size HS that is a multiple of 16 up to 128;
// float storage and every other head size run the CUDA-core kernels of cuda_flash_attention.cuh, whose conventions
// these follow: same legend, same L (B,NH,T) and D (B,NH,T) in float (attention_stats_bytes / attention_scratch_bytes
// are the same), the same three-step deterministic backward, CUDA built-ins only, shared memory through
// HPCT_DYNAMIC_SHARED, and every kernel run by the host emulation (tests/cuda_emu/test_emu_flash_attention.cpp, where
// the emulator models mma and ldmatrix as warp collectives: cuda_emu.hpp).
//
// Legend: B batch, T time, C channels, NH heads, HS = C/NH head size; qkv rows hold [q | k | v], each (NH, HS), row
// stride 3C; out and dout (B,T,C) hold head h in columns [h HS, (h+1) HS); L (lse) and D (dsum) are (B,NH,T) float.
// dqkv is assigned (every element written once), as by the CUDA-core kernels.
//
// Numerics: what is 16-bit and what is fp32.
//   - Q, K, V and dO are read as stored (16-bit, into shared memory unchanged) and fed to the tensor cores as they are:
//     their products are exact in fp32.
//   - fp32: the scores S = Q K^T (mma accumulators), the online softmax (row max m, row sum l, the rescaling), L, D,
//     dP = dO V^T, dS = P (dP - D), and every accumulator (o, dQ, dK, dV).
//   - Rounded to S as mma inputs, as FlashAttention-2 and cuDNN do: the probabilities P for o += P V and dV += P^T dO,
//     and dS for dK += dS^T Q and dQ += dS K (one rounding to nearest even each, relative error <= 2^-9 for bf16,
//     2^-12 for f16). The row sum l is summed from the fp32 p, not from the rounded ones.
//   - Each output element is rounded once to S when it is stored (out = o / l, dQ and dK times the softmax scale).
//   - The multiply-adds of the softmax (l c + sum p, scale log2(e) s - log2(e) L, ln(2) m + ln(l)) are explicit fmaf,
//     so that no compiler's contraction choice changes them (the emulated test's host twin computes the same ones).
//   - fp16 (__half): P <= 1 and the scores stay fp32, so nothing overflows; dS is rounded to f16 like the activations
//     (values below 2^-14 lose bits as subnormals: loss scaling, train.loss_scale, keeps gradients above that).
//   The tensor cores' internal accumulation order within one mma is unspecified (cuda_emu.hpp): results agree with any
//   other implementation to a few fp32 ulps per product tile, not bitwise; run to run on one GPU they are bitwise
//   reproducible (fixed tiling, fixed order of the k-steps, no atomics).
//
// Why own mma kernels rather than cuDNN's fused scaled-dot-product attention (the graph API): these keep what the
// backend guarantees, a backward that is bitwise reproducible run to run with no atomics (cuDNN's SDPA backward
// accumulates dQ across key blocks; its determinism is an option to check per version), every kernel executed by the
// host emulation in CI, and no second cuDNN API besides the legacy convolutions.
//
// Tiling. A block of kTcWarps = 4 warps owns kTcTile = 64 rows of one (b, h): query rows in the forward and the dQ
// kernel, key rows in the dK/dV kernel; warp w owns the 16 rows 16w .. 16w+15 (one mma row block). The other side
// streams through shared memory in tiles (64 keys in the forward and the dQ kernel; in the dK/dV kernel query tiles
// of bwd_query_tile(HS) = 64 rows, 32 from HS = 80 on, to keep dK and dV in registers), in ascending order. Every
// product sums its k-steps of 16 in ascending order into fp32 registers, so each output's summation order is fixed
// by the shapes alone: bitwise reproducible, with no atomics. Causality: query and key tiles share the grid of 64
// (the dK/dV kernel's query tiles of 32 divide it), so a query tile needs the key tiles up to its own; tiles that
// reach past the diagonal are masked element-wise (key j <= query t). Key 0 is visible to every row, so a row's
// running max is finite from its first tile on. Rows >= T are loaded as zeros, masked out of every sum and never
// stored.
// Shared memory: 16-bit tiles with rows padded by 8 elements (16 bytes): the row stride is HS/2 + 4 words, an odd
// multiple of 4, so the 8 rows of an ldmatrix 8x8 matrix (16 bytes each) fall into 8 distinct groups of 4 banks, and
// the staging of the outputs (lane (g, t) writes word t of row g) hits 32 distinct banks. Global memory moves in
// 16-byte vectors (8 elements) both ways: the host launches these kernels only with 16-byte aligned pointers
// (tc_pointers_aligned), HS a multiple of 16 makes every row offset a multiple of 8 elements.
//
// Fragments (cuda_mma.cuh): the scores of a warp's 16 rows against 16 keys are two n-tiles of the accumulator, which
// is exactly the A fragment of the next product over those keys: P (and dS) go from the softmax to the next mma
// without shared memory, rounded to S in pack2. Operands from shared memory come through ldmatrix .x4 (two n-tiles or
// one 16x16 A block per instruction); the .trans form reads the row-major V, dO, Q and K tiles as the "col" B operand
// of o += P V, dV += P^T dO, dK += dS^T Q and dQ += dS K.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_device_common.cuh"
#include "kernels/cuda/cuda_mma.cuh"

namespace hpct::kernels::cuda::flash_tc {
// Internal linkage: each includer compiles its own copy (the CUDA kernels in cuda_gpt.cu, host functions in the
// emulated test), which must never be merged by the linker.
namespace {

using mma::ldmatrix;
using mma::mma_acc;
using mma::pack2;

constexpr int kTcWarps = 4;                    // warps per block
constexpr int kTcThreads = kTcWarps * 32;      // threads per block
constexpr int kTcTile = 64;                    // rows of the block's own tile: 16 per warp
constexpr int kTcMaxHS = 128;                  // the largest head size of these kernels (GPT-2: 64)
constexpr int kSmemPad = 8;                    // 16-bit elements of padding per shared-memory row (16 bytes)
constexpr float kLog2e = 1.4426950408889634f;  // scores and L go to the base-2 domain of exp2f
constexpr float kLn2 = 0.6931471805599453f;
constexpr unsigned kFullMask = 0xffffffffu;

// The dK/dV kernel's query tile: 64 rows up to HS = 64, 32 above (dK and dV take HS/2 registers each per lane; the
// score and dP tiles of 64 queries 32 each, which at HS = 128 would pass the 255-register limit).
__host__ __device__ constexpr int bwd_query_tile(int HS) { return HS <= 64 ? 64 : 32; }

// dst[r * (HS + kSmemPad) + d] = src[(row0 + r) * ld_src + d] for the ROWS rows r and d < HS, in 16-byte vectors;
// rows >= T are zero. Called by every thread of the block (a __syncthreads() must follow before the tile is read).
template <typename S, int HS, int ROWS>
__device__ __forceinline__ void load_tile(S* dst, const S* __restrict__ src, int64_t ld_src, int row0, int T) {
  constexpr int kChunks = HS / 8, LD = HS + kSmemPad;
#pragma unroll 4
  for (int e = threadIdx.x; e < ROWS * kChunks; e += kTcThreads) {
    const int r = e / kChunks, c = (e % kChunks) * 8, t = row0 + r;
    int4 v = make_int4(0, 0, 0, 0);
    if (t < T) v = *reinterpret_cast<const int4*>(src + static_cast<int64_t>(t) * ld_src + c);
    *reinterpret_cast<int4*>(dst + r * LD + c) = v;
  }
}

// The warp's 16 rows of an fp32 accumulator (NT n-tiles of 8 columns, times `mul`) rounded to S into its rows of the
// shared tile `stage` (row stride HS + kSmemPad), then stored in 16-byte vectors to rows row0 .. row0 + 15 of dst (row
// stride ld_dst), those < T. `stage` holds rows that only this warp reads, so __syncwarp orders the steps: the warp's
// last reads of those rows (the ldmatrix of its final k-step, by any lane) before the staging overwrites them, and the
// staging before the stores read it back (compute-sanitizer's racecheck reports the first pair as a hazard without it).
template <typename S, int HS>
__device__ __forceinline__ void store_rows(S* __restrict__ dst, int64_t ld_dst, int row0, int T, S* stage,
                                           const float (&acc)[HS / 8][4], float mul0, float mul1) {
  constexpr int LD = HS + kSmemPad, kChunks = HS / 8;
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  __syncwarp();
#pragma unroll
  for (int nt = 0; nt < HS / 8; nt++) {
    const int col = nt * 8 + 2 * t4;
    *reinterpret_cast<uint32_t*>(stage + g * LD + col) = pack2<S>(acc[nt][0] * mul0, acc[nt][1] * mul0);
    *reinterpret_cast<uint32_t*>(stage + (g + 8) * LD + col) = pack2<S>(acc[nt][2] * mul1, acc[nt][3] * mul1);
  }
  __syncwarp();
#pragma unroll
  for (int e = lane; e < 16 * kChunks; e += 32) {
    const int r = e / kChunks, c = (e % kChunks) * 8, t = row0 + r;
    if (t < T)
      *reinterpret_cast<int4*>(dst + static_cast<int64_t>(t) * ld_dst + c) = *reinterpret_cast<const int4*>(stage +
                                                                                                            r * LD + c);
  }
}

// The A fragment of a 16x16 block at `tile` (row-major, row stride LD) for ldmatrix .x4: lanes 0-15 address rows
// 0-15 at column 0, lanes 16-31 the same rows at column 8 (matrices: rows 0-7 | rows 8-15, columns 0-7 | 8-15).
template <int LD, typename S>
__device__ __forceinline__ const S* a_rows(const S* tile, int lane) {
  return tile + (lane % 16) * LD + (lane / 16) * 8;
}
// The B fragments of two n-tiles (16 rows of the tile as the n dimension, 16 columns as k) for ldmatrix .x4 without
// .trans: matrices (rows 0-7, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 0-7), (rows 8-15, k 8-15): r[0], r[1] are the
// first n-tile's b[0], b[1], r[2], r[3] the second's.
template <int LD, typename S>
__device__ __forceinline__ const S* b_rows(const S* tile, int lane) {
  return tile + (lane % 8 + 8 * (lane / 16)) * LD + 8 * ((lane / 8) % 2);
}
// The B fragments of two n-tiles for ldmatrix .x4.trans, from a tile stored k-major (16 rows as k, 16 columns as n):
// matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
template <int LD, typename S>
__device__ __forceinline__ const S* bt_rows(const S* tile, int lane) {
  return tile + (lane % 8 + 8 * ((lane / 8) % 2)) * LD + 8 * (lane / 16);
}

// The A fragment over 16 columns of an fp32 accumulator, rounded to S: the n-tiles lo (columns 0-7) and hi (8-15).
template <typename S>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<S>(lo[0], lo[1]);
  a[1] = pack2<S>(lo[2], lo[3]);
  a[2] = pack2<S>(hi[0], hi[1]);
  a[3] = pack2<S>(hi[2], hi[3]);
}

// The two products the backward recomputes per pair of tiles, over the same k-steps (KS of 16 columns, in ascending
// order): x = A1 B1^T and y = A2 B2^T, each of the warp's 16 rows (a1, a2: row-major, the warp's rows) against the NT
// n-tiles of 8 rows of b1, b2 (row-major tiles, the n rows by the k columns); x and y are zeroed first. The dK/dV
// kernel passes (K, V) against (Q, dO): S^T and dP^T; the dQ kernel (Q, dO) against (K, V): S and dP.
template <typename S, int KS, int NT, int LD>
__device__ __forceinline__ void two_products(float (&x)[NT][4], float (&y)[NT][4], const S* a1, const S* a2,
                                             const S* b1, const S* b2, int lane) {
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int i = 0; i < 4; i++) x[nt][i] = y[nt][i] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
    uint32_t fa1[4], fa2[4];
    ldmatrix<4, false>(fa1, a_rows<LD>(a1 + ks * 16, lane));
    ldmatrix<4, false>(fa2, a_rows<LD>(a2 + ks * 16, lane));
#pragma unroll
    for (int np = 0; np < NT / 2; np++) {
      uint32_t fb1[4], fb2[4];
      ldmatrix<4, false>(fb1, b_rows<LD>(b1 + np * 16 * LD + ks * 16, lane));
      mma_acc<S>(x[2 * np], fa1, {fb1[0], fb1[1]});
      mma_acc<S>(x[2 * np + 1], fa1, {fb1[2], fb1[3]});
      ldmatrix<4, false>(fb2, b_rows<LD>(b2 + np * 16 * LD + ks * 16, lane));
      mma_acc<S>(y[2 * np], fa2, {fb2[0], fb2[1]});
      mma_acc<S>(y[2 * np + 1], fa2, {fb2[2], fb2[3]});
    }
  }
}

// Forward. Block (bh, tile): the query rows [q0, q0 + 64) of head h of sequence b; warp w the rows q0 + 16w ..
// q0 + 16w + 15, its Q fragments in registers for the whole key loop. For each key tile k0 = 0, 64, .. (the last one
// is the diagonal tile) each row runs the online softmax, in the base-2 domain x = scale log2(e) q . k:
//   m' = max(m, max_j x_j),  c = 2^(m - m'),  p_j = 2^(x_j - m'),  l' = l c + sum_j p_j,  o' = o c + sum_j round(p_j) v_j
// Lane (g, t) holds rows g and g + 8 of the warp and, per n-tile of 8 keys, the keys 2t, 2t + 1: the row max and sum
// run over the lane's own columns, then across the 4 lanes of the quad (__shfl_xor_sync 1, 2); l stays per lane until
// the end. Then out_t = o / l and L_t = ln(2) m + ln(l).
template <typename S, int HS>
__global__ void __launch_bounds__(kTcThreads)
    forward_tc_kernel(S* __restrict__ out, float* __restrict__ lse, const S* __restrict__ qkv, int T, int C, int NH,
                      float scale) {
  constexpr int LD = HS + kSmemPad, KS = HS / 16, NT_D = HS / 8, NT_K = kTcTile / 8;
  HPCT_DYNAMIC_SHARED(S, smem);
  S* sq = smem;               // (64, LD) the block's queries; at the end, the staging of out
  S* sk = sq + kTcTile * LD;  // (64, LD) the current key tile
  S* sv = sk + kTcTile * LD;  // (64, LD) the current value tile
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTcTile;  // the longest (last) query tiles are scheduled first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const S* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;  // row t at q + t C3; k = q + C, v = q + 2C
  load_tile<S, HS, kTcTile>(sq, q, C3, q0, T);
  __syncthreads();
  uint32_t qf[KS][4];  // the warp's 16 query rows as A fragments, k-step by k-step over d
#pragma unroll
  for (int ks = 0; ks < KS; ks++) ldmatrix<4, false>(qf[ks], a_rows<LD>(sq + warp * 16 * LD + ks * 16, lane));

  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};  // this lane's rows (>= T: computed, not stored)
  const float scale_log2 = scale * kLog2e;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[NT_D][4];
#pragma unroll
  for (int nt = 0; nt < NT_D; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  const int q_last = min(q0 + kTcTile, T) - 1;  // the block's last real row: the last key it sees
  for (int k0 = 0; k0 <= q_last; k0 += kTcTile) {
    __syncthreads();  // every warp is done with the previous key and value tiles
    load_tile<S, HS, kTcTile>(sk, q + C, C3, k0, T);
    load_tile<S, HS, kTcTile>(sv, q + 2 * C, C3, k0, T);
    __syncthreads();
    float s[NT_K][4];  // scores of the warp's 16 rows against the tile's 64 keys
#pragma unroll
    for (int nt = 0; nt < NT_K; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
      for (int np = 0; np < NT_K / 2; np++) {
        uint32_t kb[4];
        ldmatrix<4, false>(kb, b_rows<LD>(sk + np * 16 * LD + ks * 16, lane));
        mma_acc<S>(s[2 * np], qf[ks], {kb[0], kb[1]});
        mma_acc<S>(s[2 * np + 1], qf[ks], {kb[2], kb[3]});
      }
    const bool diagonal = k0 + kTcTile > q0;  // keys beyond some of the block's rows: mask element-wise
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT_K; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int key = k0 + nt * 8 + 2 * t4 + (i % 2);
        const float x = diagonal && key > row[i / 2] ? -INFINITY : s[nt][i] * scale_log2;
        s[nt][i] = x;
        mx[i / 2] = fmaxf(mx[i / 2], x);
      }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);  // finite: key 0 is visible in the first tile
      corr[r] = exp2f(m[r] - m_new);           // 0 on the first tile (m = -inf)
      m[r] = m_new;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NT_K; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float p = exp2f(s[nt][i] - m[i / 2]);  // masked: 2^-inf = 0
        s[nt][i] = p;
        rs[i / 2] += p;
      }
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = fmaf(l[r], corr[r], rs[r]);
#pragma unroll
    for (int nt = 0; nt < NT_D; nt++) {
      o[nt][0] *= corr[0];
      o[nt][1] *= corr[0];
      o[nt][2] *= corr[1];
      o[nt][3] *= corr[1];
    }
#pragma unroll
    for (int kk = 0; kk < NT_K / 2; kk++) {  // o += P V over the keys 16 kk .. 16 kk + 15
      uint32_t pa[4];
      acc_to_a<S>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < NT_D / 2; dp++) {
        uint32_t vb[4];
        ldmatrix<4, true>(vb, bt_rows<LD>(sv + kk * 16 * LD + dp * 16, lane));
        mma_acc<S>(o[2 * dp], pa, {vb[0], vb[1]});
        mma_acc<S>(o[2 * dp + 1], pa, {vb[2], vb[3]});
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {  // the row sums across the quad: ((l_t0 + l_t1) + (l_t2 + l_t3)) on every lane
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
  }
  const int64_t row0 = static_cast<int64_t>(b) * T;
  // l >= 1 for a real row: the max term contributes 2^0
  store_rows<S, HS>(out + row0 * C + h * HS, C, q0 + warp * 16, T, sq + warp * 16 * LD, o, 1.0f / l[0], 1.0f / l[1]);
  if (t4 == 0)
#pragma unroll
    for (int r = 0; r < 2; r++)
      if (row[r] < T) lse[static_cast<int64_t>(bh) * T + row[r]] = fmaf(m[r], kLn2, logf(l[r]));
}

// Backward, step 2 (step 1, D = rowsum(dout * out), is cuda_flash_attention.cuh's rowdot_kernel): dK and dV. Block
// (bh, tile): the keys [k0, k0 + 64); warp w the keys k0 + 16w .. k0 + 16w + 15. It walks the query tiles q0 = k0,
// k0 + QT, .. (the rows that see these keys) in order and computes, transposed (keys as the mma rows):
//   S^T = K Q^T,  P^T = 2^(scale log2(e) S^T - log2(e) L),  dP^T = V dO^T,  dS^T = P^T (dP^T - D)   (fp32)
//   dV += round(P^T) dO,  dK += round(dS^T) Q                                                       (then dK *= scale)
template <typename S, int HS>
__global__ void __launch_bounds__(kTcThreads)
    backward_dkv_tc_kernel(S* __restrict__ dqkv, const S* __restrict__ dout, const S* __restrict__ qkv,
                           const float* __restrict__ lse, const float* __restrict__ dsum, int T, int C, int NH,
                           float scale) {
  constexpr int LD = HS + kSmemPad, KS = HS / 16, NT_D = HS / 8, QT = bwd_query_tile(HS), NT_Q = QT / 8;
  HPCT_DYNAMIC_SHARED(S, smem);
  S* sk = smem;                                         // (64, LD) the block's keys; at the end, the staging of dk
  S* sv = sk + kTcTile * LD;                            // (64, LD) the block's values; at the end, the staging of dv
  S* sq = sv + kTcTile * LD;                            // (QT, LD) the current query tile
  S* sdo = sq + QT * LD;                                // (QT, LD) dout of the current query tile
  float* sl = reinterpret_cast<float*>(sdo + QT * LD);  // (QT) log2(e) L of the current query rows
  float* sd = sl + QT;                                  // (QT) D of the current query rows
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int k0 = blockIdx.y * kTcTile;  // the longest (first) key tiles are scheduled first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const S* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;    // row t at q + t C3; k = q + C, v = q + 2C
  const S* d_o = dout + static_cast<int64_t>(b) * T * C + h * HS;  // row t at d_o + t C
  const float* L = lse + static_cast<int64_t>(bh) * T;
  const float* D = dsum + static_cast<int64_t>(bh) * T;
  load_tile<S, HS, kTcTile>(sk, q + C, C3, k0, T);
  load_tile<S, HS, kTcTile>(sv, q + 2 * C, C3, k0, T);

  const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};  // this lane's keys (>= T: never stored)
  const float scale_log2 = scale * kLog2e;
  const S* wk = sk + warp * 16 * LD;
  const S* wv = sv + warp * 16 * LD;
  float dk[NT_D][4], dv[NT_D][4];
#pragma unroll
  for (int nt = 0; nt < NT_D; nt++)
#pragma unroll
    for (int i = 0; i < 4; i++) dk[nt][i] = dv[nt][i] = 0.0f;
  for (int q0 = k0; q0 < T; q0 += QT) {
    __syncthreads();  // every warp is done with the previous query tile
    load_tile<S, HS, QT>(sq, q, C3, q0, T);
    load_tile<S, HS, QT>(sdo, d_o, C, q0, T);
    if (threadIdx.x < QT) {
      const int t = q0 + threadIdx.x;
      sl[threadIdx.x] = t < T ? L[t] * kLog2e : 0.0f;
      sd[threadIdx.x] = t < T ? D[t] : 0.0f;
    }
    __syncthreads();                  // the tiles (and, on the first pass, sk and sv) are in place
    float st[NT_Q][4], dpt[NT_Q][4];  // S^T and dP^T: the warp's 16 keys against the QT queries
    two_products<S, KS, NT_Q, LD>(st, dpt, wk, wv, sq, sdo, lane);
#pragma unroll
    for (int nt = 0; nt < NT_Q; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int qi = nt * 8 + 2 * t4 + (i % 2), t = q0 + qi;
        const bool visible = key[i / 2] <= t && t < T;
        const float p = visible ? exp2f(fmaf(st[nt][i], scale_log2, -sl[qi])) : 0.0f;
        st[nt][i] = p;
        dpt[nt][i] = p * (dpt[nt][i] - sd[qi]);
      }
#pragma unroll
    for (int kk = 0; kk < NT_Q / 2; kk++) {  // over the queries 16 kk .. 16 kk + 15
      uint32_t pa[4], dsa[4];
      acc_to_a<S>(pa, st[2 * kk], st[2 * kk + 1]);
      acc_to_a<S>(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < NT_D / 2; dp++) {
        uint32_t ob[4], qb[4];
        ldmatrix<4, true>(ob, bt_rows<LD>(sdo + kk * 16 * LD + dp * 16, lane));
        mma_acc<S>(dv[2 * dp], pa, {ob[0], ob[1]});
        mma_acc<S>(dv[2 * dp + 1], pa, {ob[2], ob[3]});
        ldmatrix<4, true>(qb, bt_rows<LD>(sq + kk * 16 * LD + dp * 16, lane));
        mma_acc<S>(dk[2 * dp], dsa, {qb[0], qb[1]});
        mma_acc<S>(dk[2 * dp + 1], dsa, {qb[2], qb[3]});
      }
    }
  }
  // dk at row j + C, dv at row j + 2C of dqkv (row stride 3C), staged in the warp's own rows of sk and sv
  S* base = dqkv + static_cast<int64_t>(b) * T * C3 + h * HS;
  store_rows<S, HS>(base + C, C3, k0 + warp * 16, T, sk + warp * 16 * LD, dk, scale, scale);
  store_rows<S, HS>(base + 2 * C, C3, k0 + warp * 16, T, sv + warp * 16 * LD, dv, 1.0f, 1.0f);
}

// Backward, step 3: dQ. Block (bh, tile): the query rows [q0, q0 + 64); warp w the rows q0 + 16w .. q0 + 16w + 15,
// walking the key tiles 0 .. q0 in order:
//   S = Q K^T,  P = 2^(scale log2(e) S - log2(e) L),  dP = dO V^T,  dS = P (dP - D)  (fp32);  dQ += round(dS) K
// (then dQ *= scale).
template <typename S, int HS>
__global__ void __launch_bounds__(kTcThreads)
    backward_dq_tc_kernel(S* __restrict__ dqkv, const S* __restrict__ dout, const S* __restrict__ qkv,
                          const float* __restrict__ lse, const float* __restrict__ dsum, int T, int C, int NH,
                          float scale) {
  constexpr int LD = HS + kSmemPad, KS = HS / 16, NT_D = HS / 8, NT_K = kTcTile / 8;
  HPCT_DYNAMIC_SHARED(S, smem);
  S* sq = smem;                // (64, LD) the block's query rows; at the end, the staging of dq
  S* sdo = sq + kTcTile * LD;  // (64, LD) their dout
  S* sk = sdo + kTcTile * LD;  // (64, LD) the current key tile
  S* sv = sk + kTcTile * LD;   // (64, LD) the current value tile
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTcTile;  // the longest (last) query tiles are scheduled first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const S* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;
  const S* d_o = dout + static_cast<int64_t>(b) * T * C + h * HS;
  load_tile<S, HS, kTcTile>(sq, q, C3, q0, T);
  load_tile<S, HS, kTcTile>(sdo, d_o, C, q0, T);

  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float L2[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    L2[r] = row[r] < T ? lse[static_cast<int64_t>(bh) * T + row[r]] * kLog2e : 0.0f;
    Dr[r] = row[r] < T ? dsum[static_cast<int64_t>(bh) * T + row[r]] : 0.0f;
  }
  const float scale_log2 = scale * kLog2e;
  const S* wq = sq + warp * 16 * LD;
  const S* wdo = sdo + warp * 16 * LD;
  float dq[NT_D][4];
#pragma unroll
  for (int nt = 0; nt < NT_D; nt++) dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.0f;
  const int q_last = min(q0 + kTcTile, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += kTcTile) {
    __syncthreads();  // every warp is done with the previous key and value tiles
    load_tile<S, HS, kTcTile>(sk, q + C, C3, k0, T);
    load_tile<S, HS, kTcTile>(sv, q + 2 * C, C3, k0, T);
    __syncthreads();                // the tiles (and, on the first pass, sq and sdo) are in place
    float s[NT_K][4], dp[NT_K][4];  // S and dP: the warp's 16 queries against the 64 keys
    two_products<S, KS, NT_K, LD>(s, dp, wq, wdo, sk, sv, lane);
#pragma unroll
    for (int nt = 0; nt < NT_K; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int j = k0 + nt * 8 + 2 * t4 + (i % 2), r = i / 2;
        const bool visible = j <= row[r] && row[r] < T;
        const float p = visible ? exp2f(fmaf(s[nt][i], scale_log2, -L2[r])) : 0.0f;
        s[nt][i] = p * (dp[nt][i] - Dr[r]);  // dS
      }
#pragma unroll
    for (int kk = 0; kk < NT_K / 2; kk++) {  // dq += dS K over the keys 16 kk .. 16 kk + 15
      uint32_t dsa[4];
      acc_to_a<S>(dsa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dn = 0; dn < NT_D / 2; dn++) {
        uint32_t kb[4];
        ldmatrix<4, true>(kb, bt_rows<LD>(sk + kk * 16 * LD + dn * 16, lane));
        mma_acc<S>(dq[2 * dn], dsa, {kb[0], kb[1]});
        mma_acc<S>(dq[2 * dn + 1], dsa, {kb[2], kb[3]});
      }
    }
  }
  store_rows<S, HS>(dqkv + static_cast<int64_t>(b) * T * C3 + h * HS, C3, q0 + warp * 16, T, sq + warp * 16 * LD, dq,
                    scale, scale);
}

// ---- launch geometry (host) ----------------------------------------------------------------------------------------
// Dynamic shared memory per block, in bytes (16-bit tiles of HS + kSmemPad per row, plus the dK/dV kernel's L and D).
inline int64_t tile_bytes(int rows, int HS) { return static_cast<int64_t>(rows) * (HS + kSmemPad) * 2; }
inline int64_t forward_smem_bytes(int HS) { return 3 * tile_bytes(kTcTile, HS); }
inline int64_t backward_dkv_smem_bytes(int HS) {
  const int QT = bwd_query_tile(HS);
  return 2 * tile_bytes(kTcTile, HS) + 2 * tile_bytes(QT, HS) + 2 * QT * static_cast<int64_t>(sizeof(float));
}
inline int64_t backward_dq_smem_bytes(int HS) { return 4 * tile_bytes(kTcTile, HS); }

// The grid: x = the B*NH heads, y = the tiles of kTcTile rows; kTcThreads per block. (The caller checks that B*NH and
// the tiles fit a grid: cuda_gpt.cu.)
inline LaunchShape tiled_shape(int B, int T, int NH, int64_t bytes) {
  const int64_t heads = static_cast<int64_t>(B) * NH, tiles = (static_cast<int64_t>(T) + kTcTile - 1) / kTcTile;
  // above 48 KiB (the dQ kernel from HS = 96 on, the forward and the dK/dV kernel at HS = 128) the launch opts in
  return {{static_cast<unsigned>(heads), static_cast<unsigned>(tiles), 1},
          {kTcThreads, 1, 1},
          bytes,
          bytes > kSharedDefaultBytes};
}
inline LaunchShape forward_shape(int B, int T, int NH, int HS) { return tiled_shape(B, T, NH, forward_smem_bytes(HS)); }
inline LaunchShape backward_dkv_shape(int B, int T, int NH, int HS) {
  return tiled_shape(B, T, NH, backward_dkv_smem_bytes(HS));
}
inline LaunchShape backward_dq_shape(int B, int T, int NH, int HS) {
  return tiled_shape(B, T, NH, backward_dq_smem_bytes(HS));
}

// The head sizes these kernels take: a multiple of 16 (one mma k-step) up to kTcMaxHS.
inline bool tc_head_size(int HS) { return HS > 0 && HS % 16 == 0 && HS <= kTcMaxHS; }
// Every pointer 16-byte aligned (the kernels move 16-byte vectors); null pointers are ignored.
inline bool tc_pointers_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p != nullptr && !aligned16(p)) return false;
  return true;
}

// Host side: calls f(std::integral_constant<int, HS>{}) for the head sizes the kernels are instantiated for (16, 32,
// .., 128); false (f not called) for any other.
template <typename F>
bool with_tc_head_size(int HS, F&& f) {
  switch (HS) {
    case 16: f(std::integral_constant<int, 16>{}); return true;
    case 32: f(std::integral_constant<int, 32>{}); return true;
    case 48: f(std::integral_constant<int, 48>{}); return true;
    case 64: f(std::integral_constant<int, 64>{}); return true;
    case 80: f(std::integral_constant<int, 80>{}); return true;
    case 96: f(std::integral_constant<int, 96>{}); return true;
    case 112: f(std::integral_constant<int, 112>{}); return true;
    case 128: f(std::integral_constant<int, 128>{}); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace hpct::kernels::cuda::flash_tc
