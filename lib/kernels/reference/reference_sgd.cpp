// Reference SGD (torch.optim.SGD), written for obviousness: one element at a time, the steps of the docstring of
// kernels/ops.inc's sgd_update in order.
#include "kernels/reference/reference_sgd.hpp"

namespace hpct::kernels::reference {

template <typename Real>
void sgd_update(Real* params, const Real* grads, Real* momentum_buf, int64_t n, Real lr, Real momentum, Real dampening,
                Real weight_decay, bool nesterov, Real grad_scale, bool first_step) {
  for (int64_t i = 0; i < n; i++) {
    Real g = grads[i] * grad_scale;
    g += weight_decay * params[i];
    if (momentum != Real(0)) {
      if (first_step) momentum_buf[i] = g;
      else
        momentum_buf[i] = momentum * momentum_buf[i] + (Real(1) - dampening) * g;
      g = nesterov ? g + momentum * momentum_buf[i] : momentum_buf[i];
    }
    params[i] -= lr * g;
  }
}

template void sgd_update<float>(float*, const float*, float*, int64_t, float, float, float, float, bool, float, bool);
template void sgd_update<double>(double*, const double*, double*, int64_t, double, double, double, double, bool, double,
                                 bool);

}  // namespace hpct::kernels::reference
