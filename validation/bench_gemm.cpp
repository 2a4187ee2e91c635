// bench_gemm: single-precision GEMM throughput of the CPU libraries we may route the kernels' GEMMs through:
//   OpenBLAS        one cblas_sgemm call (OpenMP build), OpenBLAS threads it itself;
//   OpenBLAS slabs  what the CPU backend does (lib/kernels/cpu/cpu_gemm.hpp): C split into one slab per OpenMP
//                   thread, each a single-threaded cblas_sgemm inside an `omp parallel` region;
//   and, when built with oneDNN, dnnl_sgemm and the oneDNN matmul primitive.
// Shapes: 1024^3, and every GEMM of the GPT training step (B=8, T=256 -> N=2048 rows, C=256, vocabulary 256):
//   forward   Y (N,OC) = X (N,C) W^T          "NT"  M=N,  N=OC, K=C
//   backward  dX (N,C) = dY (N,OC) W (OC,C)   "NN"  M=N,  N=C,  K=OC
//             dW (OC,C) = dY^T (OC,N) X (N,C) "TN"  M=OC, N=C,  K=N
// Row-major everywhere, as the kernels call them. Each case: 5 warm-up calls, then the median (and min, max) of
// `--reps` timed calls (default 30); GFLOP/s = 2 M N K / median. Every library's result is checked against
// OpenBLAS's (max |diff| / max |C| < 1e-5, else the case counts as wrong).
// Last, the GEMM time of one GPT step (L = 4 layers: 4 x each per-layer GEMM + the logits) per library.
//
// Usage: OMP_NUM_THREADS=2 bench_gemm [--reps N]
// Output ends in `VERDICT: <library> fastest on the GPT step GEMMs (x.xx ms vs ...)`.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#ifdef HPCT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "kernels/cpu/cpu_gemm.hpp"

namespace {

struct Case {
  const char* name;
  bool trans_a, trans_b;
  int M, N, K;
  int per_step;  // how many times one GPT training step (L = 4) runs this GEMM; 0 for the square reference
};

// C (M,N) = op(A) op(B); op(A) is (M,K), op(B) is (K,N); A stored (M,K) or, transposed, (K,M); likewise B.
const Case kCases[] = {
    {"square 1024^3", false, false, 1024, 1024, 1024, 0},
    {"fwd qkv     2048x256->768", false, true, 2048, 768, 256, 4},
    {"fwd attproj 2048x256->256", false, true, 2048, 256, 256, 4},
    {"fwd fc      2048x256->1024", false, true, 2048, 1024, 256, 4},
    {"fwd fcproj  2048x1024->256", false, true, 2048, 256, 1024, 4},
    {"fwd logits  2048x256->256", false, true, 2048, 256, 256, 1},
    {"bwd dX qkv     (768->256)", false, false, 2048, 256, 768, 4},
    {"bwd dX attproj (256->256)", false, false, 2048, 256, 256, 4},
    {"bwd dX fc      (1024->256)", false, false, 2048, 256, 1024, 4},
    {"bwd dX fcproj  (256->1024)", false, false, 2048, 1024, 256, 4},
    {"bwd dX logits  (256->256)", false, false, 2048, 256, 256, 1},
    {"bwd dW qkv     768x256", true, false, 768, 256, 2048, 4},
    {"bwd dW attproj 256x256", true, false, 256, 256, 2048, 4},
    {"bwd dW fc      1024x256", true, false, 1024, 256, 2048, 4},
    {"bwd dW fcproj  256x1024", true, false, 256, 1024, 2048, 4},
    {"bwd dW logits  256x256", true, false, 256, 256, 2048, 1},
};

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;
  bool ok = true;
  bool ran = false;
};

Timing time_it(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 5; i++) fn();  // warm-up: thread pool, packing buffers, caches, primitive JIT
  std::vector<double> t(reps);
  for (int i = 0; i < reps; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::sort(t.begin(), t.end());
  Timing r;
  r.median_s = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  r.min_s = t.front();
  r.max_s = t.back();
  r.ran = true;
  return r;
}

bool same_result(const std::vector<float>& got, const std::vector<float>& want) {
  double maxdiff = 0, maxabs = 0;
  for (size_t i = 0; i < want.size(); i++) {
    maxdiff = std::max(maxdiff, static_cast<double>(std::fabs(got[i] - want[i])));
    maxabs = std::max(maxabs, static_cast<double>(std::fabs(want[i])));
  }
  return std::isfinite(maxdiff) && maxdiff <= 1e-5 * maxabs;
}

std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "unknown";
  char line[512];
  std::string model = "unknown";
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "model name", 10) == 0) {
      const char* colon = std::strchr(line, ':');
      if (colon) model = std::string(colon + 2);
      if (!model.empty() && model.back() == '\n') model.pop_back();
      break;
    }
  }
  std::fclose(f);
  return model;
}

double gflops(const Case& c, double s) { return 2.0 * c.M * c.N * c.K / s * 1e-9; }

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(20, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: OMP_NUM_THREADS=n %s [--reps N>=20]\n", argv[0]);
      return 2;
    }
  }
  std::printf("# bench_gemm: sgemm GFLOP/s (median of %d after 5 warm-up calls), row-major, fp32\n", reps);
  std::printf("# cpu: %s | OpenMP threads: %d | OpenBLAS: %s (parallel mode %d: 2 = OpenMP)\n", cpu_model().c_str(),
              omp_get_max_threads(), openblas_get_config(), openblas_get_parallel());
#ifdef HPCT_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  std::printf("# oneDNN %d.%d.%d (cpu runtime %s, ISA %s)\n", v->major, v->minor, v->patch,
              v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other", "auto");
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const char* libs[] = {"OpenBLAS", "OpenBLAS slabs", "dnnl_sgemm", "dnnl matmul"};
  const int nlibs = 4;
#else
  std::printf("# oneDNN: not found at configure time (only OpenBLAS measured)\n");
  const char* libs[] = {"OpenBLAS", "OpenBLAS slabs"};
  const int nlibs = 2;
#endif
  std::printf("%-28s %5s %5s %5s %2s |", "case", "M", "N", "K", "op");
  for (int l = 0; l < nlibs; l++) std::printf(" %14s", libs[l]);
  std::printf(" | %-14s %s\n", "fastest", "(GFLOP/s; ms median [min-max] of the fastest)");

  std::vector<double> step_ms(nlibs, 0.0);
  double step_ms_best_each = 0.0;  // if a backend picked the fastest library per shape
  int wrong = 0;
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Case& c : kCases) {
    // storage: A (M,K) or (K,M); B (K,N) or (N,K); leading dimension = stored row length
    std::vector<float> A(static_cast<size_t>(c.M) * c.K), B(static_cast<size_t>(c.K) * c.N);
    for (auto& x : A) x = dist(gen);
    for (auto& x : B) x = dist(gen);
    const int lda = c.trans_a ? c.M : c.K, ldb = c.trans_b ? c.K : c.N;
    std::vector<float> Cref(static_cast<size_t>(c.M) * c.N), Cx(Cref.size());
    Timing t[4];

    t[0] = time_it(
        [&] {
          cblas_sgemm(CblasRowMajor, c.trans_a ? CblasTrans : CblasNoTrans, c.trans_b ? CblasTrans : CblasNoTrans, c.M,
                      c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, Cref.data(), c.N);
        },
        reps);
    std::fill(Cx.begin(), Cx.end(), NAN);
    t[1] = time_it(
        [&] {
          hpct::kernels::cpu::sgemm_rowmajor(c.trans_a, c.trans_b, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb,
                                             0.0f, Cx.data(), c.N);
        },
        reps);
    t[1].ok = same_result(Cx, Cref);
#ifdef HPCT_HAVE_DNNL
    std::fill(Cx.begin(), Cx.end(), NAN);
    t[2] = time_it(
        [&] {
          dnnl_sgemm(c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N', c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb,
                     0.0f, Cx.data(), c.N);
        },
        reps);
    t[2].ok = same_result(Cx, Cref);
    {
      using dt = dnnl::memory::data_type;
      using dims = dnnl::memory::dims;
      // op(A) (M,K): strides {K,1} stored as is, {1,M} stored transposed; same for op(B) (K,N)
      const dnnl::memory::desc a_md(dims{c.M, c.K}, dt::f32, c.trans_a ? dims{1, c.M} : dims{c.K, 1});
      const dnnl::memory::desc b_md(dims{c.K, c.N}, dt::f32, c.trans_b ? dims{1, c.K} : dims{c.N, 1});
      const dnnl::memory::desc c_md(dims{c.M, c.N}, dt::f32, dims{c.N, 1});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
      const dnnl::matmul prim(pd);  // created once, outside the timing, as a backend would cache it
      dnnl::memory a_mem(a_md, eng, A.data()), b_mem(b_md, eng, B.data());
      std::fill(Cx.begin(), Cx.end(), NAN);
      dnnl::memory c_mem(c_md, eng, Cx.data());
      t[3] = time_it(
          [&] {
            prim.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
            strm.wait();
          },
          reps);
      t[3].ok = same_result(Cx, Cref);
    }
#endif
    int best = 0;
    for (int l = 0; l < nlibs; l++) {
      if (!t[l].ok) wrong++;
      if (t[l].ok && t[l].median_s < t[best].median_s) best = l;
      step_ms[l] += c.per_step * t[l].median_s * 1e3;
    }
    step_ms_best_each += c.per_step * t[best].median_s * 1e3;
    std::printf("%-28s %5d %5d %5d %c%c |", c.name, c.M, c.N, c.K, c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N');
    for (int l = 0; l < nlibs; l++) {
      if (t[l].ok) std::printf(" %14.1f", gflops(c, t[l].median_s));
      else
        std::printf(" %14s", "WRONG");
    }
    std::printf(" | %-14s (%.3f ms [%.3f-%.3f])\n", libs[best], t[best].median_s * 1e3, t[best].min_s * 1e3,
                t[best].max_s * 1e3);
  }

  std::printf("\n%-40s", "GPT step GEMMs (L=4, N=2048), ms:");
  int best = 0;
  for (int l = 0; l < nlibs; l++) {
    std::printf(" %14.2f", step_ms[l]);
    if (step_ms[l] < step_ms[best]) best = l;
  }
  std::printf("\n%-40s %14.2f\n", "  picking the fastest per shape, ms:", step_ms_best_each);
  if (wrong) {
    std::printf("FAILED: %d library results differ from OpenBLAS's (is max|diff|/max|C| > 1e-5, should be below)\n",
                wrong);
    return 1;
  }
  std::printf("VERDICT: %s fastest on the GPT step GEMMs (%.2f ms", libs[best], step_ms[best]);
  for (int l = 0; l < nlibs; l++)
    if (l != best) std::printf(" vs %s %.2f ms", libs[l], step_ms[l]);
  std::printf(")\n");
  return 0;
}
