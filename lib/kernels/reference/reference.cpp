// Reference twins: plain serial loops, written for obviousness, not speed (llm.c's CPU reference style).
// Legend: B batch, T time, C channels, OC output channels, NH heads, HS = C/NH, V vocabulary, Vp padded
// vocabulary, N = B*T rows. Parameter grads +=, activation grads =, layernorm_backward's dinp +=.
#include "kernels/reference/reference.hpp"

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

namespace hpct::kernels::reference {

// ---- encoder ----------------------------------------------------------------------------------
template <typename Real>
void encoder_forward(Real* out, const int32_t* inp, const Real* wte, const Real* wpe, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int64_t n = static_cast<int64_t>(b) * T + t;
      for (int c = 0; c < C; c++) out[n * C + c] = wte[static_cast<int64_t>(inp[n]) * C + c] + wpe[t * C + c];
    }
}

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* inp, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int64_t n = static_cast<int64_t>(b) * T + t;
      for (int c = 0; c < C; c++) {
        dwte[static_cast<int64_t>(inp[n]) * C + c] += dout[n * C + c];
        dwpe[t * C + c] += dout[n * C + c];
      }
    }
}

// ---- LayerNorm ----------------------------------------------------------------------------------
template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight, const Real* bias, int N,
                       int C) {
  const Real eps = Real(1e-5);
  for (int n = 0; n < N; n++) {
    const Real* x = inp + static_cast<int64_t>(n) * C;
    Real m = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    Real var = 0;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    const Real r = Real(1) / std::sqrt(var + eps);
    for (int c = 0; c < C; c++)
      out[static_cast<int64_t>(n) * C + c] = (x[c] - m) * r * weight[c] + (bias ? bias[c] : Real(0));
    mean[n] = m;
    rstd[n] = r;
  }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                        const Real* mean, const Real* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const Real* x = inp + static_cast<int64_t>(n) * C;
    const Real* d = dout + static_cast<int64_t>(n) * C;
    Real* dx = dinp + static_cast<int64_t>(n) * C;
    // two reductions: mean(dnorm), mean(dnorm * norm), with dnorm = weight * dout
    Real dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; c++) {
      const Real norm = (x[c] - mean[n]) * rstd[n];
      dnorm_mean += weight[c] * d[c];
      dnorm_norm_mean += weight[c] * d[c] * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int c = 0; c < C; c++) {
      const Real norm = (x[c] - mean[n]) * rstd[n];
      if (dbias) dbias[c] += d[c];
      dweight[c] += norm * d[c];
      dx[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
    }
  }
}

// ---- Linear -----------------------------------------------------------------------------------------
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      Real acc = bias ? bias[o] : Real(0);
      for (int c = 0; c < C; c++) acc += inp[static_cast<int64_t>(n) * C + c] * weight[static_cast<int64_t>(o) * C + c];
      out[static_cast<int64_t>(n) * OC + o] = acc;
    }
}

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                     int N, int C, int OC) {
  if (dinp) {
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        Real acc = 0;
        for (int o = 0; o < OC; o++)
          acc += dout[static_cast<int64_t>(n) * OC + o] * weight[static_cast<int64_t>(o) * C + c];
        dinp[static_cast<int64_t>(n) * C + c] = acc;
      }
  }
  for (int o = 0; o < OC; o++) {
    for (int c = 0; c < C; c++) {
      Real acc = 0;
      for (int n = 0; n < N; n++) acc += dout[static_cast<int64_t>(n) * OC + o] * inp[static_cast<int64_t>(n) * C + c];
      dweight[static_cast<int64_t>(o) * C + c] += acc;
    }
    if (dbias) {
      Real acc = 0;
      for (int n = 0; n < N; n++) acc += dout[static_cast<int64_t>(n) * OC + o];
      dbias[o] += acc;
    }
  }
}

// ---- causal self-attention ---------------------------------------------------------------------------
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(HS));
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const Real* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * HS;
        Real* a = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;  // (T) row of (B,NH,T,T)
        // pre-attention scores over the causal prefix, then a max-subtracted softmax
        Real maxval = -std::numeric_limits<Real>::infinity();
        for (int t2 = 0; t2 <= t; t2++) {
          const Real* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * HS;
          Real dot = 0;
          for (int i = 0; i < HS; i++) dot += q[i] * k[i];
          a[t2] = dot * scale;
          if (a[t2] > maxval) maxval = a[t2];
        }
        Real sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          a[t2] = std::exp(a[t2] - maxval);
          sum += a[t2];
        }
        for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? a[t2] / sum : Real(0);
        // out = att @ v
        Real* o = out + (static_cast<int64_t>(b) * T + t) * C + h * HS;
        for (int i = 0; i < HS; i++) o[i] = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const Real* v = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * HS;
          for (int i = 0; i < HS; i++) o[i] += a[t2] * v[i];
        }
      }
}

template <typename Real>
void attention_backward(Real* dqkv, Real* datt, const Real* dout, const Real* qkv, const Real* /*out*/, const Real* att,
                        int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(HS));
  for (int64_t i = 0; i < static_cast<int64_t>(B) * T * C3; i++) dqkv[i] = 0;  // assigned: start from zero
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const Real* a = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        Real* da = datt + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        const Real* d_o = dout + (static_cast<int64_t>(b) * T + t) * C + h * HS;
        const Real* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * HS;
        Real* dq = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * HS;
        // backward of out = att @ v: datt = dout . v, dv += att * dout
        for (int t2 = 0; t2 <= t; t2++) {
          const Real* v = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * HS;
          Real* dv = dqkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * HS;
          Real dot = 0;
          for (int i = 0; i < HS; i++) {
            dot += v[i] * d_o[i];
            dv[i] += a[t2] * d_o[i];
          }
          da[t2] = dot;
        }
        // backward of softmax: dpreatt = att * (datt - sum_j att_j datt_j)
        Real s = 0;
        for (int t2 = 0; t2 <= t; t2++) s += a[t2] * da[t2];
        // backward of preatt = scale * q . k
        for (int t2 = 0; t2 <= t; t2++) {
          const Real dpre = a[t2] * (da[t2] - s);
          const Real* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * HS;
          Real* dk = dqkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * HS;
          for (int i = 0; i < HS; i++) {
            dq[i] += dpre * scale * k[i];
            dk[i] += dpre * scale * q[i];
          }
        }
      }
}

// ---- GELU, tanh approximation ---------------------------------------------------------------------
template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t n) {
  const Real s = std::sqrt(Real(2) / std::numbers::pi_v<Real>);
  for (int64_t i = 0; i < n; i++) {
    const Real x = inp[i];
    out[i] = Real(0.5) * x * (Real(1) + std::tanh(s * (x + Real(0.044715) * x * x * x)));
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n) {
  const Real s = std::sqrt(Real(2) / std::numbers::pi_v<Real>);
  for (int64_t i = 0; i < n; i++) {
    const Real x = inp[i];
    const Real u = s * (x + Real(0.044715) * x * x * x);
    const Real sech = Real(1) / std::cosh(u);
    const Real grad = Real(0.5) * (Real(1) + std::tanh(u)) +
                      Real(0.5) * x * sech * sech * s * (Real(1) + Real(3) * Real(0.044715) * x * x);
    dinp[i] = grad * dout[i];
  }
}

// ---- residual -------------------------------------------------------------------------------------
template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ---- softmax cross-entropy over the first V of Vp columns --------------------------------------------
template <typename Real>
void crossentropy_forward(Real* losses, const Real* logits, const int32_t* targets, int N, int V, int Vp) {
  for (int n = 0; n < N; n++) {
    const Real* x = logits + static_cast<int64_t>(n) * Vp;
    Real maxval = x[0];
    for (int v = 1; v < V; v++) maxval = x[v] > maxval ? x[v] : maxval;
    Real sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(x[v] - maxval);
    losses[n] = std::log(sum) + maxval - x[targets[n]];
  }
}

template <typename Real>
void crossentropy_forward_backward(Real* losses, Real* logits, const int32_t* targets, Real dloss, int N, int V,
                                   int Vp) {
  crossentropy_forward(losses, logits, targets, N, V, Vp);
  for (int n = 0; n < N; n++) {
    Real* x = logits + static_cast<int64_t>(n) * Vp;
    Real maxval = x[0];
    for (int v = 1; v < V; v++) maxval = x[v] > maxval ? x[v] : maxval;
    Real sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(x[v] - maxval);
    for (int v = 0; v < Vp; v++) {
      const Real p = v < V ? std::exp(x[v] - maxval) / sum : Real(0);
      const Real indicator = v == targets[n] ? Real(1) : Real(0);
      x[v] = v < V ? dloss * (p - indicator) : Real(0);
    }
  }
}

// ---- label-smoothed cross-entropy: the definition, -sum_k q[k] log p[k] with q = (1 - eps) one-hot + eps / K -------
template <typename Real>
void crossentropy_smoothed_forward(Real* losses, const Real* logits, const int32_t* targets, Real eps, int N, int K) {
  for (int n = 0; n < N; n++) {
    const Real* x = logits + static_cast<int64_t>(n) * K;
    Real maxval = x[0];
    for (int k = 1; k < K; k++) maxval = x[k] > maxval ? x[k] : maxval;
    Real sum = 0;
    for (int k = 0; k < K; k++) sum += std::exp(x[k] - maxval);
    Real loss = 0;
    for (int k = 0; k < K; k++) {
      const Real q = (k == targets[n] ? Real(1) - eps : Real(0)) + eps / K;
      loss -= q * (x[k] - maxval - std::log(sum));
    }
    losses[n] = loss;
  }
}

template <typename Real>
void crossentropy_smoothed_forward_backward(Real* losses, Real* logits, const int32_t* targets, Real dloss, Real eps,
                                            int N, int K) {
  crossentropy_smoothed_forward(losses, logits, targets, eps, N, K);
  for (int n = 0; n < N; n++) {
    Real* x = logits + static_cast<int64_t>(n) * K;
    Real maxval = x[0];
    for (int k = 1; k < K; k++) maxval = x[k] > maxval ? x[k] : maxval;
    Real sum = 0;
    for (int k = 0; k < K; k++) sum += std::exp(x[k] - maxval);
    std::vector<Real> p(static_cast<size_t>(K));
    for (int k = 0; k < K; k++) p[static_cast<size_t>(k)] = std::exp(x[k] - maxval) / sum;
    for (int k = 0; k < K; k++) {
      const Real q = (k == targets[n] ? Real(1) - eps : Real(0)) + eps / K;
      x[k] = dloss * (p[static_cast<size_t>(k)] - q);
    }
  }
}

// ---- vocabulary parallelism: this rank holds the global rows/columns [v0, v0+Vl) of Vp --------------------------
template <typename Real>
void encoder_forward_vocab_parallel(Real* out, const int32_t* inp, const Real* wte_local, const Real* wpe, int v0,
                                    int Vl, int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int64_t n = static_cast<int64_t>(b) * T + t;
      const bool mine = inp[n] >= v0 && inp[n] < v0 + Vl;
      for (int c = 0; c < C; c++) {
        const Real w = mine ? wte_local[static_cast<int64_t>(inp[n] - v0) * C + c] : Real(0);
        out[n * C + c] = wpe ? w + wpe[t * C + c] : w;
      }
    }
}

template <typename Real>
void encoder_backward_vocab_parallel(Real* dwte_local, Real* dwpe, const Real* dout, const int32_t* inp, int v0, int Vl,
                                     int B, int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int64_t n = static_cast<int64_t>(b) * T + t;
      const bool mine = inp[n] >= v0 && inp[n] < v0 + Vl;
      for (int c = 0; c < C; c++) {
        if (mine) dwte_local[static_cast<int64_t>(inp[n] - v0) * C + c] += dout[n * C + c];
        if (dwpe) dwpe[t * C + c] += dout[n * C + c];
      }
    }
}

// Local column v is global column v0 + v; it is real when v0 + v < V.
template <typename Real>
void crossentropy_vp_local_max(Real* max_out, const Real* logits_local, int v0, int Vl, int V, int N) {
  for (int n = 0; n < N; n++) {
    Real m = -std::numeric_limits<Real>::infinity();
    for (int v = 0; v < Vl && v0 + v < V; v++) m = std::max(m, logits_local[static_cast<int64_t>(n) * Vl + v]);
    max_out[n] = m;
  }
}

template <typename Real>
void crossentropy_vp_local_sumexp(Real* sumexp_out, Real* target_logit_out, const Real* logits_local,
                                  const Real* global_max, const int32_t* targets, int v0, int Vl, int V, int N) {
  for (int n = 0; n < N; n++) {
    const Real* x = logits_local + static_cast<int64_t>(n) * Vl;
    Real sum = 0;
    for (int v = 0; v < Vl && v0 + v < V; v++) sum += std::exp(x[v] - global_max[n]);
    sumexp_out[n] = sum;
    target_logit_out[n] = targets[n] >= v0 && targets[n] < v0 + Vl ? x[targets[n] - v0] : Real(0);
  }
}

template <typename Real>
void crossentropy_vp_loss(Real* losses, const Real* global_max, const Real* global_sumexp,
                          const Real* global_target_logit, int N) {
  for (int n = 0; n < N; n++) losses[n] = std::log(global_sumexp[n]) + global_max[n] - global_target_logit[n];
}

template <typename Real>
void crossentropy_vp_loss_backward(Real* losses, Real* logits_local, const Real* global_max, const Real* global_sumexp,
                                   const Real* global_target_logit, const int32_t* targets, Real dloss, int v0, int Vl,
                                   int V, int N) {
  crossentropy_vp_loss(losses, global_max, global_sumexp, global_target_logit, N);
  for (int n = 0; n < N; n++) {
    Real* x = logits_local + static_cast<int64_t>(n) * Vl;
    for (int v = 0; v < Vl; v++) {
      const bool real = v0 + v < V;
      const Real p = real ? std::exp(x[v] - global_max[n]) / global_sumexp[n] : Real(0);
      const Real indicator = v0 + v == targets[n] ? Real(1) : Real(0);
      x[v] = real ? dloss * (p - indicator) : Real(0);
    }
  }
}

// ---- reductions and optimizer -----------------------------------------------------------------------
template <typename Real>
void sum(Real* out, const Real* x, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; i++) acc += static_cast<double>(x[i]);
  *out = static_cast<Real>(acc);
}

template <typename Real>
void sum_squares_accumulate(double* out, const Real* x, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; i++) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  *out += acc;
}

template <typename Real>
void scale(Real* x, Real s, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

// The formula exactly as documented in kernels.hpp (torch.optim.AdamW).
template <typename Real>
void adamw_update(Real* params, const Real* grads, Real* m, Real* v, int64_t n, Real lr, Real beta1, Real beta2,
                  Real eps, Real weight_decay, Real grad_scale, int t) {
  const Real bc1 = Real(1) - std::pow(beta1, static_cast<Real>(t));
  const Real bc2 = Real(1) - std::pow(beta2, static_cast<Real>(t));
  for (int64_t i = 0; i < n; i++) {
    const Real g = grads[i] * grad_scale;
    params[i] -= lr * weight_decay * params[i];
    m[i] = beta1 * m[i] + (Real(1) - beta1) * g;
    v[i] = beta2 * v[i] + (Real(1) - beta2) * g * g;
    const Real m_hat = m[i] / bc1;
    const Real v_hat = v[i] / bc2;
    params[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

// ---- explicit instantiations: float (backend checks) and double (finite-difference checks) ---------------
#define HPCT_INSTANTIATE_REFERENCE(Real)                                                                             \
  template void encoder_forward<Real>(Real*, const int32_t*, const Real*, const Real*, int, int, int);               \
  template void encoder_backward<Real>(Real*, Real*, const Real*, const int32_t*, int, int, int);                    \
  template void layernorm_forward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, int, int);       \
  template void layernorm_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, const Real*,    \
                                         const Real*, int, int);                                                     \
  template void matmul_forward<Real>(Real*, const Real*, const Real*, const Real*, int, int, int);                   \
  template void matmul_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, int, int, int);    \
  template void attention_forward<Real>(Real*, Real*, const Real*, int, int, int, int);                              \
  template void attention_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*, const Real*, int, int, \
                                         int, int);                                                                  \
  template void gelu_forward<Real>(Real*, const Real*, int64_t);                                                     \
  template void gelu_backward<Real>(Real*, const Real*, const Real*, int64_t);                                       \
  template void residual_forward<Real>(Real*, const Real*, const Real*, int64_t);                                    \
  template void crossentropy_forward<Real>(Real*, const Real*, const int32_t*, int, int, int);                       \
  template void crossentropy_forward_backward<Real>(Real*, Real*, const int32_t*, Real, int, int, int);              \
  template void crossentropy_smoothed_forward<Real>(Real*, const Real*, const int32_t*, Real, int, int);             \
  template void crossentropy_smoothed_forward_backward<Real>(Real*, Real*, const int32_t*, Real, Real, int, int);    \
  template void encoder_forward_vocab_parallel<Real>(Real*, const int32_t*, const Real*, const Real*, int, int, int, \
                                                     int, int);                                                      \
  template void encoder_backward_vocab_parallel<Real>(Real*, Real*, const Real*, const int32_t*, int, int, int, int, \
                                                      int);                                                          \
  template void crossentropy_vp_local_max<Real>(Real*, const Real*, int, int, int, int);                             \
  template void crossentropy_vp_local_sumexp<Real>(Real*, Real*, const Real*, const Real*, const int32_t*, int, int, \
                                                   int, int);                                                        \
  template void crossentropy_vp_loss_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*,             \
                                                    const int32_t*, Real, int, int, int, int);                       \
  template void crossentropy_vp_loss<Real>(Real*, const Real*, const Real*, const Real*, int);                       \
  template void sum<Real>(Real*, const Real*, int64_t);                                                              \
  template void sum_squares_accumulate<Real>(double*, const Real*, int64_t);                                         \
  template void scale<Real>(Real*, Real, int64_t);                                                                   \
  template void adamw_update<Real>(Real*, const Real*, Real*, Real*, int64_t, Real, Real, Real, Real, Real, Real, int);

HPCT_INSTANTIATE_REFERENCE(float)
HPCT_INSTANTIATE_REFERENCE(double)
#undef HPCT_INSTANTIATE_REFERENCE

}  // namespace hpct::kernels::reference
