#pragma once
// Chan's parallel merge of per-channel BatchNorm statistics (SyncBN, docs/parallelism.md). Host and device code
// (kept C++17-clean for nvcc). Legend: count = elements seen, mean, M2 = sum of squared deviations from mean.
//
// Chan, Golub, LeVeque (1979): two disjoint sets a and b with (n_a, mean_a, M2_a), (n_b, mean_b, M2_b) give
//   n     = n_a + n_b
//   delta = mean_b - mean_a
//   mean  = mean_a + delta * n_b / n
//   M2    = M2_a + M2_b + delta^2 * n_a * n_b / n
// Exact in real arithmetic; in floating point it never forms E[x^2] - mean^2, so it has no catastrophic
// cancellation when |mean| >> std. Biased variance M2 / n (normalisation), unbiased M2 / (n - 1) (running_var).
// An empty set (n = 0) is the identity. Merge in a fixed (rank) order so that every rank gets the same bits.
#if defined(__CUDACC__)
#define HPCT_HOST_DEVICE __host__ __device__
#else
#define HPCT_HOST_DEVICE
#endif

namespace hpct::kernels {

template <typename Real>
struct BnStats {
  Real count;
  Real mean;
  Real m2;
};

template <typename Real>
HPCT_HOST_DEVICE inline BnStats<Real> batchnorm_merge_stats(const BnStats<Real>& a, const BnStats<Real>& b) {
  const Real n = a.count + b.count;
  if (b.count == Real(0)) return a;
  if (a.count == Real(0)) return b;
  const Real delta = b.mean - a.mean;
  BnStats<Real> r;
  r.count = n;
  r.mean = a.mean + delta * (b.count / n);
  r.m2 = a.m2 + b.m2 + delta * delta * (a.count * b.count / n);
  return r;
}

}  // namespace hpct::kernels

#undef HPCT_HOST_DEVICE
