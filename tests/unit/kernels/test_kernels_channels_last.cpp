// Channels-last activations (ExecContext::channels_last) on the CPU backend, fp32 and bf16 storage: every
// layout-sensitive op against its NCHW twin on the same values transposed (conv forward / backward through oneDNN's nxc
// primitives, BatchNorm training / SyncBN pieces / evaluation / backward, max-pool, global average pool, the images'
// entry), the SyncBN split at one rank bitwise the whole-batch op, the statistics independent of the thread count, and
// the refusals (CUDA, a convolution oneDNN does not run channels-last).
// Tolerances (|got - want| <= atol + rtol |want|, atol = atol_rel * max|want|), and why:
//   - exact: max-pool (the same selections and the same adds in the same order), avgpool's backward, the image entry;
//   - fp32 conv 2e-5 / 2e-5 (another oneDNN kernel: another summation order over C*KH*KW products), its dweight
//     1e-4 / 1e-4 (sums over every position); bf16 outputs 2^-7 / 2^-8 (one rounding of either side to bf16);
//   - BatchNorm: the same double arithmetic in another order: fp32 1e-6 / 1e-6 (the float results differ by an ulp at
//     most), bf16 2^-7 / 2^-8.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"

namespace hpct::kernels {
namespace {

using test::all_close;

ExecContext nhwc_ctx(Precision p) {
  ExecContext c{Device::CPU, nullptr, p};
  c.channels_last = true;
  return c;
}
template <typename A>
Precision precision_of() {
  return std::is_same_v<A, float> ? Precision::FP32 : Precision::BF16;
}

// (N,C,HW) <-> (N,HW,C), any element type
template <typename T>
std::vector<T> to_nhwc(const std::vector<T>& x, int N, int C, int HW) {
  std::vector<T> y(x.size());
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < HW; i++)
        y[(static_cast<size_t>(n) * HW + i) * C + c] = x[(static_cast<size_t>(n) * C + c) * HW + i];
  return y;
}
template <typename T>
std::vector<T> to_nchw(const std::vector<T>& y, int N, int C, int HW) {
  std::vector<T> x(y.size());
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < HW; i++)
        x[(static_cast<size_t>(n) * C + c) * HW + i] = y[(static_cast<size_t>(n) * HW + i) * C + c];
  return x;
}
template <typename A>
std::vector<double> as_double(const std::vector<A>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); i++) d[i] = test::value_of(v[i]);
  return d;
}
template <typename A>
double rtol() {
  return std::is_same_v<A, float> ? 1e-6 : 1.0 / 128;
}
template <typename A>
double atol() {
  return std::is_same_v<A, float> ? 1e-6 : 1.0 / 256;
}
template <typename A>
bool bitwise_equal(const std::vector<A>& a, const std::vector<A>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(A)) == 0;
}

template <typename A>
class ChannelsLast : public ::testing::Test {};
using Storage = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(ChannelsLast, Storage);

TYPED_TEST(ChannelsLast, ConvMatchesNchw) {
  using A = TypeParam;
  struct S {
    int N, C, H, OC, K, stride, pad;
    bool tail;  // channel counts oneDNN's channels-last kernels are not trusted with: never channels-last
  };
  int ran = 0;
  for (const S s : {S{3, 16, 10, 16, 3, 1, 1, false}, S{2, 16, 9, 32, 3, 2, 1, false}, S{2, 16, 8, 32, 1, 2, 0, false},
                    S{2, 1, 8, 16, 3, 1, 1, false}, S{7, 3, 12, 16, 7, 2, 3, false}, S{6, 4, 12, 8, 1, 2, 0, true},
                    S{2, 4, 12, 16, 1, 2, 0, true}, S{2, 16, 12, 8, 3, 1, 1, true}}) {
    SCOPED_TRACE("N " + std::to_string(s.N) + " " + std::to_string(s.C) + ">" + std::to_string(s.OC) + " k" +
                 std::to_string(s.K));
    const ExecContext nchw{Device::CPU, nullptr, precision_of<A>()}, nhwc = nhwc_ctx(precision_of<A>());
    // oneDNN may not run a shape channels-last (no oneDNN, HPCT_CONV set, a channel tail: the AVX2 1x1 strided 4 > 8
    // at 2 threads computes a wrong weight gradient; or a result that fails the cross-check against the blocked
    // layout): then it must say so, never compute
    if (s.tail)
      EXPECT_FALSE(conv2d_channels_last_runs(nhwc, s.N, s.C, s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad, dtype_of<A>()));
    if (!conv2d_channels_last_runs(nhwc, s.N, s.C, s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad, dtype_of<A>())) {
      EXPECT_THROW(conv2d_workspace_floats(nhwc, s.N, s.C, s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad, dtype_of<A>()),
                   Error);
      continue;
    }
    ran++;
    const int OH = (s.H + 2 * s.pad - s.K) / s.stride + 1, HW = s.H * s.H, OHW = OH * OH;
    const size_t nx = static_cast<size_t>(s.N) * s.C * HW, ny = static_cast<size_t>(s.N) * s.OC * OHW,
                 nw = static_cast<size_t>(s.OC) * s.C * s.K * s.K;
    const auto x = test::random_storage<A>(nx, 1), w = test::random_storage<A>(nw, 2, -0.3, 0.3),
               dy = test::random_storage<A>(ny, 3);
    const int64_t ws_a = conv2d_workspace_floats(nchw, s.N, s.C, s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad,
                                                 dtype_of<A>()),
                  ws_b = conv2d_workspace_floats(nhwc, s.N, s.C, s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad,
                                                 dtype_of<A>());
    // a workspace holding garbage, as one shared by every layer does (its contents between calls are unspecified)
    std::vector<float> ws(static_cast<size_t>(std::max(ws_a, ws_b)), 7.5e3f);
    std::vector<A> y_a(ny), y_b(ny), dx_a(nx), dx_b(nx);
    std::vector<float> dw_a(nw, 0.0f), dw_b(nw, 0.0f);
    conv2d_forward(nchw, y_a.data(), x.data(), w.data(), static_cast<const A*>(nullptr), ws.data(), ws_a, s.N, s.C, s.H,
                   s.H, s.OC, s.K, s.K, s.stride, s.pad);
    conv2d_backward(nchw, dx_a.data(), dw_a.data(), nullptr, dy.data(), x.data(), w.data(), ws.data(), ws_a, s.N, s.C,
                    s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad);
    const auto x_l = to_nhwc(x, s.N, s.C, HW), dy_l = to_nhwc(dy, s.N, s.OC, OHW);
    conv2d_forward(nhwc, y_b.data(), x_l.data(), w.data(), static_cast<const A*>(nullptr), ws.data(), ws_b, s.N, s.C,
                   s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad);
    std::fill(ws.begin(), ws.end(), -3.25e4f);  // what the other layers left there
    conv2d_backward(nhwc, dx_b.data(), dw_b.data(), nullptr, dy_l.data(), x_l.data(), w.data(), ws.data(), ws_b, s.N,
                    s.C, s.H, s.H, s.OC, s.K, s.K, s.stride, s.pad);
    const double r = std::is_same_v<A, float> ? 2e-5 : 1.0 / 128, a = std::is_same_v<A, float> ? 2e-5 : 1.0 / 256;
    EXPECT_TRUE(all_close("out", as_double(to_nchw(y_b, s.N, s.OC, OHW)), as_double(y_a), r, a));
    EXPECT_TRUE(all_close("dinp", as_double(to_nchw(dx_b, s.N, s.C, HW)), as_double(dx_a), r, a));
    EXPECT_TRUE(all_close("dweight", as_double(dw_b), as_double(dw_a), 1e-4, 1e-4));
  }
  if (ran == 0) GTEST_SKIP() << "oneDNN runs none of these convolutions channels-last here";
}

TYPED_TEST(ChannelsLast, BatchNormMatchesNchwAndItsSyncPiecesAreTheWholeOp) {
  using A = TypeParam;
  const int N = 6, C = 24, HW = 50;
  const size_t n = static_cast<size_t>(N) * C * HW;
  const auto x = test::random_storage<A>(n, 4, 1.0, 3.0), dy = test::random_storage<A>(n, 5),
             gamma = test::random_storage<A>(C, 6, 0.5, 1.5), beta = test::random_storage<A>(C, 7);
  const ExecContext nchw{Device::CPU, nullptr, precision_of<A>()}, nhwc = nhwc_ctx(precision_of<A>());
  const auto x_l = to_nhwc(x, N, C, HW), dy_l = to_nhwc(dy, N, C, HW);
  std::vector<float> st_a(3 * C), m_a(C), r_a(C), st_b(3 * C), m_b(C), r_b(C);
  std::vector<A> y_a(n), y_b(n), dx_a(n), dx_b(n);
  std::vector<float> dg_a(C, 0.0f), db_a(C, 0.0f), dg_b(C, 0.0f), db_b(C, 0.0f);
  batchnorm2d_forward_train(nchw, y_a.data(), st_a.data(), m_a.data(), r_a.data(), x.data(), gamma.data(), beta.data(),
                            N, C, HW, 1e-5f);
  batchnorm2d_backward(nchw, dx_a.data(), dg_a.data(), db_a.data(), dy.data(), x.data(), m_a.data(), r_a.data(),
                       gamma.data(), N, C, HW);
  batchnorm2d_forward_train(nhwc, y_b.data(), st_b.data(), m_b.data(), r_b.data(), x_l.data(), gamma.data(),
                            beta.data(), N, C, HW, 1e-5f);
  batchnorm2d_backward(nhwc, dx_b.data(), dg_b.data(), db_b.data(), dy_l.data(), x_l.data(), m_b.data(), r_b.data(),
                       gamma.data(), N, C, HW);
  EXPECT_TRUE(all_close("stats", as_double(st_b), as_double(st_a), 1e-6, 1e-7));
  EXPECT_TRUE(all_close("out", as_double(to_nchw(y_b, N, C, HW)), as_double(y_a), rtol<A>(), atol<A>()));
  EXPECT_TRUE(all_close("dinp", as_double(to_nchw(dx_b, N, C, HW)), as_double(dx_a), rtol<A>(), atol<A>()));
  EXPECT_TRUE(all_close("dgamma", as_double(dg_b), as_double(dg_a), 1e-5, 1e-6));
  EXPECT_TRUE(all_close("dbeta", as_double(db_b), as_double(db_a), 1e-5, 1e-6));

  // the SyncBN pieces at one rank are the whole-batch ops, bit for bit
  std::vector<float> local(3 * C), merged(3 * C), m_s(C), r_s(C), sums(2 * C), dg_s(C, 0.0f), db_s(C, 0.0f);
  std::vector<A> y_s(n), dx_s(n);
  batchnorm2d_local_stats(nhwc, local.data(), x_l.data(), N, C, HW);
  batchnorm2d_merge_stats(nhwc, merged.data(), local.data(), 1, C);
  batchnorm2d_forward_apply(nhwc, y_s.data(), m_s.data(), r_s.data(), x_l.data(), gamma.data(), beta.data(),
                            merged.data(), N, C, HW, 1e-5f);
  batchnorm2d_backward_local_sums(nhwc, sums.data(), dg_s.data(), db_s.data(), dy_l.data(), x_l.data(), m_s.data(),
                                  r_s.data(), N, C, HW);
  batchnorm2d_backward_apply(nhwc, dx_s.data(), dy_l.data(), x_l.data(), m_s.data(), r_s.data(), gamma.data(),
                             sums.data(), static_cast<int64_t>(N) * HW, N, C, HW);
  EXPECT_TRUE(bitwise_equal(merged, st_b));
  EXPECT_TRUE(bitwise_equal(y_s, y_b));
  EXPECT_TRUE(bitwise_equal(dg_s, dg_b));
  EXPECT_TRUE(bitwise_equal(db_s, db_b));
  // dinp from the float sums the allreduce carries (the NCHW path's rounding too): within rounding of the fused op
  EXPECT_TRUE(all_close("sync dinp", as_double(dx_s), as_double(dx_b), rtol<A>(), atol<A>()));

  // two ranks of 2 and 4 images merged: the whole batch's statistics to rounding
  std::vector<float> gathered(6 * C), two(3 * C);
  const size_t img = static_cast<size_t>(C) * HW;
  batchnorm2d_local_stats(nhwc, gathered.data(), x_l.data(), 2, C, HW);
  batchnorm2d_local_stats(nhwc, gathered.data() + 3 * C, x_l.data() + 2 * img, 4, C, HW);
  batchnorm2d_merge_stats(nhwc, two.data(), gathered.data(), 2, C);
  EXPECT_TRUE(all_close("merged stats", as_double(two), as_double(st_b), 1e-6, 1e-7));

  // evaluation with running statistics
  std::vector<float> rm(C), rv(C);
  for (int c = 0; c < C; c++) {
    rm[c] = 0.1f * c;
    rv[c] = 1.0f + 0.05f * c;
  }
  std::vector<A> e_a(n), e_b(n);
  batchnorm2d_forward_eval(nchw, e_a.data(), x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                           1e-5f);
  batchnorm2d_forward_eval(nhwc, e_b.data(), x_l.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                           1e-5f);
  EXPECT_TRUE(bitwise_equal(to_nchw(e_b, N, C, HW), e_a));  // the same factors per channel, one formula per value
}

// The statistics depend on the shape only: 1 and 2 threads give the same bits (slabs, not threads, cut the sums).
TYPED_TEST(ChannelsLast, BatchNormIsIndependentOfTheThreadCount) {
  using A = TypeParam;
  const int N = 8, C = 16, HW = 196;  // above the parallel threshold, 49 slabs
  const size_t n = static_cast<size_t>(N) * C * HW;
  const auto x = test::random_storage<A>(n, 8, -2.0, 4.0), dy = test::random_storage<A>(n, 9),
             gamma = test::random_storage<A>(C, 10, 0.5, 1.5), beta = test::random_storage<A>(C, 11);
  const ExecContext ctx = nhwc_ctx(precision_of<A>());
  auto run = [&](int threads, std::vector<A>& y, std::vector<A>& dx, std::vector<float>& st, std::vector<float>& dg) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> m(C), r(C), db(C, 0.0f);
    dg.assign(C, 0.0f);
    batchnorm2d_forward_train(ctx, y.data(), st.data(), m.data(), r.data(), x.data(), gamma.data(), beta.data(), N, C,
                              HW, 1e-5f);
    batchnorm2d_backward(ctx, dx.data(), dg.data(), db.data(), dy.data(), x.data(), m.data(), r.data(), gamma.data(), N,
                         C, HW);
    omp_set_num_threads(before);
  };
  std::vector<A> y1(n), y2(n), dx1(n), dx2(n);
  std::vector<float> st1(3 * C), st2(3 * C), dg1, dg2;
  run(1, y1, dx1, st1, dg1);
  run(2, y2, dx2, st2, dg2);
  EXPECT_TRUE(bitwise_equal(st1, st2));
  EXPECT_TRUE(bitwise_equal(y1, y2));
  EXPECT_TRUE(bitwise_equal(dx1, dx2));
  EXPECT_TRUE(bitwise_equal(dg1, dg2));
}

// The BatchNorm + ReLU ops (kernels.hpp): in the channels-last kernels' own passes, bit for bit the two ops they
// replace, forward (training, SyncBN apply, evaluation) and backward (whole batch, SyncBN pair); on NCHW the two ops.
TYPED_TEST(ChannelsLast, BatchNormReluIsTheTwoOps) {
  using A = TypeParam;
  const int N = 4, C = 20, HW = 36;
  const size_t n = static_cast<size_t>(N) * C * HW;
  const auto x = test::random_storage<A>(n, 15, -1.0, 1.0), gamma = test::random_storage<A>(C, 16, 0.5, 1.5),
             beta = test::random_storage<A>(C, 17, -0.5, 0.5);
  auto dy = test::random_storage<A>(n, 18);
  std::vector<float> rm(C, 0.1f), rv(C, 0.9f);
  for (const bool nhwc : {true, false}) {
    SCOPED_TRACE(nhwc ? "nhwc" : "nchw");
    const ExecContext ctx = nhwc ? nhwc_ctx(precision_of<A>()) : ExecContext{Device::CPU, nullptr, precision_of<A>()};
    std::vector<float> st_a(3 * C), m_a(C), r_a(C), st_b(3 * C), m_b(C), r_b(C);
    std::vector<A> y_a(n), y_b(n);
    batchnorm2d_forward_train(ctx, y_a.data(), st_a.data(), m_a.data(), r_a.data(), x.data(), gamma.data(), beta.data(),
                              N, C, HW, 1e-5f);
    relu_forward(ctx, y_a.data(), y_a.data(), static_cast<int64_t>(n));
    batchnorm2d_relu_forward_train(ctx, y_b.data(), st_b.data(), m_b.data(), r_b.data(), x.data(), gamma.data(),
                                   beta.data(), N, C, HW, 1e-5f);
    EXPECT_TRUE(bitwise_equal(y_b, y_a));
    EXPECT_TRUE(bitwise_equal(st_b, st_a));
    size_t zeros = 0;
    for (const A& v : y_b) zeros += test::value_of(v) == 0.0;
    EXPECT_GT(zeros, n / 4);  // the ReLU cut about half of the values
    std::vector<A> a_a(n), a_b(n), e_a(n), e_b(n);
    batchnorm2d_forward_apply(ctx, a_a.data(), m_a.data(), r_a.data(), x.data(), gamma.data(), beta.data(), st_a.data(),
                              N, C, HW, 1e-5f);
    relu_forward(ctx, a_a.data(), a_a.data(), static_cast<int64_t>(n));
    batchnorm2d_relu_forward_apply(ctx, a_b.data(), m_b.data(), r_b.data(), x.data(), gamma.data(), beta.data(),
                                   st_a.data(), N, C, HW, 1e-5f);
    EXPECT_TRUE(bitwise_equal(a_b, a_a));
    batchnorm2d_forward_eval(ctx, e_a.data(), x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                             1e-5f);
    relu_forward(ctx, e_a.data(), e_a.data(), static_cast<int64_t>(n));
    batchnorm2d_relu_forward_eval(ctx, e_b.data(), x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                                  1e-5f);
    EXPECT_TRUE(bitwise_equal(e_b, e_a));

    // backward: relu_backward then the BatchNorm's, against the fused op (whose dout may be overwritten)
    std::vector<A> masked(n), dx_a(n), dx_b(n), dout = dy;
    std::vector<float> dg_a(C, 0.0f), db_a(C, 0.0f), dg_b(C, 0.0f), db_b(C, 0.0f);
    relu_backward(ctx, masked.data(), dy.data(), y_a.data(), static_cast<int64_t>(n));
    batchnorm2d_backward(ctx, dx_a.data(), dg_a.data(), db_a.data(), masked.data(), x.data(), m_a.data(), r_a.data(),
                         gamma.data(), N, C, HW);
    batchnorm2d_relu_backward(ctx, dx_b.data(), dg_b.data(), db_b.data(), dout.data(), y_a.data(), x.data(), m_a.data(),
                              r_a.data(), gamma.data(), N, C, HW);
    EXPECT_TRUE(bitwise_equal(dx_b, dx_a));
    EXPECT_TRUE(bitwise_equal(dg_b, dg_a));
    EXPECT_TRUE(bitwise_equal(db_b, db_a));
    std::vector<float> s_a(2 * C), s_b(2 * C);
    std::fill(dg_a.begin(), dg_a.end(), 0.0f);
    std::fill(dg_b.begin(), dg_b.end(), 0.0f);
    batchnorm2d_backward_local_sums(ctx, s_a.data(), dg_a.data(), db_a.data(), masked.data(), x.data(), m_a.data(),
                                    r_a.data(), N, C, HW);
    batchnorm2d_backward_apply(ctx, dx_a.data(), masked.data(), x.data(), m_a.data(), r_a.data(), gamma.data(),
                               s_a.data(), static_cast<int64_t>(N) * HW, N, C, HW);
    dout = dy;
    batchnorm2d_relu_backward_local_sums(ctx, s_b.data(), dg_b.data(), db_b.data(), dout.data(), y_a.data(), x.data(),
                                         m_a.data(), r_a.data(), N, C, HW);
    batchnorm2d_relu_backward_apply(ctx, dx_b.data(), dout.data(), y_a.data(), x.data(), m_a.data(), r_a.data(),
                                    gamma.data(), s_b.data(), static_cast<int64_t>(N) * HW, N, C, HW);
    EXPECT_TRUE(bitwise_equal(s_b, s_a));
    EXPECT_TRUE(bitwise_equal(dg_b, dg_a));
    EXPECT_TRUE(bitwise_equal(dx_b, dx_a));
  }
}

// A block's last BatchNorm with the residual add and ReLU: bit for bit the BatchNorm op, then residual_relu_forward
// (fused in the channels-last pass, two ops in NCHW), in training (single process and SyncBN's apply) and evaluation.
TYPED_TEST(ChannelsLast, BatchNormAddReluIsTheTwoOps) {
  using A = TypeParam;
  const int N = 3, C = 32, HW = 25;
  const size_t n = static_cast<size_t>(N) * C * HW;
  const auto x = test::random_storage<A>(n, 25, -1.0, 1.0), res = test::random_storage<A>(n, 26, -1.0, 1.0);
  const auto gamma = test::random_storage<A>(C, 27, 0.5, 1.5), beta = test::random_storage<A>(C, 28, -0.5, 0.5);
  std::vector<float> rm(C, 0.1f), rv(C, 0.9f);
  for (const bool nhwc : {true, false}) {
    SCOPED_TRACE(nhwc ? "nhwc" : "nchw");
    const ExecContext ctx = nhwc ? nhwc_ctx(precision_of<A>()) : ExecContext{Device::CPU, nullptr, precision_of<A>()};
    std::vector<float> st_a(3 * C), m_a(C), r_a(C), st_b(3 * C), m_b(C), r_b(C);
    std::vector<A> bn(n), y_a(n), y_b(n);
    batchnorm2d_forward_train(ctx, bn.data(), st_a.data(), m_a.data(), r_a.data(), x.data(), gamma.data(), beta.data(),
                              N, C, HW, 1e-5f);
    residual_relu_forward(ctx, y_a.data(), bn.data(), res.data(), static_cast<int64_t>(n));
    batchnorm2d_add_relu_forward_train(ctx, y_b.data(), st_b.data(), m_b.data(), r_b.data(), x.data(), gamma.data(),
                                       beta.data(), res.data(), N, C, HW, 1e-5f);
    EXPECT_TRUE(bitwise_equal(y_b, y_a));
    EXPECT_TRUE(bitwise_equal(st_b, st_a));
    EXPECT_TRUE(bitwise_equal(m_b, m_a));
    size_t zeros = 0, differs = 0;
    for (size_t i = 0; i < n; i++) {
      zeros += test::value_of(y_b[i]) == 0.0;
      differs += test::value_of(y_b[i]) != test::value_of(bn[i]);
    }
    EXPECT_GT(zeros, n / 8);    // the ReLU cut values
    EXPECT_GT(differs, n / 2);  // and the residual was added
    batchnorm2d_forward_apply(ctx, bn.data(), m_a.data(), r_a.data(), x.data(), gamma.data(), beta.data(), st_a.data(),
                              N, C, HW, 1e-5f);
    residual_relu_forward(ctx, y_a.data(), bn.data(), res.data(), static_cast<int64_t>(n));
    batchnorm2d_add_relu_forward_apply(ctx, y_b.data(), m_b.data(), r_b.data(), x.data(), gamma.data(), beta.data(),
                                       res.data(), st_a.data(), N, C, HW, 1e-5f);
    EXPECT_TRUE(bitwise_equal(y_b, y_a));
    batchnorm2d_forward_eval(ctx, bn.data(), x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                             1e-5f);
    residual_relu_forward(ctx, y_a.data(), bn.data(), res.data(), static_cast<int64_t>(n));
    batchnorm2d_add_relu_forward_eval(ctx, y_b.data(), x.data(), gamma.data(), beta.data(), res.data(), rm.data(),
                                      rv.data(), N, C, HW, 1e-5f);
    EXPECT_TRUE(bitwise_equal(y_b, y_a));
  }
}

TYPED_TEST(ChannelsLast, PoolsAndTheImageEntryMatchNchw) {
  using A = TypeParam;
  const int N = 3, C = 5, H = 9, W = 9, K = 3, stride = 2, pad = 1, HW = H * W;
  const int OH = (H + 2 * pad - K) / stride + 1, OHW = OH * OH;
  const ExecContext nchw{Device::CPU, nullptr, precision_of<A>()}, nhwc = nhwc_ctx(precision_of<A>());
  const size_t nx = static_cast<size_t>(N) * C * HW, ny = static_cast<size_t>(N) * C * OHW;
  auto x = test::random_storage<A>(nx, 12);
  x[7] = x[8];  // a tie inside a window: the first maximum wins in both layouts
  const auto dy = test::random_storage<A>(ny, 13);
  std::vector<A> y_a(ny), y_b(ny), dx_a(nx), dx_b(nx);
  std::vector<int32_t> i_a(ny), i_b(ny);
  maxpool2d_forward(nchw, y_a.data(), i_a.data(), x.data(), N, C, H, W, K, stride, pad);
  maxpool2d_backward(nchw, dx_a.data(), dy.data(), i_a.data(), N, C, H, W, K, stride, pad);
  const auto x_l = to_nhwc(x, N, C, HW), dy_l = to_nhwc(dy, N, C, OHW);
  maxpool2d_forward(nhwc, y_b.data(), i_b.data(), x_l.data(), N, C, H, W, K, stride, pad);
  maxpool2d_backward(nhwc, dx_b.data(), dy_l.data(), i_b.data(), N, C, H, W, K, stride, pad);
  EXPECT_TRUE(bitwise_equal(to_nchw(y_b, N, C, OHW), y_a));
  EXPECT_EQ(to_nchw(i_b, N, C, OHW), i_a);
  EXPECT_TRUE(bitwise_equal(to_nchw(dx_b, N, C, HW), dx_a));

  std::vector<A> p_a(static_cast<size_t>(N) * C), p_b(p_a.size()), g_a(nx), g_b(nx);
  global_avgpool_forward(nchw, p_a.data(), x.data(), N, C, HW);
  global_avgpool_forward(nhwc, p_b.data(), x_l.data(), N, C, HW);
  EXPECT_TRUE(all_close("avgpool", as_double(p_b), as_double(p_a), 1e-6, 1e-7));  // double sums, another order
  global_avgpool_backward(nchw, g_a.data(), p_a.data(), N, C, HW);
  global_avgpool_backward(nhwc, g_b.data(), p_a.data(), N, C, HW);
  EXPECT_TRUE(bitwise_equal(to_nchw(g_b, N, C, HW), g_a));

  const auto images = test::random_vector<float>(nx, 14, -2.0, 2.0);
  std::vector<A> entered(nx);
  images_to_channels_last(nhwc, entered.data(), images.data(), N, C, HW);
  EXPECT_TRUE(bitwise_equal(to_nchw(entered, N, C, HW), test::to_storage_vector<A>(images)));
}

// CUDA runs every convolution channels-last (cuDNN's NHWC), in every storage type, with the filter reordered to
// (OC,KH,KW,C) in the workspace for a spatial kernel: its scratch doubles there (the gradient in cuDNN's order and the
// reordered filter; fp32 too), a 1x1 kernel's is NCHW's. Computed on the host: no GPU needed.
TEST(ChannelsLastCuda, EveryConvolutionRunsAndTheWorkspaceHoldsTheReorderedFilter) {
  ExecContext cuda{Device::CUDA, nullptr};
  ExecContext cuda_nhwc = cuda;
  cuda_nhwc.channels_last = true;
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    EXPECT_TRUE(conv2d_channels_last_runs(cuda_nhwc, 2, 3, 8, 8, 5, 3, 3, 1, 1, act));
    const int64_t filter = (int64_t{5} * 3 * 9 * static_cast<int64_t>(dtype_size(act)) + 255) / 256 * 256;
    const int64_t nchw = conv2d_workspace_floats(cuda, 2, 3, 8, 8, 5, 3, 3, 1, 1, act);
    EXPECT_EQ(conv2d_workspace_floats(cuda_nhwc, 2, 3, 8, 8, 5, 3, 3, 1, 1, act),
              nchw + (act == DType::F32 ? 2 * filter : filter) / 4)
        << dtype_name(act);
    EXPECT_EQ(conv2d_workspace_floats(cuda_nhwc, 2, 16, 8, 8, 32, 1, 1, 2, 0, act),
              conv2d_workspace_floats(cuda, 2, 16, 8, 8, 32, 1, 1, 2, 0, act))
        << dtype_name(act);
  }
}

TEST(ChannelsLastRefusals, UnplannedShapesAreErrors) {
  // a too small workspace is an error on this path (there is no im2col fallback for channels-last activations)
  const ExecContext nhwc = nhwc_ctx(Precision::FP32);
  if (!conv2d_channels_last_runs(nhwc, 2, 16, 8, 8, 16, 3, 3, 1, 1, DType::F32))
    GTEST_SKIP() << "oneDNN does not run channels-last here";
  std::vector<float> x(2 * 16 * 64), w(16 * 16 * 9), y(2 * 16 * 64), ws(1);
  EXPECT_THROW(conv2d_forward(nhwc, y.data(), x.data(), w.data(), static_cast<const float*>(nullptr), ws.data(), 1, 2,
                              16, 8, 8, 16, 3, 3, 1, 1),
               Error);
}

}  // namespace
}  // namespace hpct::kernels
