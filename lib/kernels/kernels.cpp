// The run-time dispatch of every op in kernels/ops.inc on ctx.device (docs/invariants.md, invariant 5):
// Device::CPU -> cpu/ (OpenMP + OpenBLAS + oneDNN); Device::CUDA -> cuda/ (cuda_kernels.hpp) when built with
// HPCT_HAVE_CUDA. Each op's checks (ops.inc, kernels/op_checks.hpp) run here, before either backend. The entries of
// the table are dispatched by the macros below; the composed ones are written out after them.
#include "kernels/kernels.hpp"

#include <algorithm>

#include <string>
#include <type_traits>
#include <unordered_map>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_matmul_dnnl.hpp"
#include "kernels/cpu/cpu_profile.hpp"
#include "kernels/op_checks.hpp"
#ifdef HPCT_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.hpp"
#endif

namespace hpct::kernels {
namespace {

[[maybe_unused]] [[noreturn]] void cuda_not_built(const char* op) {
  HPCT_FAIL("kernels::{}: this build of hpctrain has no CUDA backend (nvcc was not found when it was configured, or "
            "-DHPCT_ENABLE_CUDA=OFF); rebuild with the CUDA toolkit, or run with train.device=cpu",
            op);
}

// The CPU backend computes in fp32, on fp32 or bf16 storage (kernels.hpp): TF32 and FP16 name CUDA's tensor-core
// arithmetic on fp32 storage and reaching the CPU they are a wiring error of the caller (the trainers reject them on
// the CPU with a UsageError first).
[[noreturn]] void cpu_precision_error(const char* op, Precision p) {
  HPCT_FAIL("kernels::{}: precision {} requested on the CPU backend, which computes fp32 on fp32 or bf16 storage; run "
            "with train.precision=fp32 or bf16 (or train.device=cuda)",
            op, precision_name(p));
}
bool cpu_precision_ok(Precision p) { return p == Precision::FP32 || p == Precision::BF16; }

// fp16 storage is CUDA-only (kernels.hpp): the CPU backend has no fp16 kernels, so that its object code carries none,
// and an op reaching it with A = fp16 is a wiring error of the caller (the trainers reject train.precision = fp16 on
// the CPU with a UsageError first).
[[noreturn]] void cpu_fp16_error(const char* op) {
  HPCT_FAIL("kernels::{}: fp16 storage requested on the CPU backend, which stores activations in fp32 or bf16 only; "
            "run with train.precision=fp32 or bf16 on the CPU (or train.device=cuda for fp16)",
            op);
}

}  // namespace

// ---- the per-op profile (kernels.hpp) ----
namespace {
bool g_profile_on = false;
std::vector<ProfileRow> g_profile_rows;                 // first-seen order
std::unordered_map<std::string, size_t> g_profile_row;  // name -> index in g_profile_rows
}  // namespace

void profile_enable(bool on) { g_profile_on = on; }
bool profile_on() { return g_profile_on; }
void profile_add(std::string_view name, double ms) {
  auto [it, fresh] = g_profile_row.try_emplace(std::string(name), g_profile_rows.size());
  if (fresh) g_profile_rows.push_back({std::string(name), 0.0, 0});
  g_profile_rows[it->second].ms += ms;
  g_profile_rows[it->second].calls += 1;
}
std::vector<ProfileRow> profile_take() {
  std::vector<ProfileRow> out;
  out.swap(g_profile_rows);
  g_profile_row.clear();
  return out;
}

// ---- the table's entries ----
// The CPU call of an op, after the precision check, in the op's profile scope; and the CUDA call, or the error of a
// build without the CUDA backend. `op` is the op's name (the profile's, and the messages').
#define HPCT_CPU_RETURN(name, args)                                               \
  do {                                                                            \
    if (!cpu_precision_ok(ctx.precision)) cpu_precision_error(op, ctx.precision); \
    const ProfileScope profile_scope_(op);                                        \
    return cpu::name(HPCT_UNPAREN args);                                          \
  } while (0)
#ifdef HPCT_HAVE_CUDA
#define HPCT_CUDA_RETURN(name, args) return cuda::name(HPCT_CTX_ARGS args)
#else
#define HPCT_CUDA_RETURN(name, args) cuda_not_built(op)
#endif

// A storage-templated op, its CPU branch given: A = fp16 never instantiates the CPU call (the CPU backend has no fp16
// storage).
#define HPCT_STORAGE_OP_DEFINITION(name, params, args, check_list, cpu_branch) \
  template <typename A>                                                        \
  void name(HPCT_WITH_CTX params) {                                            \
    [[maybe_unused]] constexpr const char* op = #name;                         \
    HPCT_UNPAREN check_list;                                                   \
    if (ctx.device == Device::CPU) {                                           \
      if constexpr (std::is_same_v<A, fp16>) {                                 \
        cpu_fp16_error(op);                                                    \
      } else {                                                                 \
        cpu_branch;                                                            \
      }                                                                        \
    }                                                                          \
    HPCT_CUDA_RETURN(name, args);                                              \
  }
#define HPCT_OP_STORAGE(name, params, args, check_list) \
  HPCT_STORAGE_OP_DEFINITION(name, params, args, check_list, HPCT_CPU_RETURN(name, args))
// A layout-sensitive op: under ctx.channels_last the CPU's name_nhwc twin (CUDA's op reads the layout from ctx).
#define HPCT_OP_STORAGE_LAYOUT(name, params, args, check_list)                          \
  HPCT_STORAGE_OP_DEFINITION(name, params, args, check_list,                            \
                             if (ctx.channels_last) HPCT_CPU_RETURN(name##_nhwc, args); \
                             HPCT_CPU_RETURN(name, args))
#define HPCT_OP(name, params, args, check_list)                 \
  void name(HPCT_WITH_CTX params) {                             \
    [[maybe_unused]] constexpr const char* op = #name;          \
    HPCT_UNPAREN check_list;                                    \
    if (ctx.device == Device::CPU) HPCT_CPU_RETURN(name, args); \
    HPCT_CUDA_RETURN(name, args);                               \
  }
#define HPCT_OP_STORAGE_COMPOSED(ret, name, params)
#define HPCT_OP_COMPOSED(ret, name, params)
#include "kernels/ops.inc"

// ---- the composed ops ----
#ifdef HPCT_HAVE_CUDA
#define HPCT_CUDA_CALL(op, ...) return cuda::op(ctx __VA_OPT__(, ) __VA_ARGS__)
#else
#define HPCT_CUDA_CALL(op, ...) cuda_not_built(#op)
#endif
// The CPU call (after the precision check, in the op's profile scope) or the CUDA call with these arguments.
#define HPCT_DISPATCH(op, ...)                                                       \
  do {                                                                               \
    if (ctx.device == Device::CPU) {                                                 \
      if (!cpu_precision_ok(ctx.precision)) cpu_precision_error(#op, ctx.precision); \
      const ProfileScope profile_scope_(#op);                                        \
      return cpu::op(__VA_ARGS__);                                                   \
    }                                                                                \
    HPCT_CUDA_CALL(op __VA_OPT__(, ) __VA_ARGS__);                                   \
  } while (0)
// On CUDA, the call of a CUDA function with arguments the CPU's NCHW op lacks (a BatchNorm's epilogue), or the error
// of a build without the CUDA backend; on the CPU nothing.
#define HPCT_CUDA_FUSED(op, ...)                                                   \
  do {                                                                             \
    if (ctx.device == Device::CUDA) HPCT_CUDA_CALL(op __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
// Under channels-last activations on the CPU, the CPU backend's op##_nhwc twin with these arguments (never fp16: CPU
// storage); otherwise nothing.
#define HPCT_CPU_CHANNELS_LAST(op, ...)                                                \
  do {                                                                                 \
    if (ctx.channels_last && ctx.device == Device::CPU) {                              \
      if constexpr (std::is_same_v<A, fp16>) {                                         \
        cpu_fp16_error(#op);                                                           \
      } else {                                                                         \
        if (!cpu_precision_ok(ctx.precision)) cpu_precision_error(#op, ctx.precision); \
        const ProfileScope profile_scope_(#op);                                        \
        return cpu::op##_nhwc(__VA_ARGS__);                                            \
      }                                                                                \
    }                                                                                  \
  } while (0)

// The Linear + GELU pairs: the CUDA backend's GELU epilogue where it runs (ctx.gelu_epilogue), else the two ops, each
// dispatched (and profiled) as itself.
template <typename A>
void matmul_gelu_forward(const ExecContext& ctx, A* out, A* pre, const A* inp, const A* weight, const A* bias, int N,
                         int C, int OC) {
  checks::linear("matmul_gelu_forward", N, C, OC);
#ifdef HPCT_HAVE_CUDA
  if (ctx.device == Device::CUDA && cuda::try_matmul_gelu_forward(ctx, out, pre, inp, weight, bias, N, C, OC)) return;
#endif
  matmul_forward(ctx, pre, inp, weight, bias, N, C, OC);
  gelu_forward(ctx, out, pre, static_cast<int64_t>(N) * OC);
}

template <typename A>
void matmul_dgelu_backward(const ExecContext& ctx, A* dpre, A* dgelu, float* dweight, float* dbias, const A* dout,
                           const A* out, const A* pre, const A* weight, int N, int C, int OC) {
  checks::linear("matmul_dgelu_backward", N, C, OC);
#ifdef HPCT_HAVE_CUDA
  if (ctx.device == Device::CUDA && cuda::try_matmul_dgelu_backward(ctx, dpre, dout, pre, weight, N, C, OC)) {
    matmul_backward(ctx, static_cast<A*>(nullptr), dweight, dbias, dout, out, weight, N, C, OC);
    return;
  }
#endif
  matmul_backward(ctx, dgelu, dweight, dbias, dout, out, weight, N, C, OC);
  gelu_backward(ctx, dpre, pre, dgelu, static_cast<int64_t>(N) * C);
}

AttentionImpl effective_attention(AttentionImpl requested, Device device, DType act) {
  return device == Device::CUDA && act != DType::F32 ? requested : AttentionImpl::Own;
}

bool cudnn_attention_built() {
#if defined(HPCT_HAVE_CUDNN_FRONTEND)
  return true;
#else
  return false;
#endif
}

namespace {
// The size queries answer for the implementation the context names; the CPU has its own kernel only.
void check_attention_choice(const char* op, const ExecContext& ctx) {
  HPCT_CHECK(ctx.attention == AttentionImpl::Own || ctx.device == Device::CUDA,
             "kernels::{}: the CPU backend has no cuDNN attention (ExecContext::attention = cudnn)", op);
}
}  // namespace

// The size queries are not profiled ops (the model calls them while planning): called directly, not through
// HPCT_DISPATCH's profile scope.
int64_t attention_stats_bytes(const ExecContext& ctx, int B, int T, int C, int NH, DType act) {
  checks::attention("attention_stats_bytes", B, T, C, NH);
  check_attention_choice("attention_stats_bytes", ctx);
  if (ctx.device == Device::CPU && act == DType::F16) cpu_fp16_error("attention_stats_bytes");
  if (ctx.device == Device::CPU) return cpu::attention_stats_bytes(B, T, C, NH, act);
  HPCT_CUDA_CALL(attention_stats_bytes, B, T, C, NH, act);
}

int64_t attention_scratch_bytes(const ExecContext& ctx, int B, int T, int C, int NH, DType act) {
  checks::attention("attention_scratch_bytes", B, T, C, NH);
  check_attention_choice("attention_scratch_bytes", ctx);
  if (ctx.device == Device::CPU && act == DType::F16) cpu_fp16_error("attention_scratch_bytes");
  if (ctx.device == Device::CPU) return cpu::attention_scratch_bytes(B, T, C, NH, act);
  HPCT_CUDA_CALL(attention_scratch_bytes, B, T, C, NH, act);
}

template <typename A>
void residual_layernorm_forward(const ExecContext& ctx, A* residual, A* out, float* mean, float* rstd, const A* a,
                                const A* b, const A* weight, const A* bias, int N, int C) {
  checks::rows("residual_layernorm_forward", N, C);
  checks::given("residual_layernorm_forward", weight, "weight");
  if (ctx.device == Device::CPU) {  // the CPU backend runs the two ops (kernels.hpp: the same results)
    residual_forward(ctx, residual, a, b, static_cast<int64_t>(N) * C);
    layernorm_forward(ctx, out, mean, rstd, residual, weight, bias, N, C);
    return;
  }
  HPCT_CUDA_CALL(residual_layernorm_forward, residual, out, mean, rstd, a, b, weight, bias, N, C);
}

// ---- convolutional layers (ResNet) ----
int64_t conv2d_workspace_floats(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                                int pad, DType act) {
  checks::conv("conv2d_workspace_floats", N, C, H, W, OC, KH, KW, stride, pad);
  if (ctx.device == Device::CUDA) {
    const size_t elem = dtype_size(act), OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
    const size_t in = size_t(N) * C * H * W * elem, out = size_t(N) * OC * OH * OW * elem;
    const size_t algo = std::max(kCudnnConvMinAlgoWorkspaceBytes, kCudnnConvAlgoWorkspacePerTensor * std::max(in, out));
    const size_t bytes = cuda_conv_filter_scratch_bytes(C, OC, KH, KW, act, ctx.channels_last) +
                         (algo + 255) / 256 * 256;
    return static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
  }
  if (act == DType::F16) cpu_fp16_error("conv2d_workspace_floats");
  if (ctx.channels_last) {
    const int64_t floats = cpu::conv2d_workspace_floats_nhwc(N, C, H, W, OC, KH, KW, stride, pad, act);
    HPCT_CHECK(floats >= 0,
               "conv2d_workspace_floats: channels-last activations, but oneDNN does not run the convolution N={} C={} "
               "H={} W={} OC={} {}x{} stride {} pad {} in that layout (conv2d_channels_last_runs is false); run the "
               "model with model.memory_format = nchw",
               N, C, H, W, OC, KH, KW, stride, pad);
    return floats;
  }
  return cpu::conv2d_workspace_floats(N, C, H, W, OC, KH, KW, stride, pad, act);
}

bool conv2d_channels_last_runs(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                               int pad, DType act) {
  checks::conv("conv2d_channels_last_runs", N, C, H, W, OC, KH, KW, stride, pad);
  if (ctx.device == Device::CUDA) return true;  // cuDNN's NHWC convolutions, every storage type
  if (act == DType::F16) return false;
  return cpu::conv2d_workspace_floats_nhwc(N, C, H, W, OC, KH, KW, stride, pad, act) >= 0;
}

template <typename A>
void images_to_channels_last(const ExecContext& ctx, A* out, const float* images, int N, int C, int HW) {
  checks::images("images_to_channels_last", N, C, HW);
  HPCT_CUDA_FUSED(images_to_channels_last, out, images, N, C, HW);
  if constexpr (std::is_same_v<A, fp16>) {
    cpu_fp16_error("images_to_channels_last");
  } else {
    const ProfileScope profile_scope_("images_to_channels_last");
    cpu::images_to_nhwc(out, images, N, C, HW);
  }
}

template <typename A>
ConvTiming conv2d_time_algorithms(const ExecContext& ctx, A* x, const A* w, A* y, A* dx, float* dw, float* workspace,
                                  int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                                  int stride, int pad, int repeats) {
  checks::conv("conv2d_time_algorithms", N, C, H, W, OC, KH, KW, stride, pad);
  checks::count("conv2d_time_algorithms", workspace_floats);
  HPCT_CHECK(ctx.device == Device::CUDA,
             "kernels::conv2d_time_algorithms: the {} backend runs each convolution one way: there is nothing to time "
             "(call it on CUDA only)",
             device_name(ctx.device));
  HPCT_CUDA_CALL(conv2d_time_algorithms, x, w, y, dx, dw, workspace, workspace_floats, N, C, H, W, OC, KH, KW, stride,
                 pad, repeats);
}

// The BatchNorm + ReLU pairs: the CUDA kernels (either layout) and the channels-last CPU kernels with the ReLU in their
// passes, else the two ops.
template <typename A>
void batchnorm2d_relu_forward_train(const ExecContext& ctx, A* out, float* stats, float* save_mean, float* save_rstd,
                                    const A* inp, const A* gamma, const A* beta, int N, int C, int HW, float eps) {
  checks::batchnorm("batchnorm2d_relu_forward_train", N, C, HW);
  HPCT_CUDA_FUSED(batchnorm2d_forward_train, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps,
                  /*relu=*/true, /*residual=*/static_cast<const A*>(nullptr));
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_forward_train, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps,
                         /*relu=*/true);
  batchnorm2d_forward_train(ctx, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps);
  relu_forward(ctx, out, out, static_cast<int64_t>(N) * C * HW);
}

template <typename A>
void batchnorm2d_relu_forward_apply(const ExecContext& ctx, A* out, float* save_mean, float* save_rstd, const A* inp,
                                    const A* gamma, const A* beta, const float* stats, int N, int C, int HW,
                                    float eps) {
  checks::batchnorm("batchnorm2d_relu_forward_apply", N, C, HW);
  HPCT_CUDA_FUSED(batchnorm2d_forward_apply, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps,
                  /*relu=*/true, /*residual=*/static_cast<const A*>(nullptr));
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_forward_apply, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps,
                         /*relu=*/true);
  batchnorm2d_forward_apply(ctx, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps);
  relu_forward(ctx, out, out, static_cast<int64_t>(N) * C * HW);
}

template <typename A>
void batchnorm2d_relu_forward_eval(const ExecContext& ctx, A* out, const A* inp, const A* gamma, const A* beta,
                                   const float* running_mean, const float* running_var, int N, int C, int HW,
                                   float eps) {
  checks::batchnorm("batchnorm2d_relu_forward_eval", N, C, HW);
  HPCT_CUDA_FUSED(batchnorm2d_forward_eval, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps,
                  /*relu=*/true, /*residual=*/static_cast<const A*>(nullptr));
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_forward_eval, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps,
                         /*relu=*/true);
  batchnorm2d_forward_eval(ctx, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps);
  relu_forward(ctx, out, out, static_cast<int64_t>(N) * C * HW);
}

template <typename A>
void batchnorm2d_relu_backward(const ExecContext& ctx, A* dinp, float* dgamma, float* dbeta, A* dout, const A* relu_out,
                               const A* inp, const float* save_mean, const float* save_rstd, const A* gamma, int N,
                               int C, int HW) {
  checks::batchnorm("batchnorm2d_relu_backward", N, C, HW);
  HPCT_CUDA_FUSED(batchnorm2d_backward, dinp, dgamma, dbeta, dout, inp, save_mean, save_rstd, gamma, N, C, HW,
                  relu_out);
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_backward, dinp, dgamma, dbeta, dout, inp, save_mean, save_rstd, gamma, N, C, HW,
                         relu_out);
  relu_backward(ctx, dout, dout, relu_out, static_cast<int64_t>(N) * C * HW);
  batchnorm2d_backward(ctx, dinp, dgamma, dbeta, dout, inp, save_mean, save_rstd, gamma, N, C, HW);
}

template <typename A>
void batchnorm2d_relu_backward_local_sums(const ExecContext& ctx, float* sums, float* dgamma, float* dbeta, A* dout,
                                          const A* relu_out, const A* inp, const float* save_mean,
                                          const float* save_rstd, int N, int C, int HW) {
  checks::batchnorm("batchnorm2d_relu_backward_local_sums", N, C, HW);
  checks::given("batchnorm2d_relu_backward_local_sums", sums, "sums");
  HPCT_CUDA_FUSED(batchnorm2d_backward_local_sums, sums, dgamma, dbeta, dout, inp, save_mean, save_rstd, N, C, HW,
                  relu_out);
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_backward_local_sums, sums, dgamma, dbeta, dout, inp, save_mean, save_rstd, N, C,
                         HW, relu_out);
  relu_backward(ctx, dout, dout, relu_out, static_cast<int64_t>(N) * C * HW);
  batchnorm2d_backward_local_sums(ctx, sums, dgamma, dbeta, dout, inp, save_mean, save_rstd, N, C, HW);
}

template <typename A>
void batchnorm2d_relu_backward_apply(const ExecContext& ctx, A* dinp, const A* dout, const A* relu_out, const A* inp,
                                     const float* save_mean, const float* save_rstd, const A* gamma,
                                     const float* global_sums, int64_t global_count, int N, int C, int HW) {
  checks::batchnorm("batchnorm2d_relu_backward_apply", N, C, HW);
  checks::global_count("batchnorm2d_relu_backward_apply", global_count, N, HW);
  HPCT_CUDA_FUSED(batchnorm2d_backward_apply, dinp, dout, inp, save_mean, save_rstd, gamma, global_sums, global_count,
                  N, C, HW, relu_out);
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_backward_apply, dinp, dout, inp, save_mean, save_rstd, gamma, global_sums,
                         global_count, N, C, HW, relu_out);
  // two-op path: batchnorm2d_relu_backward_local_sums masked dout in place already
  batchnorm2d_backward_apply(ctx, dinp, dout, inp, save_mean, save_rstd, gamma, global_sums, global_count, N, C, HW);
}

// A block's last BatchNorm with the residual add and ReLU: the CUDA kernels (either layout) and the channels-last CPU
// kernels in the BatchNorm's pass, else the BatchNorm into out and residual_relu_forward in place.
template <typename A>
void batchnorm2d_add_relu_forward_train(const ExecContext& ctx, A* out, float* stats, float* save_mean,
                                        float* save_rstd, const A* inp, const A* gamma, const A* beta,
                                        const A* residual, int N, int C, int HW, float eps) {
  checks::batchnorm("batchnorm2d_add_relu_forward_train", N, C, HW);
  HPCT_CUDA_FUSED(batchnorm2d_forward_train, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps,
                  /*relu=*/true, residual);
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_forward_train, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps,
                         /*relu=*/true, residual);
  batchnorm2d_forward_train(ctx, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps);
  residual_relu_forward(ctx, out, out, residual, static_cast<int64_t>(N) * C * HW);
}

template <typename A>
void batchnorm2d_add_relu_forward_apply(const ExecContext& ctx, A* out, float* save_mean, float* save_rstd,
                                        const A* inp, const A* gamma, const A* beta, const A* residual,
                                        const float* stats, int N, int C, int HW, float eps) {
  checks::batchnorm("batchnorm2d_add_relu_forward_apply", N, C, HW);
  HPCT_CUDA_FUSED(batchnorm2d_forward_apply, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps,
                  /*relu=*/true, residual);
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_forward_apply, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps,
                         /*relu=*/true, residual);
  batchnorm2d_forward_apply(ctx, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps);
  residual_relu_forward(ctx, out, out, residual, static_cast<int64_t>(N) * C * HW);
}

template <typename A>
void batchnorm2d_add_relu_forward_eval(const ExecContext& ctx, A* out, const A* inp, const A* gamma, const A* beta,
                                       const A* residual, const float* running_mean, const float* running_var, int N,
                                       int C, int HW, float eps) {
  checks::batchnorm("batchnorm2d_add_relu_forward_eval", N, C, HW);
  HPCT_CUDA_FUSED(batchnorm2d_forward_eval, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps,
                  /*relu=*/true, residual);
  HPCT_CPU_CHANNELS_LAST(batchnorm2d_forward_eval, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps,
                         /*relu=*/true, residual);
  batchnorm2d_forward_eval(ctx, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps);
  residual_relu_forward(ctx, out, out, residual, static_cast<int64_t>(N) * C * HW);
}

float sum_to_host(const ExecContext& ctx, float* scratch, const float* x, int64_t n) {
  sum(ctx, scratch, x, n);
  float s = 0.0f;
  copy_to_host(ctx, &s, scratch, 4);
  synchronize(ctx);  // CUDA copies are asynchronous: s is valid only now (a no-op on the CPU)
  return s;
}

void adamw_update_chunks(const ExecContext& ctx, const AdamwChunk* table, int64_t chunks, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float grad_scale, int t, DType copy) {
  checks::adam_step("adamw_update_chunks", t);
  HPCT_CHECK(copy == DType::F32 || copy == DType::BF16 || (copy == DType::F16 && ctx.device == Device::CUDA),
             "adamw_update_chunks: a compute copy of {} on {} (bf16, f16 on CUDA only, or f32 for none)",
             dtype_name(copy), device_name(ctx.device));
  HPCT_CHECK(chunks >= 0 && (chunks == 0 || table != nullptr), "adamw_update_chunks: {} chunks, table {}", chunks,
             static_cast<const void*>(table));
  if (chunks == 0) return;
  HPCT_DISPATCH(adamw_update_chunks, table, chunks, lr, beta1, beta2, eps, weight_decay, grad_scale, t, copy);
}

void sum_squares_ranges(const ExecContext& ctx, double* acc, const SquaresChunk* table, int64_t chunks,
                        double* partials) {
  HPCT_CHECK(chunks >= 0 && (chunks == 0 || (table != nullptr && partials != nullptr)),
             "sum_squares_ranges: {} chunks, table {}, partials {}", chunks, static_cast<const void*>(table),
             static_cast<const void*>(partials));
  if (chunks == 0) return;
  HPCT_DISPATCH(sum_squares_ranges, acc, table, chunks, partials);
}

void cast(const ExecContext& ctx, fp16* dst, const float* src, int64_t n) {
  checks::count("cast", n);
  if (ctx.device == Device::CPU) cpu_fp16_error("cast");
  HPCT_CUDA_CALL(cast, dst, src, n);
}
void cast(const ExecContext& ctx, float* dst, const fp16* src, int64_t n) {
  checks::count("cast", n);
  if (ctx.device == Device::CPU) cpu_fp16_error("cast");
  HPCT_CUDA_CALL(cast, dst, src, n);
}

#undef HPCT_CPU_CHANNELS_LAST
#undef HPCT_DISPATCH
#undef HPCT_CUDA_FUSED
#undef HPCT_CUDA_CALL
#undef HPCT_CUDA_RETURN
#undef HPCT_CPU_RETURN
#undef HPCT_STORAGE_OP_DEFINITION

size_t cuda_conv_filter_scratch_bytes(int C, int OC, int KH, int KW, DType act, bool channels_last) {
  HPCT_CHECK(act == DType::F32 || act == DType::BF16 || act == DType::F16,
             "conv2d_workspace_floats: storage type {} is not an activation type; pass DType::F32, BF16 or F16",
             dtype_name(act));
  const bool reorder = channels_last && KH * KW > 1;
  if (act == DType::F32 && !reorder) return 0;
  const size_t bytes = (static_cast<size_t>(OC) * C * KH * KW * dtype_size(act) + 255) / 256 * 256;
  return reorder ? 2 * bytes : bytes;  // the gradient scratch, then the reordered filter
}

std::string cpu_bf16_arithmetic() { return cpu::bf16_arithmetic(); }

std::vector<SquaresChunk> squares_table(const std::vector<SquaresRange>& ranges) {
  std::vector<SquaresChunk> table;
  for (const SquaresRange& r : ranges) {
    HPCT_CHECK(r.n >= 0 && (r.n == 0 || r.x != nullptr), "squares_table: a range of {} elements at {}", r.n,
               static_cast<const void*>(r.x));
    for (int64_t at = 0; at < r.n; at += kTableChunk) table.push_back({r.x + at, std::min(kTableChunk, r.n - at)});
  }
  return table;
}
std::vector<AdamwChunk> adamw_table(const std::vector<AdamwRange>& ranges, DType copy) {
  HPCT_CHECK(copy == DType::F32 || copy == DType::BF16 || copy == DType::F16,
             "adamw_table: a compute copy of {} (bf16 or f16, or f32 for none)", dtype_name(copy));
  std::vector<AdamwChunk> table;
  for (const AdamwRange& r : ranges) {
    HPCT_CHECK(r.n >= 0 && (r.n == 0 || (r.params && r.grads && r.m && r.v)), "adamw_table: a range of {} elements",
               r.n);
    HPCT_CHECK(r.n == 0 || (r.copy != nullptr) == (copy != DType::F32),
               "adamw_table: a range of {} elements {} a compute copy where the table's is {}", r.n,
               r.copy ? "with" : "without", dtype_name(copy));
    const int64_t copy_size = copy == DType::F32 ? 0 : static_cast<int64_t>(dtype_size(copy));
    for (int64_t at = 0; at < r.n; at += kTableChunk)
      table.push_back({r.params + at, r.grads + at, r.m + at, r.v + at, std::min(kTableChunk, r.n - at),
                       r.decays ? 1 : 0, r.copy ? static_cast<char*>(r.copy) + at * copy_size : nullptr});
  }
  return table;
}

// The three storage types of every templated op are compiled here: each address taken instantiates that op, and the
// table keeps the addresses (an unused one would let the compiler drop the instantiations, and callers in other files
// would not link). The fp16 ones are CUDA calls or cpu_fp16_error: no CPU kernel is instantiated for them.
template <typename A>
void instantiate_ops() {
  [[gnu::used]] static const void* const ops[] = {
#define HPCT_OP_STORAGE(name, params, args, check_list) reinterpret_cast<const void*>(&name<A>),
#define HPCT_OP_STORAGE_LAYOUT(name, params, args, check_list) reinterpret_cast<const void*>(&name<A>),
#define HPCT_OP(name, params, args, check_list)
#define HPCT_OP_STORAGE_COMPOSED(ret, name, params) reinterpret_cast<const void*>(&name<A>),
#define HPCT_OP_COMPOSED(ret, name, params)
#include "kernels/ops.inc"
  };
}
template void instantiate_ops<float>();
template void instantiate_ops<bf16>();
template void instantiate_ops<fp16>();

}  // namespace hpct::kernels
