// CUDA backend, core group (cuda_kernels.hpp): memory helpers, reductions, scale, AdamW, SGD, residual, GELU, ReLU,
// the embedding (serial and vocab-parallel) and LayerNorm. The CPU backend (cpu/cpu_layers.cpp, cpu_loss_optim.cpp,
// cpu_sgd.cpp, cpu_conv.cpp's ReLU) is the reference: each kernel below evaluates the same float expressions in the
// same order per element, so that pointwise ops agree to an ulp or so (both compilers may contract a*b+c into an FMA,
// each in its own pattern; nvcc's division and sqrtf are IEEE-rounded, as on the CPU).
//
// Legend: B batch, T time, C channels, N = B*T rows (LayerNorm: N rows of C); vocab-parallel: this rank holds the
// embedding rows [v0, v0+Vl) of the padded vocabulary Vp.
//
// Every op is asynchronous on stream_of(ctx) (null: the default stream), checks its host-side arguments and its
// launches, never allocates and never synchronizes (except synchronize(), whose contract is to block the host).
//
// Determinism: no floating-point atomics anywhere in this file. Every reduction runs in an order fixed by the
// shapes and the (constant) launch configuration, never by timing, so a run reproduces itself bit for bit:
//   - sum / sum_squares_accumulate: one block of 1024 threads, each summing a fixed strided subset in double, then a
//     fixed tree (block_sum). One block is not the fastest (see the note at reduce_kernel), but it needs no scratch;
//   - encoder dwte: each (row, column) is owned by one thread, which adds the positions in increasing order: the
//     CPU's order, so dwte equals the CPU backend's bit for bit; dwpe likewise (one thread per (t, c), b in order);
//   - LayerNorm dweight/dbias: one block per 32 columns, 16 fixed row groups in double, summed in a fixed order.
//
// Invalid tokens: the CPU backend throws on a negative token; a kernel cannot, and the host never reads device data,
// so the forward embeddings write NaN for a negative token (the loss turns NaN and the run's NaN check stops it) and
// the backward ones skip it. The upper bound Vp is not passed to the serial encoder (as on the CPU: the data loader
// checks the tokens against the vocabulary).
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.hpp"

namespace hpct::kernels::cuda {
namespace {

constexpr int kThreads = 256;         // elementwise kernels: threads per block (grid_for caps the grid)
constexpr int kReduceThreads = 1024;  // sum / sum_squares_accumulate: the single block
constexpr int kWteGroups = 64;        // encoder dwte: row-ownership groups (row % kWteGroups); any value gives the
                                      // same bits (each row's positions are added in increasing order regardless)
constexpr int kWteThreads = 128;      // encoder dwte: columns per block (a multiple of 32: warp-wide ballots)
constexpr int kLnWarps = 8;           // LayerNorm forward / dinp: rows (one warp each) per block
constexpr int kLnColTile = 32;        // LayerNorm dweight/dbias: columns per block (one per lane)
constexpr int kLnRowGroups = 16;      // LayerNorm dweight/dbias: fixed row groups per block (blockDim.y)
constexpr int kLnRowThreads = kLnWarps * 32;                // LayerNorm forward / dinp: threads per block
constexpr int kLnParamThreads = kLnColTile * kLnRowGroups;  // LayerNorm dweight/dbias: threads per block
constexpr unsigned kFullMask = 0xffffffffu;

// GELU tanh approximation: the constants and formulation of cpu/cpu_math.hpp (gelu_simd / gelu_grad_simd), with
// the device's expf in place of exp_simd (both within ~2 ulp of exp). cpu_math.hpp itself is C++20 host code.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

#define HPCT_GRID_STRIDE_LOOP(i, n)                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// ---- reductions ---------------------------------------------------------------------------------------------------
template <bool kSquare>
__device__ __forceinline__ void accumulate(double& acc, float v) {
  const double d = v;
  acc += kSquare ? d * d : d;
}
template <bool kSquare>
__device__ __forceinline__ void accumulate4(double& acc, float4 v) {
  accumulate<kSquare>(acc, v.x);
  accumulate<kSquare>(acc, v.y);
  accumulate<kSquare>(acc, v.z);
  accumulate<kSquare>(acc, v.w);
}

// One block of kReduceThreads: thread k sums, in double and in increasing index order, the elements (or float4s when
// x is 16-byte aligned) k, k + 1024, k + 2048, ...; then a fixed tree over the block. The order depends on n and on
// the alignment of x only. Writes *out_sum = float(total) when out_sum is set, else *out_acc += total.
// Note: one SM streams a few hundred GB/s at best, so a 500 MB gradient norm takes a few ms; a multi-block two-pass
// version needs a scratch of partial sums, which the interface does not pass.
template <bool kSquare>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_kernel(const float* x, int64_t n, bool vec4, float* out_sum, double* out_acc) {
  __shared__ double shared[32];
  double acc = 0.0;
  const int64_t tid = threadIdx.x, stride = blockDim.x;
  int64_t tail = 0;  // first element of the scalar tail
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    int64_t j = tid;
    // four independent loads in flight per thread; the additions stay in increasing j order
    for (; j + 3 * stride < n4; j += 4 * stride) {
      const float4 a = __ldg(x4 + j), b = __ldg(x4 + j + stride), c = __ldg(x4 + j + 2 * stride),
                   d = __ldg(x4 + j + 3 * stride);
      accumulate4<kSquare>(acc, a);
      accumulate4<kSquare>(acc, b);
      accumulate4<kSquare>(acc, c);
      accumulate4<kSquare>(acc, d);
    }
    for (; j < n4; j += stride) accumulate4<kSquare>(acc, __ldg(x4 + j));
    tail = n4 * 4;
  }
  for (int64_t i = tail + tid; i < n; i += stride) accumulate<kSquare>(acc, __ldg(x + i));
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    if (out_sum) *out_sum = static_cast<float>(total);
    else
      *out_acc += total;
  }
}

// ---- pointwise ----------------------------------------------------------------------------------------------------
// (No __restrict__ on the pointwise kernels: in-place calls, out == inp, are allowed; each thread reads and writes
// only its own index.)
__global__ void scale_kernel(float* x, float s, int64_t n) { HPCT_GRID_STRIDE_LOOP(i, n) x[i] *= s; }

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  HPCT_GRID_STRIDE_LOOP(i, n) out[i] = a[i] + b[i];
}

// e = exp(2u) (2u capped at 80) and d = 1 / (1 + e), u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh u) = e d.
__device__ __forceinline__ void gelu_parts(float x, float& e, float& d) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float two_u = 2.0f * u;
  e = expf(two_u > 80.0f ? 80.0f : two_u);
  d = 1.0f / (1.0f + e);
}

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  HPCT_GRID_STRIDE_LOOP(i, n) {
    const float x = inp[i];
    float e, d;
    gelu_parts(x, e, d);
    out[i] = x * (e * d);
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  HPCT_GRID_STRIDE_LOOP(i, n) {
    const float x = inp[i];
    float e, d;
    gelu_parts(x, e, d);
    const float sech2 = 4.0f * (e * d) * d;
    const float grad = (e * d) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = grad * dout[i];
  }
}

__global__ void relu_forward_kernel(float* out, const float* inp, int64_t n) {
  HPCT_GRID_STRIDE_LOOP(i, n) {
    const float x = inp[i];
    out[i] = x > 0.0f ? x : 0.0f;
  }
}

__global__ void relu_backward_kernel(float* dinp, const float* dout, const float* out, int64_t n) {
  HPCT_GRID_STRIDE_LOOP(i, n) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

// ---- optimizers (cpu_loss_optim.cpp adamw_update, cpu_sgd.cpp sgd_update: same expressions, same order) ----------
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n, float beta1, float beta2,
                             float eps, float grad_scale, float decay, float step_size, float bc2_sqrt,
                             float one_minus_b1, float one_minus_b2) {
  HPCT_GRID_STRIDE_LOOP(i, n) {
    const float g = grads[i] * grad_scale;
    const float p = params[i] * decay;
    const float mi = m[i] * beta1 + g * one_minus_b1;
    const float vi = v[i] * beta2 + g * g * one_minus_b2;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    params[i] = p - step_size * (mi / denom);
  }
}

enum class SgdMode : int { kNoMomentum = 0, kFirstStep = 1, kLaterStep = 2 };

__global__ void sgd_kernel(float* params, const float* grads, float* buf, int64_t n, float lr, float momentum,
                           float take, float weight_decay, bool nesterov, float grad_scale, SgdMode mode) {
  HPCT_GRID_STRIDE_LOOP(i, n) {
    const float g = grads[i] * grad_scale + weight_decay * params[i];
    float d;
    if (mode == SgdMode::kNoMomentum) {
      d = g;  // the buffer is neither read nor written (it may be null)
    } else if (mode == SgdMode::kFirstStep) {
      buf[i] = g;  // assigned, never read: the buffer may hold garbage on the first step
      d = nesterov ? g + momentum * g : g;
    } else {
      const float b = buf[i] * momentum + take * g;
      buf[i] = b;
      d = nesterov ? g + momentum * b : b;
    }
    params[i] = params[i] - lr * d;
  }
}

// ---- embedding ----------------------------------------------------------------------------------------------------
// out[n, c] = (inp[n] - v0 in [0, Vl) ? wte[inp[n] - v0, c] : 0) (+ wpe[n % T, c] when wpe is set); the serial
// encoder is v0 = 0, Vl = unbounded, wpe set. Branches as the CPU's (w + p, w, p or 0), so -0.0 survives alike.
__global__ void encoder_forward_kernel(float* out, const int32_t* inp, const float* wte, const float* wpe, int64_t v0,
                                       int64_t Vl, int64_t N, int T, int C) {
  const int64_t total = N * C;
  HPCT_GRID_STRIDE_LOOP(idx, total) {
    const int64_t n = idx / C;
    const int c = static_cast<int>(idx - n * C);
    const int32_t tok = inp[n];
    if (tok < 0) {
      out[idx] = quiet_nan();  // an invalid token (the CPU backend throws): make it visible in the loss
      continue;
    }
    const int64_t j = static_cast<int64_t>(tok) - v0;  // local row, or outside [0, Vl): another rank's
    const bool mine = j >= 0 && j < Vl;
    if (wpe) {
      const float p = wpe[(n % T) * C + c];
      out[idx] = mine ? wte[j * C + c] + p : p;
    } else {
      out[idx] = mine ? wte[j * C + c] : 0.0f;
    }
  }
}

// dwte[j, c] += dout[n, c] for every position n whose local row j = inp[n] - v0 lies in [0, Vl), in increasing n.
// Grid (column blocks, kWteGroups): the thread of column c in group g owns the rows j with j % kWteGroups == g, so no
// two threads ever touch the same element and each element's additions run in position order: the CPU backend's
// order (bitwise equal results). A warp reads 32 tokens at once and walks only its own, in order, with a ballot.
__global__ void __launch_bounds__(kWteThreads)
    encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* inp, int64_t v0, int64_t Vl, int64_t N,
                                int C) {
  const int lane = threadIdx.x % 32;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;  // may be >= C: such lanes join the ballots, write nothing
  const int g = blockIdx.y;
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const int64_t n = n0 + lane;
    int32_t tok = -1;
    bool owned = false;
    if (n < N) {
      tok = inp[n];
      const int64_t j = static_cast<int64_t>(tok) - v0;
      owned = tok >= 0 && j >= 0 && j < Vl && j % kWteGroups == g;  // negative tokens are skipped
    }
    unsigned mask = __ballot_sync(kFullMask, owned);  // the same on every lane of the warp
    while (mask) {
      const int k = __ffs(mask) - 1;  // lowest set bit first: increasing position
      mask &= mask - 1;
      const int32_t tk = __shfl_sync(kFullMask, tok, k);
      if (c < C) {
        const int64_t j = static_cast<int64_t>(tk) - v0;
        dwte[j * C + c] += dout[(n0 + k) * C + c];
      }
    }
  }
}

// dwpe[t, c] += dout[b, t, c] for b = 0, 1, ..., B-1 in order, in float (the CPU's order: bitwise equal results).
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const int64_t total = static_cast<int64_t>(T) * C;
  HPCT_GRID_STRIDE_LOOP(idx, total) {
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc += dout[static_cast<int64_t>(b) * total + idx];
    dwpe[idx] = acc;
  }
}

// ---- LayerNorm ----------------------------------------------------------------------------------------------------
// One warp per row (kLnWarps rows per block): mean and two-pass variance as float warp sums, then the output.
__global__ void __launch_bounds__(kLnRowThreads)
    layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                             const float* bias, int N, int C) {
  constexpr float eps = 1e-5f;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // uniform over the warp: the shuffles below see all 32 lanes
  const float* x = inp + row * C;
  float* o = out + row * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += x[c];
  s = warp_sum(s);
  const float m = s / C;
  float v = 0.0f;  // two-pass variance: no E[x^2] - m^2 cancellation
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  v = warp_sum(v);
  const float r = 1.0f / sqrtf(v / C + eps);
  if (bias) {
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * weight[c] + bias[c];
  } else {
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * weight[c];
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp += rstd * (w dout - mean(w dout) - norm * mean(w dout norm)): one warp per row, float warp sums.
__global__ void __launch_bounds__(kLnRowThreads)
    layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                   const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // uniform over the warp
  const float* x = inp + row * C;
  const float* d = dout + row * C;
  float* dx = dinp + row * C;
  const float m = mean[row], r = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dnorm = weight[c] * d[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (x[c] - m) * r;
  }
  dnorm_sum = warp_sum(dnorm_sum);
  dnorm_norm_sum = warp_sum(dnorm_norm_sum);
  const float dnorm_mean = dnorm_sum / C, dnorm_norm_mean = dnorm_norm_sum / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * r;
    dx[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * r;
  }
}

// dweight[c] += sum_n dout[n,c] norm[n,c], dbias[c] += sum_n dout[n,c] (dbias may be null), in double as the CPU.
// Block (kLnColTile, kLnRowGroups) per kLnColTile columns: thread (lane, y) sums the rows y, y + 16, ... in order,
// then row group 0 adds the 16 partials in order: a fixed order (deterministic), coalesced 128-byte row segments.
__global__ void __launch_bounds__(kLnParamThreads)
    layernorm_backward_dweight_kernel(float* dweight, float* dbias, const float* dout, const float* inp,
                                      const float* mean, const float* rstd, int N, int C) {
  __shared__ double part_w[kLnRowGroups][kLnColTile];
  __shared__ double part_b[kLnRowGroups][kLnColTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * kLnColTile + tx;
  double acc_w = 0.0, acc_b = 0.0;
  if (c < C) {
    for (int64_t n = ty; n < N; n += kLnRowGroups) {
      const float x = inp[n * C + c], d = dout[n * C + c];
      const float m = mean[n], r = rstd[n];
      acc_w += d * ((x - m) * r);  // the float product, added in double (as the CPU)
      acc_b += d;
    }
  }
  part_w[ty][tx] = acc_w;
  part_b[ty][tx] = acc_b;
  __syncthreads();
  if (ty == 0 && c < C) {
    double w = 0.0, b = 0.0;
    for (int k = 0; k < kLnRowGroups; k++) {
      w += part_w[k][tx];
      b += part_b[k][tx];
    }
    dweight[c] += static_cast<float>(w);
    if (dbias) dbias[c] += static_cast<float>(b);
  }
}

// ---- host-side helpers ----------------------------------------------------------------------------------------------
void check_encoder_shape(const char* op, int B, int T, int C) {
  HPCT_CHECK(B >= 0 && T > 0 && C > 0, "{}: bad shape B={} T={} C={}", op, B, T, C);
}

void launch_encoder_forward(const ExecContext& ctx, const char* op, float* out, const int32_t* inp, const float* wte,
                            const float* wpe, int64_t v0, int64_t Vl, int B, int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  if (N == 0) return;
  const int64_t total = N * C;
  encoder_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream_of(ctx)>>>(out, inp, wte, wpe, v0, Vl, N, T,
                                                                                     C);
  HPCT_CUDA_LAUNCH_CHECK(op);
}

void launch_encoder_backward(const ExecContext& ctx, const char* op, float* dwte, float* dwpe, const float* dout,
                             const int32_t* inp, int64_t v0, int64_t Vl, int B, int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  if (N == 0) return;
  const dim3 grid((C + kWteThreads - 1) / kWteThreads, kWteGroups);
  encoder_backward_wte_kernel<<<grid, kWteThreads, 0, stream_of(ctx)>>>(dwte, dout, inp, v0, Vl, N, C);
  HPCT_CUDA_LAUNCH_CHECK(op);
  if (dwpe) {
    const int64_t total = static_cast<int64_t>(T) * C;
    encoder_backward_wpe_kernel<<<grid_for(total, kThreads), kThreads, 0, stream_of(ctx)>>>(dwpe, dout, B, T, C);
    HPCT_CUDA_LAUNCH_CHECK(op);
  }
}

template <bool kSquare>
void launch_reduce(const ExecContext& ctx, const char* op, const float* x, int64_t n, float* out_sum, double* out_acc) {
  HPCT_CHECK(n >= 0, "{}: n={} is negative", op, n);
  HPCT_CHECK(x != nullptr || n == 0, "{}: x is null", op);
  const bool vec4 = (reinterpret_cast<uintptr_t>(x) % alignof(float4)) == 0;
  reduce_kernel<kSquare><<<1, kReduceThreads, 0, stream_of(ctx)>>>(x, n, vec4, out_sum, out_acc);
  HPCT_CUDA_LAUNCH_CHECK(op);
}

}  // namespace

// ---- embedding ----------------------------------------------------------------------------------------------------
void encoder_forward(const ExecContext& ctx, float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                     int T, int C) {
  check_encoder_shape("encoder_forward", B, T, C);
  HPCT_CHECK(wpe != nullptr, "encoder_forward: wpe is null (only the vocab-parallel encoder takes none)");
  launch_encoder_forward(ctx, "encoder_forward", out, inp, wte, wpe, 0, std::numeric_limits<int64_t>::max(), B, T, C);
}

void encoder_backward(const ExecContext& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B,
                      int T, int C) {
  check_encoder_shape("encoder_backward", B, T, C);
  HPCT_CHECK(dwpe != nullptr, "encoder_backward: dwpe is null (only the vocab-parallel encoder takes none)");
  launch_encoder_backward(ctx, "encoder_backward", dwte, dwpe, dout, inp, 0, std::numeric_limits<int64_t>::max(), B, T,
                          C);
}

void encoder_forward_vocab_parallel(const ExecContext& ctx, float* out, const int32_t* inp, const float* wte_local,
                                    const float* wpe, int v0, int Vl, int B, int T, int C) {
  HPCT_CHECK(v0 >= 0 && Vl > 0, "encoder_forward_vocab_parallel: bad vocabulary slice [v0={}, v0+Vl={})", v0,
             static_cast<int64_t>(v0) + Vl);
  check_encoder_shape("encoder_forward_vocab_parallel", B, T, C);
  launch_encoder_forward(ctx, "encoder_forward_vocab_parallel", out, inp, wte_local, wpe, v0, Vl, B, T, C);
}

void encoder_backward_vocab_parallel(const ExecContext& ctx, float* dwte_local, float* dwpe, const float* dout,
                                     const int32_t* inp, int v0, int Vl, int B, int T, int C) {
  HPCT_CHECK(v0 >= 0 && Vl > 0, "encoder_backward_vocab_parallel: bad vocabulary slice [v0={}, v0+Vl={})", v0,
             static_cast<int64_t>(v0) + Vl);
  check_encoder_shape("encoder_backward_vocab_parallel", B, T, C);
  // dwpe (when set) gets sum_b dout on every TP rank, as kernels.hpp says
  launch_encoder_backward(ctx, "encoder_backward_vocab_parallel", dwte_local, dwpe, dout, inp, v0, Vl, B, T, C);
}

// ---- LayerNorm ----------------------------------------------------------------------------------------------------
void layernorm_forward(const ExecContext& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  HPCT_CHECK(N >= 0 && C > 0, "layernorm_forward: bad shape N={} C={}", N, C);
  HPCT_CHECK(weight != nullptr, "layernorm_forward: weight is null");
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((static_cast<int64_t>(N) + kLnWarps - 1) / kLnWarps);
  layernorm_forward_kernel<<<blocks, kLnWarps * 32, 0, stream_of(ctx)>>>(out, mean, rstd, inp, weight, bias, N, C);
  HPCT_CUDA_LAUNCH_CHECK("layernorm_forward");
}

void layernorm_backward(const ExecContext& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int N, int C) {
  HPCT_CHECK(N >= 0 && C > 0, "layernorm_backward: bad shape N={} C={}", N, C);
  HPCT_CHECK(dinp != nullptr && dweight != nullptr && weight != nullptr,
             "layernorm_backward: dinp, dweight and weight must be set (only dbias may be null)");
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>((static_cast<int64_t>(N) + kLnWarps - 1) / kLnWarps);
  layernorm_backward_dinp_kernel<<<blocks, kLnWarps * 32, 0, stream_of(ctx)>>>(dinp, dout, inp, weight, mean, rstd, N,
                                                                               C);
  HPCT_CUDA_LAUNCH_CHECK("layernorm_backward");
  const dim3 block(kLnColTile, kLnRowGroups);
  const unsigned col_blocks = static_cast<unsigned>((C + kLnColTile - 1) / kLnColTile);
  layernorm_backward_dweight_kernel<<<col_blocks, block, 0, stream_of(ctx)>>>(dweight, dbias, dout, inp, mean, rstd, N,
                                                                              C);
  HPCT_CUDA_LAUNCH_CHECK("layernorm_backward");
}

// ---- pointwise ----------------------------------------------------------------------------------------------------
void gelu_forward(const ExecContext& ctx, float* out, const float* inp, int64_t n) {
  HPCT_CHECK(n >= 0, "gelu_forward: n={} is negative", n);
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(out, inp, n);
  HPCT_CUDA_LAUNCH_CHECK("gelu_forward");
}

void gelu_backward(const ExecContext& ctx, float* dinp, const float* inp, const float* dout, int64_t n) {
  HPCT_CHECK(n >= 0, "gelu_backward: n={} is negative", n);
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(dinp, inp, dout, n);
  HPCT_CUDA_LAUNCH_CHECK("gelu_backward");
}

void residual_forward(const ExecContext& ctx, float* out, const float* a, const float* b, int64_t n) {
  HPCT_CHECK(n >= 0, "residual_forward: n={} is negative", n);
  if (n == 0) return;
  residual_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(out, a, b, n);
  HPCT_CUDA_LAUNCH_CHECK("residual_forward");
}

void relu_forward(const ExecContext& ctx, float* out, const float* inp, int64_t n) {
  HPCT_CHECK(n >= 0, "relu_forward: n={} is negative", n);
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(out, inp, n);
  HPCT_CUDA_LAUNCH_CHECK("relu_forward");
}

void relu_backward(const ExecContext& ctx, float* dinp, const float* dout, const float* out, int64_t n) {
  HPCT_CHECK(n >= 0, "relu_backward: n={} is negative", n);
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(dinp, dout, out, n);
  HPCT_CUDA_LAUNCH_CHECK("relu_backward");
}

// ---- reductions and optimizers ------------------------------------------------------------------------------------
void sum(const ExecContext& ctx, float* out, const float* x, int64_t n) {
  HPCT_CHECK(out != nullptr, "sum: out is null");
  launch_reduce<false>(ctx, "sum", x, n, out, nullptr);  // n == 0 still writes *out = 0
}

void sum_squares_accumulate(const ExecContext& ctx, double* out, const float* x, int64_t n) {
  HPCT_CHECK(out != nullptr, "sum_squares_accumulate: out is null");
  launch_reduce<true>(ctx, "sum_squares_accumulate", x, n, nullptr, out);
}

void scale(const ExecContext& ctx, float* x, float s, int64_t n) {
  HPCT_CHECK(n >= 0, "scale: n={} is negative", n);
  if (n == 0) return;
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(x, s, n);
  HPCT_CUDA_LAUNCH_CHECK("scale");
}

void adamw_update(const ExecContext& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
  HPCT_CHECK(t >= 1, "adamw_update: the step t={} must be 1-based", t);
  HPCT_CHECK(n >= 0, "adamw_update: n={} is negative", n);
  if (n == 0) return;
  // the scalars exactly as the CPU backend computes them (bias corrections in double, as torch)
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  const float decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float one_minus_b1 = 1.0f - beta1, one_minus_b2 = 1.0f - beta2;
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      params, grads, m, v, n, beta1, beta2, eps, grad_scale, decay, step_size, bc2_sqrt, one_minus_b1, one_minus_b2);
  HPCT_CUDA_LAUNCH_CHECK("adamw_update");
}

void sgd_update(const ExecContext& ctx, float* params, const float* grads, float* momentum_buf, int64_t n, float lr,
                float momentum, float dampening, float weight_decay, bool nesterov, float grad_scale, bool first_step) {
  HPCT_CHECK(n >= 0, "sgd_update: n={} is negative", n);
  HPCT_CHECK(!nesterov || (momentum > 0.0f && dampening == 0.0f),
             "sgd_update: nesterov needs momentum > 0 and dampening = 0 (momentum={}, dampening={})", momentum,
             dampening);
  const SgdMode mode = momentum == 0.0f ? SgdMode::kNoMomentum
                                        : (first_step ? SgdMode::kFirstStep : SgdMode::kLaterStep);
  HPCT_CHECK(mode == SgdMode::kNoMomentum || momentum_buf != nullptr || n == 0,
             "sgd_update: momentum={} needs a momentum buffer", momentum);
  if (n == 0) return;
  const float take = 1.0f - dampening;
  sgd_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(params, grads, momentum_buf, n, lr, momentum, take,
                                                                     weight_decay, nesterov, grad_scale, mode);
  HPCT_CUDA_LAUNCH_CHECK("sgd_update");
}

// ---- memory helpers -----------------------------------------------------------------------------------------------
// All stream-ordered on ctx.stream and asynchronous with respect to the host, unlike the CPU backend's (which have
// completed when they return). Callers therefore synchronize(ctx) before reading what copy_to_host wrote, and before
// modifying or freeing the host source of a copy_from_host (cudaMemcpyAsync from pinned memory reads it later; from
// pageable memory the runtime stages it before returning, but callers must not rely on which kind they hold).
void fill_zero(const ExecContext& ctx, void* dst, int64_t bytes) {
  HPCT_CHECK(bytes >= 0, "fill_zero: bytes={} is negative", bytes);
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream_of(ctx)));
}

// With pageable (not page-locked) host memory the CUDA runtime itself may block the host until the stream reaches
// the copy: a device-to-host cudaMemcpyAsync into pageable memory returns only once the copy is done, and one from
// pageable memory may first synchronize with the stream to stage it. When NCCL work can be queued on the stream (a
// sync guard is installed) that wait would be unbounded, so the stream is first drained through the guard (bounded by
// comm.timeout_s, exec_context.hpp); the runtime's own wait is then only for the copy. Page-locked memory is not
// affected. (The callers copy to the host right before a synchronize and from the host right after one, so in
// practice this adds no synchronisation point.)
namespace {
void drain_before_pageable_copy(const ExecContext& ctx, const void* host, const char* what) {
  if (ctx.sync_guard == nullptr) return;
  cudaPointerAttributes attr{};
  const cudaError_t rc = cudaPointerGetAttributes(&attr, host);
  if (rc != cudaSuccess) (void)cudaGetLastError();  // older runtimes: an unregistered pointer is an error
  if (rc == cudaSuccess && attr.type != cudaMemoryTypeUnregistered) return;  // page-locked, managed or device
  ctx.sync_guard->synchronize(ctx.stream, what);
}
}  // namespace

// The host data is valid only after synchronize(ctx) (or another synchronization of ctx.stream).
void copy_to_host(const ExecContext& ctx, void* host_dst, const void* src, int64_t bytes) {
  HPCT_CHECK(bytes >= 0, "copy_to_host: bytes={} is negative", bytes);
  if (bytes == 0) return;
  drain_before_pageable_copy(ctx, host_dst, "copy_to_host into pageable host memory (the stream before the copy)");
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_of(ctx)));
}

// The host source must stay unchanged until synchronize(ctx).
void copy_from_host(const ExecContext& ctx, void* dst, const void* host_src, int64_t bytes) {
  HPCT_CHECK(bytes >= 0, "copy_from_host: bytes={} is negative", bytes);
  if (bytes == 0) return;
  drain_before_pageable_copy(ctx, host_src, "copy_from_host from pageable host memory (the stream before the copy)");
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_of(ctx)));
}

void copy_device(const ExecContext& ctx, void* dst, const void* src, int64_t bytes) {
  HPCT_CHECK(bytes >= 0, "copy_device: bytes={} is negative", bytes);
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

// Blocks the host until all work queued on ctx.stream has completed; also where asynchronous faults of the ops
// before it surface (as a CUDA error naming the failed synchronize). With a sync guard (exec_context.hpp: installed by
// ParallelContext when NCCL work can be queued on the stream) the wait is the guard's: bounded by comm.timeout_s,
// aborting the NCCL communicators and throwing on a stall; without one, cudaStreamSynchronize (nothing on the stream
// can wait on a peer then).
void synchronize(const ExecContext& ctx) {
  if (ctx.sync_guard != nullptr) {
    ctx.sync_guard->synchronize(ctx.stream, "kernels::synchronize of the compute stream");
    return;
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

}  // namespace hpct::kernels::cuda
