// The CUDA backend's channels-last ResNet kernels (lib/kernels/cuda/cuda_resnet_nhwc_kernels.cuh) and the BatchNorm
// kernels' fused ReLU (kRelu, both layouts) on the host emulation (cuda_emu.hpp), at the launch geometry cuda_resnet.cu
// uses and in the order its ops launch them (the emu_* functions below mirror them one for one), under the three
// schedules, against the CPU backend's channels-last ops (cpu/cpu_conv_nhwc.cpp, through kernels.hpp with
// ExecContext::channels_last). Tolerances as test_emu_resnet.cpp's (its header says why): double sums rounded once to
// float within 1e-5, 16-bit outputs within that plus one ulp of the storage type, selections and exact copies bitwise.
// Beyond the CPU: each fused ReLU gives the bits of the unfused kernels followed by the ReLU (forward) or preceded by
// ReLU's mask (backward), the masks computed on the host as relu_forward / relu_backward compute them.
//
// Shapes: C below one 32-channel tile (5), across two tiles with a partial one (40), a multiple of the 16-byte pack
// (16: 4 floats or 8 bf16 a pack; 5 and 40 in bf16 run value by value where 40 % 8 == 0 packs too), position counts
// below and above a group of 1024 (several groups, the last partial), one position per image (HW = 1); pooling with
// padding, stride 2 and ties; the filter reorder at 3x3 and 7x7 with C = 3.
#include "cuda_emu.hpp"  // first: the CUDA surface the kernel header compiles against
#include "kernels/cuda/cuda_resnet_nhwc_kernels.cuh"
//
#include <gtest/gtest.h>

#include <array>
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
using Vec = std::vector<float>;

constexpr double kRtol = 1e-5, kAtolRel = 1e-6;
constexpr float kEps = 1e-5f;

Vec nan_vector(size_t n) { return Vec(n, NAN); }

const ExecContext& nhwc_cpu() {
  static const ExecContext ctx = [] {
    ExecContext c{Device::CPU, nullptr};
    c.channels_last = true;
    return c;
  }();
  return ctx;
}

template <typename A>
double tolerance() {
  if constexpr (std::is_same_v<A, float>) return kRtol;
  else
    return kRtol + kStorageUlp<A>;
}

// ---- the launch sequences of cuda_resnet.cu's channels-last ops -----------------------------------------------------
template <typename S>
void emu_nhwc_stats(float* stats, float* save_mean, float* save_rstd, const S* inp, int N, int C, int HW, float eps) {
  const cu::BnGroupsLaunch l = cu::bn_nhwc_groups_launch(N, C, HW, kCudaReducePartialsBytes, 3);
  std::vector<double> partials(static_cast<size_t>(3 * C * l.groups), std::numeric_limits<double>::quiet_NaN());
  EMU_LAUNCH(cu::bn_nhwc_stats_partial_kernel, l.partial, partials.data(), inp, C, int64_t{N} * HW, l.per_group);
  EMU_LAUNCH(cu::bn_stats_finish_kernel, l.finish, stats, save_mean, save_rstd, partials.data(), C,
             static_cast<int>(l.groups), eps);
}
template <bool kRelu, typename S>
void emu_nhwc_apply(S* out, const S* inp, const float* mean, const float* rstd, const S* gamma, const S* beta, int N,
                    int C, int HW) {
  cu::with_pack<S>(cu::nhwc_pack_width<S>(C, {out, inp}), [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    const int64_t packs = int64_t{N} * HW * C / P;
    EMU_LAUNCH((cu::bn_nhwc_apply_kernel<P, S, kRelu>), cu::nhwc_pointwise_shape(packs), out, inp, mean, rstd, gamma,
               beta, packs, C);
  });
}
template <bool kRelu, typename S>
void emu_nhwc_eval(S* out, const S* inp, const S* gamma, const S* beta, const float* rm, const float* rv, int N, int C,
                   int HW) {
  cu::with_pack<S>(cu::nhwc_pack_width<S>(C, {out, inp}), [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    const int64_t packs = int64_t{N} * HW * C / P;
    EMU_LAUNCH((cu::bn_nhwc_eval_kernel<P, S, kRelu>), cu::nhwc_pointwise_shape(packs), out, inp, gamma, beta, rm, rv,
               packs, C, kEps);
  });
}
// the gradient sums' two stages (relu_out null: no mask)
template <bool kRelu, typename S>
void emu_nhwc_grad_sums(float* sums, float* dgamma, float* dbeta, const S* dout, const S* relu_out, const S* inp,
                        const float* mean, const float* rstd, int N, int C, int HW) {
  const cu::BnGroupsLaunch l = cu::bn_nhwc_groups_launch(N, C, HW, kCudaReducePartialsBytes, 2);
  std::vector<double> partials(static_cast<size_t>(2 * C * l.groups), std::numeric_limits<double>::quiet_NaN());
  EMU_LAUNCH((cu::bn_nhwc_grad_partial_kernel<S, kRelu>), l.partial, partials.data(), dout, relu_out, inp, mean, rstd,
             C, int64_t{N} * HW, l.per_group);
  EMU_LAUNCH(cu::bn_grad_finish_kernel, l.finish, sums, dgamma, dbeta, partials.data(), C, static_cast<int>(l.groups));
}
template <bool kRelu, typename S>
void emu_nhwc_dinp(S* dinp, const S* dout, const S* relu_out, const S* inp, const float* mean, const float* rstd,
                   const S* gamma, const float* sums, int64_t count, int N, int C, int HW) {
  cu::with_pack<S>(cu::nhwc_pack_width<S>(C, {dinp, dout, relu_out, inp}), [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    const int64_t packs = int64_t{N} * HW * C / P;
    EMU_LAUNCH((cu::bn_nhwc_backward_apply_kernel<P, S, kRelu>), cu::nhwc_pointwise_shape(packs), dinp, dout, relu_out,
               inp, mean, rstd, gamma, sums, static_cast<double>(count), packs, C);
  });
}

// relu_forward_kernel's and relu_backward_kernel's values on the host (the storage's own rounding: exact here).
template <typename A>
std::vector<A> relu_of(const std::vector<A>& v) {
  std::vector<A> r(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    const float f = test::value_of(v[i]);
    r[i] = test::to_storage_vector<A>({f > 0.0f ? f : 0.0f})[0];
  }
  return r;
}
template <typename A>
std::vector<A> masked(const std::vector<A>& dout, const std::vector<A>& relu_out) {
  std::vector<A> r(dout.size());
  for (size_t i = 0; i < dout.size(); i++)
    r[i] = test::to_storage_vector<A>(
        {test::value_of(relu_out[i]) > 0.0f ? static_cast<float>(test::value_of(dout[i])) : 0.0f})[0];
  return r;
}

struct Shape {
  int N, C, HW;
  size_t size() const { return sz(int64_t{N} * C * HW); }
  std::string name() const {
    std::ostringstream os;
    os << "N" << N << " C" << C << " HW" << HW;
    return os.str();
  }
};

// Every BatchNorm piece channels-last: the single-process forward (plain and with the ReLU), the backward (plain and
// through the ReLU), evaluation (both), and SyncBN's local statistics, apply and gradient pieces at R = 1, against the
// CPU's channels-last ops; the fused ReLU against the unfused kernels bit for bit.
template <typename A>
void check_nhwc_batchnorm() {
  using S = EmuStorage<A>;
  using R = CpuStorage<A>;
  using AVec = std::vector<A>;
  const A nanA = test::to_storage_vector<A>({NAN})[0];
  for (const Shape& s : {Shape{3, 5, 37}, Shape{2, 40, 9}, Shape{2, 16, 64}, Shape{2, 5, 1100}, Shape{7, 16, 1}}) {
    SCOPED_TRACE(s.name());
    const int N = s.N, C = s.C, HW = s.HW;
    const AVec inp = random_storage<A>(s.size(), 610, -1.0, 3.0), dout = random_storage<A>(s.size(), 611);
    const AVec gamma = random_storage<A>(sz(C), 612, 0.5, 1.5), beta = random_storage<A>(sz(C), 613);
    const Vec rm = random_vector(sz(C), 614), rv = random_vector(sz(C), 615, 0.2, 2.0);
    const Vec dg0 = random_vector(sz(C), 616), db0 = random_vector(sz(C), 617);
    AVec out(s.size(), nanA), rout(s.size(), nanA), eval(s.size(), nanA), reval(s.size(), nanA);
    AVec dinp(s.size(), nanA), rdinp(s.size(), nanA), mdinp(s.size(), nanA);
    Vec stats = nan_vector(3 * sz(C)), mean = nan_vector(sz(C)), rstd = nan_vector(sz(C));
    Vec lstats = nan_vector(3 * sz(C)), sums = nan_vector(2 * sz(C)), rsums = nan_vector(2 * sz(C)),
        msums = nan_vector(2 * sz(C));
    Vec dg = dg0, db = db0, rdg = dg0, rdb = db0, mdg = dg0, mdb = db0;
    // the ReLU's output the fused backward masks with, and dout masked by it on the host (the unfused reference)
    AVec relu_out;
    AVec dout_masked;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          emu_nhwc_stats(stats.data(), mean.data(), rstd.data(), emu_ptr(inp), N, C, HW, kEps);
          emu_nhwc_apply<false>(emu_ptr(out), emu_ptr(inp), mean.data(), rstd.data(), emu_ptr(gamma), emu_ptr(beta), N,
                                C, HW);
          emu_nhwc_apply<true>(emu_ptr(rout), emu_ptr(inp), mean.data(), rstd.data(), emu_ptr(gamma), emu_ptr(beta), N,
                               C, HW);
          emu_nhwc_eval<false>(emu_ptr(eval), emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta), rm.data(), rv.data(), N, C,
                               HW);
          emu_nhwc_eval<true>(emu_ptr(reval), emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta), rm.data(), rv.data(), N, C,
                              HW);
          emu_nhwc_stats(lstats.data(), static_cast<float*>(nullptr), static_cast<float*>(nullptr), emu_ptr(inp), N, C,
                         HW, 0.0f);
          // backward, plain
          emu_nhwc_grad_sums<false>(sums.data(), dg.data(), db.data(), emu_ptr(dout), static_cast<const S*>(nullptr),
                                    emu_ptr(inp), mean.data(), rstd.data(), N, C, HW);
          emu_nhwc_dinp<false>(emu_ptr(dinp), emu_ptr(dout), static_cast<const S*>(nullptr), emu_ptr(inp), mean.data(),
                               rstd.data(), emu_ptr(gamma), sums.data(), int64_t{N} * HW, N, C, HW);
          // backward through the ReLU: fused, and unfused on the host-masked dout
          relu_out = rout;
          dout_masked = masked(dout, relu_out);
          emu_nhwc_grad_sums<true>(rsums.data(), rdg.data(), rdb.data(), emu_ptr(dout), emu_ptr(relu_out), emu_ptr(inp),
                                   mean.data(), rstd.data(), N, C, HW);
          emu_nhwc_dinp<true>(emu_ptr(rdinp), emu_ptr(dout), emu_ptr(relu_out), emu_ptr(inp), mean.data(), rstd.data(),
                              emu_ptr(gamma), rsums.data(), int64_t{N} * HW, N, C, HW);
          emu_nhwc_grad_sums<false>(msums.data(), mdg.data(), mdb.data(), emu_ptr(dout_masked),
                                    static_cast<const S*>(nullptr), emu_ptr(inp), mean.data(), rstd.data(), N, C, HW);
          emu_nhwc_dinp<false>(emu_ptr(mdinp), emu_ptr(dout_masked), static_cast<const S*>(nullptr), emu_ptr(inp),
                               mean.data(), rstd.data(), emu_ptr(gamma), msums.data(), int64_t{N} * HW, N, C, HW);
        },
        {emu_output("out", out),           emu_output("relu out", rout),      emu_output("eval", eval),
         emu_output("relu eval", reval),   emu_output("stats", stats),        emu_output("mean", mean),
         emu_output("rstd", rstd),         emu_output("local stats", lstats), emu_output("sums", sums),
         emu_output("dinp", dinp),         emu_output("dgamma", dg),          emu_output("dbeta", db),
         emu_output("relu sums", rsums),   emu_output("relu dinp", rdinp),    emu_output("relu dgamma", rdg),
         emu_output("relu dbeta", rdb),    emu_output("masked sums", msums),  emu_output("masked dinp", mdinp),
         emu_output("masked dgamma", mdg), emu_output("masked dbeta", mdb)}));
    // the fused ReLU is the unfused kernels' bits
    EXPECT_TRUE(bitwise_equal("relu out", rout, relu_of(out)));
    EXPECT_TRUE(bitwise_equal("relu eval", reval, relu_of(eval)));
    EXPECT_TRUE(bitwise_equal("relu sums", rsums, msums));
    EXPECT_TRUE(bitwise_equal("relu dgamma", rdg, mdg));
    EXPECT_TRUE(bitwise_equal("relu dbeta", rdb, mdb));
    EXPECT_TRUE(bitwise_equal("relu dinp", rdinp, mdinp));
    // against the CPU's channels-last ops
    const ExecContext& cpu = nhwc_cpu();
    const auto xin = cpu_in(inp), xdout = cpu_in(dout), xg = cpu_in(gamma), xb = cpu_in(beta);
    std::vector<R> w_out(s.size()), w_eval(s.size()), w_dinp(s.size()), w_rout(s.size()), w_rdinp(s.size());
    std::vector<R> w_reval(s.size());
    Vec w_stats(3 * sz(C)), w_mean(sz(C)), w_rstd(sz(C)), w_lstats(3 * sz(C)), w_dg = dg0, w_db = db0;
    Vec w_rstats(3 * sz(C)), w_rmean(sz(C)), w_rrstd(sz(C)), w_rdg = dg0, w_rdb = db0;
    batchnorm2d_forward_train(cpu, w_out.data(), w_stats.data(), w_mean.data(), w_rstd.data(), xin.data(), xg.data(),
                              xb.data(), N, C, HW, kEps);
    batchnorm2d_backward(cpu, w_dinp.data(), w_dg.data(), w_db.data(), xdout.data(), xin.data(), w_mean.data(),
                         w_rstd.data(), xg.data(), N, C, HW);
    batchnorm2d_forward_eval(cpu, w_eval.data(), xin.data(), xg.data(), xb.data(), rm.data(), rv.data(), N, C, HW,
                             kEps);
    batchnorm2d_relu_forward_eval(cpu, w_reval.data(), xin.data(), xg.data(), xb.data(), rm.data(), rv.data(), N, C, HW,
                                  kEps);
    batchnorm2d_local_stats(cpu, w_lstats.data(), xin.data(), N, C, HW);
    batchnorm2d_relu_forward_train(cpu, w_rout.data(), w_rstats.data(), w_rmean.data(), w_rrstd.data(), xin.data(),
                                   xg.data(), xb.data(), N, C, HW, kEps);
    const auto xrelu = cpu_in(relu_out);
    auto xdout2 = xdout;
    batchnorm2d_relu_backward(cpu, w_rdinp.data(), w_rdg.data(), w_rdb.data(), xdout2.data(), xrelu.data(), xin.data(),
                              w_mean.data(), w_rstd.data(), xg.data(), N, C, HW);
    const double tol = tolerance<A>();
    EXPECT_TRUE(all_close("stats", stats, w_stats, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("local stats", lstats, w_lstats, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("mean", mean, w_mean, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("rstd", rstd, w_rstd, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("dgamma", dg, w_dg, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("dbeta", db, w_db, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("relu dgamma", rdg, w_rdg, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("relu dbeta", rdb, w_rdb, kRtol, kAtolRel));
    EXPECT_TRUE(all_close("out", out, cpu_out<A>(w_out), tol, kAtolRel));
    EXPECT_TRUE(all_close("relu out", rout, cpu_out<A>(w_rout), tol, kAtolRel));
    EXPECT_TRUE(all_close("eval", eval, cpu_out<A>(w_eval), tol, kAtolRel));
    EXPECT_TRUE(all_close("relu eval", reval, cpu_out<A>(w_reval), tol, kAtolRel));
    EXPECT_TRUE(all_close("dinp", dinp, cpu_out<A>(w_dinp), tol, kAtolRel));
    EXPECT_TRUE(all_close("relu dinp", rdinp, cpu_out<A>(w_rdinp), tol, kAtolRel));
  }
}
TEST(EmuResnetNhwc, BatchNormMatchesCpu) { check_nhwc_batchnorm<float>(); }
TEST(EmuResnetNhwc, Bf16BatchNormMatchesCpu) { check_nhwc_batchnorm<bf16>(); }
// fp16: the CPU's fp32 channels-last ops on the widened inputs (CpuStorage), the CPU having no fp16 storage
TEST(EmuResnetNhwc, Fp16BatchNormMatchesCpu) { check_nhwc_batchnorm<fp16>(); }

// The NCHW BatchNorm kernels' fused ReLU: the bits of the unfused kernels followed by the ReLU / preceded by its mask.
template <typename A>
void check_nchw_fused_relu() {
  using S = EmuStorage<A>;
  using AVec = std::vector<A>;
  const A nanA = test::to_storage_vector<A>({NAN})[0];
  const int N = 2, C = 3, HW = 40;  // 40: packs of 16 bytes in both types (the P > 1 instantiations)
  const size_t n = sz(N * C * HW);
  const AVec inp = random_storage<A>(n, 620, -1.0, 3.0), dout = random_storage<A>(n, 621);
  const AVec gamma = random_storage<A>(sz(C), 622, 0.5, 1.5), beta = random_storage<A>(sz(C), 623);
  const Vec mean = random_vector(sz(C), 624), rstd = random_vector(sz(C), 625, 0.5, 2.0);
  const Vec rm = random_vector(sz(C), 626), rv = random_vector(sz(C), 627, 0.2, 2.0);
  AVec out(n, nanA), rout(n, nanA), eval(n, nanA), reval(n, nanA), dinp(n, nanA), rdinp(n, nanA);
  Vec sums = nan_vector(2 * sz(C)), rsums = nan_vector(2 * sz(C)), dg(sz(C), 0.0f), db(sz(C), 0.0f), rdg(sz(C), 0.0f),
      rdb(sz(C), 0.0f);
  const int64_t planes = int64_t{N} * C;
  AVec relu_out, dout_masked;
  ASSERT_TRUE(emulate_schedules(
      [&] {
        cu::with_pack<S>(cu::pack_width<S>(HW, {emu_ptr(out), emu_ptr(inp)}), [&](auto pc) {
          constexpr int P = decltype(pc)::value;
          const cu::LaunchShape sh = cu::plane_shape(planes, HW / P);
          EMU_LAUNCH((cu::bn_apply_kernel<P, S, false>), sh, emu_ptr(out), emu_ptr(inp), mean.data(), rstd.data(),
                     emu_ptr(gamma), emu_ptr(beta), planes, C, HW);
          EMU_LAUNCH((cu::bn_apply_kernel<P, S, true>), sh, emu_ptr(rout), emu_ptr(inp), mean.data(), rstd.data(),
                     emu_ptr(gamma), emu_ptr(beta), planes, C, HW);
          EMU_LAUNCH((cu::bn_eval_kernel<P, S, false>), sh, emu_ptr(eval), emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta),
                     rm.data(), rv.data(), planes, C, HW, kEps);
          EMU_LAUNCH((cu::bn_eval_kernel<P, S, true>), sh, emu_ptr(reval), emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta),
                     rm.data(), rv.data(), planes, C, HW, kEps);
        });
        relu_out = rout;
        dout_masked = masked(dout, relu_out);
        const cu::BnGroupsLaunch l = cu::bn_groups_launch(N, C, HW, kCudaReducePartialsBytes, 2);
        std::vector<double> partials(static_cast<size_t>(2 * C * l.groups), std::numeric_limits<double>::quiet_NaN());
        EMU_LAUNCH((cu::bn_grad_partial_kernel<S, true>), l.partial, partials.data(), emu_ptr(dout), emu_ptr(relu_out),
                   emu_ptr(inp), mean.data(), rstd.data(), N, C, HW, l.per_group);
        EMU_LAUNCH(cu::bn_grad_finish_kernel, l.finish, rsums.data(), rdg.data(), rdb.data(), partials.data(), C,
                   static_cast<int>(l.groups));
        EMU_LAUNCH((cu::bn_grad_partial_kernel<S, false>), l.partial, partials.data(), emu_ptr(dout_masked),
                   static_cast<const S*>(nullptr), emu_ptr(inp), mean.data(), rstd.data(), N, C, HW, l.per_group);
        EMU_LAUNCH(cu::bn_grad_finish_kernel, l.finish, sums.data(), dg.data(), db.data(), partials.data(), C,
                   static_cast<int>(l.groups));
        cu::with_pack<S>(cu::pack_width<S>(HW, {emu_ptr(dinp), emu_ptr(inp)}), [&](auto pc) {
          constexpr int P = decltype(pc)::value;
          const cu::LaunchShape sh = cu::plane_shape(planes, HW / P);
          EMU_LAUNCH((cu::bn_backward_apply_kernel<P, S, true>), sh, emu_ptr(rdinp), emu_ptr(dout), emu_ptr(relu_out),
                     emu_ptr(inp), mean.data(), rstd.data(), emu_ptr(gamma), rsums.data(), double(N * HW), planes, C,
                     HW);
          EMU_LAUNCH((cu::bn_backward_apply_kernel<P, S, false>), sh, emu_ptr(dinp), emu_ptr(dout_masked),
                     static_cast<const S*>(nullptr), emu_ptr(inp), mean.data(), rstd.data(), emu_ptr(gamma),
                     sums.data(), double(N * HW), planes, C, HW);
        });
      },
      {emu_output("out", out), emu_output("relu out", rout), emu_output("eval", eval), emu_output("relu eval", reval),
       emu_output("sums", sums), emu_output("relu sums", rsums), emu_output("dinp", dinp),
       emu_output("relu dinp", rdinp), emu_output("dgamma", dg), emu_output("dbeta", db),
       emu_output("relu dgamma", rdg), emu_output("relu dbeta", rdb)}));
  EXPECT_TRUE(bitwise_equal("relu out", rout, relu_of(out)));
  EXPECT_TRUE(bitwise_equal("relu eval", reval, relu_of(eval)));
  EXPECT_TRUE(bitwise_equal("relu sums", rsums, sums));
  EXPECT_TRUE(bitwise_equal("relu dgamma", rdg, dg));
  EXPECT_TRUE(bitwise_equal("relu dbeta", rdb, db));
  EXPECT_TRUE(bitwise_equal("relu dinp", rdinp, dinp));
}
TEST(EmuResnetFusedRelu, NchwBatchNormReluIsTheTwoOps) { check_nchw_fused_relu<float>(); }
TEST(EmuResnetFusedRelu, Bf16NchwBatchNormReluIsTheTwoOps) { check_nchw_fused_relu<bf16>(); }

// A block's last BatchNorm with the residual add and ReLU (the apply and evaluation kernels with `residual`), in both
// layouts: the bits of the plain kernel followed by residual_relu_forward, computed on the host (the BatchNorm's
// rounded output plus the residual, rounded once, then the ReLU).
template <typename A>
void check_add_relu() {
  using S = EmuStorage<A>;
  using AVec = std::vector<A>;
  const A nanA = test::to_storage_vector<A>({NAN})[0];
  const int N = 2, C = 16, HW = 12;  // packs of 16 bytes over both HW (NCHW) and C (channels-last)
  const size_t n = sz(N * C * HW);
  const AVec inp = random_storage<A>(n, 650, -1.0, 3.0), res = random_storage<A>(n, 651, -1.5, 1.5);
  const AVec gamma = random_storage<A>(sz(C), 652, 0.5, 1.5), beta = random_storage<A>(sz(C), 653);
  const Vec mean = random_vector(sz(C), 654), rstd = random_vector(sz(C), 655, 0.5, 2.0);
  const Vec rm = random_vector(sz(C), 656), rv = random_vector(sz(C), 657, 0.2, 2.0);
  const int64_t planes = int64_t{N} * C;
  AVec out(n, nanA), fused(n, nanA), eval(n, nanA), fused_eval(n, nanA);
  AVec nout(n, nanA), nfused(n, nanA), neval(n, nanA), nfused_eval(n, nanA);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        cu::with_pack<S>(cu::pack_width<S>(HW, {emu_ptr(out), emu_ptr(inp), emu_ptr(res)}), [&](auto pc) {
          constexpr int P = decltype(pc)::value;
          const cu::LaunchShape sh = cu::plane_shape(planes, HW / P);
          EMU_LAUNCH((cu::bn_apply_kernel<P, S>), sh, emu_ptr(out), emu_ptr(inp), mean.data(), rstd.data(),
                     emu_ptr(gamma), emu_ptr(beta), planes, C, HW);
          EMU_LAUNCH((cu::bn_apply_kernel<P, S, true>), sh, emu_ptr(fused), emu_ptr(inp), mean.data(), rstd.data(),
                     emu_ptr(gamma), emu_ptr(beta), planes, C, HW, emu_ptr(res));
          EMU_LAUNCH((cu::bn_eval_kernel<P, S>), sh, emu_ptr(eval), emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta),
                     rm.data(), rv.data(), planes, C, HW, kEps);
          EMU_LAUNCH((cu::bn_eval_kernel<P, S, true>), sh, emu_ptr(fused_eval), emu_ptr(inp), emu_ptr(gamma),
                     emu_ptr(beta), rm.data(), rv.data(), planes, C, HW, kEps, emu_ptr(res));
        });
        cu::with_pack<S>(cu::nhwc_pack_width<S>(C, {emu_ptr(nout), emu_ptr(inp), emu_ptr(res)}), [&](auto pc) {
          constexpr int P = decltype(pc)::value;
          const int64_t packs = static_cast<int64_t>(n) / P;
          const cu::LaunchShape sh = cu::nhwc_pointwise_shape(packs);
          EMU_LAUNCH((cu::bn_nhwc_apply_kernel<P, S>), sh, emu_ptr(nout), emu_ptr(inp), mean.data(), rstd.data(),
                     emu_ptr(gamma), emu_ptr(beta), packs, C);
          EMU_LAUNCH((cu::bn_nhwc_apply_kernel<P, S, true>), sh, emu_ptr(nfused), emu_ptr(inp), mean.data(),
                     rstd.data(), emu_ptr(gamma), emu_ptr(beta), packs, C, emu_ptr(res));
          EMU_LAUNCH((cu::bn_nhwc_eval_kernel<P, S>), sh, emu_ptr(neval), emu_ptr(inp), emu_ptr(gamma), emu_ptr(beta),
                     rm.data(), rv.data(), packs, C, kEps);
          EMU_LAUNCH((cu::bn_nhwc_eval_kernel<P, S, true>), sh, emu_ptr(nfused_eval), emu_ptr(inp), emu_ptr(gamma),
                     emu_ptr(beta), rm.data(), rv.data(), packs, C, kEps, emu_ptr(res));
        });
      },
      {emu_output("out", out), emu_output("fused", fused), emu_output("eval", eval),
       emu_output("fused eval", fused_eval), emu_output("nhwc out", nout), emu_output("nhwc fused", nfused),
       emu_output("nhwc eval", neval), emu_output("nhwc fused eval", nfused_eval)}));
  const auto add_relu = [&](const AVec& bn) {
    AVec r(n);
    for (size_t i = 0; i < n; i++) {
      const float s = static_cast<float>(test::value_of(bn[i])) + static_cast<float>(test::value_of(res[i]));
      const float rounded = static_cast<float>(test::value_of(test::to_storage_vector<A>({s})[0]));
      r[i] = test::to_storage_vector<A>({rounded > 0.0f ? rounded : 0.0f})[0];
    }
    return r;
  };
  EXPECT_TRUE(bitwise_equal("nchw train", fused, add_relu(out)));
  EXPECT_TRUE(bitwise_equal("nchw eval", fused_eval, add_relu(eval)));
  EXPECT_TRUE(bitwise_equal("nhwc train", nfused, add_relu(nout)));
  EXPECT_TRUE(bitwise_equal("nhwc eval", nfused_eval, add_relu(neval)));
}
TEST(EmuResnetFusedRelu, BatchNormAddReluIsTheTwoOps) { check_add_relu<float>(); }
TEST(EmuResnetFusedRelu, Bf16BatchNormAddReluIsTheTwoOps) { check_add_relu<bf16>(); }
TEST(EmuResnetFusedRelu, Fp16BatchNormAddReluIsTheTwoOps) { check_add_relu<fp16>(); }

// Max-pooling (values, indices, the gather: bitwise), global average pooling and the images' entry, channels-last,
// against the CPU's channels-last ops.
template <typename A>
void check_nhwc_pooling() {
  using R = CpuStorage<A>;
  using AVec = std::vector<A>;
  const A nanA = test::to_storage_vector<A>({NAN})[0];
  const int N = 2, C = 5, H = 9, W = 7, K = 3, stride = 2, pad = 1;
  const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  const int64_t in_n = int64_t{N} * H * W * C, out_n = int64_t{N} * OH * OW * C;
  AVec inp(sz(in_n));
  const auto ints = random_ints(inp.size(), 630, -3, 4);  // few distinct values: ties
  for (size_t i = 0; i < inp.size(); i++) inp[i] = test::to_storage_vector<A>({0.25f * static_cast<float>(ints[i])})[0];
  const AVec dout = random_storage<A>(sz(out_n), 631), dpool = random_storage<A>(sz(N * C), 632);
  const Vec images = random_vector(sz(in_n), 633, -2.0, 2.0);
  AVec out(sz(out_n), nanA), dinp(sz(in_n), nanA), avg(sz(N * C), nanA), davg(sz(in_n), nanA), entered(sz(in_n), nanA);
  std::vector<int32_t> idx(sz(out_n), -7);
  using S = EmuStorage<A>;
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH(cu::maxpool_nhwc_forward_kernel, cu::nhwc_pointwise_shape(out_n), emu_ptr(out), idx.data(),
                   emu_ptr(inp), out_n, C, H, W, OH, OW, K, stride, pad);
        EMU_LAUNCH(cu::maxpool_nhwc_backward_kernel, cu::nhwc_pointwise_shape(in_n), emu_ptr(dinp), emu_ptr(dout),
                   idx.data(), in_n, C, H, W, OH, OW, K, stride, pad);
        EMU_LAUNCH(cu::global_avgpool_nhwc_forward_kernel, cu::nhwc_pointwise_shape(N * C), emu_ptr(avg), emu_ptr(inp),
                   int64_t{N} * C, C, H * W);
        EMU_LAUNCH(cu::global_avgpool_nhwc_backward_kernel, cu::nhwc_pointwise_shape(in_n), emu_ptr(davg),
                   emu_ptr(dpool), in_n, C, H * W);
        EMU_LAUNCH(cu::images_to_nhwc_kernel<S>, cu::nhwc_pointwise_shape(in_n), emu_ptr(entered), images.data(), in_n,
                   C, H * W);
      },
      {emu_output("out", out), emu_output("idx", idx), emu_output("dinp", dinp), emu_output("avg", avg),
       emu_output("davg", davg), emu_output("entered", entered)}));
  const ExecContext& cpu = nhwc_cpu();
  std::vector<R> w_out(out.size()), w_dinp(dinp.size()), w_avg(avg.size()), w_davg(davg.size());
  std::vector<int32_t> w_idx(idx.size());
  const auto xin = cpu_in(inp), xdout = cpu_in(dout), xdpool = cpu_in(dpool);
  maxpool2d_forward(cpu, w_out.data(), w_idx.data(), xin.data(), N, C, H, W, K, stride, pad);
  maxpool2d_backward(cpu, w_dinp.data(), xdout.data(), w_idx.data(), N, C, H, W, K, stride, pad);
  global_avgpool_forward(cpu, w_avg.data(), xin.data(), N, C, H * W);
  global_avgpool_backward(cpu, w_davg.data(), xdpool.data(), N, C, H * W);
  EXPECT_TRUE(bitwise_equal("maxpool out", out, cpu_out<A>(w_out)));
  EXPECT_TRUE(bitwise_equal("maxpool idx", idx, w_idx));
  EXPECT_TRUE(bitwise_equal("maxpool dinp", dinp, cpu_out<A>(w_dinp)));
  EXPECT_TRUE(all_close("avgpool out", avg, cpu_out<A>(w_avg), tolerance<A>(), kAtolRel));
  EXPECT_TRUE(bitwise_equal("avgpool dinp", davg, cpu_out<A>(w_davg)));
  // the images' entry: a transpose and one rounding (the CPU's images_to_channels_last has no fp16 twin: compared with
  // the transpose of the images rounded on the host)
  AVec want(sz(in_n));
  for (int b = 0; b < N; b++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < H * W; i++)
        want[sz((int64_t{b} * H * W + i) * C + c)] = test::to_storage_vector<A>(
            {images[sz((int64_t{b} * C + c) * H * W + i)]})[0];
  EXPECT_TRUE(bitwise_equal("images", entered, want));
}
TEST(EmuResnetNhwc, PoolingAndImagesMatchCpu) { check_nhwc_pooling<float>(); }
TEST(EmuResnetNhwc, Bf16PoolingAndImagesMatchCpu) { check_nhwc_pooling<bf16>(); }

// The filter reorder for cuDNN's NHWC convolutions and back (exact copies and one float add each), and the conv bias
// channels-last (the seed, the add, dbias's double sum), against host loops.
template <typename A>
void check_filter_reorder_and_bias() {
  using S = EmuStorage<A>;
  using AVec = std::vector<A>;
  const A nanA = test::to_storage_vector<A>({NAN})[0];
  for (const int K : {3, 7}) {
    SCOPED_TRACE(K);
    const int OC = 5, C = 3, KHW = K * K;
    const int64_t n = int64_t{OC} * C * KHW;
    const AVec w = random_storage<A>(sz(n), 640), g = random_storage<A>(sz(n), 641);
    const Vec dw0 = random_vector(sz(n), 642);
    AVec reordered(sz(n), nanA);
    Vec dw = dw0;
    ASSERT_TRUE(emulate_schedules(
        [&] {
          EMU_LAUNCH(cu::filter_to_channels_last_kernel<S>, cu::nhwc_pointwise_shape(n), emu_ptr(reordered), emu_ptr(w),
                     n, C, KHW);
          EMU_LAUNCH(cu::accumulate_channels_last_filter_kernel<S>, cu::nhwc_pointwise_shape(n), dw.data(), emu_ptr(g),
                     n, C, KHW);
        },
        {emu_output("reordered", reordered), emu_output("dw", dw)}));
    AVec want(sz(n));
    Vec want_dw = dw0;
    for (int oc = 0; oc < OC; oc++)
      for (int c = 0; c < C; c++)
        for (int r = 0; r < KHW; r++) {
          want[sz((int64_t{oc} * KHW + r) * C + c)] = w[sz((int64_t{oc} * C + c) * KHW + r)];
          want_dw[sz((int64_t{oc} * C + c) * KHW + r)] += static_cast<float>(
              test::value_of(g[sz((int64_t{oc} * KHW + r) * C + c)]));
        }
    EXPECT_TRUE(bitwise_equal("reordered filter", reordered, want));
    EXPECT_TRUE(bitwise_equal("dweight", dw, want_dw));
  }
  const int positions = 37, OC = 6;
  const int64_t n = int64_t{positions} * OC;
  const AVec bias = random_storage<A>(sz(OC), 643), conv = random_storage<A>(sz(n), 644),
             dout = random_storage<A>(sz(n), 645);
  AVec seeded(sz(n), nanA), added = conv;
  Vec dbias(sz(OC), 0.5f);
  ASSERT_TRUE(emulate_schedules(
      [&] {
        EMU_LAUNCH((cu::nhwc_bias_kernel<true, S>), cu::nhwc_pointwise_shape(n), emu_ptr(seeded), emu_ptr(bias), n, OC);
        EMU_LAUNCH((cu::nhwc_bias_kernel<false, S>), cu::nhwc_pointwise_shape(n), emu_ptr(added), emu_ptr(bias), n, OC);
        EMU_LAUNCH(cu::nhwc_channel_sum_accumulate_kernel<S>, cu::nhwc_pointwise_shape(OC), dbias.data(), emu_ptr(dout),
                   int64_t{positions}, OC);
      },
      {emu_output("seeded", seeded), emu_output("added", added), emu_output("dbias", dbias)}));
  AVec want_seed(sz(n)), want_add(sz(n));
  Vec want_db(sz(OC), 0.5f);
  for (int64_t i = 0; i < n; i++) {
    const int c = static_cast<int>(i % OC);
    want_seed[sz(i)] = bias[sz(c)];
    want_add[sz(i)] = test::to_storage_vector<A>(
        {static_cast<float>(test::value_of(conv[sz(i)])) + static_cast<float>(test::value_of(bias[sz(c)]))})[0];
  }
  for (int c = 0; c < OC; c++) {
    double s = 0.0;
    for (int j = 0; j < positions; j++) s += test::value_of(dout[sz(int64_t{j} * OC + c)]);
    want_db[sz(c)] += static_cast<float>(s);
  }
  EXPECT_TRUE(bitwise_equal("bias seed", seeded, want_seed));
  EXPECT_TRUE(bitwise_equal("bias add", added, want_add));
  EXPECT_TRUE(bitwise_equal("dbias", dbias, want_db));
}
TEST(EmuResnetNhwc, FilterReorderAndConvBias) { check_filter_reorder_and_bias<float>(); }
TEST(EmuResnetNhwc, Bf16FilterReorderAndConvBias) { check_filter_reorder_and_bias<bf16>(); }

// The channels-last launches at ResNet-50's sizes are valid on an H100 (block, grid and shared-memory limits).
TEST(EmuResnetNhwc, LaunchShapesAtLargeSizesAreValid) {
  for (const auto& [N, C, HW] :
       {std::array<int, 3>{256, 64, 112 * 112}, std::array<int, 3>{256, 2048, 49}, std::array<int, 3>{1, 3, 1}}) {
    for (int doubles : {2, 3}) {
      const cu::BnGroupsLaunch l = cu::bn_nhwc_groups_launch(N, C, HW, kCudaReducePartialsBytes, doubles);
      EXPECT_EQ(cu::launch_problem(l.partial, cu::kH100Limits), "") << N << " " << C << " " << HW;
      EXPECT_EQ(cu::launch_problem(l.finish, cu::kH100Limits), "");
      EXPECT_LE(l.groups * doubles * C * int64_t{sizeof(double)}, int64_t{kCudaReducePartialsBytes});
      EXPECT_GE(l.groups * l.per_group, int64_t{N} * HW);
      EXPECT_LT((l.groups - 1) * l.per_group, int64_t{N} * HW);
    }
    EXPECT_EQ(cu::launch_problem(cu::nhwc_pointwise_shape(int64_t{N} * C * HW), cu::kH100Limits), "");
  }
}

}  // namespace
}  // namespace hpct::kernels
