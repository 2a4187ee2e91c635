// Backward passes of the reference twins vs central finite differences, in double, on tiny shapes.
// Objective: L = sum(out * r) with fixed random weights r (so every output element matters, with its own weight),
// or L = dloss * sum_n losses[n] for the fused cross-entropy. dL/dx by the backward (dout = r) must match
// (L(x + h e_i) - L(x - h e_i)) / 2h for every input element i.
//
// Step and tolerance: with h = 1e-5 and inputs/weights of order 1, the truncation error of the central difference
// is ~h^2 |L'''| / 6 ~ 1e-10 and the rounding error ~ 2^-53 |L| / h ~ 1e-10 (|L| ~ 10), absolute. Relative to
// max(|fd|, 1e-3 max|fd|) (near-zero gradients are judged on the tensor's scale) that is at most a few 1e-7 (measured
// worst: 1.9e-7, cross-entropy; 2e-11..8e-8 elsewhere), so 1e-6 passes a correct backward while any wrong or missing
// term, which is O(1) relative, fails by orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/reference/reference.hpp"

namespace hpct::kernels {
namespace {

namespace ref = hpct::kernels::reference;
using test::random_ints;
using test::random_vector;
using Vec = std::vector<double>;

constexpr double kStep = 1e-5;
constexpr double kTol = 1e-6;

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with the central finite differences of `objective` with respect to every element of `x`.
void expect_matches_fd(const std::string& what, Vec& x, const Vec& analytic, const std::function<double()>& objective) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  Vec fd(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double lp = objective();
    x[i] = saved - kStep;
    const double lm = objective();
    x[i] = saved;
    fd[i] = (lp - lm) / (2 * kStep);
  }
  const double floor = 1e-3 * test::max_abs(fd.data(), fd.size()) + 1e-300;
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double rel = std::fabs(analytic[i] - fd[i]) / std::max(std::fabs(fd[i]), floor);
    if (!(rel <= worst)) {
      worst = rel;
      worst_i = i;
    }
  }
  EXPECT_LT(worst, kTol) << what << ": worst relative error at element " << worst_i << ": backward "
                         << analytic[worst_i] << ", finite difference " << fd[worst_i];
  // a gradient check must be able to fail: the gradient must not be (almost) all zeros
  EXPECT_GT(test::max_abs(fd.data(), fd.size()), 1e-3) << what;
}

constexpr int B = 2, T = 5, C = 8, NH = 2;  // HS = 4
constexpr int N = B * T;

TEST(KernelsGradcheck, Encoder) {
  const int Vp = 7;  // 10 positions over 7 rows: some rows are hit twice
  const auto inp = random_ints(N, 1, 0, Vp);
  Vec wte = random_vector<double>(Vp * C, 2), wpe = random_vector<double>(T * C, 3);
  const Vec r = random_vector<double>(N * C, 4);
  Vec out(N * C);
  auto objective = [&] {
    ref::encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, r);
  };
  Vec dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  ref::encoder_backward(dwte.data(), dwpe.data(), r.data(), inp.data(), B, T, C);
  expect_matches_fd("dwte", wte, dwte, objective);
  expect_matches_fd("dwpe", wpe, dwpe, objective);
}

TEST(KernelsGradcheck, LayerNorm) {
  Vec inp = random_vector<double>(N * C, 10, -1.5, 2.5), w = random_vector<double>(C, 11, 0.5, 1.5),
      b = random_vector<double>(C, 12);
  const Vec r = random_vector<double>(N * C, 13);
  Vec out(N * C), mean(N), rstd(N);
  auto objective = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(out, r);
  };
  objective();
  Vec dinp(inp.size(), 0.0), dw(C, 0.0), db(C, 0.0);
  ref::layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  expect_matches_fd("ln dinp", inp, dinp, objective);
  expect_matches_fd("ln dweight", w, dw, objective);
  expect_matches_fd("ln dbias", b, db, objective);
}

TEST(KernelsGradcheck, Matmul) {
  const int OC = 6;
  Vec inp = random_vector<double>(N * C, 20), w = random_vector<double>(OC * C, 21), b = random_vector<double>(OC, 22);
  const Vec r = random_vector<double>(N * OC, 23);
  Vec out(N * OC);
  auto objective = [&] {
    ref::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(out, r);
  };
  Vec dinp(inp.size(), 0.0), dw(w.size(), 0.0), db(OC, 0.0);
  ref::matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  expect_matches_fd("matmul dinp", inp, dinp, objective);
  expect_matches_fd("matmul dweight", w, dw, objective);
  expect_matches_fd("matmul dbias", b, db, objective);
}

TEST(KernelsGradcheck, Attention) {
  Vec qkv = random_vector<double>(B * T * 3 * C, 30, -2.0, 2.0);
  const Vec r = random_vector<double>(B * T * C, 31);
  Vec out(B * T * C), att(B * NH * T * T);
  auto objective = [&] {
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, r);
  };
  objective();
  Vec dqkv(qkv.size(), 0.0), datt(att.size(), 0.0);
  ref::attention_backward(dqkv.data(), datt.data(), r.data(), qkv.data(), out.data(), att.data(), B, T, C, NH);
  expect_matches_fd("dqkv", qkv, dqkv, objective);
}

TEST(KernelsGradcheck, Gelu) {
  const int n = 64;
  Vec inp = random_vector<double>(n, 40, -5.0, 5.0);
  const Vec r = random_vector<double>(n, 41);
  Vec out(n);
  auto objective = [&] {
    ref::gelu_forward(out.data(), inp.data(), n);
    return dot(out, r);
  };
  Vec dinp(n);
  ref::gelu_backward(dinp.data(), inp.data(), r.data(), n);
  expect_matches_fd("gelu dinp", inp, dinp, objective);
}

TEST(KernelsGradcheck, CrossEntropy) {
  const int V = 11, Vp = 16;  // 5 padded columns: their finite differences are exactly 0
  Vec logits = random_vector<double>(N * Vp, 50, -3.0, 3.0);
  const auto targets = random_ints(N, 51, 0, V);
  const double dloss = 0.37;
  Vec losses(N);
  auto objective = [&] {
    ref::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    double s = 0.0;
    for (double l : losses) s += l;
    return dloss * s;
  };
  Vec dlogits = logits;
  ref::crossentropy_forward_backward(losses.data(), dlogits.data(), targets.data(), dloss, N, V, Vp);
  expect_matches_fd("dlogits", logits, dlogits, objective);
}

}  // namespace
}  // namespace hpct::kernels
