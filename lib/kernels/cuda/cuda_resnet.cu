// CUDA backend: the convolutional layers of a ResNet, NCHW (kernels.hpp has the contracts, cpu/cpu_conv.cpp the
// reference these ops must match). Legend: N images, C input channels, H W input size, OC output channels, KH KW
// kernel, OH OW output size, HW = H*W, OHW = OH*OW, a "plane" is one (n, c) image channel of HW contiguous floats.
// Every op is asynchronous on stream_of(ctx), allocates nothing on the device (scratch comes from the caller) and
// never reads device data on the host. No float atomics anywhere: every reduction runs in a fixed order, so a run
// reproduces itself bit for bit on the same GPU.
//
// Conv2d: cuDNN 9's legacy convolution API (cudnn_cnn.h), fp32 NCHW, CUDNN_CROSS_CORRELATION (torch's Conv2d),
// groups 1, dilation 1. The math type follows ctx.precision (exec_context.hpp): fp32 -> CUDNN_FMA_MATH (no TF32 tensor
// cores: fp32 results within the tests' 1e-4-level tolerances); tf32 and bf16 -> CUDNN_TENSOR_OP_MATH (TF32 tensor cores
// on fp32 data; the legacy API has no bf16 conversion of fp32 tensors); fp16 -> CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
// (fp32 data converted to fp16 for the tensor cores).
// bf16 storage (A = bf16, whatever ctx.precision): x, w and y descriptors CUDNN_DATA_BFLOAT16, the convolution's
// compute type CUDNN_DATA_FLOAT (cuDNN's PSEUDO_BFLOAT16_CONFIG: bf16 tensor-core products, fp32 accumulation),
// CUDNN_TENSOR_OP_MATH. fp16 storage (A = fp16) is the same with CUDNN_DATA_HALF (PSEUDO_HALF_CONFIG: fp16 products,
// fp32 accumulation); "bf16" below stands for either 16-bit type. The filter gradient must accumulate into the fp32
// master gradient, but the legacy API's backward-filter takes dw of the type of x and dy (a bf16 x with a float dw is
// no supported configuration), so it writes the bf16 filter gradient (beta = 0) into a scratch at the start of the
// workspace, and accumulate_float_kernel adds it to dweight in fp32: one bf16 rounding per micro-batch of the gradient
// (as a bf16 autocast convolution's weight gradient has in PyTorch), no rounding of the accumulated sum. The
// alternatives cost more than that rounding: the graph API's mixed-type wgrad is another code path for one tensor, and
// fp32 copies of x and dy would be activation-sized scratch and TF32 speed. conv2d_workspace_floats(..., DType::BF16)
// includes that scratch. The bias (forward) seeds the output (plane_bias_kernel<true>) and cuDNN accumulates the
// convolution onto it (beta = 1), so the sum is rounded to bf16 once.
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7: no benchmarking, no device allocation),
// filtered to CUDNN_DETERMINISTIC, supported ones (under fp32 also non-tensor-op), in the heuristics' order; a known
// deterministic algorithm (IMPLICIT_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1) is appended as the last resort. Each call
// runs the FIRST candidate whose workspace fits the one passed in: the model passes conv2d_workspace_floats (the
// filter scratch and the algorithms' budget, kernels.hpp), so a phase whose preferred algorithm
// asks for more runs the next that fits, and says so once per shape and phase (rank 0, stderr); when none fits the
// op fails naming the sizes. The choice depends only on the shape, the GPU model and the workspace size: the same
// bits on every run. A table of timed choices (ExecContext::conv_algorithms, kernels/conv_algorithms.hpp) overrides
// the order per shape and phase where its algorithm is a candidate that fits (else a warning, once, and the order);
// conv2d_time_algorithms times the candidates for it. The same table gives the same bits on every run.
// Bias (forward) is a separate add kernel; dbias is our own per-channel reduction in double.
// Handles: one cudnnHandle_t per (host thread, device) (cuda_cudnn.hpp, shared with the fused attention), set to the
// op's stream each call; descriptors and candidate lists are cached per (thread, device, shape). Both are deliberately
// never destroyed: destroying cuDNN objects from thread_local/static destructors at process exit can run after the
// CUDA runtime has torn down (PyTorch leaks its handles for the same reason); the caches hold one entry per distinct
// conv shape.
//
// BatchNorm2d, MaxPool2d, global average pooling, the conv bias and dbias: our own kernels, in
// cuda_resnet_kernels.cuh (its header says how they reduce and how they are launched); this file checks the host-side
// arguments and launches them at the geometry that header's host functions give (HPCT_LAUNCH), which the emulated
// tests (tests/cuda_emu/test_emu_resnet.cpp) run too.
//
// The CPU backend's host-side checks of statistics values (count > 0 in forward_apply, count > 1 in update_running)
// cannot run here without reading device memory: a zero count gives inf/NaN in the outputs instead of an error.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/kernels.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_cudnn.hpp"
#include "kernels/cuda/cuda_kernels.hpp"
#include "kernels/cuda/cuda_resnet_kernels.cuh"
#include "kernels/cuda/cuda_resnet_nhwc_kernels.cuh"

namespace hpct::kernels::cuda {
namespace {

struct ConvDims {
  int N, C, H, W, OC, KH, KW, stride, pad, OH, OW;
  bool channels_last;  // ExecContext::channels_last: x, y and the filter cuDNN sees in CUDNN_TENSOR_NHWC
};

// The shape was checked by the dispatch (kernels/op_checks.hpp).
ConvDims conv_dims(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad) {
  return ConvDims{N,
                  C,
                  H,
                  W,
                  OC,
                  KH,
                  KW,
                  stride,
                  pad,
                  (H + 2 * pad - KH) / stride + 1,
                  (W + 2 * pad - KW) / stride + 1,
                  ctx.channels_last};
}
// Channels-last with a spatial kernel: the filter is reordered to (OC, KH, KW, C) for cuDNN and its gradient back
// (cuda_resnet_nhwc_kernels.cuh); a 1x1 filter is the same bytes in both orders.
bool reorders_filter(const ConvDims& d) { return d.channels_last && d.KH * d.KW > 1; }

struct ConvAlgo {
  int algo;      // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t bytes;  // its workspace for this shape
};

// Descriptors and the deterministic candidates (preference order) of one shape and storage type on one device.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::vector<ConvAlgo> fwd, bwd_data, bwd_filter;
};

bool tensor_op_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

void add_candidate(std::vector<ConvAlgo>& list, int algo, size_t bytes) {
  for (const ConvAlgo& a : list)
    if (a.algo == algo) return;
  list.push_back({algo, bytes});
}

// The candidates of one algorithm family, in cuDNN's heuristic order (cudnnGet*Algorithm_v7: ranks without running or
// allocating): those that succeed, are CUDNN_DETERMINISTIC, use no tensor-op math unless `tensor_ops` (fp32: no TF32)
// and whose workspace query succeeds; then `fallback`, an algorithm known to be deterministic. max_count / rank / workspace wrap the family's
// cudnnGet*AlgorithmMaxCount, cudnnGet*Algorithm_v7 and cudnnGet*WorkspaceSize.
template <class Perf, class Algo, class MaxCount, class Rank, class Workspace>
void add_deterministic(std::vector<ConvAlgo>& list, bool tensor_ops, Algo fallback, MaxCount max_count, Rank rank,
                       Workspace workspace) {
  int n = 0, returned = 0;
  CUDNN_CHECK(max_count(&n));
  std::vector<Perf> perf(static_cast<size_t>(std::max(n, 1)));
  CUDNN_CHECK(rank(static_cast<int>(perf.size()), &returned, perf.data()));
  size_t bytes = 0;
  for (int i = 0; i < returned; i++) {
    const Perf& r = perf[static_cast<size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC ||
        (!tensor_ops && tensor_op_math(r.mathType)))
      continue;
    if (workspace(r.algo, &bytes) == CUDNN_STATUS_SUCCESS) add_candidate(list, r.algo, bytes);
  }
  if (workspace(fallback, &bytes) == CUDNN_STATUS_SUCCESS) add_candidate(list, fallback, bytes);
}

// The convolution math type of a precision (header comment).
cudnnMathType_t conv_math(Precision p) {
  switch (p) {
    case Precision::FP32: return CUDNN_FMA_MATH;
    case Precision::TF32:
    case Precision::BF16: return CUDNN_TENSOR_OP_MATH;
    case Precision::FP16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  }
  HPCT_FAIL("conv2d: unknown precision {}", static_cast<int>(p));
}

// The storage type of the tensors of a convolution (dtype_of<A>() of an op's A): DType::F32, or a 16-bit one (BF16,
// F16) whose tensors cuDNN multiplies as they are.
bool half_precision(DType storage) { return storage != DType::F32; }
cudnnDataType_t cudnn_data_type(DType storage) {
  switch (storage) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    default: break;
  }
  HPCT_FAIL("conv2d: storage type {} is not an activation type; pass DType::F32, DType::BF16 or DType::F16",
            dtype_name(storage));
}

// The math type of 16-bit storage: tensor ops on the 16-bit tensors as they are.
cudnnMathType_t conv_math(Precision p, DType storage) {
  return half_precision(storage) ? CUDNN_TENSOR_OP_MATH : conv_math(p);
}

ConvPlan build_plan(cudnnHandle_t h, const ConvDims& d, Precision precision, DType storage) {
  ConvPlan p;
  const cudnnDataType_t data = cudnn_data_type(storage);
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
  // channels-last: the activations (N,H,W,C) and the filter (OC,KH,KW,C) in NHWC, as PyTorch's channels_last runs
  // cuDNN (a filter in the other order would make cuDNN transpose it on every call)
  const cudnnTensorFormat_t format = d.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, format, data, d.N, d.C, d.H, d.W));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, format, data, d.N, d.OC, d.OH, d.OW));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, data, format, d.OC, d.C, d.KH, d.KW));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.conv, d.pad, d.pad, d.stride, d.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(p.conv, 1));
  const cudnnMathType_t math = conv_math(precision, storage);
  const bool tensor_ops = math != CUDNN_FMA_MATH;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, math));  // fp32: plain fp32 FMAs, no TF32
  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &on, &oc, &oh, &ow));
  HPCT_CHECK(on == d.N && oc == d.OC && oh == d.OH && ow == d.OW,
             "conv2d: cuDNN's output shape ({}, {}, {}, {}) differs from torch's ({}, {}, {}, {})", on, oc, oh, ow, d.N,
             d.OC, d.OH, d.OW);

  // forward, backward data, backward filter: the same selection over cuDNN's three algorithm families
  add_deterministic<cudnnConvolutionFwdAlgoPerf_t>(
      p.fwd, tensor_ops, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
      [&](int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n); },
      [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, n, got, perf);
      },
      [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, a, bytes);
      });
  add_deterministic<cudnnConvolutionBwdDataAlgoPerf_t>(
      p.bwd_data, tensor_ops, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
      [&](int* n) { return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n); },
      [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x, n, got, perf);
      },
      [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x, a, bytes);
      });
  add_deterministic<cudnnConvolutionBwdFilterAlgoPerf_t>(
      p.bwd_filter, tensor_ops, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
      [&](int* n) { return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n); },
      [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w, n, got, perf);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w, a, bytes);
      });
  HPCT_CHECK(!p.fwd.empty() && !p.bwd_data.empty() && !p.bwd_filter.empty(),
             "conv2d: cuDNN offers no deterministic algorithm (math type {}, {} {} tensors) for N={} C={} H={} W={} "
             "OC={} {}x{} stride {} pad {} (forward {}, backward-data {}, backward-filter {} candidates){}",
             static_cast<int>(math), dtype_name(storage), d.channels_last ? "NHWC" : "NCHW", d.N, d.C, d.H, d.W, d.OC,
             d.KH, d.KW, d.stride, d.pad, p.fwd.size(), p.bwd_data.size(), p.bwd_filter.size(),
             half_precision(storage) ? fmt::format("; this GPU or cuDNN cannot run {} storage: run with "
                                                   "train.precision=fp32 or tf32",
                                                   dtype_name(storage))
                                     : std::string());
  return p;
}

// The cached plan of this shape on the current device (built on first use; the handle must be current).
const ConvPlan& conv_plan(cudnnHandle_t h, const ConvDims& d, Precision precision, DType storage) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  using Key = std::array<int, 13>;
  thread_local std::map<Key, std::unique_ptr<ConvPlan>> plans;  // descriptors never destroyed (header comment)
  // 16-bit storage ignores the precision: one plan for all of them
  const Key key{dev,
                d.N,
                d.C,
                d.H,
                d.W,
                d.OC,
                d.KH,
                d.KW,
                d.stride,
                d.pad,
                half_precision(storage) ? -1 : static_cast<int>(precision),
                static_cast<int>(storage),
                d.channels_last ? 1 : 0};
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, std::make_unique<ConvPlan>(build_plan(h, d, precision, storage))).first;
  return *it->second;
}

// The table's choice for this convolution and phase (ExecContext::conv_algorithms); -1 without one.
int table_choice(const ExecContext& ctx, const ConvDims& d, DType storage, ConvPhase phase) {
  if (!ctx.conv_algorithms) return -1;
  return ctx.conv_algorithms->find(conv_algo_key(ctx, d.N, d.C, d.H, d.W, d.OC, d.KH, d.KW, d.stride, d.pad, storage),
                                   phase);
}

// The workspace starts with the filter scratch (kernels.hpp, cuda_conv_filter_scratch_bytes: the filter gradient in
// cuDNN's type and order for 16-bit storage or a reordered filter, then the reordered filter itself); the algorithms
// get the rest. float storage without reordering: no scratch.
size_t filter_scratch_bytes(const ConvDims& d, DType storage) {
  return cuda_conv_filter_scratch_bytes(d.C, d.OC, d.KH, d.KW, storage, d.channels_last);
}

int64_t floats_of(size_t bytes) { return static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float)); }

// "backward-data N=... C=... ... pad 1": a phase of one convolution, for the warnings.
std::string phase_of(const char* phase, const ConvDims& d) {
  return fmt::format("{} N={} C={} H={} W={} OC={} {}x{} stride {} pad {}", phase, d.N, d.C, d.H, d.W, d.OC, d.KH, d.KW,
                     d.stride, d.pad);
}
// True the first time this process sees `key` (the warnings below say each thing once).
bool first_time(const std::string& key) {
  static std::mutex mu;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mu);
  return said.insert(key).second;
}

// Once per (shape, phase, workspace size): the preferred algorithm did not fit and `ran` runs instead (slower, as
// cuDNN ranks them; the results stay deterministic).
void warn_budget_fallback(const ConvAlgo& preferred, const ConvAlgo& ran, size_t have_bytes, const char* op,
                          const char* phase, const ConvDims& d) {
  const std::string what = phase_of(phase, d);
  if (!first_time(fmt::format("budget {} {}", what, have_bytes))) return;
  log_warn(
      "{}: cuDNN's preferred deterministic {} algorithm ({}) needs a workspace of {:.1f} MiB, more than the {:.1f} "
      "MiB this convolution has (conv2d_workspace_floats): running algorithm {} ({:.1f} MiB) instead",
      op, what, preferred.algo, preferred.bytes / 1048576.0, have_bytes / 1048576.0, ran.algo, ran.bytes / 1048576.0);
}

// Once per (shape, phase, algorithm): the table's choice is no deterministic candidate of this cuDNN and GPU, or needs
// more workspace than the call has; the heuristic order runs instead.
void warn_table_choice_unused(int chosen, const char* why, const char* op, const char* phase, const ConvDims& d) {
  const std::string what = phase_of(phase, d);
  if (!first_time(fmt::format("table {} {}", what, chosen))) return;
  log_warn("{}: the convolution algorithm table chooses algorithm {} for the {}, but {}: running cuDNN's heuristic "
           "order instead (a table timed on another GPU or cuDNN? time it again with train.conv_algorithms = timed)",
           op, chosen, what, why);
}

// The algorithm of one phase: the table's choice (`chosen`, -1: none) where it is a candidate that fits, else the first
// candidate whose workspace fits; fails naming the sizes when none does.
const ConvAlgo& pick(const std::vector<ConvAlgo>& list, size_t have_bytes, const char* op, const char* phase,
                     const ConvDims& d, int chosen = -1) {
  if (chosen >= 0) {
    const auto it = std::find_if(list.begin(), list.end(), [&](const ConvAlgo& a) { return a.algo == chosen; });
    if (it != list.end() && it->bytes <= have_bytes) return *it;
    warn_table_choice_unused(chosen,
                             it == list.end() ? "it is no deterministic candidate here" : "its workspace does not fit",
                             op, phase, d);
  }
  for (const ConvAlgo& a : list) {
    if (a.bytes > have_bytes) continue;
    if (&a != &list.front()) warn_budget_fallback(list.front(), a, have_bytes, op, phase, d);
    return a;
  }
  size_t least = list.front().bytes;
  for (const ConvAlgo& a : list) least = std::min(least, a.bytes);
  HPCT_FAIL("{}: the workspace of {} floats is smaller than the {} floats the leanest deterministic cuDNN {} algorithm "
            "needs ({} for the preferred one) for N={} C={} H={} W={} OC={} {}x{} stride {} pad {}; size it with "
            "conv2d_workspace_floats",
            op, floats_of(have_bytes), floats_of(least), phase, floats_of(list.front().bytes), d.N, d.C, d.H, d.W, d.OC,
            d.KH, d.KW, d.stride, d.pad);
}

size_t workspace_bytes(const float* workspace, int64_t workspace_floats) {
  HPCT_CHECK(workspace_floats >= 0, "conv2d: negative workspace size {}", workspace_floats);
  return workspace ? static_cast<size_t>(workspace_floats) * sizeof(float) : 0;
}

// The workspace of one call split into the filter-gradient scratch, the reordered filter and the algorithms' part
// (filter_scratch_bytes).
struct ConvWorkspace {
  void* filter_scratch;  // the filter gradient in the storage type and cuDNN's order; null for float NCHW-order
  void* filter_copy;     // the (OC,KH,KW,C) filter (reorders_filter); null otherwise
  void* algo;            // the algorithms' workspace
  size_t algo_bytes;
};
ConvWorkspace split_workspace(const char* op, float* workspace, int64_t workspace_floats, const ConvDims& d,
                              DType storage) {
  const size_t have = workspace_bytes(workspace, workspace_floats), scratch = filter_scratch_bytes(d, storage);
  if (scratch == 0) return {nullptr, nullptr, workspace, have};
  HPCT_CHECK(have >= scratch,
             "{}: {} storage{} needs a workspace of at least {} floats for the filter scratch, and the algorithms' "
             "part after it (has {} floats); size it with conv2d_workspace_floats under the same ExecContext and "
             "DType::{}",
             op, dtype_name(storage), d.channels_last ? " with channels-last activations" : "", scratch / sizeof(float),
             workspace_floats,
             storage == DType::F16    ? "F16"
             : storage == DType::BF16 ? "BF16"
                                      : "F32");
  auto* base = reinterpret_cast<unsigned char*>(workspace);
  void* copy = reorders_filter(d) ? base + scratch / 2 : nullptr;  // two equal 256-byte-rounded halves
  return {base, copy, base + scratch, have - scratch};
}
// The filter as cuDNN reads it: the stored weights, or their (OC,KH,KW,C) reorder in the workspace.
template <typename S>
const void* filter_for_cudnn(cudaStream_t stream, const char* op, const ConvDims& d, const ConvWorkspace& ws,
                             const S* weight) {
  if (!reorders_filter(d)) return weight;
  const int64_t total = static_cast<int64_t>(d.OC) * d.C * d.KH * d.KW;
  HPCT_LAUNCH(filter_to_channels_last_kernel<S>, nhwc_pointwise_shape(total), stream, static_cast<S*>(ws.filter_copy),
              weight, total, d.C, d.KH * d.KW);
  HPCT_CUDA_LAUNCH_CHECK(op);
  return ws.filter_copy;
}

}  // namespace

// ---- Conv2d ---------------------------------------------------------------------------------------------
// (conv2d_workspace_floats on CUDA is computed on the host: kernels.cpp)

template <typename A>
void conv2d_forward(const ExecContext& ctx, A* out, const A* inp, const A* weight, const A* bias, float* workspace,
                    int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad) {
  using S = DeviceStorage<A>;
  constexpr DType kStorage = dtype_of<A>();
  constexpr bool k16Bit = kHalfPrecisionStorage<A>;
  const ConvDims d = conv_dims(ctx, N, C, H, W, OC, KH, KW, stride, pad);
  const cudaStream_t stream = stream_of(ctx);
  const cudnnHandle_t h = cudnn_handle(stream);
  const ConvPlan& p = conv_plan(h, d, ctx.precision, kStorage);
  const ConvWorkspace ws = split_workspace("conv2d_forward", workspace, workspace_floats, d, kStorage);
  const ConvAlgo& a = pick(p.fwd, ws.algo_bytes, "conv2d_forward", "forward", d,
                           table_choice(ctx, d, kStorage, ConvPhase::Forward));
  const void* w = filter_for_cudnn(stream, "conv2d_forward (filter reorder)", d, ws, dev_ptr(weight));
  const int64_t planes = static_cast<int64_t>(N) * OC, len = static_cast<int64_t>(d.OH) * d.OW;
  const float one = 1.0f, zero = 0.0f;
  // the bias: seeded (kSeed) or added, per plane (NCHW) or per element's channel (channels-last)
  const auto add_bias = [&](auto seed_tag) {
    constexpr bool kSeed = decltype(seed_tag)::value;
    if (d.channels_last)
      HPCT_LAUNCH((nhwc_bias_kernel<kSeed, S>), nhwc_pointwise_shape(planes * len), stream, dev_ptr(out), dev_ptr(bias),
                  planes * len, OC);
    else
      HPCT_LAUNCH((plane_bias_kernel<kSeed, S>), plane_shape(planes, len), stream, dev_ptr(out), dev_ptr(bias), planes,
                  OC, len);
    HPCT_CUDA_LAUNCH_CHECK("conv2d_forward (bias)");
  };
  // 16-bit with a bias: the output seeded with it, the convolution accumulated onto it (one rounding; header comment)
  const bool seed = k16Bit && bias != nullptr;
  if (seed) add_bias(std::true_type{});
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, p.x, inp, p.w, w, p.conv, static_cast<cudnnConvolutionFwdAlgo_t>(a.algo),
                                      a.bytes ? ws.algo : nullptr, a.bytes, seed ? &one : &zero, p.y, out));
  if (bias && !seed) add_bias(std::false_type{});
}

template <typename A>
void conv2d_backward(const ExecContext& ctx, A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                     const A* weight, float* workspace, int64_t workspace_floats, int N, int C, int H, int W, int OC,
                     int KH, int KW, int stride, int pad) {
  using S = DeviceStorage<A>;
  constexpr DType kStorage = dtype_of<A>();
  constexpr bool k16Bit = kHalfPrecisionStorage<A>;
  const ConvDims d = conv_dims(ctx, N, C, H, W, OC, KH, KW, stride, pad);
  const cudaStream_t stream = stream_of(ctx);
  const cudnnHandle_t h = cudnn_handle(stream);
  const ConvPlan& p = conv_plan(h, d, ctx.precision, kStorage);
  const ConvWorkspace ws = split_workspace("conv2d_backward", workspace, workspace_floats, d, kStorage);
  const float one = 1.0f, zero = 0.0f;
  // dweight += dout (*) inp: beta = 1 accumulates (float, NCHW order); 16-bit or a reordered filter: into the scratch
  // (beta = 0), then added in fp32 (reordered back where it was reordered)
  const bool via_scratch = k16Bit || reorders_filter(d);
  const ConvAlgo& af = pick(p.bwd_filter, ws.algo_bytes, "conv2d_backward", "backward-filter", d,
                            table_choice(ctx, d, kStorage, ConvPhase::BackwardFilter));
  void* dw = via_scratch ? ws.filter_scratch : static_cast<void*>(dweight);
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      h, &one, p.x, inp, p.y, dout, p.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(af.algo),
      af.bytes ? ws.algo : nullptr, af.bytes, via_scratch ? &zero : &one, p.w, dw));
  const int64_t n = static_cast<int64_t>(OC) * C * KH * KW;
  if (reorders_filter(d)) {
    HPCT_LAUNCH(accumulate_channels_last_filter_kernel<S>, nhwc_pointwise_shape(n), stream, dweight,
                static_cast<const S*>(ws.filter_scratch), n, C, KH * KW);
    HPCT_CUDA_LAUNCH_CHECK("conv2d_backward (dweight += channels-last filter gradient)");
  } else if (k16Bit) {
    const int64_t packs = accumulate_packs(n, dweight, ws.filter_scratch);
    HPCT_LAUNCH(accumulate_float_kernel<S>, accumulate_shape(n, packs), stream, dweight,
                static_cast<const S*>(ws.filter_scratch), n, packs);
    HPCT_CUDA_LAUNCH_CHECK("conv2d_backward (dweight += 16-bit filter gradient)");
  }
  // dinp = conv_transpose(dout, weight): beta = 0 assigns
  if (dinp) {
    const ConvAlgo& ad = pick(p.bwd_data, ws.algo_bytes, "conv2d_backward", "backward-data", d,
                              table_choice(ctx, d, kStorage, ConvPhase::BackwardData));
    const void* w = filter_for_cudnn(stream, "conv2d_backward (filter reorder)", d, ws, dev_ptr(weight));
    CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, p.w, w, p.y, dout, p.conv,
                                             static_cast<cudnnConvolutionBwdDataAlgo_t>(ad.algo),
                                             ad.bytes ? ws.algo : nullptr, ad.bytes, &zero, p.x, dinp));
  }
  // dbias += sum over (n, oh, ow), in double: one block per output channel (NCHW), one thread (channels-last)
  if (dbias) {
    if (d.channels_last)
      HPCT_LAUNCH(nhwc_channel_sum_accumulate_kernel<S>, nhwc_pointwise_shape(OC), stream, dbias, dev_ptr(dout),
                  static_cast<int64_t>(N) * d.OH * d.OW, OC);
    else
      HPCT_LAUNCH(channel_sum_accumulate_kernel<S>, channel_reduce_shape(OC), stream, dbias, dev_ptr(dout), N, OC,
                  d.OH * d.OW);
    HPCT_CUDA_LAUNCH_CHECK("conv2d_backward (dbias)");
  }
}

// ---- the algorithms' times (kernels.hpp, conv2d_time_algorithms) -----------------------------------------
namespace {
// CUDA events, destroyed on every way out.
class EventSet {
 public:
  explicit EventSet(size_t n) : events_(n, nullptr) {
    for (cudaEvent_t& e : events_) CUDA_CHECK(cudaEventCreate(&e));
  }
  ~EventSet() {
    for (cudaEvent_t e : events_)
      if (e) (void)cudaEventDestroy(e);
  }
  EventSet(const EventSet&) = delete;
  EventSet& operator=(const EventSet&) = delete;
  cudaEvent_t operator[](size_t i) const { return events_[i]; }
  float ms(size_t from, size_t to) const {
    float t = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&t, events_[from], events_[to]));
    return t;
  }

 private:
  std::vector<cudaEvent_t> events_;
};

// A candidate whose warm-up run takes this many times the fastest time so far is not run again: its warm-up time is
// its time (it cannot be chosen, and some of cuDNN's deterministic algorithms, FFT-based ones at large shapes, are
// slow enough to make start-up wait for nothing).
constexpr double kHopelessFactor = 4.0;

// Times each candidate of one phase that fits `have_bytes`, in the list's (heuristic) order; `run(algo)` queues one call
// of the phase on the stream with that algorithm and returns cuDNN's status (a refusal leaves the candidate untimed).
template <class Run>
std::vector<AlgoTime> time_phase(const ExecContext& ctx, cudaStream_t stream, const std::vector<ConvAlgo>& list,
                                 size_t have_bytes, int repeats, const char* what, Run run) {
  std::vector<AlgoTime> out;
  double best = -1.0;
  EventSet ev(static_cast<size_t>(repeats) + 2);
  for (const ConvAlgo& a : list) {
    AlgoTime t{a.algo, a.bytes, -1.0};
    if (a.bytes <= have_bytes) {
      CUDA_CHECK(cudaEventRecord(ev[0], stream));
      const cudnnStatus_t rc = run(a);
      CUDA_CHECK(cudaEventRecord(ev[1], stream));
      synchronize(ctx);  // through the sync guard: a bounded wait
      if (rc == CUDNN_STATUS_SUCCESS) {
        const double warm = ev.ms(0, 1);
        if (best >= 0.0 && warm > kHopelessFactor * best) {
          t.ms = warm;
        } else {
          CUDA_CHECK(cudaEventRecord(ev[1], stream));  // the runs' start, after the host wait
          for (int r = 0; r < repeats; r++) {
            HPCT_CHECK(run(a) == CUDNN_STATUS_SUCCESS,
                       "conv2d_time_algorithms: cuDNN ran {} algorithm {} once and refused it the next time", what,
                       a.algo);
            CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(r) + 2], stream));
          }
          synchronize(ctx);
          std::vector<double> runs;
          for (int r = 0; r < repeats; r++)
            runs.push_back(ev.ms(static_cast<size_t>(r) + 1, static_cast<size_t>(r) + 2));
          std::sort(runs.begin(), runs.end());
          t.ms = runs[runs.size() / 2];
        }
        best = best < 0.0 ? t.ms : std::min(best, t.ms);
      }
    }
    out.push_back(t);
  }
  return out;
}
}  // namespace

template <typename A>
ConvTiming conv2d_time_algorithms(const ExecContext& ctx, A* x, const A* w, A* y, A* dx, float* dw, float* workspace,
                                  int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                                  int stride, int pad, int repeats) {
  constexpr DType kStorage = dtype_of<A>();
  constexpr bool k16Bit = kHalfPrecisionStorage<A>;
  HPCT_CHECK(repeats >= 1, "conv2d_time_algorithms: repeats = {} (at least 1)", repeats);
  HPCT_CHECK(x && w && y && dx, "conv2d_time_algorithms: x, w, y and dx must be device buffers of the shape");
  const ConvDims d = conv_dims(ctx, N, C, H, W, OC, KH, KW, stride, pad);
  const cudaStream_t stream = stream_of(ctx);
  const cudnnHandle_t h = cudnn_handle(stream);
  const ConvPlan& p = conv_plan(h, d, ctx.precision, kStorage);
  const ConvWorkspace ws = split_workspace("conv2d_time_algorithms", workspace, workspace_floats, d, kStorage);
  const void* filter = filter_for_cudnn(stream, "conv2d_time_algorithms (filter reorder)", d, ws, dev_ptr(w));
  // the backward-filter output where conv2d_backward has it: the scratch, or dweight (here `dw`, beta = 0)
  void* dw_target = k16Bit || reorders_filter(d) ? ws.filter_scratch : static_cast<void*>(dw);
  const float one = 1.0f, zero = 0.0f;
  ConvTiming t;
  t.key = conv_algo_key(ctx, N, C, H, W, OC, KH, KW, stride, pad, kStorage);
  t.phases[static_cast<size_t>(ConvPhase::Forward)] = time_phase(
      ctx, stream, p.fwd, ws.algo_bytes, repeats, "forward", [&](const ConvAlgo& a) {
        return cudnnConvolutionForward(h, &one, p.x, x, p.w, filter, p.conv,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), a.bytes ? ws.algo : nullptr,
                                       a.bytes, &zero, p.y, y);
      });
  t.phases[static_cast<size_t>(ConvPhase::BackwardData)] = time_phase(
      ctx, stream, p.bwd_data, ws.algo_bytes, repeats, "backward-data", [&](const ConvAlgo& a) {
        return cudnnConvolutionBackwardData(h, &one, p.w, filter, p.y, y, p.conv,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
                                            a.bytes ? ws.algo : nullptr, a.bytes, &zero, p.x, dx);
      });
  if (dw_target) {
    t.phases[static_cast<size_t>(ConvPhase::BackwardFilter)] = time_phase(
        ctx, stream, p.bwd_filter, ws.algo_bytes, repeats, "backward-filter", [&](const ConvAlgo& a) {
          return cudnnConvolutionBackwardFilter(h, &one, p.x, x, p.y, y, p.conv,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
                                                a.bytes ? ws.algo : nullptr, a.bytes, &zero, p.w, dw_target);
        });
  } else {
    for (const ConvAlgo& a : p.bwd_filter)
      t.phases[static_cast<size_t>(ConvPhase::BackwardFilter)].push_back({a.algo, a.bytes, -1.0});
  }
  return t;
}

// ---- BatchNorm2d ---------------------------------------------------------------------------------------
// NCHW or channels-last (ctx.channels_last: the column reductions and pack-of-channels passes of
// cuda_resnet_nhwc_kernels.cuh); the statistics' and sums' second stages are the same kernels. `relu` / `relu_out`:
// the ReLU that follows, fused into the passes (kRelu).
namespace {
// Calls f(std::bool_constant<b>).
template <typename F>
void with_relu(bool b, F&& f) {
  if (b) f(std::true_type{});
  else
    f(std::false_type{});
}
// The statistics' two stages over the device's partials buffer (bn_groups_launch / bn_nhwc_groups_launch).
template <typename S>
void launch_bn_stats(cudaStream_t stream, bool nhwc, const char* op, float* stats, float* save_mean, float* save_rstd,
                     const S* inp, int N, int C, int HW, float eps) {
  double* partials = reduce_partials(op, 3 * int64_t{C} * static_cast<int64_t>(sizeof(double)));
  const BnGroupsLaunch l = nhwc ? bn_nhwc_groups_launch(N, C, HW, kCudaReducePartialsBytes, 3)
                                : bn_groups_launch(N, C, HW, kCudaReducePartialsBytes, 3);
  if (nhwc)
    HPCT_LAUNCH(bn_nhwc_stats_partial_kernel<S>, l.partial, stream, partials, inp, C, static_cast<int64_t>(N) * HW,
                l.per_group);
  else
    HPCT_LAUNCH(bn_stats_partial_kernel<S>, l.partial, stream, partials, inp, N, C, HW, l.per_group);
  HPCT_CUDA_LAUNCH_CHECK(op);
  HPCT_LAUNCH(bn_stats_finish_kernel, l.finish, stream, stats, save_mean, save_rstd, partials, C,
              static_cast<int>(l.groups), eps);
  HPCT_CUDA_LAUNCH_CHECK(op);
}
// The gradient sums' two stages: sums[2 c + k] (float, assigned), dbeta += sum dout, dgamma += sum dout xhat (dout
// masked by relu_out where given). The partials buffer holds the groups' doubles, then, when `sums` is null, the float
// sums themselves (the single-process backward has no buffer of its own for them); returns where the sums are.
template <typename S>
const float* launch_bn_grad_sums(cudaStream_t stream, bool nhwc, const char* op, float* sums, float* dgamma,
                                 float* dbeta, const S* dout, const S* relu_out, const S* inp, const float* save_mean,
                                 const float* save_rstd, int N, int C, int HW) {
  const int64_t own_sums = sums ? 0 : 2 * int64_t{C} * static_cast<int64_t>(sizeof(float));
  double* partials = reduce_partials(op, 2 * int64_t{C} * static_cast<int64_t>(sizeof(double)) + own_sums);
  const int64_t budget = static_cast<int64_t>(kCudaReducePartialsBytes) - own_sums;
  const BnGroupsLaunch l = nhwc ? bn_nhwc_groups_launch(N, C, HW, budget, 2) : bn_groups_launch(N, C, HW, budget, 2);
  if (!sums) sums = reinterpret_cast<float*>(partials + 2 * int64_t{C} * l.groups);
  with_relu(relu_out != nullptr, [&](auto relu_tag) {
    constexpr bool kRelu = decltype(relu_tag)::value;
    if (nhwc)
      HPCT_LAUNCH((bn_nhwc_grad_partial_kernel<S, kRelu>), l.partial, stream, partials, dout, relu_out, inp, save_mean,
                  save_rstd, C, static_cast<int64_t>(N) * HW, l.per_group);
    else
      HPCT_LAUNCH((bn_grad_partial_kernel<S, kRelu>), l.partial, stream, partials, dout, relu_out, inp, save_mean,
                  save_rstd, N, C, HW, l.per_group);
  });
  HPCT_CUDA_LAUNCH_CHECK(op);
  HPCT_LAUNCH(bn_grad_finish_kernel, l.finish, stream, sums, dgamma, dbeta, partials, C, static_cast<int>(l.groups));
  HPCT_CUDA_LAUNCH_CHECK(op);
  return sums;
}
// The pointwise BatchNorm kernels at their pack width: NCHW, P = kPack<S> where the planes fill whole 16-byte packs
// of every pointer (pack_width), the plane launch over HW / P; channels-last, P = kPack<S> where C is a multiple of it
// (nhwc_pack_width), a grid-stride launch over the tensor's packs.
// out = (inp - mean) * rstd * gamma + beta (then the ReLU where `relu`, the residual add and ReLU where `residual`):
template <typename S>
void launch_bn_apply(cudaStream_t stream, bool nhwc, bool relu, S* out, const S* inp, const float* mean,
                     const float* rstd, const S* gamma, const S* beta, const S* residual, int N, int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  with_relu(relu, [&](auto relu_tag) {
    constexpr bool kRelu = decltype(relu_tag)::value;
    if (nhwc) {
      with_pack<S>(nhwc_pack_width<S>(C, {out, inp, residual}), [&](auto pc) {
        constexpr int P = decltype(pc)::value;
        const int64_t packs = planes * HW / P;
        HPCT_LAUNCH((bn_nhwc_apply_kernel<P, S, kRelu>), nhwc_pointwise_shape(packs), stream, out, inp, mean, rstd,
                    gamma, beta, packs, C, residual);
      });
    } else {
      with_pack<S>(pack_width<S>(HW, {out, inp, residual}), [&](auto pc) {
        constexpr int P = decltype(pc)::value;
        HPCT_LAUNCH((bn_apply_kernel<P, S, kRelu>), plane_shape(planes, HW / P), stream, out, inp, mean, rstd, gamma,
                    beta, planes, C, HW, residual);
      });
    }
  });
}
// dinp from the gradient sums over `count` values per channel (dout masked by relu_out where given):
template <typename S>
void launch_bn_dinp(cudaStream_t stream, bool nhwc, S* dinp, const S* dout, const S* relu_out, const S* inp,
                    const float* save_mean, const float* save_rstd, const S* gamma, const float* sums, int64_t count,
                    int N, int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  with_relu(relu_out != nullptr, [&](auto relu_tag) {
    constexpr bool kRelu = decltype(relu_tag)::value;
    if (nhwc) {
      with_pack<S>(nhwc_pack_width<S>(C, {dinp, dout, relu_out, inp}), [&](auto pc) {
        constexpr int P = decltype(pc)::value;
        const int64_t packs = planes * HW / P;
        HPCT_LAUNCH((bn_nhwc_backward_apply_kernel<P, S, kRelu>), nhwc_pointwise_shape(packs), stream, dinp, dout,
                    relu_out, inp, save_mean, save_rstd, gamma, sums, static_cast<double>(count), packs, C);
      });
    } else {
      with_pack<S>(pack_width<S>(HW, {dinp, dout, relu_out, inp}), [&](auto pc) {
        constexpr int P = decltype(pc)::value;
        HPCT_LAUNCH((bn_backward_apply_kernel<P, S, kRelu>), plane_shape(planes, HW / P), stream, dinp, dout, relu_out,
                    inp, save_mean, save_rstd, gamma, sums, static_cast<double>(count), planes, C, HW);
      });
    }
  });
}
}  // namespace

template <typename A>
void batchnorm2d_forward_train(const ExecContext& ctx, A* out, float* stats, float* save_mean, float* save_rstd,
                               const A* inp, const A* gamma, const A* beta, int N, int C, int HW, float eps, bool relu,
                               const A* residual) {
  const cudaStream_t stream = stream_of(ctx);
  launch_bn_stats(stream, ctx.channels_last, "batchnorm2d_forward_train (stats)", stats, save_mean, save_rstd,
                  dev_ptr(inp), N, C, HW, eps);
  launch_bn_apply(stream, ctx.channels_last, relu, dev_ptr(out), dev_ptr(inp), save_mean, save_rstd, dev_ptr(gamma),
                  dev_ptr(beta), dev_ptr(residual), N, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_train (apply)");
}

template <typename A>
void batchnorm2d_local_stats(const ExecContext& ctx, float* stats, const A* inp, int N, int C, int HW) {
  launch_bn_stats(stream_of(ctx), ctx.channels_last, "batchnorm2d_local_stats", stats, static_cast<float*>(nullptr),
                  static_cast<float*>(nullptr), dev_ptr(inp), N, C, HW, 0.0f);
}

void batchnorm2d_merge_stats(const ExecContext& ctx, float* merged, const float* gathered, int R, int C) {
  HPCT_LAUNCH(bn_merge_kernel, per_channel_shape(C), stream_of(ctx), merged, gathered, R, C);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_merge_stats");
}

template <typename A>
void batchnorm2d_forward_apply(const ExecContext& ctx, A* out, float* save_mean, float* save_rstd, const A* inp,
                               const A* gamma, const A* beta, const float* stats, int N, int C, int HW, float eps,
                               bool relu, const A* residual) {
  const cudaStream_t stream = stream_of(ctx);
  HPCT_LAUNCH(bn_mean_rstd_kernel, per_channel_shape(C), stream, save_mean, save_rstd, stats, C, eps);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_apply (mean, rstd)");
  launch_bn_apply(stream, ctx.channels_last, relu, dev_ptr(out), dev_ptr(inp), save_mean, save_rstd, dev_ptr(gamma),
                  dev_ptr(beta), dev_ptr(residual), N, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_apply");
}

void batchnorm2d_update_running(const ExecContext& ctx, float* running_mean, float* running_var, const float* stats,
                                int C, float momentum) {
  HPCT_LAUNCH(bn_update_running_kernel, per_channel_shape(C), stream_of(ctx), running_mean, running_var, stats, C,
              momentum);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_update_running");
}

template <typename A>
void batchnorm2d_forward_eval(const ExecContext& ctx, A* out, const A* inp, const A* gamma, const A* beta,
                              const float* running_mean, const float* running_var, int N, int C, int HW, float eps,
                              bool relu, const A* residual) {
  using S = DeviceStorage<A>;
  const int64_t planes = static_cast<int64_t>(N) * C;
  with_relu(relu, [&](auto relu_tag) {
    constexpr bool kRelu = decltype(relu_tag)::value;
    if (ctx.channels_last) {
      with_pack<S>(nhwc_pack_width<S>(C, {dev_ptr(out), dev_ptr(inp), dev_ptr(residual)}), [&](auto pc) {
        constexpr int P = decltype(pc)::value;
        const int64_t packs = planes * HW / P;
        HPCT_LAUNCH((bn_nhwc_eval_kernel<P, S, kRelu>), nhwc_pointwise_shape(packs), stream_of(ctx), dev_ptr(out),
                    dev_ptr(inp), dev_ptr(gamma), dev_ptr(beta), running_mean, running_var, packs, C, eps,
                    dev_ptr(residual));
      });
    } else {
      with_pack<S>(pack_width<S>(HW, {dev_ptr(out), dev_ptr(inp), dev_ptr(residual)}), [&](auto pc) {
        constexpr int P = decltype(pc)::value;
        HPCT_LAUNCH((bn_eval_kernel<P, S, kRelu>), plane_shape(planes, HW / P), stream_of(ctx), dev_ptr(out),
                    dev_ptr(inp), dev_ptr(gamma), dev_ptr(beta), running_mean, running_var, planes, C, HW, eps,
                    dev_ptr(residual));
      });
    }
  });
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_forward_eval");
}

template <typename A>
void batchnorm2d_backward(const ExecContext& ctx, A* dinp, float* dgamma, float* dbeta, const A* dout, const A* inp,
                          const float* save_mean, const float* save_rstd, const A* gamma, int N, int C, int HW,
                          const A* relu_out) {
  const cudaStream_t stream = stream_of(ctx);
  const float* sums = launch_bn_grad_sums(stream, ctx.channels_last, "batchnorm2d_backward",
                                          static_cast<float*>(nullptr), dgamma, dbeta, dev_ptr(dout), dev_ptr(relu_out),
                                          dev_ptr(inp), save_mean, save_rstd, N, C, HW);
  launch_bn_dinp(stream, ctx.channels_last, dev_ptr(dinp), dev_ptr(dout), dev_ptr(relu_out), dev_ptr(inp), save_mean,
                 save_rstd, dev_ptr(gamma), sums, static_cast<int64_t>(N) * HW, N, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_backward");
}

template <typename A>
void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums, float* dgamma, float* dbeta, const A* dout,
                                     const A* inp, const float* save_mean, const float* save_rstd, int N, int C, int HW,
                                     const A* relu_out) {
  launch_bn_grad_sums(stream_of(ctx), ctx.channels_last, "batchnorm2d_backward_local_sums", sums, dgamma, dbeta,
                      dev_ptr(dout), dev_ptr(relu_out), dev_ptr(inp), save_mean, save_rstd, N, C, HW);
}

template <typename A>
void batchnorm2d_backward_apply(const ExecContext& ctx, A* dinp, const A* dout, const A* inp, const float* save_mean,
                                const float* save_rstd, const A* gamma, const float* global_sums, int64_t global_count,
                                int N, int C, int HW, const A* relu_out) {
  launch_bn_dinp(stream_of(ctx), ctx.channels_last, dev_ptr(dinp), dev_ptr(dout), dev_ptr(relu_out), dev_ptr(inp),
                 save_mean, save_rstd, dev_ptr(gamma), global_sums, global_count, N, C, HW);
  HPCT_CUDA_LAUNCH_CHECK("batchnorm2d_backward_apply");
}

// The BatchNorm ops of kernels/ops.inc: the ones above without an epilogue.
template <typename A>
void batchnorm2d_forward_train(const ExecContext& ctx, A* out, float* stats, float* save_mean, float* save_rstd,
                               const A* inp, const A* gamma, const A* beta, int N, int C, int HW, float eps) {
  batchnorm2d_forward_train(ctx, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps, false,
                            static_cast<const A*>(nullptr));
}
template <typename A>
void batchnorm2d_forward_apply(const ExecContext& ctx, A* out, float* save_mean, float* save_rstd, const A* inp,
                               const A* gamma, const A* beta, const float* stats, int N, int C, int HW, float eps) {
  batchnorm2d_forward_apply(ctx, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps, false,
                            static_cast<const A*>(nullptr));
}
template <typename A>
void batchnorm2d_forward_eval(const ExecContext& ctx, A* out, const A* inp, const A* gamma, const A* beta,
                              const float* running_mean, const float* running_var, int N, int C, int HW, float eps) {
  batchnorm2d_forward_eval(ctx, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps, false,
                           static_cast<const A*>(nullptr));
}
template <typename A>
void batchnorm2d_backward(const ExecContext& ctx, A* dinp, float* dgamma, float* dbeta, const A* dout, const A* inp,
                          const float* save_mean, const float* save_rstd, const A* gamma, int N, int C, int HW) {
  batchnorm2d_backward(ctx, dinp, dgamma, dbeta, dout, inp, save_mean, save_rstd, gamma, N, C, HW,
                       static_cast<const A*>(nullptr));
}
template <typename A>
void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums, float* dgamma, float* dbeta, const A* dout,
                                     const A* inp, const float* save_mean, const float* save_rstd, int N, int C,
                                     int HW) {
  batchnorm2d_backward_local_sums(ctx, sums, dgamma, dbeta, dout, inp, save_mean, save_rstd, N, C, HW,
                                  static_cast<const A*>(nullptr));
}
template <typename A>
void batchnorm2d_backward_apply(const ExecContext& ctx, A* dinp, const A* dout, const A* inp, const float* save_mean,
                                const float* save_rstd, const A* gamma, const float* global_sums, int64_t global_count,
                                int N, int C, int HW) {
  batchnorm2d_backward_apply(ctx, dinp, dout, inp, save_mean, save_rstd, gamma, global_sums, global_count, N, C, HW,
                             static_cast<const A*>(nullptr));
}

// ---- MaxPool2d ---------------------------------------------------------------------------------------------
template <typename A>
void maxpool2d_forward(const ExecContext& ctx, A* out, int32_t* idx, const A* inp, int N, int C, int H, int W, int K,
                       int stride, int pad) {
  using S = DeviceStorage<A>;
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (ctx.channels_last) {
    const int64_t total = planes * OH * OW;
    HPCT_LAUNCH(maxpool_nhwc_forward_kernel<S>, nhwc_pointwise_shape(total), stream_of(ctx), dev_ptr(out), idx,
                dev_ptr(inp), total, C, H, W, OH, OW, K, stride, pad);
  } else {
    HPCT_LAUNCH(maxpool_forward_kernel<S>, plane_shape(planes, static_cast<int64_t>(OH) * OW), stream_of(ctx),
                dev_ptr(out), idx, dev_ptr(inp), planes, H, W, OH, OW, K, stride, pad);
  }
  HPCT_CUDA_LAUNCH_CHECK("maxpool2d_forward");
}

template <typename A>
void maxpool2d_backward(const ExecContext& ctx, A* dinp, const A* dout, const int32_t* idx, int N, int C, int H, int W,
                        int K, int stride, int pad) {
  using S = DeviceStorage<A>;
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (ctx.channels_last) {
    const int64_t total = planes * H * W;
    HPCT_LAUNCH(maxpool_nhwc_backward_kernel<S>, nhwc_pointwise_shape(total), stream_of(ctx), dev_ptr(dinp),
                dev_ptr(dout), idx, total, C, H, W, OH, OW, K, stride, pad);
  } else {
    HPCT_LAUNCH(maxpool_backward_kernel<S>, plane_shape(planes, static_cast<int64_t>(H) * W), stream_of(ctx),
                dev_ptr(dinp), dev_ptr(dout), idx, planes, H, W, OH, OW, K, stride, pad);
  }
  HPCT_CUDA_LAUNCH_CHECK("maxpool2d_backward");
}

// ---- global average pooling ------------------------------------------------------------------------------------
template <typename A>
void global_avgpool_forward(const ExecContext& ctx, A* out, const A* inp, int N, int C, int HW) {
  using S = DeviceStorage<A>;
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (planes == 0) return;
  if (ctx.channels_last)
    HPCT_LAUNCH(global_avgpool_nhwc_forward_kernel<S>, nhwc_pointwise_shape(planes), stream_of(ctx), dev_ptr(out),
                dev_ptr(inp), planes, C, HW);
  else
    HPCT_LAUNCH(global_avgpool_forward_kernel<S>, global_avgpool_forward_shape(planes), stream_of(ctx), dev_ptr(out),
                dev_ptr(inp), planes, HW);
  HPCT_CUDA_LAUNCH_CHECK("global_avgpool_forward");
}

template <typename A>
void global_avgpool_backward(const ExecContext& ctx, A* dinp, const A* dout, int N, int C, int HW) {
  using S = DeviceStorage<A>;
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (planes == 0) return;
  if (ctx.channels_last)
    HPCT_LAUNCH(global_avgpool_nhwc_backward_kernel<S>, nhwc_pointwise_shape(planes * HW), stream_of(ctx),
                dev_ptr(dinp), dev_ptr(dout), planes * HW, C, HW);
  else
    HPCT_LAUNCH(global_avgpool_backward_kernel<S>, plane_shape(planes, HW), stream_of(ctx), dev_ptr(dinp),
                dev_ptr(dout), planes, HW);
  HPCT_CUDA_LAUNCH_CHECK("global_avgpool_backward");
}

// ---- the images into channels-last activations ---------------------------------------------------------------------
template <typename A>
void images_to_channels_last(const ExecContext& ctx, A* out, const float* images, int N, int C, int HW) {
  using S = DeviceStorage<A>;
  const int64_t total = static_cast<int64_t>(N) * C * HW;
  if (total == 0) return;
  HPCT_LAUNCH(images_to_nhwc_kernel<S>, nhwc_pointwise_shape(total), stream_of(ctx), dev_ptr(out), images, total, C,
              HW);
  HPCT_CUDA_LAUNCH_CHECK("images_to_channels_last");
}

// ---- the three storage types of the templated ops (kernels.hpp) ---------------------------------------------------
#define HPCT_INSTANTIATE_RESNET(A)                                                                                    \
  template void conv2d_forward<A>(const ExecContext&, A*, const A*, const A*, const A*, float*, int64_t, int, int,    \
                                  int, int, int, int, int, int, int);                                                 \
  template void conv2d_backward<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const A*, float*,      \
                                   int64_t, int, int, int, int, int, int, int, int, int);                             \
  template ConvTiming conv2d_time_algorithms<A>(const ExecContext&, A*, const A*, A*, A*, float*, float*, int64_t,    \
                                                int, int, int, int, int, int, int, int, int, int);                    \
  template void batchnorm2d_forward_train<A>(const ExecContext&, A*, float*, float*, float*, const A*, const A*,      \
                                             const A*, int, int, int, float, bool, const A*);                         \
  template void batchnorm2d_local_stats<A>(const ExecContext&, float*, const A*, int, int, int);                      \
  template void batchnorm2d_forward_apply<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const A*,    \
                                             const float*, int, int, int, float, bool, const A*);                     \
  template void batchnorm2d_forward_eval<A>(const ExecContext&, A*, const A*, const A*, const A*, const float*,       \
                                            const float*, int, int, int, float, bool, const A*);                      \
  template void batchnorm2d_backward<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const float*,     \
                                        const float*, const A*, int, int, int, const A*);                             \
  template void batchnorm2d_backward_local_sums<A>(const ExecContext&, float*, float*, float*, const A*, const A*,    \
                                                   const float*, const float*, int, int, int, const A*);              \
  template void batchnorm2d_backward_apply<A>(const ExecContext&, A*, const A*, const A*, const float*, const float*, \
                                              const A*, const float*, int64_t, int, int, int, const A*);              \
  template void batchnorm2d_forward_train<A>(const ExecContext&, A*, float*, float*, float*, const A*, const A*,      \
                                             const A*, int, int, int, float);                                         \
  template void batchnorm2d_forward_apply<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const A*,    \
                                             const float*, int, int, int, float);                                     \
  template void batchnorm2d_forward_eval<A>(const ExecContext&, A*, const A*, const A*, const A*, const float*,       \
                                            const float*, int, int, int, float);                                      \
  template void batchnorm2d_backward<A>(const ExecContext&, A*, float*, float*, const A*, const A*, const float*,     \
                                        const float*, const A*, int, int, int);                                       \
  template void batchnorm2d_backward_local_sums<A>(const ExecContext&, float*, float*, float*, const A*, const A*,    \
                                                   const float*, const float*, int, int, int);                        \
  template void batchnorm2d_backward_apply<A>(const ExecContext&, A*, const A*, const A*, const float*, const float*, \
                                              const A*, const float*, int64_t, int, int, int);                        \
  template void images_to_channels_last<A>(const ExecContext&, A*, const float*, int, int, int);                      \
  template void maxpool2d_forward<A>(const ExecContext&, A*, int32_t*, const A*, int, int, int, int, int, int, int);  \
  template void maxpool2d_backward<A>(const ExecContext&, A*, const A*, const int32_t*, int, int, int, int, int, int, \
                                      int);                                                                           \
  template void global_avgpool_forward<A>(const ExecContext&, A*, const A*, int, int, int);                           \
  template void global_avgpool_backward<A>(const ExecContext&, A*, const A*, int, int, int);
HPCT_INSTANTIATE_RESNET(float)
HPCT_INSTANTIATE_RESNET(bf16)
HPCT_INSTANTIATE_RESNET(fp16)
#undef HPCT_INSTANTIATE_RESNET

}  // namespace hpct::kernels::cuda
