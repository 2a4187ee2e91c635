// Vocabulary parallelism: the vocab-parallel embedding and softmax cross-entropy kernels (kernels.hpp).
// Legend: B batch, T time, C channels, N = B*T rows, V true vocabulary, Vp padded vocabulary (multiple of 128),
//         t simulated TP ranks; rank r holds the rows/columns [v0, v0+Vl) of Vp, v0 = r*Vl, Vl = Vp/t.
//
// (i)  CPU backend vs the reference twins (float), one rank's slice at a time, including a slice of padding only.
// (ii) t = 1, 2, 4, 8 ranks simulated in one process: the model's allreduces are played by the test (MAX, then SUM,
//      in rank order) between the kernel calls, and the result is compared with the serial kernels:
//      - embedding: exact. With wpe passed on rank 0 only, every element of the rank sum has at most two non-zero
//        terms (wte[token], wpe[t]) whose float sum is the serial one's; dwte rows are added in the serial order;
//      - cross-entropy: the max and the target logit are exact (a max; one non-zero term), so the only difference is
//        the order of the sum of exponentials: t per-rank float sums of Vl/8 SIMD lanes each, then t-1 adds, instead
//        of one. Both orders err by at most ~(V/8 + t + 3) * 2^-24 ~ 2e-6 relative to the (positive-term) sum and
//        typically by ~1e-7; dlogits = dloss e/s inherit that relative error, the loss log(s) + max - x_tgt an
//        absolute one of the same size. Hence rtol 2e-6 with an absolute floor of 1e-6 of the tensor's scale (for
//        the dlogits ~0 and for the loss ~0 of a row whose target dominates); a wrong mask, a missing target term or
//        a wrong normaliser is O(1e-2..1) and fails by orders of magnitude.
//      The same in double with the reference twins, where the order changes the sum by ~1e-16 relative: 1e-12.
// (iii) No finite-difference test of its own: (ii) shows in double that the composed reference phases equal the
//      serial reference crossentropy_forward_backward to 1e-12, and test_kernels_gradcheck.cpp checks that one
//      against finite differences; (i) ties the CPU backend to the reference twins. A gradient check here would
//      re-test the same function.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"
#include "kernels/reference/reference.hpp"

namespace hpct::kernels {
namespace {

namespace ref = hpct::kernels::reference;
using test::all_close;
using test::cross_entropy_logits;
using test::random_ints;
using test::random_vector;

const ExecContext kCpu{Device::CPU, nullptr};

// Columns [v0, v0+Vl) of the row-major (N, Vp) matrix x: one rank's (N, Vl) slice.
template <typename Real>
std::vector<Real> column_block(const std::vector<Real>& x, int N, int Vp, int v0, int Vl) {
  std::vector<Real> out(static_cast<size_t>(N) * Vl);
  for (int n = 0; n < N; n++)
    std::copy_n(x.begin() + static_cast<size_t>(n) * Vp + v0, Vl, out.begin() + static_cast<size_t>(n) * Vl);
  return out;
}

// Writes the (N, Vl) block back into columns [v0, v0+Vl) of the (N, Vp) matrix x.
template <typename Real>
void put_column_block(std::vector<Real>& x, const std::vector<Real>& block, int N, int Vp, int v0, int Vl) {
  for (int n = 0; n < N; n++)
    std::copy_n(block.begin() + static_cast<size_t>(n) * Vl, Vl, x.begin() + static_cast<size_t>(n) * Vp + v0);
}

// max_i |got_i - want_i| / max(|want_i|, floor * max|want|): the worst relative error, reported in the XML output.
template <typename A, typename B>
double worst_rel_err(const std::vector<A>& got, const std::vector<B>& want, double floor) {
  const double scale = floor * test::max_abs(want.data(), want.size()) + 1e-300;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); i++) {
    const double w = static_cast<double>(want[i]);
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - w) / std::max(std::fabs(w), scale));
  }
  return worst;
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- (i) CPU backend vs reference, one slice ------------------------------------------------------------------
TEST(KernelsVocabParallel, EncoderCpuVsReference) {
  const int B = 3, T = 67, C = 48, N = B * T;
  // (v0, Vl): a first slice, a middle one, and a slice no token falls in (tokens < 200)
  for (const auto& [v0, Vl] : {std::pair{0, 128}, std::pair{128, 64}, std::pair{224, 32}}) {
    for (bool with_wpe : {true, false}) {
      SCOPED_TRACE("v0=" + std::to_string(v0) + " Vl=" + std::to_string(Vl) + (with_wpe ? " wpe" : " no wpe"));
      const auto inp = random_ints(N, 200, 0, 200);
      const auto wte_local = random_vector(static_cast<size_t>(Vl) * C, 201);
      const auto wpe = random_vector(static_cast<size_t>(T) * C, 202);
      const float* wpe_p = with_wpe ? wpe.data() : nullptr;
      std::vector<float> out(static_cast<size_t>(N) * C, NAN), out_ref(out.size());
      encoder_forward_vocab_parallel(kCpu, out.data(), inp.data(), wte_local.data(), wpe_p, v0, Vl, B, T, C);
      ref::encoder_forward_vocab_parallel(out_ref.data(), inp.data(), wte_local.data(), wpe_p, v0, Vl, B, T, C);
      EXPECT_TRUE(all_close("vp encoder out", out, out_ref, 0, 0));  // at most one add: exact

      const auto dout = random_vector(out.size(), 203);
      auto dwte = random_vector(wte_local.size(), 204), dwpe = random_vector(wpe.size(), 205);  // += : non-zero start
      auto dwte_ref = dwte, dwpe_ref = dwpe;
      const auto dwte_before = dwte, dwpe_before = dwpe;
      float* dwpe_p = with_wpe ? dwpe.data() : nullptr;
      float* dwpe_ref_p = with_wpe ? dwpe_ref.data() : nullptr;
      encoder_backward_vocab_parallel(kCpu, dwte.data(), dwpe_p, dout.data(), inp.data(), v0, Vl, B, T, C);
      ref::encoder_backward_vocab_parallel(dwte_ref.data(), dwpe_ref_p, dout.data(), inp.data(), v0, Vl, B, T, C);
      EXPECT_TRUE(all_close("vp dwte", dwte, dwte_ref, 0, 0));  // positions added in the same order: exact
      EXPECT_TRUE(all_close("vp dwpe", dwpe, dwpe_ref, 0, 0));
      if (!with_wpe) {
        EXPECT_TRUE(same_bits(dwpe, dwpe_before)) << "dwpe = null must leave dwpe alone";
      }
      if (v0 >= 200) {
        EXPECT_TRUE(same_bits(dwte, dwte_before)) << "no token in range: dwte_local unchanged";
      } else {
        EXPECT_FALSE(same_bits(dwte, dwte_before));
      }
    }
  }
}

TEST(KernelsVocabParallel, CrossEntropyCpuVsReference) {
  struct Slice {
    int N, V, v0, Vl;
  };
  // all real; partly padded (V = 200 in [128, 256)); padded only; a wider slice of V = 1000, Vp = 1024, t = 2
  for (const Slice& s :
       {Slice{67, 200, 0, 128}, Slice{67, 200, 128, 128}, Slice{67, 200, 224, 32}, Slice{33, 1000, 512, 512}}) {
    SCOPED_TRACE("N" + std::to_string(s.N) + " V" + std::to_string(s.V) + " v0=" + std::to_string(s.v0) +
                 " Vl=" + std::to_string(s.Vl));
    const int N = s.N, Vl = s.Vl, Vr = std::clamp(s.V - s.v0, 0, Vl);
    auto logits = random_vector(static_cast<size_t>(N) * Vl, 210, -4.0, 4.0);
    for (int v = 0; v < Vr; v++) logits[v] += 80.0f;
    for (int n = 0; n < N; n++)
      for (int v = Vr; v < Vl; v++) logits[static_cast<size_t>(n) * Vl + v] = 1e4f;  // padding: must be masked
    const auto targets = random_ints(N, 211, 0, s.V);

    // a) local max: exact
    std::vector<float> mx(N, NAN), mx_ref(N);
    crossentropy_vp_local_max(kCpu, mx.data(), logits.data(), s.v0, Vl, s.V, N);
    ref::crossentropy_vp_local_max(mx_ref.data(), logits.data(), s.v0, Vl, s.V, N);
    if (Vr == 0) {
      for (int n = 0; n < N; n++) EXPECT_EQ(mx[n], -INFINITY) << "padding only: the MAX identity";
    } else {
      EXPECT_TRUE(all_close("vp local max", mx, mx_ref, 0, 0));
    }

    // the "other ranks": a global max >= the local one (finite even when this slice is padding only)
    const auto other_max = random_vector(N, 212, -4.0, 5.0);
    std::vector<float> gmax(N);
    for (int n = 0; n < N; n++) gmax[n] = std::max(mx[n], other_max[n] + (n == 0 ? 80.0f : 0.0f));

    // b) local sum of exponentials and target logit
    std::vector<float> se(N, NAN), tl(N, NAN), se_ref(N), tl_ref(N);
    crossentropy_vp_local_sumexp(kCpu, se.data(), tl.data(), logits.data(), gmax.data(), targets.data(), s.v0, Vl, s.V,
                                 N);
    ref::crossentropy_vp_local_sumexp(se_ref.data(), tl_ref.data(), logits.data(), gmax.data(), targets.data(), s.v0,
                                      Vl, s.V, N);
    // exp_simd within 1.5 ulp of libm, and sums of up to 512 terms in another order (SIMD lanes)
    EXPECT_TRUE(all_close("vp local sumexp", se, se_ref, 2e-5, 2e-5));
    EXPECT_TRUE(all_close("vp target logit", tl, tl_ref, 0, 0));  // a copy or 0
    int in_range = 0;
    for (int n = 0; n < N; n++) in_range += targets[n] >= s.v0 && targets[n] < s.v0 + Vl;
    if (Vr > 0) {
      EXPECT_GT(in_range, 0) << "the test must exercise targets in this slice";
    }

    // c) the global statistics as the SUM allreduce would give them (other ranks add >= 0 to sumexp)
    const auto other_se = random_vector(N, 213, 0.0, 30.0);
    const auto other_tl = random_vector(N, 214, -4.0, 4.0);
    std::vector<float> gse(N), gtl(N);
    for (int n = 0; n < N; n++) {
      const bool mine = targets[n] >= s.v0 && targets[n] < s.v0 + Vl;
      gse[n] = se[n] + other_se[n] + 1.0f;  // >= 1, as a real global sum (the max column contributes 1)
      gtl[n] = mine ? tl[n] : other_tl[n];
    }
    const float dloss = 1.0f / 37.0f;
    std::vector<float> losses(N, NAN), losses_ref(N), losses_fwd(N, NAN);
    auto dlogits = logits, dlogits_ref = logits;
    crossentropy_vp_loss_backward(kCpu, losses.data(), dlogits.data(), gmax.data(), gse.data(), gtl.data(),
                                  targets.data(), dloss, s.v0, Vl, s.V, N);
    ref::crossentropy_vp_loss_backward(losses_ref.data(), dlogits_ref.data(), gmax.data(), gse.data(), gtl.data(),
                                       targets.data(), dloss, s.v0, Vl, s.V, N);
    // losses: log(s) + max - x_tgt with terms up to ~85, summed in another order: ~85 * 2^-24 absolute
    EXPECT_TRUE(all_close("vp losses", losses, losses_ref, 2e-5, 2e-5));
    EXPECT_TRUE(all_close("vp dlogits", dlogits, dlogits_ref, 2e-5, 2e-5));
    size_t nonzero_pad = 0;
    for (int n = 0; n < N; n++)
      for (int v = Vr; v < Vl; v++) nonzero_pad += dlogits[static_cast<size_t>(n) * Vl + v] != 0.0f;
    EXPECT_EQ(nonzero_pad, 0u) << "padded columns must get exactly zero gradient";

    // evaluation: the same losses from the statistics alone
    crossentropy_vp_loss(kCpu, losses_fwd.data(), gmax.data(), gse.data(), gtl.data(), N);
    EXPECT_TRUE(all_close("vp forward-only losses", losses_fwd, losses, 0, 0));  // the same expression
  }
}

TEST(KernelsVocabParallel, CrossEntropyRejectsBadTargetsAndSlices) {
  const int N = 2, Vl = 64;
  std::vector<float> logits(N * Vl, 0.5f), a(N), b(N), gmax(N, 0.5f);
  const std::vector<int32_t> bad = {3, 100};  // 100 >= V = 90: a padded column, whichever rank holds it
  EXPECT_THROW(crossentropy_vp_local_sumexp(kCpu, a.data(), b.data(), logits.data(), gmax.data(), bad.data(), 64, Vl,
                                            90, N),
               hpct::Error);
  EXPECT_THROW(crossentropy_vp_loss_backward(kCpu, a.data(), logits.data(), gmax.data(), gmax.data(), gmax.data(),
                                             bad.data(), 1.0f, 0, Vl, 90, N),
               hpct::Error);
  EXPECT_THROW(crossentropy_vp_local_max(kCpu, a.data(), logits.data(), -64, Vl, 90, N), hpct::Error);
}

// ---- (ii) t simulated ranks vs the serial kernels ---------------------------------------------------------------
TEST(KernelsVocabParallel, EncoderRanksEqualSerial) {
  const int B = 3, T = 67, C = 48, N = B * T, Vp = 256, V = 200;
  const auto inp = random_ints(N, 220, 0, V);  // rank 7 of t = 8 ([224, 256)) gets no token
  const auto wte = random_vector(static_cast<size_t>(Vp) * C, 221);
  const auto wpe = random_vector(static_cast<size_t>(T) * C, 222);
  const auto dout = random_vector(static_cast<size_t>(N) * C, 223);
  const auto dwte0 = random_vector(wte.size(), 224), dwpe0 = random_vector(wpe.size(), 225);  // += : non-zero start

  std::vector<float> out_serial(static_cast<size_t>(N) * C);
  encoder_forward(kCpu, out_serial.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  auto dwte_serial = dwte0, dwpe_serial = dwpe0;
  encoder_backward(kCpu, dwte_serial.data(), dwpe_serial.data(), dout.data(), inp.data(), B, T, C);

  for (int t : {1, 2, 4, 8}) {
    SCOPED_TRACE("t=" + std::to_string(t));
    const int Vl = Vp / t;
    std::vector<float> out_sum(out_serial.size(), 0.0f), dwte_cat(wte.size());
    for (int r = 0; r < t; r++) {
      const int v0 = r * Vl;
      const std::vector<float> wte_local(wte.begin() + static_cast<size_t>(v0) * C,
                                         wte.begin() + static_cast<size_t>(v0 + Vl) * C);  // (Vl, C)
      std::vector<float> out(out_serial.size(), NAN);
      encoder_forward_vocab_parallel(kCpu, out.data(), inp.data(), wte_local.data(), r == 0 ? wpe.data() : nullptr, v0,
                                     Vl, B, T, C);
      for (size_t i = 0; i < out.size(); i++) out_sum[i] += out[i];  // the allreduce(SUM), in rank order

      std::vector<float> dwte_local(dwte0.begin() + static_cast<size_t>(v0) * C,
                                    dwte0.begin() + static_cast<size_t>(v0 + Vl) * C);  // (Vl, C)
      auto dwpe = dwpe0;                                                                // every rank's replica of wpe
      encoder_backward_vocab_parallel(kCpu, dwte_local.data(), dwpe.data(), dout.data(), inp.data(), v0, Vl, B, T, C);
      std::copy(dwte_local.begin(), dwte_local.end(), dwte_cat.begin() + static_cast<size_t>(v0) * C);
      EXPECT_TRUE(all_close("rank dwpe vs serial", dwpe, dwpe_serial, 0, 0)) << "rank " << r;
    }
    EXPECT_TRUE(all_close("sum of rank outputs vs encoder_forward", out_sum, out_serial, 0, 0));
    EXPECT_TRUE(all_close("concatenated dwte vs encoder_backward", dwte_cat, dwte_serial, 0, 0));
  }
}

// One simulated TP group running the three phases; returns the rank-0 losses and the concatenated dlogits (N, Vp).
// Real is float for the CPU backend (use_cpu) and float or double for the reference twins.
template <typename Real, bool kCpuBackend>
void run_vp_crossentropy(int t, const std::vector<Real>& logits, const std::vector<int32_t>& targets, Real dloss, int N,
                         int V, int Vp, std::vector<Real>& losses, std::vector<Real>& dlogits) {
  const int Vl = Vp / t;
  std::vector<std::vector<Real>> local(t);
  std::vector<Real> gmax(N, -INFINITY), gse(N, Real(0)), gtl(N, Real(0)), mx(N), se(N), tl(N);
  for (int r = 0; r < t; r++) {  // a) local max, then allreduce(MAX)
    local[r] = column_block(logits, N, Vp, r * Vl, Vl);
    if constexpr (kCpuBackend) crossentropy_vp_local_max(kCpu, mx.data(), local[r].data(), r * Vl, Vl, V, N);
    else
      ref::crossentropy_vp_local_max(mx.data(), local[r].data(), r * Vl, Vl, V, N);
    for (int n = 0; n < N; n++) gmax[n] = std::max(gmax[n], mx[n]);
  }
  for (int r = 0; r < t; r++) {  // b) local sums, then allreduce(SUM) in rank order
    if constexpr (kCpuBackend)
      crossentropy_vp_local_sumexp(kCpu, se.data(), tl.data(), local[r].data(), gmax.data(), targets.data(), r * Vl, Vl,
                                   V, N);
    else
      ref::crossentropy_vp_local_sumexp(se.data(), tl.data(), local[r].data(), gmax.data(), targets.data(), r * Vl, Vl,
                                        V, N);
    for (int n = 0; n < N; n++) {
      gse[n] += se[n];
      gtl[n] += tl[n];
    }
  }
  dlogits.assign(static_cast<size_t>(N) * Vp, Real(NAN));
  std::vector<Real> losses_r(N);
  for (int r = 0; r < t; r++) {  // c) losses and dlogits, in place in each rank's slice
    if constexpr (kCpuBackend)
      crossentropy_vp_loss_backward(kCpu, losses_r.data(), local[r].data(), gmax.data(), gse.data(), gtl.data(),
                                    targets.data(), dloss, r * Vl, Vl, V, N);
    else
      ref::crossentropy_vp_loss_backward(losses_r.data(), local[r].data(), gmax.data(), gse.data(), gtl.data(),
                                         targets.data(), dloss, r * Vl, Vl, V, N);
    put_column_block(dlogits, local[r], N, Vp, r * Vl, Vl);
    if (r == 0) {
      losses = losses_r;
    } else {
      EXPECT_EQ(std::memcmp(losses.data(), losses_r.data(), N * sizeof(Real)), 0) << "rank " << r << " losses";
    }
  }
  if constexpr (kCpuBackend) {  // evaluation path: the same losses from the reduced statistics
    std::vector<Real> losses_fwd(N, NAN);
    crossentropy_vp_loss(kCpu, losses_fwd.data(), gmax.data(), gse.data(), gtl.data(), N);
    EXPECT_TRUE(all_close("forward-only losses", losses_fwd, losses, 0, 0));
  }
}

TEST(KernelsVocabParallel, CrossEntropyRanksEqualSerial) {
  const int N = 67, Vp = 256;
  const float dloss = 1.0f / 37.0f;
  for (int V : {200, 256}) {
    const auto logits = cross_entropy_logits(N, V, Vp, 230 + V);
    const auto targets = random_ints(N, 231 + V, 0, V);
    std::vector<float> losses_serial(N), losses_fwd_serial(N);
    auto dlogits_serial = logits;
    crossentropy_forward(kCpu, losses_fwd_serial.data(), logits.data(), targets.data(), N, V, Vp);
    crossentropy_forward_backward(kCpu, losses_serial.data(), dlogits_serial.data(), targets.data(), dloss, N, V, Vp);
    // double: the serial reference (gradient-checked in test_kernels_gradcheck.cpp) vs the composed vp reference
    const auto logits_d = test::cast_vector<double>(logits);
    std::vector<double> losses_serial_d(N);
    auto dlogits_serial_d = logits_d;
    ref::crossentropy_forward_backward(losses_serial_d.data(), dlogits_serial_d.data(), targets.data(),
                                       static_cast<double>(dloss), N, V, Vp);

    for (int t : {1, 2, 4, 8}) {  // t = 8 with V = 200: rank 7 ([224, 256)) holds padding only
      const std::string tag = "t" + std::to_string(t) + "_V" + std::to_string(V);
      SCOPED_TRACE(tag);
      std::vector<float> losses, dlogits;
      run_vp_crossentropy<float, true>(t, logits, targets, dloss, N, V, Vp, losses, dlogits);
      EXPECT_TRUE(all_close("vp losses vs crossentropy_forward_backward", losses, losses_serial, 2e-6, 1e-6));
      EXPECT_TRUE(all_close("vp losses vs crossentropy_forward", losses, losses_fwd_serial, 2e-6, 1e-6));
      EXPECT_TRUE(all_close("vp dlogits vs crossentropy_forward_backward", dlogits, dlogits_serial, 2e-6, 1e-6));
      // the padded columns are exactly zero in both; the max and target logit are exact, so at t = 1 (one partial
      // sum, the serial loop) the whole result is the serial one bit for bit
      if (t == 1) {
        EXPECT_TRUE(same_bits(losses, losses_serial)) << "t = 1 must reproduce the serial kernel bit for bit";
        EXPECT_TRUE(same_bits(dlogits, dlogits_serial)) << "t = 1 must reproduce the serial kernel bit for bit";
      }
      ::testing::Test::RecordProperty("worst_rel_losses_" + tag, sci(worst_rel_err(losses, losses_serial, 1e-6)));
      ::testing::Test::RecordProperty("worst_rel_dlogits_" + tag, sci(worst_rel_err(dlogits, dlogits_serial, 1e-6)));

      std::vector<double> losses_d, dlogits_d;
      run_vp_crossentropy<double, false>(t, logits_d, targets, static_cast<double>(dloss), N, V, Vp, losses_d,
                                         dlogits_d);
      EXPECT_TRUE(all_close("vp reference losses (double)", losses_d, losses_serial_d, 1e-12, 1e-12));
      EXPECT_TRUE(all_close("vp reference dlogits (double)", dlogits_d, dlogits_serial_d, 1e-12, 1e-12));
      ::testing::Test::RecordProperty("worst_rel_dlogits_double_" + tag,
                                      sci(worst_rel_err(dlogits_d, dlogits_serial_d, 1e-12)));
    }
  }
}

// ---- determinism: the vp kernels do not depend on the number of threads ------------------------------------------
TEST(KernelsVocabParallel, BitwiseIndependentOfThreadCount) {
  const int B = 2, T = 150, C = 96, N = B * T, V = 200, v0 = 64, Vl = 128;
  const auto inp = random_ints(N, 240, 0, V);
  const auto dout = random_vector(static_cast<size_t>(N) * C, 241);
  const auto logits = random_vector(static_cast<size_t>(N) * Vl, 242, -4.0, 4.0);
  const auto targets = random_ints(N, 243, 0, V);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> dwte(static_cast<size_t>(Vl) * C), dwpe(static_cast<size_t>(T) * C), mx(N), se(N), tl(N),
        losses(N);
    encoder_backward_vocab_parallel(kCpu, dwte.data(), dwpe.data(), dout.data(), inp.data(), v0, Vl, B, T, C);
    auto dl = logits;
    crossentropy_vp_local_max(kCpu, mx.data(), dl.data(), v0, Vl, V, N);
    crossentropy_vp_local_sumexp(kCpu, se.data(), tl.data(), dl.data(), mx.data(), targets.data(), v0, Vl, V, N);
    for (int n = 0; n < N; n++) se[n] += 1.0f;  // as if another rank had contributed
    crossentropy_vp_loss_backward(kCpu, losses.data(), dl.data(), mx.data(), se.data(), tl.data(), targets.data(),
                                  0.01f, v0, Vl, V, N);
    omp_set_num_threads(saved);
    return std::vector<std::vector<float>>{dwte, dwpe, se, losses, dl};
  };
  const auto one = run(1), three = run(3);
  for (size_t i = 0; i < one.size(); i++) EXPECT_TRUE(same_bits(one[i], three[i])) << "output " << i;
}

TEST(KernelsVocabParallel, CudaContextFailsWithAClearMessage) {
  const ExecContext cuda{Device::CUDA, nullptr};
  std::vector<float> x(16, 1.0f);
  try {
    crossentropy_vp_local_max(cuda, x.data(), x.data(), 0, 16, 16, 1);
    FAIL() << "expected hpct::Error";
  } catch (const hpct::Error& e) {
    EXPECT_NE(e.cause().find("crossentropy_vp_local_max"), std::string::npos) << e.cause();
  }
}

}  // namespace
}  // namespace hpct::kernels
