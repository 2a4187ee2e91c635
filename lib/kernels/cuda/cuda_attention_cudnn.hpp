#pragma once
// CUDA backend: causal multi-head self-attention through cuDNN's fused scaled-dot-product attention, the
// ExecContext::attention = Cudnn alternative to the own flash kernels (cuda_gpt.cu dispatches; the op contract is
// kernels.hpp's attention_forward / attention_backward: qkv rows [q | k | v], out (B,T,C), stats one float per row,
// (B,NH,T): cuDNN's softmax statistics, which only its backward reads). 16-bit storage only (DType::BF16 or
// DType::F16). Host code.
#include <cstdint>
#include <string>

#include "kernels/exec_context.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels::cuda {

// cuDNN's own checks of the op's graph (shapes, strides, the causal mask, the deterministic backward) for a device of
// compute capability sm_version (90: Hopper), on the host: no GPU needed. "" when cuDNN accepts it, else its message.
std::string cudnn_attention_validate(int sm_version, bool backward, DType act, int B, int T, int C, int NH);

// out, stats from qkv. workspace: device memory for cuDNN's forward plan, `workspace_bytes` of it (the caller lends
// the cuBLASLt workspace, which the same stream orders); a plan that asks for more is refused naming both sizes.
void cudnn_attention_forward(const ExecContext& ctx, DType act, void* out, float* stats, const void* qkv, int B, int T,
                             int C, int NH, void* workspace, int64_t workspace_bytes);

// dqkv (assigned) from dout, qkv, out and the forward's stats, with cuDNN's deterministic backward. scratch: the
// attention scratch planned for this shape (kernels::cudnn_attention_scratch_bytes of B, T, NH, C/NH bytes), cuDNN's
// workspace; a plan that asks for more is refused naming both sizes.
void cudnn_attention_backward(const ExecContext& ctx, DType act, void* dqkv, void* scratch, const void* dout,
                              const void* qkv, const void* out, const float* stats, int B, int T, int C, int NH);

}  // namespace hpct::kernels::cuda
