// The ops' checks run in the dispatch, before either backend (kernels/ops.inc, kernels/op_checks.hpp): a bad call is
// refused with the same message on the CPU and on CUDA, naming the op and the values, and on CUDA before any device
// work, so that these tests run on machines without a GPU (or without the CUDA backend: the check comes before the
// "no CUDA backend" error). Pointers are null throughout: a refused call must not touch its buffers.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/kernels.hpp"
#if defined(HPCT_HAVE_CUDA)
#include "kernels/cuda/cuda_attention_cudnn.hpp"
#endif

namespace hpct::kernels {
namespace {

struct BadCall {
  const char* what;  // the message's part that names the fault
  std::function<void(const ExecContext&)> call;
};

std::string refusal(const ExecContext& ctx, const BadCall& bad) {
  try {
    bad.call(ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OpChecks, EachBadCallIsRefusedAlikeOnTheCpuAndOnCuda) {
  float* f = nullptr;
  const std::vector<BadCall> calls = {
      {"kernels::encoder_forward: bad shape B=2 T=0 C=8",
       [=](const ExecContext& ctx) { encoder_forward<float>(ctx, f, nullptr, f, f, 2, 0, 8); }},
      {"kernels::encoder_forward: wpe is null",
       [=](const ExecContext& ctx) { encoder_forward<float>(ctx, f, nullptr, f, nullptr, 2, 4, 8); }},
      {"kernels::layernorm_forward: bad shape N=4 C=0",
       [=](const ExecContext& ctx) { layernorm_forward<float>(ctx, f, f, f, f, f, f, 4, 0); }},
      {"kernels::matmul_backward: bad shape N=-1 C=4 OC=4",
       [=](const ExecContext& ctx) { matmul_backward<float>(ctx, f, f, f, f, f, f, -1, 4, 4); }},
      {"kernels::matmul_gelu_forward: bad shape N=2 C=4 OC=0",
       [=](const ExecContext& ctx) { matmul_gelu_forward<float>(ctx, f, f, f, f, f, 2, 4, 0); }},
      {"kernels::attention_forward: C=10 is not a multiple of NH=3",
       [=](const ExecContext& ctx) { attention_forward<float>(ctx, f, f, f, 1, 4, 10, 3); }},
      {"kernels::attention_stats_bytes: bad shape B=0 T=4 C=8 NH=2",
       [=](const ExecContext& ctx) { (void)attention_stats_bytes(ctx, 0, 4, 8, 2); }},
      {"kernels::crossentropy_forward: bad shape N=2 V=9 Vp=8",
       [=](const ExecContext& ctx) { crossentropy_forward<float>(ctx, f, f, nullptr, 2, 9, 8); }},
      {"kernels::crossentropy_vp_local_max: bad vocabulary slice [v0=0, v0+Vl=0) of V=8, N=2",
       [=](const ExecContext& ctx) { crossentropy_vp_local_max<float>(ctx, f, f, 0, 0, 8, 2); }},
      {"kernels::conv2d_forward: kernel 7x7 larger than the padded input 6x6",
       [=](const ExecContext& ctx) { conv2d_forward<float>(ctx, f, f, f, f, f, 0, 1, 3, 4, 4, 8, 7, 7, 1, 1); }},
      {"kernels::conv2d_workspace_floats: bad shape N=1 C=3 H=4 W=4 OC=8 KH=3 KW=3 stride=0 pad=1",
       [=](const ExecContext& ctx) { (void)conv2d_workspace_floats(ctx, 1, 3, 4, 4, 8, 3, 3, 0, 1); }},
      {"kernels::batchnorm2d_forward_train: bad shape N=0 C=4 HW=9",
       [=](const ExecContext& ctx) { batchnorm2d_forward_train<float>(ctx, f, f, f, f, f, f, f, 0, 4, 9, 1e-5f); }},
      {"kernels::batchnorm2d_relu_forward_train: bad shape N=0 C=4 HW=9",
       [=](const ExecContext& ctx) {
         batchnorm2d_relu_forward_train<float>(ctx, f, f, f, f, f, f, f, 0, 4, 9, 1e-5f);
       }},
      {"kernels::batchnorm2d_backward_apply: global count 10 is smaller than this rank's 18 values per channel",
       [=](const ExecContext& ctx) { batchnorm2d_backward_apply<float>(ctx, f, f, f, f, f, f, f, 10, 2, 4, 9); }},
      {"kernels::maxpool2d_forward: bad shape N=1 C=2 H=8 W=8 K=3 stride=2 pad=2 (torch needs pad <= K/2)",
       [=](const ExecContext& ctx) { maxpool2d_forward<float>(ctx, f, nullptr, f, 1, 2, 8, 8, 3, 2, 2); }},
      {"kernels::relu_forward: a count of -3 (negative)",
       [=](const ExecContext& ctx) { relu_forward<float>(ctx, f, f, -3); }},
      {"kernels::adamw_update: the step t=0 must be 1-based",
       [=](const ExecContext& ctx) { adamw_update(ctx, f, f, f, f, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 0); }},
      {"kernels::sgd_update: nesterov needs momentum > 0 and dampening = 0",
       [=](const ExecContext& ctx) { sgd_update(ctx, f, f, f, 4, 0.1f, 0.0f, 0.0f, 0.0f, true, 1.0f, false); }},
      {"kernels::sgd_update: momentum=0.9 needs a momentum buffer",
       [=](const ExecContext& ctx) { sgd_update(ctx, f, f, nullptr, 4, 0.1f, 0.9f, 0.0f, 0.0f, false, 1.0f, true); }},
      {"kernels::fill_zero: a count of -1 (negative)", [=](const ExecContext& ctx) { fill_zero(ctx, f, -1); }},
      {"kernels::host_register of 0 bytes", [=](const ExecContext& ctx) { host_register(ctx, f, 0); }},
  };
  const ExecContext cpu{Device::CPU};
  const ExecContext cuda{Device::CUDA};
  for (const BadCall& bad : calls) {
    const std::string on_cpu = refusal(cpu, bad), on_cuda = refusal(cuda, bad);
    EXPECT_NE(on_cpu.find(bad.what), std::string::npos) << "CPU: " << on_cpu;
    EXPECT_EQ(on_cpu, on_cuda) << bad.what;  // the same check, thrown from the same line
  }
}

// train.attention: cuDNN's fused attention where a run can have it (CUDA, 16-bit storage), the own kernels elsewhere;
// the CPU refuses a context that names cuDNN's; the names round-trip and a bad one is a UsageError naming the choices.
// The planned backward scratch under cuDNN is the bound of kernels.hpp: at GPT-2 124M's shape and micro-batch 16,
// the row sums (B*NH*T floats), the 16-bit dP (T = 1024 is a multiple of 128), the fp32 dQ accumulator and 32 MiB.
TEST(AttentionChoice, CudnnOnlyOnCudaWith16BitStorage) {
  EXPECT_EQ(effective_attention(AttentionImpl::Cudnn, Device::CPU, DType::BF16), AttentionImpl::Own);
  EXPECT_EQ(effective_attention(AttentionImpl::Cudnn, Device::CPU, DType::F32), AttentionImpl::Own);
  EXPECT_EQ(effective_attention(AttentionImpl::Cudnn, Device::CUDA, DType::F32), AttentionImpl::Own);
  EXPECT_EQ(effective_attention(AttentionImpl::Cudnn, Device::CUDA, DType::BF16), AttentionImpl::Cudnn);
  EXPECT_EQ(effective_attention(AttentionImpl::Cudnn, Device::CUDA, DType::F16), AttentionImpl::Cudnn);
  EXPECT_EQ(effective_attention(AttentionImpl::Own, Device::CUDA, DType::BF16), AttentionImpl::Own);
  EXPECT_EQ(parse_attention_impl("cudnn"), AttentionImpl::Cudnn);
  EXPECT_EQ(parse_attention_impl(attention_impl_name(AttentionImpl::Own)), AttentionImpl::Own);
  try {
    parse_attention_impl("flash");
    ADD_FAILURE() << "parse_attention_impl(\"flash\") returned";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("use one of own, cudnn"), std::string::npos) << e.what();
  }
  ExecContext cpu{Device::CPU};
  cpu.attention = AttentionImpl::Cudnn;
  const BadCall refused{"the CPU backend has no cuDNN attention",
                        [](const ExecContext& ctx) { (void)attention_scratch_bytes(ctx, 1, 8, 16, 2); }};
  EXPECT_NE(refusal(cpu, refused).find(refused.what), std::string::npos) << refusal(cpu, refused);
  const int64_t rows = int64_t{16} * 12 * 1024;
  EXPECT_EQ(cudnn_attention_scratch_bytes(16, 1024, 12, 64),
            rows * 4 + rows * 1024 * 2 + rows * 64 * 4 + (int64_t{32} << 20));
  EXPECT_EQ(cudnn_attention_scratch_bytes(1, 130, 1, 8), 130 * 4 + 256 * 256 * 2 + 130 * 8 * 4 + (int64_t{32} << 20));
#if defined(HPCT_HAVE_CUDA)  // a size query: no device work, no GPU needed
  ExecContext cuda{Device::CUDA};
  cuda.attention = AttentionImpl::Cudnn;
  EXPECT_EQ(attention_scratch_bytes(cuda, 16, 1024, 768, 12, DType::BF16),
            cudnn_attention_scratch_bytes(16, 1024, 12, 64));
  EXPECT_EQ(attention_stats_bytes(cuda, 16, 1024, 768, 12, DType::BF16), rows * 4);
  const BadCall fp32{"cuDNN's fused attention takes bf16 or fp16 storage, not f32",
                     [](const ExecContext& ctx) { (void)attention_scratch_bytes(ctx, 1, 8, 16, 2, DType::F32); }};
  EXPECT_NE(refusal(cuda, fp32).find(fp32.what), std::string::npos) << refusal(cuda, fp32);
#endif
}

#if defined(HPCT_HAVE_CUDA)
// cuDNN's own validation of the fused attention's graphs (cuda_attention_cudnn.cpp) for a Hopper GPU, run on the host
// against the cuDNN this process loads: the shapes, the strided q, k, v, out and gradients in the qkv rows, the causal
// mask, the deterministic backward. GPT-2 124M and one TP-2 rank of it, the tiny deck and one TP-2 rank of it (head
// size 16), head size 128 at an odd T; bf16 and fp16. A head size cuDNN has no kernel for (260: not a multiple of 8)
// is refused both ways: the check is cuDNN's, not a formality.
TEST(AttentionChoice, CudnnGraphsValidateForHopper) {
  if (!cudnn_attention_built()) GTEST_SKIP() << "built without the cuDNN frontend (scripts/setup.sh installs it)";
  struct Shape {
    int B, T, C, NH;
  };
  for (const Shape s : {Shape{16, 1024, 768, 12}, Shape{16, 1024, 384, 6}, Shape{8, 64, 64, 4}, Shape{8, 64, 32, 2},
                        Shape{2, 130, 256, 2}})
    for (const bool backward : {false, true})
      for (const DType act : {DType::BF16, DType::F16})
        EXPECT_EQ(cuda::cudnn_attention_validate(90, backward, act, s.B, s.T, s.C, s.NH), "")
            << (backward ? "backward" : "forward") << " B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH
            << " " << dtype_name(act);
  for (const bool backward : {false, true})
    EXPECT_NE(cuda::cudnn_attention_validate(90, backward, DType::BF16, 1, 64, 520, 2), "") << "head size 260";
}
#endif

}  // namespace
}  // namespace hpct::kernels
