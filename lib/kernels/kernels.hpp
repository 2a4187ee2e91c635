#pragma once
// The compute interface of hpctrain: every op the models use, declared once with its contract in kernels/ops.inc,
// checked there and dispatched on ctx.device to a backend (cpu/: OpenMP + OpenBLAS + oneDNN; cuda/: CUDA, cuBLAS,
// cuDNN) by kernels.cpp. Every op has a plain reference twin in reference/reference.hpp with the same names and
// argument order minus the context; tests compare the two on random data.
//
// Legend: B batch, T time (sequence), C channels, OC output channels, NH heads, HS = C/NH head size,
//         V true vocabulary, Vp padded vocabulary (multiple of 128), N = B*T rows.
// All tensors are contiguous, row-major, on ctx.device.
//
// Storage types (train.precision, docs/precision.md). The ops templated on the storage type A (ops.inc's
// HPCT_OP_STORAGE* entries) exist for A = float, A = bf16 (tensor/bf16.hpp) and A = fp16 (tensor/fp16.hpp, CUDA only:
// the CPU backend has no fp16 storage, and an op called with A = fp16 on the CPU throws, naming the fix); A is the
// type of everything a model stores between forward and backward and of the parameters the op reads (under bf16: the compute copy, cast once per step from the fp32 masters by cast()):
//   A      activations, activation gradients, logits, parameters read (weights, biases, LayerNorm/BatchNorm gains)
//   float  parameter gradients (accumulated in fp32 across micro-batches: +=), per-row or per-channel statistics
//          (LayerNorm mean and rstd, BatchNorm statistics, running averages), losses, every reduction's result
// Arithmetic inside an op is fp32 for all three: 16-bit loads widen to fp32, and each output is rounded once, to
// nearest even, when stored. GEMMs and convolutions multiply 16-bit inputs with fp32 accumulation (oneDNN on the CPU,
// cuBLASLt / cuDNN on CUDA). ctx.precision names the arithmetic of float-storage products on CUDA (tf32, below); with
// A = bf16 it is BF16, with A = fp16 FP16. The CPU backend accepts FP32 (A = float) and BF16 (A = bf16) and refuses
// TF32, FP16 and A = fp16.
//
// Gradient convention (say it once):
//   - parameter gradients (dweight, dbias, dw, db, dwte, dwpe) are ACCUMULATED (+=), so micro-batches
//     accumulate for free; the trainer zeroes them once per optimizer step;
//   - activation gradients are ASSIGNED (=), except layernorm_backward's dinp, which ACCUMULATES (+=)
//     because a LayerNorm input is always the residual stream, whose gradient also flows around it.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/exec_context.hpp"
#include "kernels/op_table.hpp"
#include "kernels/chunk_tables.hpp"
#include "kernels/conv_algorithms.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"
#include "tensor/tensor.hpp"

namespace hpct::kernels {

// The cuBLASLt workspace of the CUDA backend's 16-bit GEMMs: one buffer per device, allocated at the first bf16 or fp16
// GEMM and kept (32 MiB, cuBLAS's recommendation for Hopper). The memory record and plan count it as `workspace`.
constexpr size_t kCudaGemmWorkspaceBytes = size_t{32} << 20;
// What a run on `device` with activations of type `act` holds of it: the workspace on CUDA under 16-bit storage, else 0.
constexpr size_t gemm_workspace_bytes(Device device, DType act) {
  return device == Device::CUDA && act != DType::F32 ? kCudaGemmWorkspaceBytes : 0;
}

// train.attention = cudnn: cuDNN's fused attention (ExecContext::attention). What a run gets for the requested choice:
// Cudnn on CUDA with 16-bit storage (bf16, fp16), Own everywhere else (the CPU has one kernel; cuDNN's fused attention
// takes no fp32 input), so that one deck runs on both backends and the CPU reference of a GPU run ignores the key.
AttentionImpl effective_attention(AttentionImpl requested, Device device, DType act);
// Whether this build has the cuDNN frontend's headers that the Cudnn choice compiles from (scripts/setup.sh installs
// them where the CUDA toolkit is); a run that gets Cudnn from a build without them is refused at start.
bool cudnn_attention_built();
// The backward's scratch under Cudnn (attention_scratch_bytes): a bound computed from the shape, not cuDNN's answer,
// which depends on the GPU and the cuDNN version that a plan made on a login node cannot ask (the convolutions'
// workspace is planned the same way, below). It covers both of cuDNN's deterministic backward paths on Hopper: the
// frontend's row sums of dout * out (B,NH,T) float, the dP matrix (B,NH,T,T) in 16 bits with T padded to 128
// (cuDNN's default deterministic path: dQ from the stored dP in one GEMM) and an fp32 dQ accumulator (B,NH,T,HS)
// (its ordered-accumulation path), plus 32 MiB for the engine's own. The run checks cuDNN's figure against it at
// the first backward of a shape, and says both.
constexpr int64_t cudnn_attention_scratch_bytes(int64_t B, int64_t T, int64_t NH, int64_t HS) {
  const int64_t rows = B * NH * T, padded = (T + 127) / 128 * 128;
  return rows * 4 + B * NH * padded * padded * 2 + rows * HS * 4 + (int64_t{32} << 20);
}

// The block partials of the CUDA backend's full-grid column reductions (LayerNorm's dweight and dbias, the Linear
// bias gradient): one buffer of doubles per device, allocated at the first such reduction and kept, like the cuBLASLt
// workspace. Its size bounds how many row groups a reduction splits into (cuda_core_kernels.cuh, partial_rows), so
// the order of every sum depends on the shapes and this constant only. Counted as `workspace`.
constexpr size_t kCudaReducePartialsBytes = size_t{8} << 20;

// Every device-wide buffer the CUDA backend keeps for a run whose activations are of type `act` (the memory record's
// and the plan's `workspace` besides the model's own): the cuBLASLt workspace under 16-bit storage and the reduction
// partials; 0 on the CPU.
constexpr size_t device_workspace_bytes(Device device, DType act) {
  return gemm_workspace_bytes(device, act) + (device == Device::CUDA ? kCudaReducePartialsBytes : 0);
}

// The CUDA backend's convolution workspace (cuDNN): the 16-bit filter-gradient scratch of the layer (cuda_resnet.cu
// says why it exists; none under fp32 storage), then a budget for cuDNN's algorithms computed from the shape: twice the
// larger of the layer's input and output tensors (bytes of the storage type), at least 32 MiB. Each convolution runs
// the first deterministic algorithm, in cuDNN's order of preference, whose workspace fits. A formula and not "what the
// preferred algorithm asks": that depends on the GPU model and the cuDNN version, which a plan made on a login node
// (--plan, train.memory_limit_gb) cannot ask, and the plan must be the run's size. Measured on an H100 (cuDNN 9,
// ResNet-50 at micro-batch 256 in bf16): the preferred algorithms ask up to 1.5x the larger tensor, the leanest
// backward-filter algorithm of a strided 1x1 layer 1.6x its input; a fixed 256 MiB made that layer fail.
constexpr size_t kCudnnConvMinAlgoWorkspaceBytes = size_t{32} << 20;
constexpr int kCudnnConvAlgoWorkspacePerTensor = 2;
// The filter scratch: OC*C*KH*KW elements of the storage type, rounded up to 256 bytes so that the algorithms' part
// keeps the workspace's alignment, for the 16-bit filter gradient; with channels-last activations and a spatial kernel
// (KH*KW > 1) twice that for every storage type (the gradient in cuDNN's (OC,KH,KW,C) order, and the filter reordered
// to it); 0 under float storage otherwise.
size_t cuda_conv_filter_scratch_bytes(int C, int OC, int KH, int KW, DType act, bool channels_last = false);

// ---- the ranges of the one-launch optimizer and norm ops (ops.inc: sum_squares_ranges, adamw_update_chunks) ----
// squares_table(ranges) cuts each range, in order, into chunks of kTableChunk elements (its last one shorter; an
// empty range gives none): the chunk table of sum_squares_ranges, which the caller copies to ctx.device while planning.
struct SquaresRange {
  const float* x;
  int64_t n;
};
std::vector<SquaresChunk> squares_table(const std::vector<SquaresRange>& ranges);
// adamw_table(ranges, copy) likewise for adamw_update_chunks: a range's `copy` is its parameters' 16-bit compute copy
// (n elements of the table's `copy` type; null when that type is DType::F32), `decays` whether weight decay applies.
struct AdamwRange {
  float* params;
  const float* grads;
  float* m;
  float* v;
  int64_t n;
  bool decays;
  void* copy = nullptr;
};
std::vector<AdamwChunk> adamw_table(const std::vector<AdamwRange>& ranges, DType copy = DType::F32);

// How the CPU backend multiplies bf16, in one sentence for the run log (e.g. "bf16 GEMMs with fp32 accumulation
// through oneDNN ... (brg:avx512_core_amx_bf16)", or fp32 GEMMs on bf16 storage and why): cpu/cpu_matmul_dnnl.hpp.
std::string cpu_bf16_arithmetic();

// ---- the ops: one entry each in kernels/ops.inc, with its contract; here, each as kernels::name(ctx, ...) ----
#define HPCT_OP_STORAGE(name, params, args, check_list) \
  template <typename A>                                 \
  void name(HPCT_WITH_CTX params);
#define HPCT_OP_STORAGE_LAYOUT(name, params, args, check_list) HPCT_OP_STORAGE(name, params, args, check_list)
#define HPCT_OP(name, params, args, check_list) void name(HPCT_WITH_CTX params);
#define HPCT_OP_STORAGE_COMPOSED(ret, name, params) \
  template <typename A>                             \
  ret name(HPCT_WITH_CTX params);
#define HPCT_OP_COMPOSED(ret, name, params) ret name(HPCT_WITH_CTX params);
#include "kernels/ops.inc"

// ---- per-op wall-clock profile (off by default; validation/bench_resnet --profile) -------------
// When on, every dispatched op, and named phases inside some ops (e.g. "conv2d_backward/weight 3x3s1 16>16 @28"),
// add their wall time to a table keyed by name. For a single host thread driving the ops (the step loop); a CPU op
// returns only when its work is done, so wall time is its time. Off, it costs one branch per op.
struct ProfileRow {
  std::string name;
  double ms;
  int64_t calls;
};
void profile_enable(bool on);
std::vector<ProfileRow> profile_take();  // the rows since the last take, in first-seen order; clears the table

}  // namespace hpct::kernels
