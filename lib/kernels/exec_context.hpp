#pragma once
// Execution context every kernel takes (DESIGN.md §7): which backend runs it, on which stream, and in which precision.
// On the CPU the stream is unused (kernels complete before they return); on CUDA it is a cudaStream_t.
#include <string>

#include "tensor/device.hpp"

namespace hpct {

// The arithmetic of the matrix products (deck key train.precision). Storage is fp32 everywhere (parameters, master
// weights, optimizer state, activations, gradients); only the tensor-core products round their inputs:
//   FP32  plain fp32 products (the CPU backend; cuBLAS CUBLAS_COMPUTE_32F, cuDNN CUDNN_FMA_MATH)
//   TF32  inputs rounded to tf32 (10-bit mantissa), fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32; cuDNN tensor ops)
//   BF16  inputs rounded to bf16 (7-bit mantissa, fp32's range), fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF;
//         convolutions: TF32 tensor ops, cuDNN's legacy API has no bf16 conversion of fp32 data)
//   FP16  inputs rounded to fp16 (10-bit mantissa, max 65504, normal min 6.1e-5), fp32 accumulation
//         (CUBLAS_COMPUTE_32F_FAST_16F; cuDNN CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION): needs loss scaling
//         (train/loss_scaler.hpp) so that small gradients do not flush to zero in the conversion.
// The CPU backend computes FP32 only: an op dispatched to the CPU with another precision throws.
enum class Precision { FP32, TF32, BF16, FP16 };

// "fp32" | "tf32" | "bf16" | "fp16"
const char* precision_name(Precision p);
// The inverse; anything else is a UsageError naming the accepted values.
Precision parse_precision(const std::string& s);

struct ExecContext {
  Device device = Device::CPU;
  void* stream = nullptr;  // cudaStream_t on Device::CUDA, unused on Device::CPU
  Precision precision = Precision::FP32;
};

}  // namespace hpct
