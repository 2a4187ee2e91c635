#pragma once
// Execution context every kernel takes (docs/cuda.md): which backend runs it, on which stream, and in which precision.
// On the CPU the stream is unused (kernels complete before they return); on CUDA it is a cudaStream_t.
#include <string>

#include "tensor/device.hpp"

namespace hpct {
namespace kernels {
class ConvAlgorithms;  // kernels/conv_algorithms.hpp
}

// The arithmetic of the matrix products (deck key train.precision). Storage is fp32 everywhere (parameters, master
// weights, optimizer state, activations, gradients); only the tensor-core products round their inputs:
//   FP32  plain fp32 products (the CPU backend; cuBLAS CUBLAS_COMPUTE_32F, cuDNN CUDNN_FMA_MATH)
//   TF32  inputs rounded to tf32 (10-bit mantissa), fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32; cuDNN tensor ops)
//   BF16  inputs rounded to bf16 (7-bit mantissa, fp32's range), fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF;
//         convolutions: TF32 tensor ops, cuDNN's legacy API has no bf16 conversion of fp32 data)
//   FP16  inputs rounded to fp16 (10-bit mantissa, max 65504, normal min 6.1e-5), fp32 accumulation
//         (CUBLAS_COMPUTE_32F_FAST_16F; cuDNN CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION): needs loss scaling
//         (optim/loss_scaler.hpp) so that small gradients do not flush to zero in the conversion.
// The CPU backend computes FP32 only: an op dispatched to the CPU with another precision throws.
enum class Precision { FP32, TF32, BF16, FP16 };

// "fp32" | "tf32" | "bf16" | "fp16"
const char* precision_name(Precision p);
// The inverse; anything else is a UsageError naming the accepted values.
Precision parse_precision(const std::string& s);

// The causal self-attention's kernels on CUDA (deck key train.attention):
//   Own    the own flash kernels (kernels/cuda/cuda_flash_attention*.cuh), on every backend and storage type
//   Cudnn  cuDNN's fused scaled-dot-product attention (the graph API through the cuDNN frontend), forward and the
//          deterministic backward: CUDA with 16-bit storage only (cuDNN has no fp32 input for it)
// The CPU has its own kernel only; effective_attention says what a run actually gets.
enum class AttentionImpl { Own, Cudnn };

// "own" | "cudnn"
const char* attention_impl_name(AttentionImpl a);
// The inverse; anything else is a UsageError naming the accepted values.
AttentionImpl parse_attention_impl(const std::string& s);

// A bounded host wait on a stream (docs/invariants.md, invariant 3). Once NCCL work is queued on the compute stream
// (the communicators' Work::wait() is stream-ordered: the stream waits on their completion events), a plain
// cudaStreamSynchronize could block forever on a peer that stalled. lib/parallel's ParallelContext installs an
// implementation in its exec() (comm/nccl_sync_guard.hpp) that polls the stream with back-off, watches the NCCL
// communicators' asynchronous errors and, past comm.timeout_s, aborts them and throws hpct::Error naming the rank and
// what it waited for. An interface here, so that lib/kernels builds without MPI and NCCL.
class StreamSyncGuard {
 public:
  virtual ~StreamSyncGuard() = default;
  // Blocks the host until all work queued so far on `stream` (a cudaStream_t) has completed; throws hpct::Error on a
  // timeout or a failure (`what` names the wait in the message).
  virtual void synchronize(void* stream, const char* what) = 0;
  // Aborts the communication the waited streams may depend on (NCCL: ncclCommAbort of every watched communicator,
  // whose kernels then exit), so that nothing queued on them waits for a peer any more. Called on the way out of a
  // failed run, before device memory is freed (a cudaFree waits for the device). Never throws.
  virtual void abort_communication() noexcept {}
};

struct ExecContext {
  Device device = Device::CPU;
  void* stream = nullptr;  // cudaStream_t on Device::CUDA, unused on Device::CPU
  Precision precision = Precision::FP32;
  // CUDA: kernels::synchronize() waits through it when set (else cudaStreamSynchronize), and so do copy_to_host /
  // copy_from_host with pageable host memory before the copy (the runtime would block on the stream itself there);
  // unused on the CPU.
  StreamSyncGuard* sync_guard = nullptr;
  // CUDA with 16-bit storage: the MLP's GELU in cuBLASLt's GEMM epilogues (matmul_gelu_forward, matmul_dgelu_backward;
  // the deck key train.gelu_epilogue). Ignored elsewhere.
  bool gelu_epilogue = false;
  // CUDA with 16-bit storage: the attention kernels (train.attention, kernels::effective_attention); the CPU and fp32
  // storage refuse Cudnn. The size queries attention_stats_bytes / attention_scratch_bytes answer for this choice.
  AttentionImpl attention = AttentionImpl::Own;
  // The 4-D activations of the convolution, BatchNorm and pooling ops are channels-last, (N,H,W,C), instead of NCHW
  // (the weights stay OIHW). The CPU backend with oneDNN only (kernels.hpp, conv2d_channels_last_runs); a ResNet sets
  // it for its own calls (model.memory_format).
  bool channels_last = false;
  // CUDA: the convolution algorithms chosen by timing them (kernels/conv_algorithms.hpp); null, or a shape the table
  // does not hold: cuDNN's heuristic order. A ResNet sets it for its own calls. The CPU backend ignores it.
  const kernels::ConvAlgorithms* conv_algorithms = nullptr;
};

}  // namespace hpct
