#pragma once
// Helpers shared by the kernel tests: seeded random data (never all zeros) and an all-close check that reports
// the worst element, so that a failure says where and by how much; bf16 and fp16 vectors (random, rounded, widened) for
// the tests of the 16-bit storage types, which all_close and bitwise_equal accept as well.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/exec_context.hpp"
#include "tensor/bf16.hpp"
#include "tensor/fp16.hpp"

namespace hpct::kernels::test {

// The CPU backend's context: the reference every backend test compares with.
inline const ExecContext& cpu_ctx() {
  static const ExecContext c{Device::CPU, nullptr};
  return c;
}

inline size_t sz(int64_t n) { return static_cast<size_t>(n); }

// The value of an element as a double, for comparisons and messages (bf16 widened exactly).
template <typename T>
double value_of(T x) {
  return static_cast<double>(x);
}
inline double value_of(bf16 x) { return static_cast<double>(to_f32(x)); }
inline double value_of(fp16 x) { return static_cast<double>(to_f32(x)); }

// Bitwise equality (NaN payloads and -0.0 included), naming the first difference.
template <typename T>
::testing::AssertionResult bitwise_equal(const std::string& what, const std::vector<T>& got,
                                         const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < got.size(); i++)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure()
             << what << ": element " << i << " differs: got " << value_of(got[i]) << ", want " << value_of(want[i]);
  return ::testing::AssertionSuccess();
}

// Uniform in [lo, hi), from a fixed seed: every test is reproducible, and different seeds give different tensors.
template <typename Real = float>
std::vector<Real> random_vector(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<Real> v(n);
  for (auto& x : v) x = static_cast<Real>(dist(gen));
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t lo, int32_t hi_exclusive) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi_exclusive - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Logits (N, Vp) for the cross-entropy tests: uniform in [-4, 4), row 0 offset by 80 (exp overflows without the max
// subtraction), the padded columns v >= V at 1e4 (they must be masked, not merely multiplied by zero).
inline std::vector<float> cross_entropy_logits(int N, int V, int Vp, uint32_t seed) {
  auto logits = random_vector(static_cast<size_t>(N) * Vp, seed, -4.0, 4.0);
  for (int v = 0; v < V; v++) logits[static_cast<size_t>(v)] += 80.0f;
  for (int n = 0; n < N; n++)
    for (int v = V; v < Vp; v++) logits[static_cast<size_t>(n) * Vp + v] = 1e4f;
  return logits;
}

// Targets in [0, V), with the last and (N > 1) the first class present.
inline std::vector<int32_t> cross_entropy_targets(int N, int V, uint32_t seed) {
  auto t = random_ints(static_cast<size_t>(N), seed, 0, V);
  t[0] = V - 1;
  if (N > 1) t[1] = 0;
  return t;
}

template <typename To, typename From>
std::vector<To> cast_vector(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// ---- bf16 ----------------------------------------------------------------------------------------------------
// Each float rounded to bf16 (nearest even), and back (exact).
inline std::vector<bf16> to_bf16_vector(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = to_bf16(v[i]);
  return out;
}
inline std::vector<float> to_float_vector(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = to_f32(v[i]);
  return out;
}
// Uniform in [lo, hi) as random_vector, rounded to bf16: a bf16 kernel's input. Its float twin, to_float_vector(x),
// holds exactly the same values: the input of the float reference.
inline std::vector<bf16> random_bf16(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return to_bf16_vector(random_vector(n, seed, lo, hi));
}
// The values a float vector takes when stored as bf16 (what a bf16 kernel stores for a float result).
inline std::vector<float> round_to_bf16(const std::vector<float>& v) { return to_float_vector(to_bf16_vector(v)); }

// Relative rounding error of one float -> bf16 rounding (8-bit significand, round to nearest): 2^-8.
inline constexpr double kBf16Rounding = 1.0 / 256.0;

// ---- fp16 (CUDA only: the CPU backend has no fp16 storage) ----------------------------------------------------
inline std::vector<fp16> to_fp16_vector(const std::vector<float>& v) {
  std::vector<fp16> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = to_fp16(v[i]);
  return out;
}
inline std::vector<float> to_float_vector(const std::vector<fp16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = to_f32(v[i]);
  return out;
}

// ---- either 16-bit storage type A (bf16, fp16), for tests written once over A ----------------------------------
// Each float rounded to A (nearest even).
template <typename A>
std::vector<A> to_storage_vector(const std::vector<float>& v) {
  std::vector<A> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = from_f32<A>(v[i]);
  return out;
}
// Uniform in [lo, hi) as random_vector, rounded to A: a kernel's input (keep |values| well inside fp16's 65504).
template <typename A>
std::vector<A> random_storage(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return to_storage_vector<A>(random_vector(n, seed, lo, hi));
}

// The CPU backend as the reference of an op on storage A. bf16: the CPU's own bf16 op (CpuStorage<bf16> = bf16:
// cpu_in and cpu_out pass the vectors through). fp16, which the CPU does not store: the CPU's fp32 op on the inputs
// widened exactly (cpu_in), its outputs rounded once to fp16 (cpu_out): what an fp16 kernel computes, fp32 inside and
// one rounding per stored value. A reference written over CpuStorage<A> serves both.
template <typename A>
using CpuStorage = std::conditional_t<std::is_same_v<A, fp16>, float, A>;
template <typename A>
std::vector<CpuStorage<A>> cpu_in(const std::vector<A>& v) {
  if constexpr (std::is_same_v<A, fp16>) return to_float_vector(v);
  else
    return v;
}
template <typename A>
std::vector<A> cpu_out(const std::vector<CpuStorage<A>>& v) {
  if constexpr (std::is_same_v<A, fp16>) return to_fp16_vector(v);
  else
    return v;
}

template <typename T>
double max_abs(const T* x, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = std::max(m, std::fabs(value_of(x[i])));
  return m;
}

// Passes when |got - want| <= atol + rtol |want| for every element, with atol = atol_rel * max|want| (an absolute
// floor proportional to the tensor's scale: sums that cancel to ~0 are judged against the scale of their terms).
// NaN or Inf in either fails.
template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const A* got, const B* want, size_t n, double rtol,
                                     double atol_rel) {
  const double atol = atol_rel * max_abs(want, n);
  size_t worst = 0, bad = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < n; i++) {
    const double g = value_of(got[i]), w = value_of(want[i]);
    const double tol = atol + rtol * std::fabs(w);
    const double err = std::fabs(g - w);
    const bool ok = std::isfinite(g) && std::isfinite(w) && err <= tol;
    if (!ok) bad++;
    const double excess = std::isfinite(err) ? err / (tol > 0 ? tol : 1e-300) : INFINITY;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << n << " elements differ; worst at " << worst
                                       << ": got " << value_of(got[worst]) << ", want " << value_of(want[worst])
                                       << " (rtol " << rtol << ", atol " << atol << ")";
}

template <typename A, typename B>
::testing::AssertionResult all_close(const std::string& what, const std::vector<A>& got, const std::vector<B>& want,
                                     double rtol, double atol_rel) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": sizes differ (" << got.size() << " vs " << want.size() << ")";
  return all_close(what, got.data(), want.data(), got.size(), rtol, atol_rel);
}

// The log-sum-exp of each row's scaled causal attention scores, L[(b NH + h) T + t] = log sum_{j <= t} exp(scale q_t . k_j)
// with scale 1/sqrt(HS), in double from qkv (B,T,3C) rows [q | k | v]: what the CUDA flash forward keeps for backward.
inline std::vector<double> attention_log_sum_exp_rows(const std::vector<float>& qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const int64_t C3 = 3 * int64_t{C};
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> lse(static_cast<size_t>(int64_t{B} * NH * T)), x(static_cast<size_t>(T));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float* q = qkv.data() + (int64_t{b} * T + t) * C3 + h * HS;
        double m = -INFINITY;
        for (int j = 0; j <= t; j++) {
          const float* k = qkv.data() + (int64_t{b} * T + j) * C3 + C + h * HS;
          double dot = 0.0;
          for (int d = 0; d < HS; d++) dot += static_cast<double>(q[d]) * k[d];
          x[static_cast<size_t>(j)] = dot * scale;
          m = std::max(m, x[static_cast<size_t>(j)]);
        }
        double s = 0.0;
        for (int j = 0; j <= t; j++) s += std::exp(x[static_cast<size_t>(j)] - m);
        lse[static_cast<size_t>((int64_t{b} * NH + h) * T + t)] = m + std::log(s);
      }
  return lse;
}

}  // namespace hpct::kernels::test
