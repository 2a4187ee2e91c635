#pragma once
// The flash attention kernels of the CUDA backend and the host functions that give their launch geometry, included
// by cuda_gpt.cu (which launches them: attention_forward / attention_backward there). Device code compiled by nvcc
// through cuda_gpt.cu and, as plain C++, by the host emulation of CUDA (tests/cuda_emu, cuda_emu.hpp):
// tests/cuda_emu/test_emu_flash_attention.cpp runs every kernel here at the geometry below against the CPU backend,
// which is how a machine without a GPU executes and checks the kernels' indexing, masking, online softmax and barrier
// placement. Keep it so: CUDA built-ins only (no CUDA header), shared memory through HPCT_DYNAMIC_SHARED
// (cuda_device_common.cuh), and every new kernel with its emulated test.
//
// Legend: B batch, T time, C channels, NH heads, HS = C/NH head size; qkv rows hold [q | k | v], each (NH, HS), row
// stride 3C; out and dout (B,T,C) hold head h in columns [h HS, (h+1) HS); L (lse) and D (dsum) are (B,NH,T).
//
// Storage types (cuda_device_common.cuh): qkv, out, dout and dqkv have the storage type S (float or __nv_bfloat16); L
// and D are float whatever S. Tiles are widened to float as they are loaded into shared memory (load_tile), so the
// tiles, the scores, the online softmax and every accumulation are float for both; each output element is rounded
// once to S when it is stored. The kernels are the same for both storage types but for those conversions.
//
// Tensor cores. For 16-bit storage with a head size that is a multiple of 16 (up to 128), cuda_gpt.cu runs the
// FlashAttention-2-style mma.sync kernels of cuda_flash_attention_tc.cuh instead (same L and D, same deterministic
// three-step backward; its header has their numerics and why they are own kernels rather than cuDNN's fused
// attention). The kernels here serve float storage (fp32 throughout) and the other head sizes, and rowdot_kernel
// (step 1 of the backward) serves both.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_device_common.cuh"

namespace hpct::kernels::cuda::flash {
// Internal linkage: each includer compiles its own copy (the CUDA kernels in cuda_gpt.cu, host functions in the
// emulated test), which must never be merged by the linker.
namespace {

// Tiling. A block of kWarps warps owns one tile of kTile = 32 rows of one (b, h): query rows in the forward and the dQ
// kernel, key rows in the dK/dV kernel. Warp w owns the kRowsPerWarp = 4 rows 4w .. 4w+3 of it. The other side
// streams through shared memory in tiles of 32 rows, in ascending order, lane l holding row l of the streamed tile:
// lane l computes the scores of the warp's rows against its row l (a dot product over d = 0 .. HS-1, in order).
// Products summed over a streamed tile, e.g. o += p v, are accumulated in lane order 0 .. 31 through warp shuffles,
// into per-lane registers over the head dimension: lane l holds d = l, l + 32, ... (NS = ceil(HS / 32) slots, HS <=
// kMaxHS). Every sum therefore runs in an order fixed by the shapes alone: bitwise reproducible, with no atomics.
// Shared memory: a tile read with one row per lane ("lane = row") is padded to HS + 1 floats per row, so the 32 lanes
// reading column d of 32 rows hit 32 different banks; tiles read by broadcast (the whole warp at one address) or
// along a row (lanes over d) are not padded. Rows >= T are loaded as zeros and masked out of every sum.
// Causality: query tiles and key tiles share the same grid of 32, so the query tile starting at q0 needs exactly the
// key tiles k0 = 0, 32, .., q0; the diagonal tile is masked element-wise (key j <= query t). Key 0 is visible to every
// row, so a row's running max is finite from its first tile on (no -inf - -inf).
constexpr int kTile = 32;                     // rows per tile, on both sides: one per lane
constexpr int kWarps = 8;                     // warps per block
constexpr int kRowsPerWarp = kTile / kWarps;  // rows of the block's own tile per warp
constexpr int kAttnThreads = kWarps * 32;
constexpr int kMaxHS = 128;  // head sizes up to 4 slots of 32 per lane (GPT-2: 64)
constexpr unsigned kFullMask = 0xffffffffu;

// dst[r * ld_dst + d] = src[(row0 + r) * ld_src + d] (widened to float) for the kTile rows r and d < HS; rows >= T
// are zero. Called by every thread of the block (a __syncthreads() must follow before the tile is read).
template <typename S>
__device__ __forceinline__ void load_tile(float* dst, int ld_dst, const S* __restrict__ src, int64_t ld_src, int row0,
                                          int T, int HS) {
  for (int e = threadIdx.x; e < kTile * HS; e += blockDim.x) {
    const int r = e / HS, d = e - r * HS, t = row0 + r;
    dst[r * ld_dst + d] = t < T ? to_float(src[static_cast<int64_t>(t) * ld_src + d]) : 0.0f;
  }
}

// Forward. Block (bh, tile): the query rows [q0, q0 + 32) of head h of sequence b. For each key tile, lane l scores
// key k0 + l against the warp's 4 rows and each row runs the online softmax:
//   m' = max(m, max_j x_j),  c = exp(m - m'),  p_j = exp(x_j - m'),  l' = l c + sum_j p_j,  o' = o c + sum_j p_j v_j
// with x_j = scale q_t . k_j (masked: j > t or j >= T). At the end out_t = o / l and L_t = m + log(l).
template <typename S, int NS>
__global__ void __launch_bounds__(kAttnThreads)
    forward_kernel(S* __restrict__ out, float* __restrict__ lse, const S* __restrict__ qkv, int T, int C, int NH,
                   float scale) {
  HPCT_DYNAMIC_SHARED(float, smem);
  const int HS = C / NH, ldp = HS + 1;
  float* sq = smem;              // (kTile, HS)     the block's query rows (broadcast reads)
  float* sk = sq + kTile * HS;   // (kTile, HS + 1) the current key tile (lane = key)
  float* sv = sk + kTile * ldp;  // (kTile, HS)     the current value tile (lanes over d)
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // the longest (last) query tiles are scheduled first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const S* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;  // row t at q + t C3; k = q + C, v = q + 2C
  load_tile(sq, HS, q, C3, q0, T, HS);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][NS];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < NS; c++) o[r][c] = 0.0f;
  }
  const int q_last = min(q0 + kTile, T) - 1;  // the block's last real row: the last key it sees
  for (int k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // every warp is done with the previous key tile
    load_tile(sk, ldp, q + C, C3, k0, T, HS);
    load_tile(sv, HS, q + 2 * C, C3, k0, T, HS);
    __syncthreads();  // the tiles (and, on the first pass, sq) are in place
    float s[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r++) s[r] = 0.0f;
    for (int d = 0; d < HS; d++) {
      const float kd = sk[lane * ldp + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) s[r] += sq[(warp * kRowsPerWarp + r) * HS + d] * kd;
    }
    const int j = k0 + lane;  // this lane's key
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r++) {
      const int t = q0 + warp * kRowsPerWarp + r;  // >= T only in the last tile: computed (finite), never stored
      const bool visible = j <= t && j < T;
      const float x = visible ? s[r] * scale : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(x));  // finite: key 0 is visible in the first tile
      const float p = visible ? expf(x - m_new) : 0.0f;
      const float corr = expf(m[r] - m_new);  // 0 on the first tile (m = -inf)
      l[r] = l[r] * corr + warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < NS; c++) o[r][c] *= corr;
      for (int jj = 0; jj < kTile; jj++) {
        const float pj = __shfl_sync(kFullMask, p, jj);
#pragma unroll
        for (int c = 0; c < NS; c++) {
          const int d = lane + 32 * c;
          if (d < HS) o[r][c] += pj * sv[jj * HS + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int t = q0 + warp * kRowsPerWarp + r;
    if (t >= T) continue;
    const float inv = 1.0f / l[r];  // l >= 1: the max term contributes exp(0)
    S* o_row = out + (static_cast<int64_t>(b) * T + t) * C + h * HS;
#pragma unroll
    for (int c = 0; c < NS; c++) {
      const int d = lane + 32 * c;
      if (d < HS) o_row[d] = from_float<S>(o[r][c] * inv);
    }
    if (lane == 0) lse[static_cast<int64_t>(bh) * T + t] = m[r] + logf(l[r]);
  }
}

// Backward, step 1: D[(b NH + h) T + t] = sum_d dout[b, t, h HS + d] out[b, t, h HS + d] (= sum_j P dP of the row),
// one warp per row, lanes over d, then the warp's fixed shuffle tree.
template <typename S>
__global__ void __launch_bounds__(kAttnThreads)
    rowdot_kernel(float* __restrict__ dsum, const S* __restrict__ dout, const S* __restrict__ out, int64_t rows, int T,
                  int C, int NH) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // uniform over the warp: the shuffles below see all 32 lanes
  const int HS = C / NH;
  const int t = static_cast<int>(row % T);
  const int64_t bh = row / T;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int64_t off = (b * T + t) * C + static_cast<int64_t>(h) * HS;
  float s = 0.0f;
  for (int d = lane; d < HS; d += 32) s += to_float(dout[off + d]) * to_float(out[off + d]);
  s = warp_sum(s);
  if (lane == 0) dsum[row] = s;
}

// Backward, step 2: dK and dV. Block (bh, tile): the keys [k0, k0 + 32). It walks the query tiles q0 = k0, k0 + 32,
// .. (the rows that see these keys) in order; lane l takes query row i = q0 + l and, for each of the warp's 4 keys j,
// recomputes P = exp(scale q_i . k_j - L_i) (0 where j > i) and dP = dout_i . v_j, dS = P (dP - D_i); then
//   dv_j += sum_i P dout_i,   dk_j += sum_i dS q_i   (times scale at the end).
template <typename S, int NS>
__global__ void __launch_bounds__(kAttnThreads)
    backward_dkv_kernel(S* __restrict__ dqkv, const S* __restrict__ dout, const S* __restrict__ qkv,
                        const float* __restrict__ lse, const float* __restrict__ dsum, int T, int C, int NH,
                        float scale) {
  HPCT_DYNAMIC_SHARED(float, smem);
  const int HS = C / NH, ldp = HS + 1;
  float* sk = smem;               // (kTile, HS)     the block's keys (broadcast reads)
  float* sv = sk + kTile * HS;    // (kTile, HS)     the block's values (broadcast reads)
  float* sq = sv + kTile * HS;    // (kTile, HS + 1) the current query tile (lane = row, and lanes over d)
  float* sdo = sq + kTile * ldp;  // (kTile, HS + 1) dout of the current query tile (likewise)
  float* sl = sdo + kTile * ldp;  // (kTile)         L of the current query rows
  float* sd = sl + kTile;         // (kTile)         D of the current query rows
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int k0 = blockIdx.y * kTile;  // the longest (first) key tiles are scheduled first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const S* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;    // row t at q + t C3; k = q + C, v = q + 2C
  const S* d_o = dout + static_cast<int64_t>(b) * T * C + h * HS;  // row t at d_o + t C
  const float* L = lse + static_cast<int64_t>(bh) * T;
  const float* D = dsum + static_cast<int64_t>(bh) * T;
  load_tile(sk, HS, q + C, C3, k0, T, HS);
  load_tile(sv, HS, q + 2 * C, C3, k0, T, HS);

  float dk[kRowsPerWarp][NS], dv[kRowsPerWarp][NS];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++)
#pragma unroll
    for (int c = 0; c < NS; c++) dk[r][c] = dv[r][c] = 0.0f;
  for (int q0 = k0; q0 < T; q0 += kTile) {
    __syncthreads();  // every warp is done with the previous query tile
    load_tile(sq, ldp, q, C3, q0, T, HS);
    load_tile(sdo, ldp, d_o, C, q0, T, HS);
    if (threadIdx.x < kTile) {
      const int t = q0 + threadIdx.x;
      sl[threadIdx.x] = t < T ? L[t] : 0.0f;
      sd[threadIdx.x] = t < T ? D[t] : 0.0f;
    }
    __syncthreads();          // the tiles (and, on the first pass, sk and sv) are in place
    const int i = q0 + lane;  // this lane's query row
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r++) {
      const int jr = warp * kRowsPerWarp + r, j = k0 + jr;  // the key (>= T only in the last tile: never stored)
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < HS; d++) {
        s += sq[lane * ldp + d] * sk[jr * HS + d];
        dp += sdo[lane * ldp + d] * sv[jr * HS + d];
      }
      const bool visible = j <= i && i < T;
      const float p = visible ? expf(s * scale - sl[lane]) : 0.0f;
      const float ds = p * (dp - sd[lane]);
      for (int ii = 0; ii < kTile; ii++) {
        const float pi = __shfl_sync(kFullMask, p, ii);
        const float dsi = __shfl_sync(kFullMask, ds, ii);
#pragma unroll
        for (int c = 0; c < NS; c++) {
          const int d = lane + 32 * c;
          if (d < HS) {
            dv[r][c] += pi * sdo[ii * ldp + d];
            dk[r][c] += dsi * sq[ii * ldp + d];
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int j = k0 + warp * kRowsPerWarp + r;
    if (j >= T) continue;
    S* row = dqkv + (static_cast<int64_t>(b) * T + j) * C3 + h * HS;  // dq at row, dk at row + C, dv at row + 2C
#pragma unroll
    for (int c = 0; c < NS; c++) {
      const int d = lane + 32 * c;
      if (d < HS) {
        row[C + d] = from_float<S>(scale * dk[r][c]);
        row[2 * C + d] = from_float<S>(dv[r][c]);
      }
    }
  }
}

// Backward, step 3: dQ. Block (bh, tile): the query rows [q0, q0 + 32), walking the key tiles 0 .. q0 in order; lane
// l takes key j = k0 + l and, for each of the warp's 4 rows t, recomputes P and dS as above; then
//   dq_t += sum_j dS k_j   (times scale at the end).
template <typename S, int NS>
__global__ void __launch_bounds__(kAttnThreads)
    backward_dq_kernel(S* __restrict__ dqkv, const S* __restrict__ dout, const S* __restrict__ qkv,
                       const float* __restrict__ lse, const float* __restrict__ dsum, int T, int C, int NH,
                       float scale) {
  HPCT_DYNAMIC_SHARED(float, smem);
  const int HS = C / NH, ldp = HS + 1;
  float* sq = smem;              // (kTile, HS)     the block's query rows (broadcast reads)
  float* sdo = sq + kTile * HS;  // (kTile, HS)     their dout (broadcast reads)
  float* sk = sdo + kTile * HS;  // (kTile, HS + 1) the current key tile (lane = key, and lanes over d)
  float* sv = sk + kTile * ldp;  // (kTile, HS + 1) the current value tile (lane = key)
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // the longest (last) query tiles are scheduled first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const S* q = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;
  const S* d_o = dout + static_cast<int64_t>(b) * T * C + h * HS;
  load_tile(sq, HS, q, C3, q0, T, HS);
  load_tile(sdo, HS, d_o, C, q0, T, HS);

  float Lr[kRowsPerWarp], Dr[kRowsPerWarp], dq[kRowsPerWarp][NS];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int t = q0 + warp * kRowsPerWarp + r;
    Lr[r] = t < T ? lse[static_cast<int64_t>(bh) * T + t] : 0.0f;
    Dr[r] = t < T ? dsum[static_cast<int64_t>(bh) * T + t] : 0.0f;
#pragma unroll
    for (int c = 0; c < NS; c++) dq[r][c] = 0.0f;
  }
  const int q_last = min(q0 + kTile, T) - 1;
  for (int k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // every warp is done with the previous key tile
    load_tile(sk, ldp, q + C, C3, k0, T, HS);
    load_tile(sv, ldp, q + 2 * C, C3, k0, T, HS);
    __syncthreads();  // the tiles (and, on the first pass, sq and sdo) are in place
    float s[kRowsPerWarp], dp[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r++) s[r] = dp[r] = 0.0f;
    for (int d = 0; d < HS; d++) {
      const float kd = sk[lane * ldp + d], vd = sv[lane * ldp + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) {
        s[r] += sq[(warp * kRowsPerWarp + r) * HS + d] * kd;
        dp[r] += sdo[(warp * kRowsPerWarp + r) * HS + d] * vd;
      }
    }
    const int j = k0 + lane;  // this lane's key
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r++) {
      const int t = q0 + warp * kRowsPerWarp + r;
      const bool visible = j <= t && t < T;
      const float p = visible ? expf(s[r] * scale - Lr[r]) : 0.0f;
      const float ds = p * (dp[r] - Dr[r]);
      for (int jj = 0; jj < kTile; jj++) {
        const float dsj = __shfl_sync(kFullMask, ds, jj);
#pragma unroll
        for (int c = 0; c < NS; c++) {
          const int d = lane + 32 * c;
          if (d < HS) dq[r][c] += dsj * sk[jj * ldp + d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int t = q0 + warp * kRowsPerWarp + r;
    if (t >= T) continue;
    S* row = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * HS;
#pragma unroll
    for (int c = 0; c < NS; c++) {
      const int d = lane + 32 * c;
      if (d < HS) row[d] = from_float<S>(scale * dq[r][c]);
    }
  }
}

// ---- launch geometry (host) ----------------------------------------------------------------------------------------
// Dynamic shared memory per block of the three flash kernels, in floats.
inline int64_t forward_smem_floats(int HS) { return static_cast<int64_t>(kTile) * (2 * HS + (HS + 1)); }
inline int64_t backward_dkv_smem_floats(int HS) { return static_cast<int64_t>(kTile) * (2 * HS + 2 * (HS + 1) + 2); }
inline int64_t backward_dq_smem_floats(int HS) { return static_cast<int64_t>(kTile) * (2 * HS + 2 * (HS + 1)); }

// The grid of the tiled kernels: x = the B*NH heads, y = the tiles of kTile rows; kAttnThreads per block and the
// kernel's dynamic shared memory. (The caller checks that B*NH and the tiles fit a grid: cuda_gpt.cu.)
inline LaunchShape tiled_shape(int B, int T, int NH, int64_t smem_floats) {
  const int64_t heads = static_cast<int64_t>(B) * NH, tiles = (static_cast<int64_t>(T) + kTile - 1) / kTile;
  const int64_t bytes = smem_floats * static_cast<int64_t>(sizeof(float));
  // above 48 KiB (the backward kernels from HS = 96 on, the forward at HS = 128) the launch opts in
  return {{static_cast<unsigned>(heads), static_cast<unsigned>(tiles), 1},
          {kAttnThreads, 1, 1},
          bytes,
          bytes > kSharedDefaultBytes};
}
inline LaunchShape forward_shape(int B, int T, int NH, int HS) {
  return tiled_shape(B, T, NH, forward_smem_floats(HS));
}
inline LaunchShape backward_dkv_shape(int B, int T, int NH, int HS) {
  return tiled_shape(B, T, NH, backward_dkv_smem_floats(HS));
}
inline LaunchShape backward_dq_shape(int B, int T, int NH, int HS) {
  return tiled_shape(B, T, NH, backward_dq_smem_floats(HS));
}
// rowdot_kernel: one warp per row, kWarps rows per block
inline LaunchShape rowdot_shape(int64_t rows) {
  return {{static_cast<unsigned>((rows + kWarps - 1) / kWarps), 1, 1}, {kAttnThreads, 1, 1}, 0};
}

// Host side: calls f(std::integral_constant<int, NS>{}) with NS = ceil(HS / 32), the register slots per lane (1 .. 4)
// the kernels are instantiated for; false (f not called) when HS is outside [1, kMaxHS].
template <typename F>
bool with_head_slots(int HS, F&& f) {
  switch ((HS + 31) / 32) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace hpct::kernels::cuda::flash
