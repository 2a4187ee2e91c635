// Thin run-time dispatch of every op in kernels.hpp on ctx.device (docs/invariants.md, invariant 5):
// Device::CPU -> cpu/ (OpenMP + OpenBLAS); Device::CUDA -> cuda/ (cuda_kernels.hpp) when built with HPCT_HAVE_CUDA.
// No logic lives here: shapes are checked by the backends.
#include "kernels/kernels.hpp"

#include <string>
#include <unordered_map>

#include "core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/cpu_profile.hpp"
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

// The CPU backend computes fp32 only (exec_context.hpp): another precision reaching it is a wiring error of the
// caller (the trainers reject train.precision != fp32 on the CPU with a UsageError first).
[[noreturn]] void cpu_precision_error(const char* op, Precision p) {
  HPCT_FAIL("kernels::{}: precision {} requested on the CPU backend, which computes fp32 only; run with "
            "train.precision=fp32 (or train.device=cuda)",
            op, precision_name(p));
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

// One line per op: the CPU call, or the CUDA call (with the context: its stream), or the error of a build without
// the CUDA backend.
#ifdef HPCT_HAVE_CUDA
#define HPCT_CUDA_CALL(op, ...) return cuda::op(ctx __VA_OPT__(, ) __VA_ARGS__)
#else
#define HPCT_CUDA_CALL(op, ...) cuda_not_built(#op)
#endif
#define HPCT_DISPATCH(op, ...)                                                       \
  do {                                                                               \
    if (ctx.device == Device::CPU) {                                                 \
      if (ctx.precision != Precision::FP32) cpu_precision_error(#op, ctx.precision); \
      const ProfileScope profile_scope_(#op);                                        \
      return cpu::op(__VA_ARGS__);                                                   \
    }                                                                                \
    HPCT_CUDA_CALL(op __VA_OPT__(, ) __VA_ARGS__);                                   \
  } while (0)

void encoder_forward(const ExecContext& ctx, float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                     int T, int C) {
  HPCT_DISPATCH(encoder_forward, out, inp, wte, wpe, B, T, C);
}
void encoder_backward(const ExecContext& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B,
                      int T, int C) {
  HPCT_DISPATCH(encoder_backward, dwte, dwpe, dout, inp, B, T, C);
}

void layernorm_forward(const ExecContext& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  HPCT_DISPATCH(layernorm_forward, out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_backward(const ExecContext& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int N, int C) {
  HPCT_DISPATCH(layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void matmul_forward(const ExecContext& ctx, float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  HPCT_DISPATCH(matmul_forward, out, inp, weight, bias, N, C, OC);
}
void matmul_backward(const ExecContext& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  HPCT_DISPATCH(matmul_backward, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

// The size queries are not profiled ops (the model calls them while planning): called directly, not through
// HPCT_DISPATCH's profile scope.
int64_t attention_stats_floats(const ExecContext& ctx, int B, int T, int C, int NH) {
  if (ctx.device == Device::CPU) return cpu::attention_stats_floats(B, T, C, NH);
  HPCT_CUDA_CALL(attention_stats_floats, B, T, C, NH);
}
int64_t attention_scratch_floats(const ExecContext& ctx, int B, int T, int C, int NH) {
  if (ctx.device == Device::CPU) return cpu::attention_scratch_floats(B, T, C, NH);
  HPCT_CUDA_CALL(attention_scratch_floats, B, T, C, NH);
}
void attention_forward(const ExecContext& ctx, float* out, float* stats, const float* qkv, int B, int T, int C,
                       int NH) {
  HPCT_DISPATCH(attention_forward, out, stats, qkv, B, T, C, NH);
}
void attention_backward(const ExecContext& ctx, float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* stats, int B, int T, int C, int NH) {
  HPCT_DISPATCH(attention_backward, dqkv, scratch, dout, qkv, out, stats, B, T, C, NH);
}

void gelu_forward(const ExecContext& ctx, float* out, const float* inp, int64_t n) {
  HPCT_DISPATCH(gelu_forward, out, inp, n);
}
void gelu_backward(const ExecContext& ctx, float* dinp, const float* inp, const float* dout, int64_t n) {
  HPCT_DISPATCH(gelu_backward, dinp, inp, dout, n);
}

void residual_forward(const ExecContext& ctx, float* out, const float* a, const float* b, int64_t n) {
  HPCT_DISPATCH(residual_forward, out, a, b, n);
}

void crossentropy_forward(const ExecContext& ctx, float* losses, const float* logits, const int32_t* targets, int N,
                          int V, int Vp) {
  HPCT_DISPATCH(crossentropy_forward, losses, logits, targets, N, V, Vp);
}
void crossentropy_forward_backward(const ExecContext& ctx, float* losses, float* logits, const int32_t* targets,
                                   float dloss, int N, int V, int Vp) {
  HPCT_DISPATCH(crossentropy_forward_backward, losses, logits, targets, dloss, N, V, Vp);
}

void encoder_forward_vocab_parallel(const ExecContext& ctx, float* out, const int32_t* inp, const float* wte_local,
                                    const float* wpe, int v0, int Vl, int B, int T, int C) {
  HPCT_DISPATCH(encoder_forward_vocab_parallel, out, inp, wte_local, wpe, v0, Vl, B, T, C);
}
void encoder_backward_vocab_parallel(const ExecContext& ctx, float* dwte_local, float* dwpe, const float* dout,
                                     const int32_t* inp, int v0, int Vl, int B, int T, int C) {
  HPCT_DISPATCH(encoder_backward_vocab_parallel, dwte_local, dwpe, dout, inp, v0, Vl, B, T, C);
}

void crossentropy_smoothed_forward(const ExecContext& ctx, float* losses, const float* logits, const int32_t* targets,
                                   float eps, int N, int K) {
  HPCT_DISPATCH(crossentropy_smoothed_forward, losses, logits, targets, eps, N, K);
}
void crossentropy_smoothed_forward_backward(const ExecContext& ctx, float* losses, float* logits,
                                            const int32_t* targets, float dloss, float eps, int N, int K) {
  HPCT_DISPATCH(crossentropy_smoothed_forward_backward, losses, logits, targets, dloss, eps, N, K);
}
void crossentropy_vp_local_max(const ExecContext& ctx, float* max_out, const float* logits_local, int v0, int Vl, int V,
                               int N) {
  HPCT_DISPATCH(crossentropy_vp_local_max, max_out, logits_local, v0, Vl, V, N);
}
void crossentropy_vp_local_sumexp(const ExecContext& ctx, float* sumexp_out, float* target_logit_out,
                                  const float* logits_local, const float* global_max, const int32_t* targets, int v0,
                                  int Vl, int V, int N) {
  HPCT_DISPATCH(crossentropy_vp_local_sumexp, sumexp_out, target_logit_out, logits_local, global_max, targets, v0, Vl,
                V, N);
}
void crossentropy_vp_loss_backward(const ExecContext& ctx, float* losses, float* logits_local, const float* global_max,
                                   const float* global_sumexp, const float* global_target_logit, const int32_t* targets,
                                   float dloss, int v0, int Vl, int V, int N) {
  HPCT_DISPATCH(crossentropy_vp_loss_backward, losses, logits_local, global_max, global_sumexp, global_target_logit,
                targets, dloss, v0, Vl, V, N);
}
void crossentropy_vp_loss(const ExecContext& ctx, float* losses, const float* global_max, const float* global_sumexp,
                          const float* global_target_logit, int N) {
  HPCT_DISPATCH(crossentropy_vp_loss, losses, global_max, global_sumexp, global_target_logit, N);
}

// ---- convolutional layers (ResNet) ----
int64_t conv2d_workspace_floats(const ExecContext& ctx, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                                int pad) {
  HPCT_DISPATCH(conv2d_workspace_floats, N, C, H, W, OC, KH, KW, stride, pad);
}
void conv2d_forward(const ExecContext& ctx, float* out, const float* inp, const float* weight, const float* bias,
                    float* workspace, int64_t workspace_floats, int N, int C, int H, int W, int OC, int KH, int KW,
                    int stride, int pad) {
  HPCT_DISPATCH(conv2d_forward, out, inp, weight, bias, workspace, workspace_floats, N, C, H, W, OC, KH, KW, stride,
                pad);
}
void conv2d_backward(const ExecContext& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, float* workspace, int64_t workspace_floats, int N, int C,
                     int H, int W, int OC, int KH, int KW, int stride, int pad) {
  HPCT_DISPATCH(conv2d_backward, dinp, dweight, dbias, dout, inp, weight, workspace, workspace_floats, N, C, H, W, OC,
                KH, KW, stride, pad);
}
void batchnorm2d_forward_train(const ExecContext& ctx, float* out, float* stats, float* save_mean, float* save_rstd,
                               const float* inp, const float* gamma, const float* beta, int N, int C, int HW,
                               float eps) {
  HPCT_DISPATCH(batchnorm2d_forward_train, out, stats, save_mean, save_rstd, inp, gamma, beta, N, C, HW, eps);
}
void batchnorm2d_local_stats(const ExecContext& ctx, float* stats, const float* inp, int N, int C, int HW) {
  HPCT_DISPATCH(batchnorm2d_local_stats, stats, inp, N, C, HW);
}
void batchnorm2d_merge_stats(const ExecContext& ctx, float* merged, const float* gathered, int R, int C) {
  HPCT_DISPATCH(batchnorm2d_merge_stats, merged, gathered, R, C);
}
void batchnorm2d_forward_apply(const ExecContext& ctx, float* out, float* save_mean, float* save_rstd, const float* inp,
                               const float* gamma, const float* beta, const float* stats, int N, int C, int HW,
                               float eps) {
  HPCT_DISPATCH(batchnorm2d_forward_apply, out, save_mean, save_rstd, inp, gamma, beta, stats, N, C, HW, eps);
}
void batchnorm2d_update_running(const ExecContext& ctx, float* running_mean, float* running_var, const float* stats,
                                int C, float momentum) {
  HPCT_DISPATCH(batchnorm2d_update_running, running_mean, running_var, stats, C, momentum);
}
void batchnorm2d_forward_eval(const ExecContext& ctx, float* out, const float* inp, const float* gamma,
                              const float* beta, const float* running_mean, const float* running_var, int N, int C,
                              int HW, float eps) {
  HPCT_DISPATCH(batchnorm2d_forward_eval, out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps);
}
void batchnorm2d_backward(const ExecContext& ctx, float* dinp, float* dgamma, float* dbeta, const float* dout,
                          const float* inp, const float* save_mean, const float* save_rstd, const float* gamma, int N,
                          int C, int HW) {
  HPCT_DISPATCH(batchnorm2d_backward, dinp, dgamma, dbeta, dout, inp, save_mean, save_rstd, gamma, N, C, HW);
}
void batchnorm2d_backward_local_sums(const ExecContext& ctx, float* sums, float* dgamma, float* dbeta,
                                     const float* dout, const float* inp, const float* save_mean,
                                     const float* save_rstd, int N, int C, int HW) {
  HPCT_DISPATCH(batchnorm2d_backward_local_sums, sums, dgamma, dbeta, dout, inp, save_mean, save_rstd, N, C, HW);
}
void batchnorm2d_backward_apply(const ExecContext& ctx, float* dinp, const float* dout, const float* inp,
                                const float* save_mean, const float* save_rstd, const float* gamma,
                                const float* global_sums, int64_t global_count, int N, int C, int HW) {
  HPCT_DISPATCH(batchnorm2d_backward_apply, dinp, dout, inp, save_mean, save_rstd, gamma, global_sums, global_count, N,
                C, HW);
}
void relu_forward(const ExecContext& ctx, float* out, const float* inp, int64_t n) {
  HPCT_DISPATCH(relu_forward, out, inp, n);
}
void relu_backward(const ExecContext& ctx, float* dinp, const float* dout, const float* out, int64_t n) {
  HPCT_DISPATCH(relu_backward, dinp, dout, out, n);
}
void maxpool2d_forward(const ExecContext& ctx, float* out, int32_t* idx, const float* inp, int N, int C, int H, int W,
                       int K, int stride, int pad) {
  HPCT_DISPATCH(maxpool2d_forward, out, idx, inp, N, C, H, W, K, stride, pad);
}
void maxpool2d_backward(const ExecContext& ctx, float* dinp, const float* dout, const int32_t* idx, int N, int C, int H,
                        int W, int K, int stride, int pad) {
  HPCT_DISPATCH(maxpool2d_backward, dinp, dout, idx, N, C, H, W, K, stride, pad);
}
void global_avgpool_forward(const ExecContext& ctx, float* out, const float* inp, int N, int C, int HW) {
  HPCT_DISPATCH(global_avgpool_forward, out, inp, N, C, HW);
}
void global_avgpool_backward(const ExecContext& ctx, float* dinp, const float* dout, int N, int C, int HW) {
  HPCT_DISPATCH(global_avgpool_backward, dinp, dout, N, C, HW);
}

void sum(const ExecContext& ctx, float* out, const float* x, int64_t n) { HPCT_DISPATCH(sum, out, x, n); }
float sum_to_host(const ExecContext& ctx, float* scratch, const float* x, int64_t n) {
  sum(ctx, scratch, x, n);
  float s = 0.0f;
  copy_to_host(ctx, &s, scratch, 4);
  synchronize(ctx);  // CUDA copies are asynchronous: s is valid only now (a no-op on the CPU)
  return s;
}
void sum_squares_accumulate(const ExecContext& ctx, double* out, const float* x, int64_t n) {
  HPCT_DISPATCH(sum_squares_accumulate, out, x, n);
}
void scale(const ExecContext& ctx, float* x, float s, int64_t n) { HPCT_DISPATCH(scale, x, s, n); }
void adamw_update(const ExecContext& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
  HPCT_DISPATCH(adamw_update, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
}

void fill_zero(const ExecContext& ctx, void* dst, int64_t bytes) { HPCT_DISPATCH(fill_zero, dst, bytes); }
void copy_to_host(const ExecContext& ctx, void* host_dst, const void* src, int64_t bytes) {
  HPCT_DISPATCH(copy_to_host, host_dst, src, bytes);
}
void copy_from_host(const ExecContext& ctx, void* dst, const void* host_src, int64_t bytes) {
  HPCT_DISPATCH(copy_from_host, dst, host_src, bytes);
}
void copy_device(const ExecContext& ctx, void* dst, const void* src, int64_t bytes) {
  HPCT_DISPATCH(copy_device, dst, src, bytes);
}
void synchronize(const ExecContext& ctx) { HPCT_DISPATCH(synchronize); }

#undef HPCT_DISPATCH

}  // namespace hpct::kernels
