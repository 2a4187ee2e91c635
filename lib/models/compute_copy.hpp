#pragma once
// The 16-bit compute copy of a model's parameters (docs/precision.md, "The bf16 scheme"; fp16 follows it): under
// train.precision = bf16 or fp16 the kernels read the parameters in the activation type, cast from the fp32 masters
// once per step, while the optimizer, the gradient norm and the checkpoints keep to the masters. Gpt and ResNet plan
// the copy as a slab with the masters' tensors in the same order (each of the activation type) and refresh it through
// this one function.
#include "kernels/exec_context.hpp"
#include "tensor/tensor.hpp"

namespace hpct::models {

// Casts every fp32 tensor of `masters` into the tensor of the same index of `copy` (bf16 or f16: the copy's dtype
// says which), rounding to nearest even, on ctx.device (stream-ordered on CUDA). An empty copy (fp32 storage, where the
// kernels read the masters) is a no-op. The two slabs must list the same shapes in the same order.
void refresh_compute_copy(const ExecContext& ctx, Slab& copy, const Slab& masters);

}  // namespace hpct::models
