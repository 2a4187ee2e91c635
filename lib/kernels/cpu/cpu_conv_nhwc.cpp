// CPU backend: BatchNorm2d and the pools on channels-last activations (N,H,W,C), the layout oneDNN's convolutions
// run on without reordering (cpu_conv_dnnl.hpp), so that a ResNet's activations stay in it from the first conv to the
// pooled features (kernels.hpp, ExecContext::channels_last). Legend as cpu_conv.cpp; P = N*HW positions, each a run of
// C contiguous channels, and every loop's inner dimension is the channel (vectorised).
//
// BatchNorm's reductions: the positions are cut into slabs whose number and size depend on P only (kSlabs), each
// slab's per-channel sums in double in position order, then the slabs added in slab order: the statistics depend on
// the shape alone, never on the thread count (threads take whole slabs). The arithmetic per value is the NCHW
// kernels' (two-pass mean and M2 in double, the same float formulas for the output and dinp); only the order of the
// sums differs, so the two layouts agree to rounding. The float statistics rows, the SyncBN exchange and the merge
// are the NCHW path's unchanged. The slab partials and the per-channel factors live in buffers of the calling thread,
// grown on first use and kept (the steady step allocates nothing: docs/invariants.md, invariant 7).
// The ReLU that follows a BatchNorm inside a residual block runs in the same passes (kernels.hpp, the batchnorm2d_relu
// ops): forward, the output's ReLU on the rounded value (relu_forward's bits); backward, dout masked by the ReLU's
// output (relu_backward's bits) as it is read, so that one pass per activation replaces two.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu/cpu_conv_common.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_math.hpp"

namespace hpct::kernels::cpu {
namespace {

constexpr int64_t kSlabs = 64;    // at most this many slabs per reduction ...
constexpr int64_t kSlabMin = 32;  // ... of at least this many positions

struct Slabs {
  int64_t count, size;
  int64_t begin(int64_t s) const { return s * size; }
  int64_t end(int64_t s, int64_t P) const { return std::min(P, (s + 1) * size); }
};
Slabs slabs_of(int64_t P) {
  const int64_t size = std::max(kSlabMin, (P + kSlabs - 1) / kSlabs);
  return {(P + size - 1) / size, size};
}

// The calling thread's scratch: `doubles` doubles and `floats` floats, kept between calls.
struct Scratch {
  double* d;
  float* f;
};
Scratch scratch(int64_t doubles, int64_t floats) {
  thread_local std::vector<double> d;
  thread_local std::vector<float> f;
  if (static_cast<int64_t>(d.size()) < doubles) d.resize(static_cast<size_t>(doubles));
  if (static_cast<int64_t>(f.size()) < floats) f.resize(static_cast<size_t>(floats));
  return {d.data(), f.data()};
}

// 2 x C doubles of the calling thread, kept between calls, apart from scratch()'s (the backward's (sum dy, sum dy xhat)
// per channel, which outlive the scratch the sums are made in).
double* channel_pairs(int C) {
  thread_local std::vector<double> v;
  if (static_cast<int64_t>(v.size()) < 2 * static_cast<int64_t>(C)) v.resize(2 * static_cast<size_t>(C));
  return v.data();
}

// out[k*C + c] = sum over the positions p (slab by slab, each in position order, then the slabs in order) of what
// `add(p0, p1, c0, L, acc)` adds into the K per-channel accumulators acc[k*C + c] for the positions [p0, p1) and the
// channels [c0, c0 + L), in double. `part` holds count x K x C doubles. The channels go in blocks of kLanes (whole
// vectors of sums the compiler keeps in registers across the positions), a remainder one by one; the order of each
// channel's sum is the same either way.
constexpr int kLanes = 16;
template <int K, typename Add>
void channel_sums(double* out, double* part, int64_t P, int C, Add&& add) {
  const Slabs sl = slabs_of(P);
  const int64_t width = static_cast<int64_t>(K) * C;
#pragma omp parallel for schedule(static) if (P * C >= kMinParallel && sl.count > 1)
  for (int64_t s = 0; s < sl.count; s++) {
    double* acc = part + s * width;
    std::fill(acc, acc + width, 0.0);
    int c0 = 0;
    for (; c0 + kLanes <= C; c0 += kLanes)
      add(sl.begin(s), sl.end(s, P), c0, std::integral_constant<int, kLanes>(), acc);
    for (; c0 < C; c0++) add(sl.begin(s), sl.end(s, P), c0, std::integral_constant<int, 1>(), acc);
  }
  std::fill(out, out + width, 0.0);
  for (int64_t s = 0; s < sl.count; s++) {
    const double* acc = part + s * width;
#pragma omp simd
    for (int64_t i = 0; i < width; i++) out[i] += acc[i];
  }
}

// The float stats rows (count, mean, M2) of every channel: mean, then M2 = sum (x - mean)^2, both in double.
template <typename A>
void channel_stats(float* stats, const A* inp, int N, int C, int HW) {
  const int64_t P = static_cast<int64_t>(N) * HW;
  const Scratch sc = scratch(slabs_of(P).count * C + 2 * static_cast<int64_t>(C), 0);
  double* mean = sc.d + slabs_of(P).count * C;
  double* m2 = mean + C;
  channel_sums<1>(mean, sc.d, P, C, [&](int64_t p0, int64_t p1, int c0, auto lanes, double* acc) {
    constexpr int L = decltype(lanes)::value;
    double a[L] = {};
    for (int64_t p = p0; p < p1; p++) {
      const A* x = inp + p * C + c0;
#pragma omp simd
      for (int l = 0; l < L; l++) a[l] += to_f32(x[l]);
    }
    for (int l = 0; l < L; l++) acc[c0 + l] = a[l];
  });
  for (int c = 0; c < C; c++) mean[c] /= static_cast<double>(P);
  channel_sums<1>(m2, sc.d, P, C, [&](int64_t p0, int64_t p1, int c0, auto lanes, double* acc) {
    constexpr int L = decltype(lanes)::value;
    double a[L] = {}, mu[L];
    for (int l = 0; l < L; l++) mu[l] = mean[c0 + l];
    for (int64_t p = p0; p < p1; p++) {
      const A* x = inp + p * C + c0;
#pragma omp simd
      for (int l = 0; l < L; l++) {
        const double dx = to_f32(x[l]) - mu[l];
        a[l] += dx * dx;
      }
    }
    for (int l = 0; l < L; l++) acc[c0 + l] = a[l];
  });
  for (int c = 0; c < C; c++) store_stats(stats + 3 * c, mean[c], m2[c], N, HW);
}

// The gradient dout[i] as the BatchNorm backward reads it: with kRelu, what relu_backward passes through the ReLU whose
// output is out (dout[i], or +0); else dout[i] itself.
template <bool kRelu, typename A>
inline float relu_grad(const A* dout, const A* out, int i) {
  if constexpr (kRelu) return relu_keeps(out[i]) ? to_f32(dout[i]) : 0.0f;
  else
    return to_f32(dout[i]);
}

// out[p, c] = (x - mean[c]) * scale[c] + shift[c] over every position, rounded once to A, then (kRelu) the ReLU of
// the rounded value; kAdd: the rounded value plus residual[p, c], rounded once, then the ReLU (residual_relu_forward's
// bits on the BatchNorm's output: a block's last BatchNorm and its end).
template <bool kRelu, bool kAdd, typename A>
void affine_pass(A* out, const A* inp, const A* residual, const float* mean, const float* scale, const float* shift,
                 int64_t P, int C) {
#pragma omp parallel for schedule(static) if (P * C >= kMinParallel)
  for (int64_t p = 0; p < P; p++) {
    const A* x = inp + p * C;
    A* o = out + p * C;
    const A* r = kAdd ? residual + p * C : nullptr;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float v = (to_f32(x[c]) - mean[c]) * scale[c] + shift[c];
      if constexpr (kAdd) v = to_f32(from_f32<A>(v)) + to_f32(r[c]);
      // relu_forward of the rounded value, taken before the rounding: a positive float rounds to a positive value or
      // to +0, anything else (-0, NaN included) to +0 either way: the same bits, and a select the compiler vectorises
      o[c] = from_f32<A>(kRelu || kAdd ? (v > 0.0f ? v : 0.0f) : v);
    }
  }
}
template <typename A>
void affine(A* out, const A* inp, const A* residual, const float* mean, const float* scale, const float* shift,
            int64_t P, int C, bool relu) {
  if (residual) affine_pass<true, true>(out, inp, residual, mean, scale, shift, P, C);
  else if (relu)
    affine_pass<true, false>(out, inp, residual, mean, scale, shift, P, C);
  else
    affine_pass<false, false>(out, inp, residual, mean, scale, shift, P, C);
}

// sums (C,2) = (sum dout, sum dout * xhat) per channel, in double, xhat = (x - mean) * rstd in float as the NCHW path;
// dout through the ReLU whose output is relu_out when that is not null.
template <bool kRelu, typename A>
void grad_sums_pass(double* sdy, double* sdyx, const A* dout, const A* relu_out, const A* inp, const float* save_mean,
                    const float* save_rstd, int N, int C, int HW) {
  const int64_t P = static_cast<int64_t>(N) * HW;
  const Scratch sc = scratch(slabs_of(P).count * 2 * C + 2 * static_cast<int64_t>(C), 0);
  double* both = sc.d + slabs_of(P).count * 2 * C;
  channel_sums<2>(both, sc.d, P, C, [&](int64_t p0, int64_t p1, int c0, auto lanes, double* acc) {
    constexpr int L = decltype(lanes)::value;
    double a[L] = {}, b[L] = {};
    float mu[L], rs[L];
    for (int l = 0; l < L; l++) {
      mu[l] = save_mean[c0 + l];
      rs[l] = save_rstd[c0 + l];
    }
    for (int64_t p = p0; p < p1; p++) {
      const A* x = inp + p * C + c0;
      const A* dy = dout + p * C + c0;
      const A* y = kRelu ? relu_out + p * C + c0 : nullptr;
#pragma omp simd
      for (int l = 0; l < L; l++) {
        const float g = relu_grad<kRelu>(dy, y, l);
        a[l] += g;
        b[l] += static_cast<double>(g) * ((to_f32(x[l]) - mu[l]) * rs[l]);
      }
    }
    for (int l = 0; l < L; l++) {
      acc[c0 + l] = a[l];
      acc[C + c0 + l] = b[l];
    }
  });
  std::copy(both, both + C, sdy);
  std::copy(both + C, both + 2 * C, sdyx);
}
template <typename A>
void grad_sums(double* sdy, double* sdyx, const A* dout, const A* relu_out, const A* inp, const float* save_mean,
               const float* save_rstd, int N, int C, int HW) {
  if (relu_out) grad_sums_pass<true>(sdy, sdyx, dout, relu_out, inp, save_mean, save_rstd, N, C, HW);
  else
    grad_sums_pass<false>(sdy, sdyx, dout, relu_out, inp, save_mean, save_rstd, N, C, HW);
}

// dinp = gamma rstd (dout - mean_dy - xhat mean_dy_xhat) per channel, with the sums over `count` values.
template <bool kRelu, typename A>
void dinp_pass(A* dinp, const A* dout, const A* relu_out, const A* inp, const float* save_mean, const float* save_rstd,
               const A* gamma, const double* sdy, const double* sdyx, double count, int N, int C, int HW) {
  const int64_t P = static_cast<int64_t>(N) * HW;
  const Scratch sc = scratch(0, 3 * static_cast<int64_t>(C));
  float *k0 = sc.f, *mdy = sc.f + C, *mdyx = sc.f + 2 * C;
  for (int c = 0; c < C; c++) {
    k0[c] = to_f32(gamma[c]) * save_rstd[c];
    mdy[c] = static_cast<float>(sdy[c] / count);
    mdyx[c] = static_cast<float>(sdyx[c] / count);
  }
#pragma omp parallel for schedule(static) if (P * C >= kMinParallel)
  for (int64_t p = 0; p < P; p++) {
    const A* x = inp + p * C;
    const A* dy = dout + p * C;
    const A* y = kRelu ? relu_out + p * C : nullptr;
    A* dx = dinp + p * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      const float g = relu_grad<kRelu>(dy, y, c);
      dx[c] = from_f32<A>(k0[c] * (g - mdy[c] - (to_f32(x[c]) - save_mean[c]) * save_rstd[c] * mdyx[c]));
    }
  }
}
// dinp = gamma rstd (dout - mean_dy - xhat mean_dy_xhat) per channel, with the sums over `count` values; dout through
// the ReLU whose output is relu_out when that is not null.
template <typename A>
void dinp_all(A* dinp, const A* dout, const A* relu_out, const A* inp, const float* save_mean, const float* save_rstd,
              const A* gamma, const double* sdy, const double* sdyx, double count, int N, int C, int HW) {
  if (relu_out) dinp_pass<true>(dinp, dout, relu_out, inp, save_mean, save_rstd, gamma, sdy, sdyx, count, N, C, HW);
  else
    dinp_pass<false>(dinp, dout, relu_out, inp, save_mean, save_rstd, gamma, sdy, sdyx, count, N, C, HW);
}

}  // namespace

template <typename A>
void batchnorm2d_local_stats_nhwc(float* stats, const A* inp, int N, int C, int HW) {
  channel_stats(stats, inp, N, C, HW);
}

template <typename A>
void batchnorm2d_forward_apply_nhwc(A* out, float* save_mean, float* save_rstd, const A* inp, const A* gamma,
                                    const A* beta, const float* stats, int N, int C, int HW, float eps, bool relu,
                                    const A* residual) {
  const Scratch sc = scratch(0, 3 * static_cast<int64_t>(C));
  float *mean = sc.f, *scale = sc.f + C, *shift = sc.f + 2 * C;
  for (int c = 0; c < C; c++) {  // cpu_conv.cpp's apply_channel
    const float* st = stats + 3 * c;
    HPCT_CHECK(st[0] > 0, "batchnorm2d_forward_apply: channel {} has count {}", c, st[0]);
    const float rstd = bn_rstd(st, eps);
    mean[c] = st[1];
    scale[c] = rstd * to_f32(gamma[c]);
    shift[c] = to_f32(beta[c]);
    save_mean[c] = st[1];
    save_rstd[c] = rstd;
  }
  affine(out, inp, residual, mean, scale, shift, static_cast<int64_t>(N) * HW, C, relu);
}

template <typename A>
void batchnorm2d_forward_train_nhwc(A* out, float* stats, float* save_mean, float* save_rstd, const A* inp,
                                    const A* gamma, const A* beta, int N, int C, int HW, float eps, bool relu,
                                    const A* residual) {
  // the SyncBN path at one rank, literally: its statistics, then its apply
  batchnorm2d_local_stats_nhwc(stats, inp, N, C, HW);
  batchnorm2d_forward_apply_nhwc(out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps, relu, residual);
}

template <typename A>
void batchnorm2d_forward_eval_nhwc(A* out, const A* inp, const A* gamma, const A* beta, const float* running_mean,
                                   const float* running_var, int N, int C, int HW, float eps, bool relu,
                                   const A* residual) {
  const Scratch sc = scratch(0, 3 * static_cast<int64_t>(C));
  float *mean = sc.f, *scale = sc.f + C, *shift = sc.f + 2 * C;
  for (int c = 0; c < C; c++) {  // the NCHW eval's factors
    mean[c] = running_mean[c];
    scale[c] = bn_eval_rstd(running_var[c], eps) * to_f32(gamma[c]);
    shift[c] = to_f32(beta[c]);
  }
  affine(out, inp, residual, mean, scale, shift, static_cast<int64_t>(N) * HW, C, relu);
}

template <typename A>
void batchnorm2d_backward_nhwc(A* dinp, float* dgamma, float* dbeta, const A* dout, const A* inp,
                               const float* save_mean, const float* save_rstd, const A* gamma, int N, int C, int HW,
                               const A* relu_out) {
  double* sdy = channel_pairs(C);
  double* sdyx = sdy + C;
  grad_sums(sdy, sdyx, dout, relu_out, inp, save_mean, save_rstd, N, C, HW);
  for (int c = 0; c < C; c++) {
    dbeta[c] += static_cast<float>(sdy[c]);
    dgamma[c] += static_cast<float>(sdyx[c]);
  }
  dinp_all(dinp, dout, relu_out, inp, save_mean, save_rstd, gamma, sdy, sdyx, static_cast<double>(N) * HW, N, C, HW);
}

template <typename A>
void batchnorm2d_backward_local_sums_nhwc(float* sums, float* dgamma, float* dbeta, const A* dout, const A* inp,
                                          const float* save_mean, const float* save_rstd, int N, int C, int HW,
                                          const A* relu_out) {
  double* sdy = channel_pairs(C);
  double* sdyx = sdy + C;
  grad_sums(sdy, sdyx, dout, relu_out, inp, save_mean, save_rstd, N, C, HW);
  for (int c = 0; c < C; c++) {
    sums[2 * c + 0] = static_cast<float>(sdy[c]);
    sums[2 * c + 1] = static_cast<float>(sdyx[c]);
    dbeta[c] += static_cast<float>(sdy[c]);
    dgamma[c] += static_cast<float>(sdyx[c]);
  }
}

template <typename A>
void batchnorm2d_backward_apply_nhwc(A* dinp, const A* dout, const A* inp, const float* save_mean,
                                     const float* save_rstd, const A* gamma, const float* global_sums,
                                     int64_t global_count, int N, int C, int HW, const A* relu_out) {
  double* sdy = channel_pairs(C);
  double* sdyx = sdy + C;
  for (int c = 0; c < C; c++) {  // the float sums the NCHW path hands dinp_channel, widened as it does
    sdy[c] = global_sums[2 * c];
    sdyx[c] = global_sums[2 * c + 1];
  }
  dinp_all(dinp, dout, relu_out, inp, save_mean, save_rstd, gamma, sdy, sdyx, static_cast<double>(global_count), N, C,
           HW);
}

// ---- MaxPool2d: the NCHW kernels' windows and index (ih * W + iw within the plane), per channel lane -----------
template <typename A>
void maxpool2d_forward_nhwc(A* out, int32_t* idx, const A* inp, int N, int C, int H, int W, int K, int stride,
                            int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t rows = static_cast<int64_t>(N) * OH;
#pragma omp parallel for schedule(static) if (rows * OW * C >= kMinParallel / 4)
  for (int64_t r = 0; r < rows; r++) {
    const int n = static_cast<int>(r / OH), oh = static_cast<int>(r % OH);
    const A* x = inp + static_cast<int64_t>(n) * H * W * C;
    for (int ow = 0; ow < OW; ow++) {
      const int h0 = oh * stride - pad, w0 = ow * stride - pad;
      const int64_t o = (r * OW + ow) * C;
      for (int c = 0; c < C; c++) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t arg = -1;
        for (int ih = std::max(h0, 0); ih < std::min(h0 + K, H); ih++)
          for (int iw = std::max(w0, 0); iw < std::min(w0 + K, W); iw++) {
            const float v = to_f32(x[(static_cast<int64_t>(ih) * W + iw) * C + c]);
            if (v > best || arg < 0) {
              best = v;
              arg = ih * W + iw;
            }
          }
        out[o + c] = from_f32<A>(best);  // exact: best is a stored value
        idx[o + c] = arg;
      }
    }
  }
}

template <typename A>
void maxpool2d_backward_nhwc(A* dinp, const A* dout, const int32_t* idx, int N, int C, int H, int W, int K, int stride,
                             int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t rows = static_cast<int64_t>(N) * H;
  // gathered per input pixel from the outputs whose window holds it, in output order (the NCHW kernel's sums)
#pragma omp parallel for schedule(static) if (rows * W * C >= kMinParallel)
  for (int64_t r = 0; r < rows; r++) {
    const int n = static_cast<int>(r / H), ih = static_cast<int>(r % H);
    const A* dy = dout + static_cast<int64_t>(n) * OH * OW * C;
    const int32_t* id = idx + static_cast<int64_t>(n) * OH * OW * C;
    const int oh0 = std::max(0, (ih + pad - K + stride) / stride), oh1 = std::min(OH - 1, (ih + pad) / stride);
    for (int iw = 0; iw < W; iw++) {
      const int ow0 = std::max(0, (iw + pad - K + stride) / stride), ow1 = std::min(OW - 1, (iw + pad) / stride);
      const int32_t self = ih * W + iw;
      A* dx = dinp + (r * W + iw) * C;
      for (int c = 0; c < C; c++) {
        float s = 0.0f;
        for (int oh = oh0; oh <= oh1; oh++)
          for (int ow = ow0; ow <= ow1; ow++) {
            const int64_t o = (static_cast<int64_t>(oh) * OW + ow) * C + c;
            if (id[o] == self) s += to_f32(dy[o]);
          }
        dx[c] = from_f32<A>(s);
      }
    }
  }
}

// ---- global average pooling: the NCHW kernels' double sums per (image, channel), in hw order -------------------
template <typename A>
void global_avgpool_forward_nhwc(A* out, const A* inp, int N, int C, int HW) {
  constexpr int kLanes = 64;  // channels summed together (their accumulators on the stack)
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * C * HW >= kMinParallel)
  for (int n = 0; n < N; n++)
    for (int c0 = 0; c0 < C; c0 += kLanes) {
      const int lanes = std::min(kLanes, C - c0);
      double acc[kLanes] = {};
      for (int i = 0; i < HW; i++) {
        const A* x = inp + (static_cast<int64_t>(n) * HW + i) * C + c0;
#pragma omp simd
        for (int c = 0; c < lanes; c++) acc[c] += to_f32(x[c]);
      }
      for (int c = 0; c < lanes; c++)
        out[static_cast<int64_t>(n) * C + c0 + c] = from_f32<A>(static_cast<float>(acc[c] / HW));
    }
}

template <typename A>
void global_avgpool_backward_nhwc(A* dinp, const A* dout, int N, int C, int HW) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * C * HW >= kMinParallel)
  for (int n = 0; n < N; n++) {
    const A* g = dout + static_cast<int64_t>(n) * C;
    for (int i = 0; i < HW; i++) {
      A* dx = dinp + (static_cast<int64_t>(n) * HW + i) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) dx[c] = from_f32<A>(to_f32(g[c]) / static_cast<float>(HW));
    }
  }
}

template <typename A>
void images_to_nhwc(A* out, const float* inp, int N, int C, int HW) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * C * HW >= kMinParallel)
  for (int n = 0; n < N; n++)
    for (int i = 0; i < HW; i++)
      for (int c = 0; c < C; c++)
        out[(static_cast<int64_t>(n) * HW + i) * C + c] = from_f32<A>(inp[(static_cast<int64_t>(n) * C + c) * HW + i]);
}

#define HPCT_CPU_NHWC_INSTANTIATE(A)                                                                                   \
  template void batchnorm2d_forward_train_nhwc<A>(A*, float*, float*, float*, const A*, const A*, const A*, int, int,  \
                                                  int, float, bool, const A*);                                         \
  template void batchnorm2d_local_stats_nhwc<A>(float*, const A*, int, int, int);                                      \
  template void batchnorm2d_forward_apply_nhwc<A>(A*, float*, float*, const A*, const A*, const A*, const float*, int, \
                                                  int, int, float, bool, const A*);                                    \
  template void batchnorm2d_forward_eval_nhwc<A>(A*, const A*, const A*, const A*, const float*, const float*, int,    \
                                                 int, int, float, bool, const A*);                                     \
  template void batchnorm2d_backward_nhwc<A>(A*, float*, float*, const A*, const A*, const float*, const float*,       \
                                             const A*, int, int, int, const A*);                                       \
  template void batchnorm2d_backward_local_sums_nhwc<A>(float*, float*, float*, const A*, const A*, const float*,      \
                                                        const float*, int, int, int, const A*);                        \
  template void batchnorm2d_backward_apply_nhwc<A>(A*, const A*, const A*, const float*, const float*, const A*,       \
                                                   const float*, int64_t, int, int, int, const A*);                    \
  template void maxpool2d_forward_nhwc<A>(A*, int32_t*, const A*, int, int, int, int, int, int, int);                  \
  template void maxpool2d_backward_nhwc<A>(A*, const A*, const int32_t*, int, int, int, int, int, int, int);           \
  template void global_avgpool_forward_nhwc<A>(A*, const A*, int, int, int);                                           \
  template void global_avgpool_backward_nhwc<A>(A*, const A*, int, int, int);                                          \
  template void images_to_nhwc<A>(A*, const float*, int, int, int);
HPCT_CPU_NHWC_INSTANTIATE(float)
HPCT_CPU_NHWC_INSTANTIATE(bf16)
#undef HPCT_CPU_NHWC_INSTANTIATE

}  // namespace hpct::kernels::cpu
