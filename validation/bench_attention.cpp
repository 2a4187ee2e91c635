// bench_attention: the CPU backend's causal self-attention, forward and backward, flash style (the kernel of
// lib/kernels/cpu/cpu_attention.cpp: keeps L (B,NH,T), recomputes the probabilities tile by tile in backward) against
// the previous kernel, which kept the probabilities (B,NH,T,T) and used a (B,NH,T,T) float scratch (a copy kept for
// this comparison only: bench_attention_previous.cpp).
// Shapes: GPT-2 124M per rank (T = 1024, C = 768, NH = 12, B = 4, 8, 16: inputs/gpt2_124m.toml's micro_batch is 16),
// inputs/bench_gpt.toml (B = 8, T = 256, C = 256, NH = 4) and inputs/gpt_tiny.toml (B = 2, T = 64, C = 64, NH = 4);
// fp32 and bf16 storage; 1 and 2 OpenMP threads (omp_set_num_threads; the kernels run one (b, h) per task and
// single-threaded OpenBLAS inside). Each case: one warm-up call (the buffers grow there), then the fastest of `--reps`
// timed calls of forward, and of backward, for each kernel, alternated. Both kernels' out and dqkv are compared
// (max |new - old| / max |old|) so that a fast wrong kernel shows.
//
// Usage: bench_attention [--reps N] [--max-b B] [--threads 1|2]   (defaults 5, 16, both; no OMP_NUM_THREADS needed)
// Output: one table row per case, then `VERDICT: flash / previous time at T = 1024: forward x.xx, backward x.xx`
// (worst ratio over the T = 1024 cases).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace hpct::kernels::cpu::previous {
int64_t attention_stats_bytes(int B, int T, int C, int NH, DType act);
int64_t attention_scratch_bytes(int B, int T, int C, int NH, DType act);
template <typename A>
void attention_forward(A* out, void* stats, const A* qkv, int B, int T, int C, int NH);
template <typename A>
void attention_backward(A* dqkv, void* scratch, const A* dout, const A* qkv, const A* out, const void* stats, int B,
                        int T, int C, int NH);
}  // namespace hpct::kernels::cpu::previous

namespace {

using hpct::bf16;
using hpct::DType;
namespace cpu = hpct::kernels::cpu;
namespace prev = hpct::kernels::cpu::previous;

struct Shape {
  const char* what;
  int B, T, C, NH;
};

double ms_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
// The fastest of the timed calls: the machine is shared, and other jobs only ever add time.
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
template <typename A>
float as_float(A x) {
  if constexpr (std::is_same_v<A, bf16>) return hpct::to_f32(x);
  else
    return x;
}
template <typename A>
double rel_diff(const std::vector<A>& a, const std::vector<A>& b) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < a.size(); i++) {
    d = std::max(d, std::fabs(static_cast<double>(as_float(a[i])) - as_float(b[i])));
    m = std::max(m, std::fabs(static_cast<double>(as_float(b[i]))));
  }
  return d / m;
}

struct Result {
  double fwd_old, fwd_new, bwd_old, bwd_new, diff_out, diff_dqkv;
  int64_t bytes_old, bytes_new;  // stats + scratch
};

template <typename A>
Result run_case(const Shape& s, int reps) {
  const DType act = std::is_same_v<A, float> ? DType::F32 : DType::BF16;
  const int B = s.B, T = s.T, C = s.C, NH = s.NH;
  const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f), g(-1.0f, 1.0f);
  std::vector<A> qkv(n_qkv), dout(n_out), out_old(n_out), out_new(n_out), dqkv_old(n_qkv), dqkv_new(n_qkv);
  for (auto& x : qkv) x = hpct::from_f32<A>(u(rng));
  for (auto& x : dout) x = hpct::from_f32<A>(g(rng));
  Result r{};
  const int64_t so = prev::attention_stats_bytes(B, T, C, NH, act),
                co = prev::attention_scratch_bytes(B, T, C, NH, act);
  const int64_t sn = cpu::attention_stats_bytes(B, T, C, NH, act), cn = cpu::attention_scratch_bytes(B, T, C, NH, act);
  r.bytes_old = so + co;
  r.bytes_new = sn + cn;
  std::vector<unsigned char> stats_old(static_cast<size_t>(so)), scratch_old(static_cast<size_t>(co));
  std::vector<unsigned char> stats_new(static_cast<size_t>(sn)), scratch_new(static_cast<size_t>(cn));
  auto fwd_old = [&] { prev::attention_forward(out_old.data(), stats_old.data(), qkv.data(), B, T, C, NH); };
  auto fwd_new = [&] { cpu::attention_forward(out_new.data(), stats_new.data(), qkv.data(), B, T, C, NH); };
  auto bwd_old = [&] {
    prev::attention_backward(dqkv_old.data(), scratch_old.data(), dout.data(), qkv.data(), out_old.data(),
                             stats_old.data(), B, T, C, NH);
  };
  auto bwd_new = [&] {
    cpu::attention_backward(dqkv_new.data(), scratch_new.data(), dout.data(), qkv.data(), out_new.data(),
                            stats_new.data(), B, T, C, NH);
  };
  fwd_old();
  bwd_old();
  fwd_new();
  bwd_new();
  r.diff_out = rel_diff(out_new, out_old);
  r.diff_dqkv = rel_diff(dqkv_new, dqkv_old);
  std::vector<double> fo, fn, bo, bn;
  for (int i = 0; i < reps; i++) {
    fo.push_back(ms_of(fwd_old));
    bo.push_back(ms_of(bwd_old));
    fn.push_back(ms_of(fwd_new));
    bn.push_back(ms_of(bwd_new));
  }
  r.fwd_old = fastest(fo);
  r.fwd_new = fastest(fn);
  r.bwd_old = fastest(bo);
  r.bwd_new = fastest(bn);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, max_b = 16, only_threads = 0;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      only_threads = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--max-b") == 0 && i + 1 < argc) {
      max_b = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--max-b B] [--threads N]\n", argv[0]);
      return 2;
    }
  }
  const Shape shapes[] = {{"gpt_tiny", 2, 64, 64, 4},
                          {"bench_gpt", 8, 256, 256, 4},
                          {"gpt2_124m", 4, 1024, 768, 12},
                          {"gpt2_124m", 8, 1024, 768, 12},
                          {"gpt2_124m", 16, 1024, 768, 12}};
  std::printf("# bench_attention: causal attention forward / backward, previous kernel (probabilities kept) vs flash "
              "(L kept), fastest of %d calls\n",
              reps);
  std::printf("%-10s %3s %5s %4s %3s %5s %3s | %9s %9s %6s | %9s %9s %6s | %11s %11s | %8s %8s\n", "shape", "B", "T",
              "C", "NH", "type", "thr", "fwd_old", "fwd_new", "ratio", "bwd_old", "bwd_new", "ratio", "MiB_old",
              "MiB_new", "d_out", "d_dqkv");
  double worst_f = 0.0, worst_b = 0.0;
  for (const int threads : {1, 2}) {
    if (only_threads > 0 && threads != only_threads) continue;
    omp_set_num_threads(threads);
    for (const bool bf : {false, true})
      for (const Shape& s : shapes) {
        if (s.B > max_b) continue;
        const Result r = bf ? run_case<bf16>(s, reps) : run_case<float>(s, reps);
        std::printf("%-10s %3d %5d %4d %3d %5s %3d | %9.2f %9.2f %6.3f | %9.2f %9.2f %6.3f | %11.2f %11.3f | %8.1e "
                    "%8.1e\n",
                    s.what, s.B, s.T, s.C, s.NH, bf ? "bf16" : "fp32", threads, r.fwd_old, r.fwd_new,
                    r.fwd_new / r.fwd_old, r.bwd_old, r.bwd_new, r.bwd_new / r.bwd_old, r.bytes_old / 1048576.0,
                    r.bytes_new / 1048576.0, r.diff_out, r.diff_dqkv);
        std::fflush(stdout);
        if (s.T == 1024) {
          worst_f = std::max(worst_f, r.fwd_new / r.fwd_old);
          worst_b = std::max(worst_b, r.bwd_new / r.bwd_old);
        }
      }
  }
  std::printf(
      "# ms per call; ratio = flash / previous (< 1: flash faster); MiB = stats + scratch bytes the model plans; "
      "d_* = max |flash - previous| / max |previous|\n");
  if (worst_f > 0.0)
    std::printf("VERDICT: flash / previous time at T = 1024 (worst case): forward %.2f, backward %.2f\n", worst_f,
                worst_b);
  return 0;
}
