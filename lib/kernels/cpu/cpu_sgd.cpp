// sgd_update (kernels/ops.inc) on the CPU: one fused OpenMP loop.
// Legend: n elements of one flat parameter range.
#include <cstdint>

#include "kernels/cpu/cpu_kernels.hpp"

namespace hpct::kernels::cpu {
namespace {
constexpr int64_t kMinParallel = 1 << 14;  // below this many elements a pointwise op stays serial (as cpu_loss_optim)
}  // namespace

// In the operation order of torch.optim.SGD (1.13, single-tensor path), so that a PyTorch run matches to fp32
// rounding: d_p.add(param, alpha=wd); buf.mul_(momentum).add_(d_p, alpha=1-dampening); d_p.add(buf,
// alpha=momentum); param.add_(d_p, alpha=-lr). The branches on the flags are hoisted out of the loop.
void sgd_update(float* params, const float* grads, float* buf, int64_t n, float lr, float momentum, float dampening,
                float weight_decay, bool nesterov, float grad_scale, bool first_step) {
  if (momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) {
      const float g = grads[i] * grad_scale + weight_decay * params[i];
      params[i] = params[i] - lr * g;
    }
    return;
  }
  if (first_step) {
    // buf may hold garbage (e.g. freshly planned memory): assign, never read it, so a NaN cannot leak through 0*buf
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
    for (int64_t i = 0; i < n; i++) {
      const float g = grads[i] * grad_scale + weight_decay * params[i];
      buf[i] = g;
      const float d = nesterov ? g + momentum * g : g;
      params[i] = params[i] - lr * d;
    }
    return;
  }
  const float take = 1.0f - dampening;
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; i++) {
    const float g = grads[i] * grad_scale + weight_decay * params[i];
    const float b = buf[i] * momentum + take * g;
    buf[i] = b;
    const float d = nesterov ? g + momentum * b : b;
    params[i] = params[i] - lr * d;
  }
}

}  // namespace hpct::kernels::cpu
