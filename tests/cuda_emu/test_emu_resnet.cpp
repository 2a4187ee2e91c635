// The CUDA backend's ResNet kernels (lib/kernels/cuda/cuda_resnet_kernels.cuh: the conv bias and dbias, BatchNorm2d
// in all its pieces, MaxPool2d, global average pooling) run on the host emulation (cuda_emu.hpp), at the launch
// geometry cuda_resnet.cu uses and in the order its ops launch them (the emu_* functions below mirror them one for
// one), against the CPU backend (cpu/cpu_conv.cpp). Every launch sequence runs under three schedules (in-order,
// shuffled, run-ahead: emulate_schedules) and must give the same bits every time. Outputs an op assigns start as NaN (a value it
// fails to write shows up); outputs it accumulates (+=) start as random values on both sides.
//
// Tolerances (kernel_test_util.hpp all_close: |got - want| <= atol + rtol |want|, atol = atol_rel * max|want|): those
// of the GPU test of the same ops (tests/unit/kernels/test_cuda_resnet.cpp), for the same reasons:
//   - bitwise: max-pooling forward (a selection: values and argmax indices, ties included) and backward (the gather
//     adds the same floats in the CPU scatter's order), global-average-pool backward (one float division), the conv
//     bias add (one float addition per element, checked against that addition), the count columns of the statistics;
//   - kRtol / kAtolRel = 1e-5 / 1e-6 (the fp32 default): everything computed in double on both sides and rounded once
//     to float (BatchNorm statistics, Chan's merge, gradient sums, dbias, avg-pool forward; the kernels add in their
//     strided-then-tree order, the CPU sequentially or in SIMD lanes), and the pointwise float formulas that follow
//     from them (normalisation, eval, dinp), which each compiler may contract into FMAs in its own pattern;
//   - kConvRtol / kConvAtolRel = 1e-4 / 1e-4 (the GPU test's convolution tolerance): only where the bias add on the
//     CPU's unbiased convolution is compared with the CPU's own biased convolution, whose GEMM may accumulate the
//     bias with the products (a different rounding of a sum of C*KH*KW terms).
//
// bf16 storage (the kernels' __nv_bfloat16 instantiations) against the CPU backend's bf16 ops on the same bf16 inputs:
// the statistics, sums and parameter gradients are float (the float tolerances above: both sides widen the same bf16
// values); the stored activations are rounded once from float values that may differ in their last bits (the float
// tolerance plus one bf16 ulp, kBf16Ulp); bitwise where the float values are the same on both sides (max-pooling, the
// avg-pool backward, the bias seed and add, the filter-gradient accumulation).
// fp16 storage (the __half instantiations): the same checks, written once over the 16-bit type (CpuStorage: the CPU's
// fp32 ops on the widened fp16 inputs, outputs rounded once to fp16), one fp16 ulp (kFp16Ulp = 2^-10) in place of the
// bf16 one; the inputs stay within a few units, far inside fp16's range.
//
// Shapes (every CUDA thread is a fiber: small, yet at the kernels' edges): odd channel counts; planes of 1x1, 3x3,
// 7x7 and others that are not multiples of 32, one longer than the 256-thread plane block (several x blocks); a
// channel's N*HW below, equal to and above the 512-thread reduction block, with HW that does not divide the block
// (for_channel_range's incremental (n, i) walk wraps), HW = 512 (one image per sweep) and HW > 512 (several sweeps per
// image); one image; |mean| >> std; SyncBN with R = 1 and R = 3 ranks (one with an empty row in the merge); C = 130
// (the one-thread-per-channel kernels over two 128-thread blocks); pooling with padding and stride 2 (floor mode),
// overlapping stride-1 windows and many ties, stride 3 over 2x2 windows, 1x1 windows. The production grids are capped
// at sizes the emulation cannot reach; the loops that stride over the rest run on deliberately small grids instead
// (bitwise equal to the full grid), and the geometry functions are checked against the H100's limits at large sizes.
#include "cuda_emu.hpp"  // first: the CUDA surface the kernel header compiles against
#include "kernels/cuda/cuda_resnet_kernels.cuh"
//
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "emu_test_util.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

namespace cu = cuda;
using test::all_close;
using test::bitwise_equal;
using test::cpu_ctx;
using test::cpu_in;
using test::cpu_out;
using test::CpuStorage;
using test::emu_output;
using test::emu_ptr;
using test::emulate_schedules;
using test::EmuStorage;
using test::kStorageUlp;
using test::random_ints;
using test::random_storage;
using test::random_vector;
using test::sz;
using test::to_float_vector;
using Vec = std::vector<float>;

constexpr double kRtol = 1e-5, kAtolRel = 1e-6;
constexpr double kConvRtol = 1e-4, kConvAtolRel = 1e-4;
constexpr float kEps = 1e-5f;

Vec nan_vector(size_t n) { return Vec(n, NAN); }

// column k of rows of `stride` floats (stats (C,3), sums (C,2))
Vec column(const Vec& v, int stride, int k) {
  Vec r;
  for (size_t i = static_cast<size_t>(k); i < v.size(); i += static_cast<size_t>(stride)) r.push_back(v[i]);
  return r;
}

// ---- the launch sequences of cuda_resnet.cu's ops ----------------------------------------------------------------
// conv2d_forward's bias part (after cuDNN's convolution into out)
void emu_conv_bias(float* out, const float* bias, int N, int OC, int64_t len) {
  const int64_t planes = static_cast<int64_t>(N) * OC;
  EMU_LAUNCH((cu::plane_bias_kernel<false, float>), cu::plane_shape(planes, len), out, bias, planes, OC, len);
}
// conv2d_backward's dbias part
void emu_conv_dbias(float* dbias, const float* dout, int N, int OC, int OHW) {
  EMU_LAUNCH(cu::channel_sum_accumulate_kernel, cu::channel_reduce_shape(OC), dbias, dout, N, OC, OHW);
}
// the statistics' two stages as cuda_resnet.cu's launch_bn_stats runs them, over a partials buffer of partials_bytes
// (its groups start NaN: a group the first stage does not write poisons the result)
template <typename S>
void emu_bn_stats(float* stats, float* save_mean, float* save_rstd, const S* inp, int N, int C, int HW, float eps,
                  int64_t partials_bytes = kCudaReducePartialsBytes) {
  const cu::BnGroupsLaunch l = cu::bn_groups_launch(N, C, HW, partials_bytes, 3);
  std::vector<double> partials(static_cast<size_t>(3 * C * l.groups), std::numeric_limits<double>::quiet_NaN());
  EMU_LAUNCH(cu::bn_stats_partial_kernel, l.partial, partials.data(), inp, N, C, HW, l.per_group);
  EMU_LAUNCH(cu::bn_stats_finish_kernel, l.finish, stats, save_mean, save_rstd, partials.data(), C,
             static_cast<int>(l.groups), eps);
}
// The pointwise BatchNorm kernels at the pack width cuda_resnet.cu picks (pack_width over the plane's length and the
// pointers: 16-byte packs where they fit, else one value at a time), so that the emulation takes the GPU's path.
template <typename S>
void emu_bn_apply(S* out, const S* inp, const float* mean, const float* rstd, const S* gamma, const S* beta, int N,
                  int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  cu::with_pack<S>(cu::pack_width<S>(HW, {out, inp}), [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    EMU_LAUNCH((cu::bn_apply_kernel<P, S>), cu::plane_shape(planes, HW / P), out, inp, mean, rstd, gamma, beta, planes,
               C, HW);
  });
}
template <typename S>
void emu_bn_eval(S* out, const S* inp, const S* gamma, const S* beta, const float* running_mean,
                 const float* running_var, int N, int C, int HW, float eps) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  cu::with_pack<S>(cu::pack_width<S>(HW, {out, inp}), [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    EMU_LAUNCH((cu::bn_eval_kernel<P, S>), cu::plane_shape(planes, HW / P), out, inp, gamma, beta, running_mean,
               running_var, planes, C, HW, eps);
  });
}
template <typename S>
void emu_bn_dinp(S* dinp, const S* dout, const S* inp, const float* save_mean, const float* save_rstd, const S* gamma,
                 const float* global_sums, int64_t global_count, int N, int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  cu::with_pack<S>(cu::pack_width<S>(HW, {dinp, dout, inp}), [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    EMU_LAUNCH((cu::bn_backward_apply_kernel<P, S>), cu::plane_shape(planes, HW / P), dinp, dout,
               static_cast<const S*>(nullptr), inp, save_mean, save_rstd, gamma, global_sums,
               static_cast<double>(global_count), planes, C, HW);
  });
}
void emu_bn_forward_train(float* out, float* stats, float* save_mean, float* save_rstd, const float* inp,
                          const float* gamma, const float* beta, int N, int C, int HW, float eps) {
  emu_bn_stats(stats, save_mean, save_rstd, inp, N, C, HW, eps);
  emu_bn_apply(out, inp, save_mean, save_rstd, gamma, beta, N, C, HW);
}
void emu_bn_local_stats(float* stats, const float* inp, int N, int C, int HW) {
  emu_bn_stats(stats, static_cast<float*>(nullptr), static_cast<float*>(nullptr), inp, N, C, HW, 0.0f);
}
void emu_bn_merge_stats(float* merged, const float* gathered, int R, int C) {
  EMU_LAUNCH(cu::bn_merge_kernel, cu::per_channel_shape(C), merged, gathered, R, C);
}
void emu_bn_forward_apply(float* out, float* save_mean, float* save_rstd, const float* inp, const float* gamma,
                          const float* beta, const float* stats, int N, int C, int HW, float eps) {
  EMU_LAUNCH(cu::bn_mean_rstd_kernel, cu::per_channel_shape(C), save_mean, save_rstd, stats, C, eps);
  emu_bn_apply(out, inp, save_mean, save_rstd, gamma, beta, N, C, HW);
}
void emu_bn_update_running(float* running_mean, float* running_var, const float* stats, int C, float momentum) {
  EMU_LAUNCH(cu::bn_update_running_kernel, cu::per_channel_shape(C), running_mean, running_var, stats, C, momentum);
}
void emu_bn_forward_eval(float* out, const float* inp, const float* gamma, const float* beta, const float* running_mean,
                         const float* running_var, int N, int C, int HW, float eps) {
  emu_bn_eval(out, inp, gamma, beta, running_mean, running_var, N, C, HW, eps);
}
// the gradient sums' two stages as cuda_resnet.cu's launch_bn_grad_sums runs them (the groups start NaN)
template <typename S>
void emu_bn_backward_local_sums(float* sums, float* dgamma, float* dbeta, const S* dout, const S* inp,
                                const float* save_mean, const float* save_rstd, int N, int C, int HW,
                                int64_t partials_bytes = kCudaReducePartialsBytes) {
  const cu::BnGroupsLaunch l = cu::bn_groups_launch(N, C, HW, partials_bytes, 2);
  std::vector<double> partials(static_cast<size_t>(2 * C * l.groups), std::numeric_limits<double>::quiet_NaN());
  EMU_LAUNCH(cu::bn_grad_partial_kernel, l.partial, partials.data(), dout, static_cast<const S*>(nullptr), inp,
             save_mean, save_rstd, N, C, HW, l.per_group);
  EMU_LAUNCH(cu::bn_grad_finish_kernel, l.finish, sums, dgamma, dbeta, partials.data(), C, static_cast<int>(l.groups));
}
void emu_bn_backward_apply(float* dinp, const float* dout, const float* inp, const float* save_mean,
                           const float* save_rstd, const float* gamma, const float* global_sums, int64_t global_count,
                           int N, int C, int HW);
// the single-process backward: the sums (in the partials buffer's tail on the GPU), then the apply
void emu_bn_backward(float* dinp, float* dgamma, float* dbeta, const float* dout, const float* inp,
                     const float* save_mean, const float* save_rstd, const float* gamma, int N, int C, int HW) {
  std::vector<float> sums(2 * static_cast<size_t>(C), std::numeric_limits<float>::quiet_NaN());
  emu_bn_backward_local_sums(sums.data(), dgamma, dbeta, dout, inp, save_mean, save_rstd, N, C, HW);
  emu_bn_backward_apply(dinp, dout, inp, save_mean, save_rstd, gamma, sums.data(), int64_t{N} * HW, N, C, HW);
}
void emu_bn_backward_apply(float* dinp, const float* dout, const float* inp, const float* save_mean,
                           const float* save_rstd, const float* gamma, const float* global_sums, int64_t global_count,
                           int N, int C, int HW) {
  emu_bn_dinp(dinp, dout, inp, save_mean, save_rstd, gamma, global_sums, global_count, N, C, HW);
}
void emu_maxpool_forward(float* out, int32_t* idx, const float* inp, int N, int C, int H, int W, int K, int stride,
                         int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
  EMU_LAUNCH(cu::maxpool_forward_kernel, cu::plane_shape(planes, static_cast<int64_t>(OH) * OW), out, idx, inp, planes,
             H, W, OH, OW, K, stride, pad);
}
void emu_maxpool_backward(float* dinp, const float* dout, const int32_t* idx, int N, int C, int H, int W, int K,
                          int stride, int pad) {
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = static_cast<int64_t>(N) * C;
  EMU_LAUNCH(cu::maxpool_backward_kernel, cu::plane_shape(planes, static_cast<int64_t>(H) * W), dinp, dout, idx, planes,
             H, W, OH, OW, K, stride, pad);
}
void emu_global_avgpool_forward(float* out, const float* inp, int N, int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (planes == 0) return;
  EMU_LAUNCH(cu::global_avgpool_forward_kernel, cu::global_avgpool_forward_shape(planes), out, inp, planes, HW);
}
void emu_global_avgpool_backward(float* dinp, const float* dout, int N, int C, int HW) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (planes == 0) return;
  EMU_LAUNCH(cu::global_avgpool_backward_kernel, cu::plane_shape(planes, HW), dinp, dout, planes, HW);
}

// ---- Conv2d bias and dbias -----------------------------------------------------------------------------------------
struct ConvShape {
  int N, C, H, W, OC, KH, KW, stride, pad;
  int OH() const { return (H + 2 * pad - KH) / stride + 1; }
  int OW() const { return (W + 2 * pad - KW) / stride + 1; }
  size_t in_size() const { return sz(int64_t{N} * C * H * W); }
  size_t out_size() const { return sz(int64_t{N} * OC * OH() * OW()); }
  size_t w_size() const { return sz(int64_t{OC} * C * KH * KW); }
  std::string name() const {
    std::ostringstream os;
    os << "N" << N << " C" << C << " H" << H << " W" << W << " OC" << OC << " " << KH << "x" << KW << " s" << stride
       << " p" << pad;
    return os.str();
  }
};

// output planes (OH x OW, N*OH*OW): 11x9 (297 < 512), 15x13 (780 > 512, 195 does not divide 512), 7x7, 1x1 (one
// value per image), one image 12x10 with 33 channels, 20x17 (340 > 256: two x blocks per plane)
const ConvShape kConvShapes[] = {{3, 5, 11, 9, 7, 3, 3, 1, 1},   {4, 3, 15, 13, 5, 3, 3, 1, 1},
                                 {2, 6, 7, 7, 9, 1, 1, 1, 0},    {3, 4, 2, 2, 6, 2, 2, 1, 0},
                                 {1, 3, 23, 19, 33, 7, 7, 2, 3}, {2, 2, 20, 17, 3, 1, 1, 1, 0}};

TEST(EmuResnet, ConvBiasAndDbias) {
  for (const ConvShape& s : kConvShapes) {
    SCOPED_TRACE(s.name());
    const int64_t OHW = static_cast<int64_t>(s.OH()) * s.OW();
    const Vec inp = random_vector(s.in_size(), 11), w = random_vector(s.w_size(), 12, -0.3, 0.3);
    const Vec bias = random_vector(sz(s.OC), 13), dout = random_vector(s.out_size(), 14);
    const Vec db0 = random_vector(sz(s.OC), 16);
    const int64_t wsf = conv2d_workspace_floats(cpu_ctx(), s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    Vec ws(sz(std::max<int64_t>(wsf, 1)));

    // forward: the CPU's convolution without bias, then the bias kernel on it (cuDNN's part replaced by the CPU's)
    Vec plain(s.out_size()), biased(s.out_size());
    conv2d_forward(cpu_ctx(), plain.data(), inp.data(), w.data(), static_cast<const float*>(nullptr), ws.data(), wsf,
                   s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    conv2d_forward(cpu_ctx(), biased.data(), inp.data(), w.data(), bias.data(), ws.data(), wsf, s.N, s.C, s.H, s.W,
                   s.OC, s.KH, s.KW, s.stride, s.pad);
    Vec out = plain;
    ASSERT_TRUE(emulate_schedules([&] { emu_conv_bias(out.data(), bias.data(), s.N, s.OC, OHW); },
                                  {emu_output("conv out + bias", out)}));
    Vec exact = plain;
    for (size_t i = 0; i < exact.size(); i++) exact[i] += bias[sz((static_cast<int64_t>(i) / OHW) % s.OC)];
    EXPECT_TRUE(bitwise_equal("conv out + bias", out, exact));
    EXPECT_TRUE(all_close("conv out + bias vs the CPU's biased conv", out, biased, kConvRtol, kConvAtolRel));

    // backward: dbias += sum over (n, oh, ow) of dout, against the CPU's conv2d_backward (dweight is scratch here)
    Vec dbias = db0, want_db = db0, dw(s.w_size(), 0.0f);
    ASSERT_TRUE(emulate_schedules([&] { emu_conv_dbias(dbias.data(), dout.data(), s.N, s.OC, static_cast<int>(OHW)); },
                                  {emu_output("conv dbias", dbias)}));
    conv2d_backward(cpu_ctx(), static_cast<float*>(nullptr), dw.data(), want_db.data(), dout.data(), inp.data(),
                    w.data(), ws.data(), wsf, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride, s.pad);
    EXPECT_TRUE(all_close("conv dbias (+=)", dbias, want_db, kRtol, kAtolRel));
  }
}

// ---- BatchNorm2d -------------------------------------------------------------------------------------------------
struct BnShape {
  int N, C, HW;
  size_t size() const { return sz(int64_t{N} * C * HW); }
  std::string name() const {
    std::ostringstream os;
    os << "N" << N << " C" << C << " HW" << HW;
    return os.str();
  }
};
// a channel's N*HW against the 512-thread block: 111 (HW 37 does not divide it), 2062 (HW 1031 > 512: several
// sweeps per image), 5 (1x1 planes), 784 (7x7 planes, HW 49: the walk wraps every sweep), 9 (one image, 3x3 planes,
// 33 channels), 512 (HW = the block), 1000 (HW 500: 12 left over per sweep)
const BnShape kBnShapes[] = {{3, 5, 37}, {2, 3, 1031}, {5, 4, 1}, {16, 3, 49}, {1, 33, 9}, {1, 3, 512}, {2, 5, 500}};

TEST(EmuResnet, BatchNormForwardTrainAndEval) {
  int k = 0;
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(s.name());
    const double offset = (k++ % 2) ? 50.0 : 0.0;  // |mean| >> std on every other shape: no cancellation allowed
    const Vec inp = random_vector(s.size(), 41, offset - 1.0, offset + 1.0);
    const Vec gamma = random_vector(sz(s.C), 42, 0.5, 1.5), beta = random_vector(sz(s.C), 43);
    Vec want_out(s.size()), want_stats(3 * sz(s.C)), want_mean(sz(s.C)), want_rstd(sz(s.C));
    batchnorm2d_forward_train(cpu_ctx(), want_out.data(), want_stats.data(), want_mean.data(), want_rstd.data(),
                              inp.data(), gamma.data(), beta.data(), s.N, s.C, s.HW, kEps);
    Vec out = nan_vector(s.size()), stats = nan_vector(3 * sz(s.C)), mean = nan_vector(sz(s.C)),
        rstd = nan_vector(sz(s.C));
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_forward_train(out.data(), stats.data(), mean.data(), rstd.data(), inp.data(), gamma.data(),
                               beta.data(), s.N, s.C, s.HW, kEps);
        },
        {emu_output("bn out", out), emu_output("bn stats", stats), emu_output("bn save_mean", mean),
         emu_output("bn save_rstd", rstd)}));
    EXPECT_TRUE(bitwise_equal("bn stats count", column(stats, 3, 0), column(want_stats, 3, 0)));
    EXPECT_TRUE(all_close("bn stats mean", column(stats, 3, 1), column(want_stats, 3, 1), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("bn stats M2", column(stats, 3, 2), column(want_stats, 3, 2), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("bn save_mean", mean, want_mean, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("bn save_rstd", rstd, want_rstd, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("bn out", out, want_out, kRtol, kAtolRel));

    // local statistics alone: the same kernel without save_mean / save_rstd, the same bits as above
    Vec local = nan_vector(3 * sz(s.C));
    ASSERT_TRUE(emulate_schedules([&] { emu_bn_local_stats(local.data(), inp.data(), s.N, s.C, s.HW); },
                                  {emu_output("bn local stats", local)}));
    EXPECT_TRUE(bitwise_equal("bn local stats vs forward_train's", local, stats));

    // running statistics (+ the unbiased variance) from the emulated stats, then evaluation (skipped at one value per
    // channel: the unbiased variance needs two)
    if (static_cast<int64_t>(s.N) * s.HW > 1) {
      Vec rm = random_vector(sz(s.C), 44), rv = random_vector(sz(s.C), 45, 0.5, 1.5);
      Vec want_rm = rm, want_rv = rv;
      ASSERT_TRUE(emulate_schedules([&] { emu_bn_update_running(rm.data(), rv.data(), stats.data(), s.C, 0.1f); },
                                    {emu_output("running_mean", rm), emu_output("running_var", rv)}));
      batchnorm2d_update_running(cpu_ctx(), want_rm.data(), want_rv.data(), want_stats.data(), s.C, 0.1f);
      EXPECT_TRUE(all_close("bn running_mean", rm, want_rm, kRtol, kAtolRel));
      EXPECT_TRUE(all_close("bn running_var", rv, want_rv, kRtol, kAtolRel));
    }
    const Vec rm = random_vector(sz(s.C), 46, offset - 0.5, offset + 0.5), rv = random_vector(sz(s.C), 47, 0.2, 2.0);
    Vec oe = nan_vector(s.size()), want_oe(s.size());
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_forward_eval(oe.data(), inp.data(), gamma.data(), beta.data(), rm.data(), rv.data(), s.N, s.C, s.HW,
                              kEps);
        },
        {emu_output("bn eval out", oe)}));
    batchnorm2d_forward_eval(cpu_ctx(), want_oe.data(), inp.data(), gamma.data(), beta.data(), rm.data(), rv.data(),
                             s.N, s.C, s.HW, kEps);
    EXPECT_TRUE(all_close("bn eval out", oe, want_oe, kRtol, kAtolRel));
  }
}

// SyncBN forward over R simulated ranks of different batch sizes: local stats into the rank rows of `gathered`,
// Chan's merge, apply on one rank's images, running statistics from the merged ones.
// The statistics and the gradient sums over several groups of a channel (N*HW = 20000: groups of 8192 values, the
// last shorter, boundaries inside an image; and over a buffer of two groups: 10000 each), |mean| >> std: against the
// CPU's passes over the whole channel, and the launch of ResNet-50's first BatchNorm at micro-batch 256 (64 channels
// of 256 x 112 x 112).
TEST(EmuResnet, BatchNormStatisticsOverManyGroups) {
  const int N = 4, C = 3, HW = 5000;
  const Vec inp = random_vector(sz(int64_t{N} * C * HW), 48, 49.0, 51.0);
  Vec want_stats(3 * sz(C)), want_mean(sz(C)), want_rstd(sz(C)), want_out(inp.size());
  const Vec gamma(sz(C), 1.0f), beta(sz(C), 0.0f);
  batchnorm2d_forward_train(cpu_ctx(), want_out.data(), want_stats.data(), want_mean.data(), want_rstd.data(),
                            inp.data(), gamma.data(), beta.data(), N, C, HW, kEps);
  for (const int64_t bytes : {static_cast<int64_t>(kCudaReducePartialsBytes), int64_t{2 * 3 * C * 8}}) {
    const cu::BnGroupsLaunch l = cu::bn_groups_launch(N, C, HW, bytes, 3);
    SCOPED_TRACE("partials " + std::to_string(bytes) + ": " + std::to_string(l.groups) + " groups");
    EXPECT_EQ(l.groups, bytes == 48 * C ? 2 : 3);
    Vec stats = nan_vector(3 * sz(C)), mean = nan_vector(sz(C)), rstd = nan_vector(sz(C));
    ASSERT_TRUE(emulate_schedules(
        [&] { emu_bn_stats(stats.data(), mean.data(), rstd.data(), inp.data(), N, C, HW, kEps, bytes); },
        {emu_output("stats", stats), emu_output("save_mean", mean), emu_output("save_rstd", rstd)}));
    EXPECT_TRUE(bitwise_equal("count", column(stats, 3, 0), column(want_stats, 3, 0)));
    EXPECT_TRUE(all_close("mean", column(stats, 3, 1), column(want_stats, 3, 1), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("M2", column(stats, 3, 2), column(want_stats, 3, 2), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("save_rstd", rstd, want_rstd, kRtol, kAtolRel));
    // the gradient sums over the same groups (2 doubles per group: the two-group buffer holds three)
    const Vec dout = random_vector(inp.size(), 49);
    Vec sums = nan_vector(2 * sz(C)), dg(sz(C), 0.5f), db(sz(C), -0.5f);
    Vec want_sums(2 * sz(C)), want_dg = dg, want_db = db;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_backward_local_sums(sums.data(), dg.data(), db.data(), dout.data(), inp.data(), want_mean.data(),
                                     want_rstd.data(), N, C, HW, bytes);
        },
        {emu_output("sums", sums), emu_output("dgamma", dg), emu_output("dbeta", db)}));
    batchnorm2d_backward_local_sums(cpu_ctx(), want_sums.data(), want_dg.data(), want_db.data(), dout.data(),
                                    inp.data(), want_mean.data(), want_rstd.data(), N, C, HW);
    EXPECT_TRUE(all_close("sums", sums, want_sums, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("dgamma", dg, want_dg, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("dbeta", db, want_db, kRtol, kAtolRel));
  }
  const cu::BnGroupsLaunch r50 = cu::bn_groups_launch(256, 64, 112 * 112, kCudaReducePartialsBytes, 3);
  EXPECT_EQ(r50.groups, 392);  // 3,211,264 values per channel in 392 groups of 8192
  EXPECT_EQ(r50.partial.grid.count(), 392 * 64);
  for (const cu::LaunchShape& sh : {r50.partial, r50.finish}) EXPECT_EQ(cu::launch_problem(sh, cu::kH100Limits), "");
}

TEST(EmuResnet, BatchNormSyncForward) {
  const int C = 13, HW = 50;
  for (const std::vector<int>& Ns : {std::vector<int>{3}, std::vector<int>{2, 3, 1}}) {
    const int R = static_cast<int>(Ns.size());
    SCOPED_TRACE("R=" + std::to_string(R));
    std::vector<Vec> inps;
    for (int r = 0; r < R; r++)
      inps.push_back(random_vector(sz(int64_t{Ns[r]} * C * HW), 51 + static_cast<uint32_t>(r), 19.0 + r, 21.0));
    Vec want_gathered(sz(int64_t{R} * C * 3)), gathered = nan_vector(want_gathered.size());
    for (int r = 0; r < R; r++)
      batchnorm2d_local_stats(cpu_ctx(), want_gathered.data() + sz(int64_t{r} * C * 3), inps[r].data(), Ns[r], C, HW);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          for (int r = 0; r < R; r++)
            emu_bn_local_stats(gathered.data() + sz(int64_t{r} * C * 3), inps[r].data(), Ns[r], C, HW);
        },
        {emu_output("gathered", gathered)}));
    EXPECT_TRUE(bitwise_equal("local stats count", column(gathered, 3, 0), column(want_gathered, 3, 0)));
    EXPECT_TRUE(all_close("local stats mean", column(gathered, 3, 1), column(want_gathered, 3, 1), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("local stats M2", column(gathered, 3, 2), column(want_gathered, 3, 2), kRtol, kAtolRel));

    // merge the CPU's gathered rows on both sides, so that the merge itself is compared on identical inputs
    Vec want_merged(sz(C) * 3), merged = nan_vector(want_merged.size());
    batchnorm2d_merge_stats(cpu_ctx(), want_merged.data(), want_gathered.data(), R, C);
    ASSERT_TRUE(emulate_schedules([&] { emu_bn_merge_stats(merged.data(), want_gathered.data(), R, C); },
                                  {emu_output("merged", merged)}));
    EXPECT_TRUE(bitwise_equal("merged count", column(merged, 3, 0), column(want_merged, 3, 0)));
    EXPECT_TRUE(all_close("merged mean", column(merged, 3, 1), column(want_merged, 3, 1), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("merged M2", column(merged, 3, 2), column(want_merged, 3, 2), kRtol, kAtolRel));

    // apply on the images of the last rank with the (CPU's) merged stats
    const int N = Ns.back();
    const Vec& inp = inps.back();
    const Vec gamma = random_vector(sz(C), 55, 0.5, 1.5), beta = random_vector(sz(C), 56);
    Vec want_out(inp.size()), want_mean(sz(C)), want_rstd(sz(C));
    batchnorm2d_forward_apply(cpu_ctx(), want_out.data(), want_mean.data(), want_rstd.data(), inp.data(), gamma.data(),
                              beta.data(), want_merged.data(), N, C, HW, kEps);
    Vec out = nan_vector(inp.size()), mean = nan_vector(sz(C)), rstd = nan_vector(sz(C));
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_forward_apply(out.data(), mean.data(), rstd.data(), inp.data(), gamma.data(), beta.data(),
                               want_merged.data(), N, C, HW, kEps);
        },
        {emu_output("apply out", out), emu_output("apply save_mean", mean), emu_output("apply save_rstd", rstd)}));
    EXPECT_TRUE(all_close("apply save_mean", mean, want_mean, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("apply save_rstd", rstd, want_rstd, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("apply out", out, want_out, kRtol, kAtolRel));

    Vec rm = random_vector(sz(C), 57, 19.0, 21.0), rv = random_vector(sz(C), 58, 0.5, 1.5);
    Vec want_rm = rm, want_rv = rv;
    batchnorm2d_update_running(cpu_ctx(), want_rm.data(), want_rv.data(), want_merged.data(), C, 0.1f);
    ASSERT_TRUE(emulate_schedules([&] { emu_bn_update_running(rm.data(), rv.data(), want_merged.data(), C, 0.1f); },
                                  {emu_output("running_mean", rm), emu_output("running_var", rv)}));
    EXPECT_TRUE(all_close("sync running_mean", rm, want_rm, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("sync running_var", rv, want_rv, kRtol, kAtolRel));
  }
}

// The one-thread-per-channel kernels (merge, mean/rstd, running statistics) at C = 130: two 128-thread blocks, the
// second mostly idle. The merge at R = 1 (a copy through double) and R = 3 with an empty row (count 0: the identity).
TEST(EmuResnet, BatchNormPerChannelKernelsOverTwoBlocks) {
  const int C = 130, HW = 3;
  const int Ns[3] = {2, 1, 4};
  std::vector<Vec> inps;
  Vec gathered(sz(3 * C * 3));
  for (int r = 0; r < 3; r++) {
    inps.push_back(random_vector(sz(int64_t{Ns[r]} * C * HW), 101 + static_cast<uint32_t>(r), -1.0 + r, 2.0 + r));
    batchnorm2d_local_stats(cpu_ctx(), gathered.data() + sz(int64_t{r} * C * 3), inps[r].data(), Ns[r], C, HW);
  }
  float* empty = gathered.data() + sz((int64_t{1} * C + 77) * 3);  // rank 1, channel 77: no values
  empty[0] = empty[1] = empty[2] = 0.0f;
  for (int R : {1, 3}) {
    SCOPED_TRACE("R=" + std::to_string(R));
    Vec want_merged(sz(C) * 3), merged = nan_vector(want_merged.size());
    batchnorm2d_merge_stats(cpu_ctx(), want_merged.data(), gathered.data(), R, C);
    ASSERT_TRUE(emulate_schedules([&] { emu_bn_merge_stats(merged.data(), gathered.data(), R, C); },
                                  {emu_output("merged", merged)}));
    EXPECT_TRUE(bitwise_equal("merged count", column(merged, 3, 0), column(want_merged, 3, 0)));
    EXPECT_TRUE(all_close("merged mean", column(merged, 3, 1), column(want_merged, 3, 1), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("merged M2", column(merged, 3, 2), column(want_merged, 3, 2), kRtol, kAtolRel));

    const int N = Ns[0];
    const Vec gamma = random_vector(sz(C), 105, 0.5, 1.5), beta = random_vector(sz(C), 106);
    Vec want_out(inps[0].size()), want_mean(sz(C)), want_rstd(sz(C));
    batchnorm2d_forward_apply(cpu_ctx(), want_out.data(), want_mean.data(), want_rstd.data(), inps[0].data(),
                              gamma.data(), beta.data(), want_merged.data(), N, C, HW, kEps);
    Vec out = nan_vector(inps[0].size()), mean = nan_vector(sz(C)), rstd = nan_vector(sz(C));
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_forward_apply(out.data(), mean.data(), rstd.data(), inps[0].data(), gamma.data(), beta.data(),
                               want_merged.data(), N, C, HW, kEps);
        },
        {emu_output("apply out", out), emu_output("apply save_mean", mean), emu_output("apply save_rstd", rstd)}));
    EXPECT_TRUE(all_close("apply save_mean", mean, want_mean, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("apply save_rstd", rstd, want_rstd, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("apply out", out, want_out, kRtol, kAtolRel));

    Vec rm = random_vector(sz(C), 107), rv = random_vector(sz(C), 108, 0.5, 1.5);
    Vec want_rm = rm, want_rv = rv;
    batchnorm2d_update_running(cpu_ctx(), want_rm.data(), want_rv.data(), want_merged.data(), C, 0.1f);
    ASSERT_TRUE(emulate_schedules([&] { emu_bn_update_running(rm.data(), rv.data(), want_merged.data(), C, 0.1f); },
                                  {emu_output("running_mean", rm), emu_output("running_var", rv)}));
    EXPECT_TRUE(all_close("running_mean", rm, want_rm, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("running_var", rv, want_rv, kRtol, kAtolRel));
  }
}

// The CPU forward's save_mean / save_rstd feed both sides' backward (the same inputs on both sides).
struct BnSaved {
  Vec inp, gamma, mean, rstd, dout;
};
BnSaved bn_saved(const BnShape& s, uint32_t seed) {
  BnSaved b{random_vector(s.size(), seed, -2.0, 3.0), random_vector(sz(s.C), seed + 1, 0.5, 1.5), Vec(sz(s.C)),
            Vec(sz(s.C)), random_vector(s.size(), seed + 2)};
  const Vec beta = random_vector(sz(s.C), seed + 3);
  Vec out(s.size()), stats(3 * sz(s.C));
  batchnorm2d_forward_train(cpu_ctx(), out.data(), stats.data(), b.mean.data(), b.rstd.data(), b.inp.data(),
                            b.gamma.data(), beta.data(), s.N, s.C, s.HW, kEps);
  return b;
}

TEST(EmuResnet, BatchNormBackward) {
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(s.name());
    const BnSaved b = bn_saved(s, 61);
    const Vec dg0 = random_vector(sz(s.C), 65), db0 = random_vector(sz(s.C), 66);
    Vec want_dinp(s.size()), want_dg = dg0, want_db = db0;
    batchnorm2d_backward(cpu_ctx(), want_dinp.data(), want_dg.data(), want_db.data(), b.dout.data(), b.inp.data(),
                         b.mean.data(), b.rstd.data(), b.gamma.data(), s.N, s.C, s.HW);
    Vec dinp = nan_vector(s.size()), dg = dg0, db = db0;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_backward(dinp.data(), dg.data(), db.data(), b.dout.data(), b.inp.data(), b.mean.data(), b.rstd.data(),
                          b.gamma.data(), s.N, s.C, s.HW);
        },
        {emu_output("bn dinp", dinp), emu_output("bn dgamma", dg), emu_output("bn dbeta", db)}));
    EXPECT_TRUE(all_close("bn dinp", dinp, want_dinp, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("bn dgamma (+=)", dg, want_dg, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("bn dbeta (+=)", db, want_db, kRtol, kAtolRel));
  }
}

// SyncBN backward: local sums (assigned) + local dgamma/dbeta (+=), then dinp from "allreduced" sums and a global count
// larger than this rank's.
TEST(EmuResnet, BatchNormSyncBackward) {
  for (const BnShape& s : kBnShapes) {
    SCOPED_TRACE(s.name());
    const BnSaved b = bn_saved(s, 71);
    const Vec dg0 = random_vector(sz(s.C), 75), db0 = random_vector(sz(s.C), 76);
    Vec want_sums(2 * sz(s.C)), want_dg = dg0, want_db = db0;
    batchnorm2d_backward_local_sums(cpu_ctx(), want_sums.data(), want_dg.data(), want_db.data(), b.dout.data(),
                                    b.inp.data(), b.mean.data(), b.rstd.data(), s.N, s.C, s.HW);
    Vec sums = nan_vector(2 * sz(s.C)), dg = dg0, db = db0;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_backward_local_sums(sums.data(), dg.data(), db.data(), b.dout.data(), b.inp.data(), b.mean.data(),
                                     b.rstd.data(), s.N, s.C, s.HW);
        },
        {emu_output("local sums", sums), emu_output("local dgamma", dg), emu_output("local dbeta", db)}));
    EXPECT_TRUE(all_close("sum dout", column(sums, 2, 0), column(want_sums, 2, 0), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("sum dout*xhat", column(sums, 2, 1), column(want_sums, 2, 1), kRtol, kAtolRel));
    EXPECT_TRUE(all_close("local dgamma (+=)", dg, want_dg, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("local dbeta (+=)", db, want_db, kRtol, kAtolRel));

    const Vec global_sums = random_vector(2 * sz(s.C), 77, -5.0, 5.0);
    const int64_t global_count = 3 * static_cast<int64_t>(s.N) * s.HW;
    Vec want_dinp(s.size()), dinp = nan_vector(s.size());
    batchnorm2d_backward_apply(cpu_ctx(), want_dinp.data(), b.dout.data(), b.inp.data(), b.mean.data(), b.rstd.data(),
                               b.gamma.data(), global_sums.data(), global_count, s.N, s.C, s.HW);
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_bn_backward_apply(dinp.data(), b.dout.data(), b.inp.data(), b.mean.data(), b.rstd.data(), b.gamma.data(),
                                global_sums.data(), global_count, s.N, s.C, s.HW);
        },
        {emu_output("sync dinp", dinp)}));
    EXPECT_TRUE(all_close("sync dinp", dinp, want_dinp, kRtol, kAtolRel));
  }
}

// ---- MaxPool2d ---------------------------------------------------------------------------------------------------
struct PoolShape {
  int N, C, H, W, K, stride, pad;
  int OH() const { return (H + 2 * pad - K) / stride + 1; }
  int OW() const { return (W + 2 * pad - K) / stride + 1; }
  std::string name() const {
    std::ostringstream os;
    os << "N" << N << " C" << C << " H" << H << " W" << W << " K" << K << " s" << stride << " p" << pad;
    return os.str();
  }
};
// the ResNet stem's 3x3 stride 2 pad 1 on odd sizes, on 56x56 (28x28 out: more than a 256-thread plane block) and on
// 14x14 (7x7 out); 2x2 stride 2; 3x3 stride 1 pad 1 (windows overlapping 9-fold); 3x3 stride 2 unpadded (floor mode
// drops the last row/column); a 1x1 output from a 2x2 window on a 2x3 input (one image); stride 3 over 2x2 windows
// (inputs in no window: dinp 0) and a 1x1 window with stride 2
const PoolShape kPoolShapes[] = {{2, 3, 11, 13, 3, 2, 1}, {1, 2, 56, 56, 3, 2, 1}, {2, 5, 14, 14, 3, 2, 1},
                                 {2, 3, 8, 8, 2, 2, 0},   {1, 4, 9, 7, 3, 1, 1},   {3, 2, 10, 10, 3, 2, 0},
                                 {1, 3, 2, 3, 2, 2, 0},   {1, 2, 10, 11, 2, 3, 0}, {2, 2, 7, 9, 1, 2, 0}};

TEST(EmuResnet, MaxPoolIsBitwiseTheCpus) {
  for (const PoolShape& s : kPoolShapes) {
    for (int ties = 0; ties < 2; ties++) {
      SCOPED_TRACE(s.name() + (ties ? " (many ties)" : ""));
      const size_t n_in = sz(int64_t{s.N} * s.C * s.H * s.W), n_out = sz(int64_t{s.N} * s.C * s.OH() * s.OW());
      // small integers make equal maxima in a window common: the first in row-major order must win on both
      const Vec inp = ties ? test::cast_vector<float>(random_ints(n_in, 81, -3, 4)) : random_vector(n_in, 82);
      Vec want_out(n_out);
      std::vector<int32_t> want_idx(n_out);
      maxpool2d_forward(cpu_ctx(), want_out.data(), want_idx.data(), inp.data(), s.N, s.C, s.H, s.W, s.K, s.stride,
                        s.pad);
      Vec out = nan_vector(n_out);
      std::vector<int32_t> idx(n_out, -7);
      ASSERT_TRUE(emulate_schedules(
          [&] { emu_maxpool_forward(out.data(), idx.data(), inp.data(), s.N, s.C, s.H, s.W, s.K, s.stride, s.pad); },
          {emu_output("maxpool out", out), emu_output("maxpool idx", idx)}));
      EXPECT_TRUE(bitwise_equal("maxpool out", out, want_out));
      EXPECT_TRUE(bitwise_equal("maxpool argmax", idx, want_idx));

      const Vec dout = random_vector(n_out, 83);
      Vec want_dinp(n_in), dinp = nan_vector(n_in);
      maxpool2d_backward(cpu_ctx(), want_dinp.data(), dout.data(), want_idx.data(), s.N, s.C, s.H, s.W, s.K, s.stride,
                         s.pad);
      ASSERT_TRUE(emulate_schedules(
          [&] {
            emu_maxpool_backward(dinp.data(), dout.data(), want_idx.data(), s.N, s.C, s.H, s.W, s.K, s.stride, s.pad);
          },
          {emu_output("maxpool dinp", dinp)}));
      EXPECT_TRUE(bitwise_equal("maxpool dinp (assigned)", dinp, want_dinp));
    }
  }
}

// ---- global average pooling --------------------------------------------------------------------------------------
TEST(EmuResnet, GlobalAvgPool) {
  // 7x7 planes, 1x1 planes, 56x56 planes (a warp's lanes sum 98 values each; the backward's plane spans 13 x blocks),
  // 33 planes of 17 in one image, 360 planes (45 blocks of 8 warps)
  const BnShape shapes[] = {{3, 5, 49}, {2, 7, 1}, {1, 3, 3136}, {1, 33, 17}, {9, 40, 16}};
  for (const BnShape& s : shapes) {
    SCOPED_TRACE(s.name());
    const size_t planes = sz(int64_t{s.N} * s.C);
    const Vec inp = random_vector(s.size(), 91, -1.0, 2.0);
    Vec want_out(planes), out = nan_vector(planes);
    global_avgpool_forward(cpu_ctx(), want_out.data(), inp.data(), s.N, s.C, s.HW);
    ASSERT_TRUE(emulate_schedules([&] { emu_global_avgpool_forward(out.data(), inp.data(), s.N, s.C, s.HW); },
                                  {emu_output("avgpool out", out)}));
    EXPECT_TRUE(all_close("avgpool out", out, want_out, kRtol, kAtolRel));

    const Vec dout = random_vector(planes, 92);
    Vec want_dinp(s.size()), dinp = nan_vector(s.size());
    global_avgpool_backward(cpu_ctx(), want_dinp.data(), dout.data(), s.N, s.C, s.HW);
    ASSERT_TRUE(emulate_schedules([&] { emu_global_avgpool_backward(dinp.data(), dout.data(), s.N, s.C, s.HW); },
                                  {emu_output("avgpool dinp", dinp)}));
    EXPECT_TRUE(bitwise_equal("avgpool dinp (assigned)", dinp, want_dinp));
  }
}

// ---- grids smaller than the work -------------------------------------------------------------------------------------
// The production grids are capped (65535 blocks per dimension, more than the emulation can run), and the kernels'
// loops stride over the rest: at a deliberately small grid, every pointwise kernel and the avg-pool forward (one
// warp's lane-strided sum per plane: the same order at any grid) must give exactly the bits of the full grid.
template <typename T, typename Launch>
::testing::AssertionResult same_bits_on_a_small_grid(const std::string& what, const std::vector<T>& init,
                                                     const cu::LaunchShape& full, const cu::LaunchShape& small,
                                                     Launch launch) {
  std::vector<T> a = init, b = init;
  ::testing::AssertionResult r = emulate_schedules([&] { launch(a.data(), full); }, {emu_output(what, a)});
  if (r) r = emulate_schedules([&] { launch(b.data(), small); }, {emu_output(what, b)});
  if (r) r = bitwise_equal(what + " (small grid vs full grid)", b, a);
  return r;
}

TEST(EmuResnet, LoopsStrideOverASmallGrid) {
  const int N = 3, C = 5, HW = 37;
  const int64_t planes = int64_t{N} * C;
  const cu::LaunchShape full = cu::plane_shape(planes, HW);
  const cu::LaunchShape small{{1, 2, 1}, {32, 2, 1}, 0};  // 32 positions x 4 planes per sweep: both loops stride
  const Vec inp = random_vector(sz(planes * HW), 111), dout = random_vector(sz(planes * HW), 112);
  const Vec gamma = random_vector(sz(C), 113, 0.5, 1.5), beta = random_vector(sz(C), 114);
  const Vec mean = random_vector(sz(C), 115), rstd = random_vector(sz(C), 116, 0.5, 2.0);
  const Vec rv = random_vector(sz(C), 117, 0.2, 2.0), sums = random_vector(2 * sz(C), 118, -5.0, 5.0);
  const double count = 2.0 * N * HW;
  EXPECT_TRUE(same_bits_on_a_small_grid("conv bias", inp, full, small, [&](float* o, const cu::LaunchShape& sh) {
    EMU_LAUNCH((cu::plane_bias_kernel<false, float>), sh, o, gamma.data(), planes, C, int64_t{HW});
  }));
  EXPECT_TRUE(same_bits_on_a_small_grid("bn apply", nan_vector(inp.size()), full, small,
                                        [&](float* o, const cu::LaunchShape& sh) {
                                          EMU_LAUNCH((cu::bn_apply_kernel<1, float>), sh, o, inp.data(), mean.data(),
                                                     rstd.data(), gamma.data(), beta.data(), planes, C, HW);
                                        }));
  EXPECT_TRUE(same_bits_on_a_small_grid("bn eval", nan_vector(inp.size()), full, small,
                                        [&](float* o, const cu::LaunchShape& sh) {
                                          EMU_LAUNCH((cu::bn_eval_kernel<1, float>), sh, o, inp.data(), gamma.data(),
                                                     beta.data(), mean.data(), rv.data(), planes, C, HW, kEps);
                                        }));
  EXPECT_TRUE(same_bits_on_a_small_grid(
      "bn backward apply", nan_vector(inp.size()), full, small, [&](float* o, const cu::LaunchShape& sh) {
        EMU_LAUNCH((cu::bn_backward_apply_kernel<1, float>), sh, o, dout.data(), static_cast<const float*>(nullptr),
                   inp.data(), mean.data(), rstd.data(), gamma.data(), sums.data(), count, planes, C, HW);
      }));
  const Vec pooled = random_vector(sz(planes), 119);
  EXPECT_TRUE(same_bits_on_a_small_grid(
      "avgpool dinp", nan_vector(inp.size()), full, small, [&](float* o, const cu::LaunchShape& sh) {
        EMU_LAUNCH(cu::global_avgpool_backward_kernel, sh, o, pooled.data(), planes, HW);
      }));
  const cu::LaunchShape two_warps{{1, 1, 1}, {64, 1, 1}, 0};  // 2 planes per sweep
  EXPECT_TRUE(same_bits_on_a_small_grid("avgpool out", nan_vector(sz(planes)), cu::global_avgpool_forward_shape(planes),
                                        two_warps, [&](float* o, const cu::LaunchShape& sh) {
                                          EMU_LAUNCH(cu::global_avgpool_forward_kernel, sh, o, inp.data(), planes, HW);
                                        }));

  // max-pooling, 3x3 stride 2 pad 1 on 11x13 (6x7 out): values, indices and the gather
  const PoolShape p{N, C, 11, 13, 3, 2, 1};
  const int64_t OHW = int64_t{p.OH()} * p.OW(), IHW = int64_t{p.H} * p.W;
  const Vec x = random_vector(sz(planes * IHW), 120), dy = random_vector(sz(planes * OHW), 121);
  std::vector<int32_t> idx(sz(planes * OHW), -7);
  EXPECT_TRUE(same_bits_on_a_small_grid("maxpool out", nan_vector(idx.size()), cu::plane_shape(planes, OHW), small,
                                        [&](float* o, const cu::LaunchShape& sh) {
                                          EMU_LAUNCH(cu::maxpool_forward_kernel, sh, o, idx.data(), x.data(), planes,
                                                     p.H, p.W, p.OH(), p.OW(), p.K, p.stride, p.pad);
                                        }));
  const std::vector<int32_t> want_idx = idx;  // from the small grid (the last run)
  EXPECT_TRUE(same_bits_on_a_small_grid("maxpool idx", std::vector<int32_t>(idx.size(), -7),
                                        cu::plane_shape(planes, OHW), small,
                                        [&](int32_t* id, const cu::LaunchShape& sh) {
                                          Vec o(idx.size());
                                          EMU_LAUNCH(cu::maxpool_forward_kernel, sh, o.data(), id, x.data(), planes,
                                                     p.H, p.W, p.OH(), p.OW(), p.K, p.stride, p.pad);
                                        }));
  EXPECT_TRUE(same_bits_on_a_small_grid("maxpool dinp", nan_vector(x.size()), cu::plane_shape(planes, IHW), small,
                                        [&](float* o, const cu::LaunchShape& sh) {
                                          EMU_LAUNCH(cu::maxpool_backward_kernel, sh, o, dy.data(), want_idx.data(),
                                                     planes, p.H, p.W, p.OH(), p.OW(), p.K, p.stride, p.pad);
                                        }));
}

// ---- launch geometry beyond what the emulation can run ---------------------------------------------------------------
// The shapes the GPU gets at sizes too large to emulate (every thread a fiber) stay within the H100's limits: the
// plane launch caps its grid (the loops stride over the rest), one block per channel, the avg-pool grid capped.
TEST(EmuResnet, LaunchShapesAtLargeSizesAreValid) {
  using cu::kH100Limits;
  using cu::launch_problem;
  for (int64_t planes : {int64_t{1}, int64_t{7}, int64_t{1} << 20, int64_t{1} << 31})
    for (int64_t len : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{49}, int64_t{257}, int64_t{1} << 26}) {
      const cu::LaunchShape shape = cu::plane_shape(planes, len);
      EXPECT_EQ(launch_problem(shape, kH100Limits), "") << planes << " planes of " << len;
      EXPECT_EQ(shape.block.count(), cu::kPlaneThreads);
    }
  for (int C : {1, 2048, 1 << 20}) {
    EXPECT_EQ(launch_problem(cu::channel_reduce_shape(C), kH100Limits), "") << C;
    EXPECT_EQ(launch_problem(cu::per_channel_shape(C), kH100Limits), "") << C;
    EXPECT_GE(int64_t{cu::per_channel_shape(C).grid.x} * cu::kPerChannelThreads, C);
  }
  for (int64_t planes : {int64_t{1}, int64_t{1} << 20, int64_t{1} << 31})
    EXPECT_EQ(launch_problem(cu::global_avgpool_forward_shape(planes), kH100Limits), "") << planes;
}

// ---- 16-bit storage (bf16, fp16) ---------------------------------------------------------------------------------
// Each check is written once over the storage type A; the CPU reference is CpuStorage<A> (kernel_test_util.hpp: the
// CPU's bf16 ops, or for fp16, which the CPU does not store, its fp32 ops on the widened inputs with each stored output
// rounded once to fp16); the stored activations add one ulp of A (kStorageUlp: 2^-7 for bf16, 2^-10 for fp16) to the
// float tolerances. NaN / infinity fill the outputs before the launches (a value never written shows).

// conv2d's 16-bit pieces around cuDNN: the bias seed (forward: cuDNN then accumulates the convolution onto it), the
// add (the float path's kernel on 16-bit storage: one rounding), dbias of a 16-bit dout against the CPU's
// conv2d_backward, and the fp32 accumulation of cuDNN's 16-bit filter gradient (exact float additions).
template <typename A>
void check_conv_pieces() {
  using S = EmuStorage<A>;
  using R = CpuStorage<A>;
  using BVec = std::vector<A>;
  const int N = 2, OC = 3, OHW = 37;
  const int64_t planes = int64_t{N} * OC, len = OHW;
  const BVec bias = random_storage<A>(sz(OC), 500), conv = random_storage<A>(sz(planes * len), 501);
  BVec seeded(sz(planes * len), from_f32<A>(INFINITY)), added = conv;
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH((cu::plane_bias_kernel<true, S>), cu::plane_shape(planes, len), emu_ptr(seeded), emu_ptr(bias),
                   planes, OC, len);
        EMU_LAUNCH((cu::plane_bias_kernel<false, S>), cu::plane_shape(planes, len), emu_ptr(added), emu_ptr(bias),
                   planes, OC, len);
      },
      {emu_output("seeded", seeded), emu_output("added", added)}));
  BVec want_seed(seeded.size()), want_add(added.size());
  for (size_t i = 0; i < seeded.size(); i++) {
    const A b = bias[sz((static_cast<int64_t>(i) / len) % OC)];
    want_seed[i] = b;
    want_add[i] = from_f32<A>(to_f32(conv[i]) + to_f32(b));
  }
  EXPECT_TRUE(bitwise_equal("bias seed", seeded, want_seed));
  EXPECT_TRUE(bitwise_equal("bias add", added, want_add));

  // dbias of a 16-bit dout, against the CPU's conv2d_backward (3x3, stride 1, pad 1 on 5x7 inputs: OHW 35)
  const int C = 2, H = 5, W = 7, K = 3;
  const BVec inp = random_storage<A>(sz(int64_t{N} * C * H * W), 502),
             w = random_storage<A>(sz(int64_t{OC} * C * K * K), 503);
  const BVec dout = random_storage<A>(sz(int64_t{N} * OC * H * W), 504);
  const Vec db0 = random_vector(sz(OC), 505);
  Vec dbias = db0, want_db = db0, dw(sz(int64_t{OC} * C * K * K), 0.0f);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH(cu::channel_sum_accumulate_kernel, cu::channel_reduce_shape(OC), dbias.data(), emu_ptr(dout), N, OC,
                   H * W);
      },
      {emu_output("dbias", dbias)}));
  const DType cpu_storage = std::is_same_v<R, float> ? DType::F32 : DType::BF16;
  const int64_t wsf = conv2d_workspace_floats(cpu_ctx(), N, C, H, W, OC, K, K, 1, 1, cpu_storage);
  Vec ws(sz(std::max<int64_t>(wsf, 1)));
  const auto rdout = cpu_in(dout), rinp = cpu_in(inp), rw = cpu_in(w);
  conv2d_backward(cpu_ctx(), static_cast<R*>(nullptr), dw.data(), want_db.data(), rdout.data(), rinp.data(), rw.data(),
                  ws.data(), wsf, N, C, H, W, OC, K, K, 1, 1);
  EXPECT_TRUE(all_close("conv dbias (+=)", dbias, want_db, kRtol, kAtolRel));

  // dweight += the 16-bit filter gradient, packs and tail (n = 1031), aligned and not
  for (int off : {0, 1}) {
    SCOPED_TRACE("off " + std::to_string(off));
    const int64_t n = 1031;
    const BVec grad = random_storage<A>(sz(n + off), 506);
    const Vec acc0 = random_vector(sz(n + off), 507);
    Vec acc = acc0;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          const int64_t packs = cu::accumulate_packs(n, acc.data() + off, emu_ptr(grad) + off);
          EXPECT_EQ(packs, off == 0 ? n / 4 : 0);
          EMU_LAUNCH(cu::accumulate_float_kernel, cu::accumulate_shape(n, packs), acc.data() + off, emu_ptr(grad) + off,
                     n, packs);
        },
        {emu_output("dweight", acc)}));
    Vec want = acc0;
    for (int64_t i = 0; i < n; i++) want[sz(i + off)] += to_f32(grad[sz(i + off)]);
    EXPECT_TRUE(bitwise_equal("dweight += 16-bit filter gradient", acc, want));
  }
}
// The pointwise BatchNorm passes in 16-byte packs give the bits of the one-value-at-a-time kernels (the same formula
// per value), at the production grid and at a grid small enough that both loops stride; and the launch helpers the
// backend uses pick the packs for such planes (HW a multiple of the pack, aligned storage).
template <typename A>
void check_bn_packs_match_scalar() {
  using S = EmuStorage<A>;
  using BVec = std::vector<A>;
  constexpr int P = cu::kPack<S>;
  const int N = 2, C = 3, HW = 3 * P;  // three packs per plane
  const int64_t planes = int64_t{N} * C;
  const size_t n = sz(planes * HW);
  const BVec inp = random_storage<A>(n, 531, -1.0, 3.0), dout = random_storage<A>(n, 532);
  const BVec gamma = random_storage<A>(sz(C), 533, 0.5, 1.5), beta = random_storage<A>(sz(C), 534);
  const Vec mean = random_vector(sz(C), 535), rstd = random_vector(sz(C), 536, 0.5, 2.0);
  const Vec rv = random_vector(sz(C), 537, 0.2, 2.0), sums = random_vector(2 * sz(C), 538, -5.0, 5.0);
  const BVec nan_out(n, from_f32<A>(NAN));
  ASSERT_EQ(cu::pack_width<S>(HW, {emu_ptr(inp), emu_ptr(dout), emu_ptr(nan_out)}), P);
  const cu::LaunchShape small{{1, 1, 1}, {32, 2, 1}, 0};  // 32 packs x 2 planes per sweep: both loops stride
  const auto run = [&](const char* what, auto launch_packed, auto launch_scalar) {
    SCOPED_TRACE(what);
    BVec scalar = nan_out, packed = nan_out, packed_small = nan_out;
    ASSERT_TRUE(emulate_schedules([&] { launch_scalar(emu_ptr(scalar), cu::plane_shape(planes, HW)); },
                                  {emu_output(what, scalar)}));
    ASSERT_TRUE(emulate_schedules([&] { launch_packed(emu_ptr(packed), cu::plane_shape(planes, HW / P)); },
                                  {emu_output(what, packed)}));
    ASSERT_TRUE(
        emulate_schedules([&] { launch_packed(emu_ptr(packed_small), small); }, {emu_output(what, packed_small)}));
    EXPECT_TRUE(bitwise_equal(std::string(what) + " (packs vs one value at a time)", packed, scalar));
    EXPECT_TRUE(bitwise_equal(std::string(what) + " (packs, small grid)", packed_small, scalar));
  };
  const auto apply = [&](auto p) {
    return [&, p](S* o, const cu::LaunchShape& sh) {
      EMU_LAUNCH((cu::bn_apply_kernel<decltype(p)::value, S>), sh, o, emu_ptr(inp), mean.data(), rstd.data(),
                 emu_ptr(gamma), emu_ptr(beta), planes, C, HW);
    };
  };
  const auto eval = [&](auto p) {
    return [&, p](S* o, const cu::LaunchShape& sh) {
      EMU_LAUNCH((cu::bn_eval_kernel<decltype(p)::value, S>), sh, o, emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta),
                 mean.data(), rv.data(), planes, C, HW, kEps);
    };
  };
  const auto dinp = [&](auto p) {
    return [&, p](S* o, const cu::LaunchShape& sh) {
      EMU_LAUNCH((cu::bn_backward_apply_kernel<decltype(p)::value, S>), sh, o, emu_ptr(dout),
                 static_cast<const S*>(nullptr), emu_ptr(inp), mean.data(), rstd.data(), emu_ptr(gamma), sums.data(),
                 2.0 * N * HW, planes, C, HW);
    };
  };
  using Packed = std::integral_constant<int, P>;
  using Scalar = std::integral_constant<int, 1>;
  run("bn apply", apply(Packed{}), apply(Scalar{}));
  run("bn eval", eval(Packed{}), eval(Scalar{}));
  run("bn dinp", dinp(Packed{}), dinp(Scalar{}));
}
TEST(EmuResnet, BatchNormPacksMatchOneValueAtATime) { check_bn_packs_match_scalar<float>(); }
TEST(EmuResnet, Bf16BatchNormPacksMatchOneValueAtATime) { check_bn_packs_match_scalar<bf16>(); }

TEST(EmuResnet, Bf16ConvPieces) { check_conv_pieces<bf16>(); }
TEST(EmuResnet, Fp16ConvPieces) { check_conv_pieces<fp16>(); }

// BatchNorm2d in 16-bit storage, every piece (single process, SyncBN forward and backward with R = 1, eval) against
// the CPU's.
template <typename A>
void check_batchnorm_matches_cpu() {
  using R = CpuStorage<A>;
  using BVec = std::vector<A>;
  const A nan16 = from_f32<A>(NAN);
  // 37: one value at a time; 64: whole 16-byte packs of 16-bit values (8 per pack) in the pointwise passes
  for (const BnShape& s : {BnShape{3, 5, 37}, BnShape{2, 3, 64}}) {
    SCOPED_TRACE(s.name());
    const int N = s.N, C = s.C, HW = s.HW;
    const BVec inp = random_storage<A>(s.size(), 510, -1.0, 3.0), dout = random_storage<A>(s.size(), 511);
    const BVec gamma = random_storage<A>(sz(C), 512, 0.5, 1.5), beta = random_storage<A>(sz(C), 513);
    const Vec rm = random_vector(sz(C), 514), rv = random_vector(sz(C), 515, 0.2, 2.0);
    const Vec dg0 = random_vector(sz(C), 516), db0 = random_vector(sz(C), 517);
    BVec out(s.size(), nan16), eval(s.size(), nan16), dinp(s.size(), nan16);
    BVec apply_out(s.size(), nan16), apply_dinp(s.size(), nan16);
    Vec stats = nan_vector(3 * sz(C)), mean = nan_vector(sz(C)), rstd = nan_vector(sz(C));
    Vec lstats = nan_vector(3 * sz(C)), amean = nan_vector(sz(C)), arstd = nan_vector(sz(C)),
        sums = nan_vector(2 * sz(C));
    Vec dg = dg0, db = db0, ldg = dg0, ldb = db0;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          // single process: forward_train, backward; eval
          emu_bn_stats(stats.data(), mean.data(), rstd.data(), emu_ptr(inp), N, C, HW, kEps);
          emu_bn_apply(emu_ptr(out), emu_ptr(inp), mean.data(), rstd.data(), emu_ptr(gamma), emu_ptr(beta), N, C, HW);
          std::vector<float> own_sums(2 * sz(C), std::numeric_limits<float>::quiet_NaN());
          emu_bn_backward_local_sums(own_sums.data(), dg.data(), db.data(), emu_ptr(dout), emu_ptr(inp), mean.data(),
                                     rstd.data(), N, C, HW);
          emu_bn_dinp(emu_ptr(dinp), emu_ptr(dout), emu_ptr(inp), mean.data(), rstd.data(), emu_ptr(gamma),
                      own_sums.data(), int64_t{N} * HW, N, C, HW);
          emu_bn_eval(emu_ptr(eval), emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta), rm.data(), rv.data(), N, C, HW, kEps);
          // SyncBN at R = 1: local stats (= the global ones), apply, local sums, apply backward
          emu_bn_stats(lstats.data(), static_cast<float*>(nullptr), static_cast<float*>(nullptr), emu_ptr(inp), N, C,
                       HW, 0.0f);
          EMU_LAUNCH(cu::bn_mean_rstd_kernel, cu::per_channel_shape(C), amean.data(), arstd.data(), lstats.data(), C,
                     kEps);
          emu_bn_apply(emu_ptr(apply_out), emu_ptr(inp), amean.data(), arstd.data(), emu_ptr(gamma), emu_ptr(beta), N,
                       C, HW);
          emu_bn_backward_local_sums(sums.data(), ldg.data(), ldb.data(), emu_ptr(dout), emu_ptr(inp), amean.data(),
                                     arstd.data(), N, C, HW);
          emu_bn_dinp(emu_ptr(apply_dinp), emu_ptr(dout), emu_ptr(inp), amean.data(), arstd.data(), emu_ptr(gamma),
                      sums.data(), int64_t{N} * HW, N, C, HW);
        },
        {emu_output("out", out), emu_output("eval", eval), emu_output("dinp", dinp), emu_output("stats", stats),
         emu_output("mean", mean), emu_output("rstd", rstd), emu_output("dgamma", dg), emu_output("dbeta", db),
         emu_output("sync out", apply_out), emu_output("sync dinp", apply_dinp), emu_output("sums", sums),
         emu_output("local dgamma", ldg), emu_output("local dbeta", ldb)}));
    std::vector<R> w_out(s.size()), w_eval(s.size()), w_dinp(s.size()), w_aout(s.size()), w_adinp(s.size());
    const auto rinp = cpu_in(inp), rdout = cpu_in(dout), rgamma = cpu_in(gamma), rbeta = cpu_in(beta);
    Vec w_stats(3 * sz(C)), w_mean(sz(C)), w_rstd(sz(C)), w_lstats(3 * sz(C)), w_amean(sz(C)), w_arstd(sz(C));
    Vec w_sums(2 * sz(C)), w_dg = dg0, w_db = db0, w_ldg = dg0, w_ldb = db0;
    batchnorm2d_forward_train(cpu_ctx(), w_out.data(), w_stats.data(), w_mean.data(), w_rstd.data(), rinp.data(),
                              rgamma.data(), rbeta.data(), N, C, HW, kEps);
    batchnorm2d_backward(cpu_ctx(), w_dinp.data(), w_dg.data(), w_db.data(), rdout.data(), rinp.data(), w_mean.data(),
                         w_rstd.data(), rgamma.data(), N, C, HW);
    batchnorm2d_forward_eval(cpu_ctx(), w_eval.data(), rinp.data(), rgamma.data(), rbeta.data(), rm.data(), rv.data(),
                             N, C, HW, kEps);
    batchnorm2d_local_stats(cpu_ctx(), w_lstats.data(), rinp.data(), N, C, HW);
    batchnorm2d_forward_apply(cpu_ctx(), w_aout.data(), w_amean.data(), w_arstd.data(), rinp.data(), rgamma.data(),
                              rbeta.data(), w_lstats.data(), N, C, HW, kEps);
    batchnorm2d_backward_local_sums(cpu_ctx(), w_sums.data(), w_ldg.data(), w_ldb.data(), rdout.data(), rinp.data(),
                                    w_amean.data(), w_arstd.data(), N, C, HW);
    batchnorm2d_backward_apply(cpu_ctx(), w_adinp.data(), rdout.data(), rinp.data(), w_amean.data(), w_arstd.data(),
                               rgamma.data(), w_sums.data(), int64_t{N} * HW, N, C, HW);
    EXPECT_TRUE(all_close("stats", stats, w_stats, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("local stats", lstats, w_lstats, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("mean", mean, w_mean, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("rstd", rstd, w_rstd, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("dgamma", dg, w_dg, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("dbeta", db, w_db, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("sums", sums, w_sums, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("local dgamma", ldg, w_ldg, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("local dbeta", ldb, w_ldb, kRtol, kAtolRel));
    constexpr double kUlp = kStorageUlp<A>;
    EXPECT_TRUE(all_close("out", out, cpu_out<A>(w_out), kRtol + kUlp, kAtolRel));
    EXPECT_TRUE(all_close("eval", eval, cpu_out<A>(w_eval), kRtol + kUlp, kAtolRel));
    EXPECT_TRUE(all_close("dinp", dinp, cpu_out<A>(w_dinp), kRtol + kUlp, kAtolRel));
    EXPECT_TRUE(all_close("sync out", apply_out, cpu_out<A>(w_aout), kRtol + kUlp, kAtolRel));
    EXPECT_TRUE(all_close("sync dinp", apply_dinp, cpu_out<A>(w_adinp), kRtol + kUlp, kAtolRel));
  }
}
TEST(EmuResnet, Bf16BatchNormMatchesCpu) { check_batchnorm_matches_cpu<bf16>(); }
TEST(EmuResnet, Fp16BatchNormMatchesCpu) { check_batchnorm_matches_cpu<fp16>(); }

// Pooling in 16-bit storage: max-pooling selects and gathers the same float values as the CPU (bitwise, indices
// included), the avg-pool backward is one division rounded once (bitwise), the avg-pool forward a double sum rounded
// once.
template <typename A>
void check_pooling_matches_cpu() {
  using R = CpuStorage<A>;
  using BVec = std::vector<A>;
  const A nan16 = from_f32<A>(NAN);
  const int N = 2, C = 3, H = 9, W = 7, K = 3, stride = 2, pad = 1;
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t planes = int64_t{N} * C;
  // few distinct values: many ties, the first maximum in window order must win on both sides
  BVec inp(sz(planes * H * W));
  const auto ints = random_ints(inp.size(), 520, -3, 4);
  for (size_t i = 0; i < inp.size(); i++) inp[i] = from_f32<A>(0.25f * static_cast<float>(ints[i]));
  const BVec dout = random_storage<A>(sz(planes * OH * OW), 521), dpool = random_storage<A>(sz(planes), 522);
  BVec out(sz(planes * OH * OW), nan16), dinp(inp.size(), nan16), avg(sz(planes), nan16);
  BVec davg(inp.size(), nan16);
  std::vector<int32_t> idx(out.size(), -7);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH(cu::maxpool_forward_kernel, cu::plane_shape(planes, int64_t{OH} * OW), emu_ptr(out), idx.data(),
                   emu_ptr(inp), planes, H, W, OH, OW, K, stride, pad);
        EMU_LAUNCH(cu::maxpool_backward_kernel, cu::plane_shape(planes, int64_t{H} * W), emu_ptr(dinp), emu_ptr(dout),
                   idx.data(), planes, H, W, OH, OW, K, stride, pad);
        EMU_LAUNCH(cu::global_avgpool_forward_kernel, cu::global_avgpool_forward_shape(planes), emu_ptr(avg),
                   emu_ptr(inp), planes, H * W);
        EMU_LAUNCH(cu::global_avgpool_backward_kernel, cu::plane_shape(planes, int64_t{H} * W), emu_ptr(davg),
                   emu_ptr(dpool), planes, H * W);
      },
      {emu_output("out", out), emu_output("idx", idx), emu_output("dinp", dinp), emu_output("avg", avg),
       emu_output("davg", davg)}));
  std::vector<R> w_out(out.size()), w_dinp(dinp.size()), w_avg(avg.size()), w_davg(davg.size());
  std::vector<int32_t> w_idx(idx.size());
  const auto rinp = cpu_in(inp), rdout = cpu_in(dout), rdpool = cpu_in(dpool);
  maxpool2d_forward(cpu_ctx(), w_out.data(), w_idx.data(), rinp.data(), N, C, H, W, K, stride, pad);
  maxpool2d_backward(cpu_ctx(), w_dinp.data(), rdout.data(), w_idx.data(), N, C, H, W, K, stride, pad);
  global_avgpool_forward(cpu_ctx(), w_avg.data(), rinp.data(), N, C, H * W);
  global_avgpool_backward(cpu_ctx(), w_davg.data(), rdpool.data(), N, C, H * W);
  EXPECT_TRUE(bitwise_equal("maxpool out", out, cpu_out<A>(w_out)));
  EXPECT_TRUE(bitwise_equal("maxpool idx", idx, w_idx));
  EXPECT_TRUE(bitwise_equal("maxpool dinp", dinp, cpu_out<A>(w_dinp)));
  EXPECT_TRUE(all_close("avgpool out", avg, cpu_out<A>(w_avg), kRtol + kStorageUlp<A>, kAtolRel));
  EXPECT_TRUE(bitwise_equal("avgpool dinp", davg, cpu_out<A>(w_davg)));
}
TEST(EmuResnet, Bf16PoolingMatchesCpu) { check_pooling_matches_cpu<bf16>(); }
TEST(EmuResnet, Fp16PoolingMatchesCpu) { check_pooling_matches_cpu<fp16>(); }

}  // namespace
}  // namespace hpct::kernels
