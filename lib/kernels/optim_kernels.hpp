#pragma once
// Optimizer kernels beyond kernels.hpp's adamw_update, dispatched on ctx.device like every op (docs/invariants.md,
// invariant 5). Kept in their own header and translation units (cpu/cpu_sgd.cpp, reference/reference_sgd.*) so
// that they can grow without touching the model kernels. Plain reference twin: reference/reference_sgd.hpp.
//
// Legend: n elements of one flat parameter range; all buffers fp32, contiguous, on ctx.device.
#include <cstdint>

#include "kernels/exec_context.hpp"

namespace hpct::kernels {

// SGD with momentum, torch.optim.SGD semantics (1.13, single-tensor path), in its operation order:
//   g = grads * grad_scale                       (grad_scale: e.g. the clipping factor)
//   g = g + weight_decay * p                     (L2 decay added to the gradient, not decoupled)
//   if momentum != 0:
//     buf = g                                    on the first step (torch: no buffer yet)
//     buf = momentum * buf + (1 - dampening) * g on later steps
//     g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
// With momentum == 0 the buffer is neither read nor written (it may be null), as torch keeps none.
// nesterov requires momentum > 0 and dampening == 0 (torch raises otherwise; so does this).
void sgd_update(const ExecContext& ctx, float* params /*(n)*/, const float* grads /*(n)*/,
                float* momentum_buf /*(n) in/out, or null when momentum == 0*/, int64_t n, float lr, float momentum,
                float dampening, float weight_decay, bool nesterov, float grad_scale, bool first_step);

}  // namespace hpct::kernels
