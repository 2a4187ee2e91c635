#pragma once
// Reference twin of kernels/ops.inc's sgd_update: the same names and argument order minus the
// ExecContext, a plain serial loop, templated on the scalar (float and double instantiated in reference_sgd.cpp).
#include <cstdint>

namespace hpct::kernels::reference {

template <typename Real>
void sgd_update(Real* params /*(n)*/, const Real* grads /*(n)*/, Real* momentum_buf /*(n) or null*/, int64_t n, Real lr,
                Real momentum, Real dampening, Real weight_decay, bool nesterov, Real grad_scale, bool first_step);

}  // namespace hpct::kernels::reference
