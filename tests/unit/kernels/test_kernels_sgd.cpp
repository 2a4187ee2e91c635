// sgd_update (kernels/ops.inc): the CPU backend vs its reference twin (float) and vs torch.optim.SGD
// written out in double, over several steps, for every flag combination the optimizer uses.
// Legend: n elements of one flat parameter range.
//
// Tolerances: a step is 4-5 float operations per element with |p| <= 1, lr <= 0.1, |g| <= ~1: after 4 steps the
// float result is within a few ulps (~1e-7 relative, 1e-6 with margin) of the double one; the backend and the
// reference do the same operations in the same order, up to FMA contraction (1e-6 again).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kernel_test_util.hpp"
#include "kernels/kernels.hpp"
#include "kernels/reference/reference_sgd.hpp"

namespace hpct::kernels {
namespace {

namespace ref = hpct::kernels::reference;
using test::all_close;
using test::random_vector;

const ExecContext kCpu{Device::CPU, nullptr};

struct SgdCase {
  float momentum, dampening, weight_decay;
  bool nesterov;
};

// n above the backend's serial threshold (1 << 14), so the OpenMP path runs.
void check_sgd_steps(const SgdCase& c, int64_t n) {
  const float lr = 0.05f, gscale = 0.7f;
  auto p = random_vector(static_cast<size_t>(n), 200);
  std::vector<float> buf(n, 0.0f);
  auto p_ref = p, buf_ref = buf;
  std::vector<double> pd(p.begin(), p.end()), bd(n, 0.0);
  for (int t = 1; t <= 4; t++) {
    const auto g = random_vector(static_cast<size_t>(n), 210 + t);
    const float step_lr = lr * static_cast<float>(t);  // a schedule changes lr between steps
    sgd_update(kCpu, p.data(), g.data(), buf.data(), n, step_lr, c.momentum, c.dampening, c.weight_decay, c.nesterov,
               gscale, t == 1);
    ref::sgd_update(p_ref.data(), g.data(), buf_ref.data(), n, step_lr, c.momentum, c.dampening, c.weight_decay,
                    c.nesterov, gscale, t == 1);
    for (int64_t i = 0; i < n; i++) {  // torch.optim.SGD, written out in double
      double d = static_cast<double>(g[i]) * gscale + static_cast<double>(c.weight_decay) * pd[i];
      if (c.momentum != 0.0f) {
        bd[i] = t == 1 ? d : static_cast<double>(c.momentum) * bd[i] + (1.0 - c.dampening) * d;
        d = c.nesterov ? d + static_cast<double>(c.momentum) * bd[i] : bd[i];
      }
      pd[i] -= static_cast<double>(step_lr) * d;
    }
  }
  EXPECT_TRUE(all_close("sgd p vs double", p.data(), pd.data(), static_cast<size_t>(n), 1e-6, 1e-6));
  EXPECT_TRUE(all_close("sgd p vs reference", p, p_ref, 1e-6, 1e-6));
  if (c.momentum != 0.0f) {
    EXPECT_TRUE(all_close("sgd buf vs double", buf.data(), bd.data(), static_cast<size_t>(n), 1e-6, 1e-6));
    EXPECT_TRUE(all_close("sgd buf vs reference", buf, buf_ref, 1e-6, 1e-6));
  } else {  // no momentum: the buffer is not touched (torch keeps none)
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(buf[i], 0.0f) << i;
  }
  // the parameters moved: a kernel that did nothing would pass the reference comparison only if both did nothing
  const auto p0 = random_vector(static_cast<size_t>(n), 200);
  EXPECT_FALSE(all_close("sgd moved", p.data(), p0.data(), static_cast<size_t>(n), 1e-3, 1e-3));
}

TEST(KernelsSgd, MomentumFourStepsMatchTorchInDouble) { check_sgd_steps({0.9f, 0.0f, 1e-2f, false}, 50001); }
TEST(KernelsSgd, NesterovFourStepsMatchTorchInDouble) { check_sgd_steps({0.9f, 0.0f, 1e-2f, true}, 50001); }
TEST(KernelsSgd, DampeningNoDecay) { check_sgd_steps({0.8f, 0.25f, 0.0f, false}, 4099); }
TEST(KernelsSgd, PlainSgdWithoutMomentum) { check_sgd_steps({0.0f, 0.0f, 5e-2f, false}, 50001); }

// torch.optim.SGD creates the buffer as a copy of the first gradient: whatever the buffer held before (planned,
// uninitialised memory; a NaN here) must not leak into the first update.
TEST(KernelsSgd, FirstStepOverwritesTheBuffer) {
  const int64_t n = 33;
  auto p = random_vector(n, 220);
  const auto g = random_vector(n, 221);
  std::vector<float> buf(n, std::numeric_limits<float>::quiet_NaN());
  const auto p0 = p;
  sgd_update(kCpu, p.data(), g.data(), buf.data(), n, 0.1f, 0.9f, 0.0f, 0.0f, false, 1.0f, true);
  for (int64_t i = 0; i < n; i++) {
    ASSERT_EQ(buf[i], g[i]) << i;
    ASSERT_FLOAT_EQ(p[i], p0[i] - 0.1f * g[i]) << i;
  }
}

TEST(KernelsSgd, NesterovNeedsMomentumAndNoDampening) {
  std::vector<float> p(4, 1.0f), g(4, 1.0f), buf(4, 0.0f);
  EXPECT_THROW(sgd_update(kCpu, p.data(), g.data(), buf.data(), 4, 0.1f, 0.0f, 0.0f, 0.0f, true, 1.0f, true),
               hpct::Error);
  EXPECT_THROW(sgd_update(kCpu, p.data(), g.data(), buf.data(), 4, 0.1f, 0.9f, 0.1f, 0.0f, true, 1.0f, true),
               hpct::Error);
  EXPECT_THROW(sgd_update(kCpu, p.data(), g.data(), nullptr, 4, 0.1f, 0.9f, 0.0f, 0.0f, false, 1.0f, true),
               hpct::Error);
}

}  // namespace
}  // namespace hpct::kernels
