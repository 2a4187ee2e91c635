// Reference twins of the ResNet layers: plain serial loops, NCHW. Legend: N images, C/OC input/output channels,
// H W input size, KH KW kernel, OH OW output size, HW = H*W. Parameter grads +=, activation grads =.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/batchnorm_stats.hpp"
#include "kernels/reference/reference.hpp"

namespace hpct::kernels::reference {

// ---- Conv2d: out[n,oc,oh,ow] = bias[oc] + sum_{c,kh,kw} weight[oc,c,kh,kw] inp[n,c,oh*s-pad+kh,ow*s-pad+kw] ----
template <typename Real>
void conv2d_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int H, int W,
                    int OC, int KH, int KW, int stride, int pad) {
  const int OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  for (int n = 0; n < N; n++)
    for (int oc = 0; oc < OC; oc++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          Real acc = bias ? bias[oc] : Real(0);
          for (int c = 0; c < C; c++)
            for (int kh = 0; kh < KH; kh++)
              for (int kw = 0; kw < KW; kw++) {
                const int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += weight[((static_cast<int64_t>(oc) * C + c) * KH + kh) * KW + kw] *
                       inp[((static_cast<int64_t>(n) * C + c) * H + ih) * W + iw];
              }
          out[((static_cast<int64_t>(n) * OC + oc) * OH + oh) * OW + ow] = acc;
        }
}

template <typename Real>
void conv2d_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                     int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad) {
  const int OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  if (dinp)
    for (int64_t i = 0; i < static_cast<int64_t>(N) * C * H * W; i++) dinp[i] = Real(0);
  for (int n = 0; n < N; n++)
    for (int oc = 0; oc < OC; oc++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
          const Real d = dout[((static_cast<int64_t>(n) * OC + oc) * OH + oh) * OW + ow];
          if (dbias) dbias[oc] += d;
          for (int c = 0; c < C; c++)
            for (int kh = 0; kh < KH; kh++)
              for (int kw = 0; kw < KW; kw++) {
                const int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t wi = ((static_cast<int64_t>(oc) * C + c) * KH + kh) * KW + kw;
                const int64_t xi = ((static_cast<int64_t>(n) * C + c) * H + ih) * W + iw;
                dweight[wi] += d * inp[xi];
                if (dinp) dinp[xi] += d * weight[wi];
              }
        }
}

// ---- BatchNorm2d ----------------------------------------------------------------------------------------
template <typename Real>
void batchnorm2d_local_stats(Real* stats, const Real* inp, int N, int C, int HW) {
  for (int c = 0; c < C; c++) {
    const Real count = static_cast<Real>(N) * HW;
    Real s = 0;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) s += inp[(static_cast<int64_t>(n) * C + c) * HW + i];
    const Real mean = s / count;
    Real m2 = 0;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const Real d = inp[(static_cast<int64_t>(n) * C + c) * HW + i] - mean;
        m2 += d * d;
      }
    stats[3 * c] = count;
    stats[3 * c + 1] = mean;
    stats[3 * c + 2] = m2;
  }
}

template <typename Real>
void batchnorm2d_merge_stats(Real* merged, const Real* gathered, int R, int C) {
  for (int c = 0; c < C; c++) {
    BnStats<Real> acc{0, 0, 0};
    for (int r = 0; r < R; r++) {
      const Real* g = gathered + (static_cast<int64_t>(r) * C + c) * 3;
      acc = batchnorm_merge_stats(acc, BnStats<Real>{g[0], g[1], g[2]});
    }
    merged[3 * c] = acc.count;
    merged[3 * c + 1] = acc.mean;
    merged[3 * c + 2] = acc.m2;
  }
}

template <typename Real>
void batchnorm2d_forward_apply(Real* out, Real* save_mean, Real* save_rstd, const Real* inp, const Real* gamma,
                               const Real* beta, const Real* stats, int N, int C, int HW, Real eps) {
  for (int c = 0; c < C; c++) {
    const Real mean = stats[3 * c + 1], var = stats[3 * c + 2] / stats[3 * c];  // biased
    const Real rstd = Real(1) / std::sqrt(var + eps);
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const int64_t k = (static_cast<int64_t>(n) * C + c) * HW + i;
        out[k] = (inp[k] - mean) * rstd * gamma[c] + beta[c];
      }
    save_mean[c] = mean;
    save_rstd[c] = rstd;
  }
}

template <typename Real>
void batchnorm2d_forward_train(Real* out, Real* stats, Real* save_mean, Real* save_rstd, const Real* inp,
                               const Real* gamma, const Real* beta, int N, int C, int HW, Real eps) {
  batchnorm2d_local_stats(stats, inp, N, C, HW);
  batchnorm2d_forward_apply(out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps);
}

template <typename Real>
void batchnorm2d_update_running(Real* running_mean, Real* running_var, const Real* stats, int C, Real momentum) {
  for (int c = 0; c < C; c++) {
    running_mean[c] = (1 - momentum) * running_mean[c] + momentum * stats[3 * c + 1];
    running_var[c] = (1 - momentum) * running_var[c] + momentum * stats[3 * c + 2] / (stats[3 * c] - 1);  // unbiased
  }
}

template <typename Real>
void batchnorm2d_forward_eval(Real* out, const Real* inp, const Real* gamma, const Real* beta, const Real* running_mean,
                              const Real* running_var, int N, int C, int HW, Real eps) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < HW; i++) {
        const int64_t k = (static_cast<int64_t>(n) * C + c) * HW + i;
        out[k] = (inp[k] - running_mean[c]) / std::sqrt(running_var[c] + eps) * gamma[c] + beta[c];
      }
}

template <typename Real>
void batchnorm2d_backward_local_sums(Real* sums, Real* dgamma, Real* dbeta, const Real* dout, const Real* inp,
                                     const Real* save_mean, const Real* save_rstd, int N, int C, int HW) {
  for (int c = 0; c < C; c++) {
    Real sdy = 0, sdyx = 0;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const int64_t k = (static_cast<int64_t>(n) * C + c) * HW + i;
        sdy += dout[k];
        sdyx += dout[k] * (inp[k] - save_mean[c]) * save_rstd[c];
      }
    sums[2 * c] = sdy;
    sums[2 * c + 1] = sdyx;
    dbeta[c] += sdy;
    dgamma[c] += sdyx;
  }
}

template <typename Real>
void batchnorm2d_backward_apply(Real* dinp, const Real* dout, const Real* inp, const Real* save_mean,
                                const Real* save_rstd, const Real* gamma, const Real* global_sums, int64_t global_count,
                                int N, int C, int HW) {
  const Real M = static_cast<Real>(global_count);
  for (int c = 0; c < C; c++)
    for (int n = 0; n < N; n++)
      for (int i = 0; i < HW; i++) {
        const int64_t k = (static_cast<int64_t>(n) * C + c) * HW + i;
        const Real xhat = (inp[k] - save_mean[c]) * save_rstd[c];
        dinp[k] = gamma[c] * save_rstd[c] * (dout[k] - global_sums[2 * c] / M - xhat * global_sums[2 * c + 1] / M);
      }
}

template <typename Real>
void batchnorm2d_backward(Real* dinp, Real* dgamma, Real* dbeta, const Real* dout, const Real* inp,
                          const Real* save_mean, const Real* save_rstd, const Real* gamma, int N, int C, int HW) {
  // the single-rank backward is the split pair with this rank's sums as the global ones
  std::vector<Real> sums(2 * static_cast<size_t>(C));  // (C,2)
  batchnorm2d_backward_local_sums(sums.data(), dgamma, dbeta, dout, inp, save_mean, save_rstd, N, C, HW);
  batchnorm2d_backward_apply(dinp, dout, inp, save_mean, save_rstd, gamma, sums.data(), static_cast<int64_t>(N) * HW, N,
                             C, HW);
}

// ---- ReLU, pooling ------------------------------------------------------------------------------------------
template <typename Real>
void relu_forward(Real* out, const Real* inp, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = inp[i] > 0 ? inp[i] : Real(0);
}

template <typename Real>
void relu_backward(Real* dinp, const Real* dout, const Real* out, int64_t n) {
  for (int64_t i = 0; i < n; i++) dinp[i] = out[i] > 0 ? dout[i] : Real(0);
}

template <typename Real>
void maxpool2d_forward(Real* out, int32_t* idx, const Real* inp, int N, int C, int H, int W, int K, int stride,
                       int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  for (int64_t p = 0; p < static_cast<int64_t>(N) * C; p++)
    for (int oh = 0; oh < OH; oh++)
      for (int ow = 0; ow < OW; ow++) {
        Real best = -std::numeric_limits<Real>::infinity();
        int32_t arg = -1;
        for (int kh = 0; kh < K; kh++)
          for (int kw = 0; kw < K; kw++) {
            const int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const Real v = inp[p * H * W + ih * W + iw];
            if (arg < 0 || v > best) {
              best = v;
              arg = ih * W + iw;
            }
          }
        out[(p * OH + oh) * OW + ow] = best;
        idx[(p * OH + oh) * OW + ow] = arg;
      }
}

template <typename Real>
void maxpool2d_backward(Real* dinp, const Real* dout, const int32_t* idx, int N, int C, int H, int W, int K, int stride,
                        int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  for (int64_t i = 0; i < static_cast<int64_t>(N) * C * H * W; i++) dinp[i] = Real(0);
  for (int64_t p = 0; p < static_cast<int64_t>(N) * C; p++)
    for (int j = 0; j < OH * OW; j++) dinp[p * H * W + idx[p * OH * OW + j]] += dout[p * OH * OW + j];
}

template <typename Real>
void global_avgpool_forward(Real* out, const Real* inp, int N, int C, int HW) {
  for (int64_t p = 0; p < static_cast<int64_t>(N) * C; p++) {
    Real s = 0;
    for (int i = 0; i < HW; i++) s += inp[p * HW + i];
    out[p] = s / HW;
  }
}

template <typename Real>
void global_avgpool_backward(Real* dinp, const Real* dout, int N, int C, int HW) {
  for (int64_t p = 0; p < static_cast<int64_t>(N) * C; p++)
    for (int i = 0; i < HW; i++) dinp[p * HW + i] = dout[p] / HW;
}

#define HPCT_INSTANTIATE_CONV(Real)                                                                                    \
  template void conv2d_forward<Real>(Real*, const Real*, const Real*, const Real*, int, int, int, int, int, int, int,  \
                                     int, int);                                                                        \
  template void conv2d_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, int, int, int, int,  \
                                      int, int, int, int, int);                                                        \
  template void batchnorm2d_forward_train<Real>(Real*, Real*, Real*, Real*, const Real*, const Real*, const Real*,     \
                                                int, int, int, Real);                                                  \
  template void batchnorm2d_local_stats<Real>(Real*, const Real*, int, int, int);                                      \
  template void batchnorm2d_merge_stats<Real>(Real*, const Real*, int, int);                                           \
  template void batchnorm2d_forward_apply<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*,            \
                                                const Real*, int, int, int, Real);                                     \
  template void batchnorm2d_update_running<Real>(Real*, Real*, const Real*, int, Real);                                \
  template void batchnorm2d_forward_eval<Real>(Real*, const Real*, const Real*, const Real*, const Real*, const Real*, \
                                               int, int, int, Real);                                                   \
  template void batchnorm2d_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, const Real*,    \
                                           const Real*, int, int, int);                                                \
  template void batchnorm2d_backward_local_sums<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*,      \
                                                      const Real*, int, int, int);                                     \
  template void batchnorm2d_backward_apply<Real>(Real*, const Real*, const Real*, const Real*, const Real*,            \
                                                 const Real*, const Real*, int64_t, int, int, int);                    \
  template void relu_forward<Real>(Real*, const Real*, int64_t);                                                       \
  template void relu_backward<Real>(Real*, const Real*, const Real*, int64_t);                                         \
  template void maxpool2d_forward<Real>(Real*, int32_t*, const Real*, int, int, int, int, int, int, int);              \
  template void maxpool2d_backward<Real>(Real*, const Real*, const int32_t*, int, int, int, int, int, int, int);       \
  template void global_avgpool_forward<Real>(Real*, const Real*, int, int, int);                                       \
  template void global_avgpool_backward<Real>(Real*, const Real*, int, int, int);

HPCT_INSTANTIATE_CONV(float)
HPCT_INSTANTIATE_CONV(double)
#undef HPCT_INSTANTIATE_CONV

}  // namespace hpct::kernels::reference
