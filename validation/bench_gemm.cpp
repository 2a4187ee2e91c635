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
// --bf16: the backend's Linear layer (kernels::matmul_forward / matmul_backward, bias and dbias included) on the same
// shapes in fp32 and in bf16 (oneDNN's bf16 matmul where the CPU has bf16 instructions, cpu/cpu_matmul_dnnl.hpp; run
// with HPCT_BF16_GEMM=fp32 for the fallback), ms per call and per GPT step.
// --gpt-step: one training step of inputs/bench_gpt.toml's GPT (L=4, C=256, NH=4, T=256, B=8, vocabulary 256) as the
// kernel calls lib/models/gpt makes (bf16: the compute copy cast from the fp32 masters; forward, fused cross-entropy,
// backward, gradient norm, AdamW), in fp32 and in bf16, alternated, median over --steps steps, with the per-op profile
// (kernels::profile_enable). No data loading, no trainer: the kernels' share of a step.
//
// Usage: OMP_NUM_THREADS=2 bench_gemm [--reps N] [--bf16] [--gpt-step [--steps N]]
// Output ends in `VERDICT: <library> fastest on the GPT step GEMMs (x.xx ms vs ...)`; with --bf16 / --gpt-step in
// `VERDICT: bf16 x.xx times faster than fp32 on ...`.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#ifdef HPCT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "kernels/cpu/cpu_gemm.hpp"
#include "kernels/kernels.hpp"

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

namespace k = hpct::kernels;
using hpct::bf16;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

template <typename A>
std::vector<A> random_as(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<A> v(n);
  for (auto& x : v) x = hpct::from_f32<A>(dist(gen));
  return v;
}

// ---- --bf16: the Linear layer in fp32 and bf16 -----------------------------------------------------------------
struct Linear {
  const char* name;
  int C, OC, per_step;
};
const Linear kLinears[] = {
    {"qkv     256->768", 256, 768, 4},  {"attproj 256->256", 256, 256, 4}, {"fc      256->1024", 256, 1024, 4},
    {"fcproj 1024->256", 1024, 256, 4}, {"logits  256->256", 256, 256, 1},
};

template <typename A>
void time_linear(const Linear& l, int N, int reps, double& fwd_ms, double& bwd_ms) {
  const hpct::ExecContext ctx{hpct::Device::CPU, nullptr,
                              std::is_same_v<A, float> ? hpct::Precision::FP32 : hpct::Precision::BF16};
  const auto inp = random_as<A>(static_cast<size_t>(N) * l.C, 1), w = random_as<A>(static_cast<size_t>(l.OC) * l.C, 2);
  const auto b = random_as<A>(l.OC, 3), dout = random_as<A>(static_cast<size_t>(N) * l.OC, 4);
  std::vector<A> out(static_cast<size_t>(N) * l.OC), dinp(inp.size());
  std::vector<float> dw(w.size()), db(l.OC);
  fwd_ms = time_it([&] { k::matmul_forward(ctx, out.data(), inp.data(), w.data(), b.data(), N, l.C, l.OC); }, reps)
               .median_s *
           1e3;
  bwd_ms = time_it(
               [&] {
                 k::matmul_backward(ctx, dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, l.C,
                                    l.OC);
               },
               reps)
               .median_s *
           1e3;
}

int bench_bf16_linear(int reps) {
  const int N = 2048;
  std::printf("# bench_gemm --bf16: kernels::matmul_forward / matmul_backward (dinp, dweight +=, dbias +=), N=%d rows, "
              "ms median of %d after 5 warm-up calls\n# cpu: %s | OpenMP threads: %d\n# bf16: %s\n",
              N, reps, cpu_model().c_str(), omp_get_max_threads(), k::cpu_bf16_arithmetic().c_str());
  std::printf("%-18s %9s %9s %9s %9s | %7s %7s\n", "layer", "fp32 fwd", "bf16 fwd", "fp32 bwd", "bf16 bwd", "x fwd",
              "x bwd");
  double step32 = 0, step16 = 0;
  for (const Linear& l : kLinears) {
    double f32, b32, f16, b16;
    time_linear<float>(l, N, reps, f32, b32);
    time_linear<bf16>(l, N, reps, f16, b16);
    step32 += l.per_step * (f32 + b32);
    step16 += l.per_step * (f16 + b16);
    std::printf("%-18s %9.3f %9.3f %9.3f %9.3f | %7.2f %7.2f\n", l.name, f32, f16, b32, b16, f32 / f16, b32 / b16);
  }
  std::printf("\nLinear layers of one GPT step (L=4, fwd + bwd), ms: fp32 %.2f, bf16 %.2f\n", step32, step16);
  std::printf("VERDICT: bf16 %.2f times faster than fp32 on the GPT step's Linear layers (%.2f ms vs %.2f ms)\n",
              step32 / step16, step16, step32);
  return 0;
}

// ---- --gpt-step: the kernel calls of one GPT training step -------------------------------------------------------
// Shapes and call sequence of lib/models/gpt/gpt.cpp (serial: TP = PP = 1), bench_gpt.toml's model.
struct GptShape {
  int L = 4, C = 256, NH = 4, T = 256, B = 8, V = 256, Vp = 256;
};

template <typename A>
class GptStep {
 public:
  explicit GptStep(const GptShape& s)
      : s_(s),
        ctx_{hpct::Device::CPU, nullptr, std::is_same_v<A, float> ? hpct::Precision::FP32 : hpct::Precision::BF16} {
    const int C = s.C, L = s.L;
    const int64_t N = int64_t{s.B} * s.T;
    // parameters, in one flat fp32 master array (the optimizer's view) and its compute copy (A)
    auto add = [&](int64_t n) {
      const int64_t off = nparams_;
      nparams_ += n;
      return off;
    };
    wte_ = add(int64_t{s.Vp} * C), wpe_ = add(int64_t{s.T} * C);
    for (int l = 0; l < L; l++) {
      Layer y;
      y.ln1w = add(C), y.ln1b = add(C), y.qkvw = add(3 * int64_t{C} * C), y.qkvb = add(3 * C);
      y.projw = add(int64_t{C} * C), y.projb = add(C), y.ln2w = add(C), y.ln2b = add(C);
      y.fcw = add(4 * int64_t{C} * C), y.fcb = add(4 * C), y.fcprojw = add(4 * int64_t{C} * C), y.fcprojb = add(C);
      layers_.push_back(y);
    }
    lnfw_ = add(C), lnfb_ = add(C);
    master_ = random_as<float>(static_cast<size_t>(nparams_), 1, 0.05f);
    for (const Layer& y : layers_)
      for (int64_t i = 0; i < C; i++) master_[y.ln1w + i] = master_[y.ln2w + i] = 1.0f;
    for (int64_t i = 0; i < C; i++) master_[lnfw_ + i] = 1.0f;
    grad_.assign(master_.size(), 0.0f);
    m_.assign(master_.size(), 0.0f);
    v_.assign(master_.size(), 0.0f);
    if constexpr (std::is_same_v<A, float>) {
      compute_ = nullptr;
    } else {
      copy_.resize(master_.size());
      compute_ = copy_.data();
    }
    // activations (A), per layer as the model keeps them
    auto act = [&](int64_t n) { return std::vector<A>(static_cast<size_t>(n)); };
    const int64_t stats = k::attention_stats_bytes(ctx_, s.B, s.T, C, s.NH, act_dtype()) / int64_t{sizeof(A)};
    for (int l = 0; l <= L; l++) res_.push_back(act(N * C));  // res_[0] = encoded, res_[l+1] = residual3 of layer l
    for (int l = 0; l < L; l++) {
      Acts a;
      a.ln1 = act(N * C), a.qkv = act(3 * N * C), a.atty = act(N * C), a.att = act(stats), a.res2 = act(N * C);
      a.ln2 = act(N * C), a.fch = act(4 * N * C), a.fch_gelu = act(4 * N * C);
      a.ln1_mean.resize(N), a.ln1_rstd.resize(N), a.ln2_mean.resize(N), a.ln2_rstd.resize(N);
      acts_.push_back(std::move(a));
    }
    lnf_ = act(N * C), logits_ = act(N * s.Vp), scratch_ = act(N * C), dres_ = act(N * C), dln_ = act(N * C);
    datty_ = act(N * C), dqkv_ = act(3 * N * C), dfch_ = act(4 * N * C), dfch_gelu_ = act(4 * N * C);
    lnf_mean_.resize(N), lnf_rstd_.resize(N), losses_.resize(N);
    att_scratch_.resize(static_cast<size_t>(k::attention_scratch_bytes(ctx_, s.B, s.T, C, s.NH, act_dtype()) / 4));
    std::mt19937 gen(7);
    std::uniform_int_distribution<int> tok(0, s.V - 1);
    inputs_.resize(N), targets_.resize(N);
    for (auto& t : inputs_) t = tok(gen);
    for (auto& t : targets_) t = tok(gen);
  }

  // one optimizer step; returns the mean loss
  double step(int t) {
    const int C = s_.C, T = s_.T, B = s_.B, NH = s_.NH, L = s_.L;
    const int N = B * T;
    const int64_t NC = int64_t{N} * C;
    const A* p = params();
    if constexpr (!std::is_same_v<A, float>) k::cast(ctx_, copy_.data(), master_.data(), nparams_);
    k::fill_zero(ctx_, grad_.data(), nparams_ * 4);
    float* g = grad_.data();
    // forward
    k::encoder_forward(ctx_, res_[0].data(), inputs_.data(), p + wte_, p + wpe_, B, T, C);
    for (int l = 0; l < L; l++) {
      const Layer& y = layers_[l];
      Acts& a = acts_[l];
      const A* residual = res_[l].data();
      k::layernorm_forward(ctx_, a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual, p + y.ln1w, p + y.ln1b,
                           N, C);
      k::matmul_forward(ctx_, a.qkv.data(), a.ln1.data(), p + y.qkvw, p + y.qkvb, N, C, 3 * C);
      k::attention_forward(ctx_, a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
      k::matmul_forward(ctx_, scratch_.data(), a.atty.data(), p + y.projw, p + y.projb, N, C, C);
      k::residual_forward(ctx_, a.res2.data(), residual, scratch_.data(), NC);
      k::layernorm_forward(ctx_, a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p + y.ln2w,
                           p + y.ln2b, N, C);
      k::matmul_forward(ctx_, a.fch.data(), a.ln2.data(), p + y.fcw, p + y.fcb, N, C, 4 * C);
      k::gelu_forward(ctx_, a.fch_gelu.data(), a.fch.data(), 4 * NC);
      k::matmul_forward(ctx_, scratch_.data(), a.fch_gelu.data(), p + y.fcprojw, p + y.fcprojb, N, 4 * C, C);
      k::residual_forward(ctx_, res_[l + 1].data(), a.res2.data(), scratch_.data(), NC);
    }
    k::layernorm_forward(ctx_, lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), res_[L].data(), p + lnfw_, p + lnfb_, N,
                         C);
    k::matmul_forward(ctx_, logits_.data(), lnf_.data(), p + wte_, static_cast<const A*>(nullptr), N, C, s_.Vp);
    k::crossentropy_forward_backward(ctx_, losses_.data(), logits_.data(), targets_.data(), 1.0f / N, N, s_.V, s_.Vp);
    // backward
    k::matmul_backward(ctx_, dln_.data(), g + wte_, nullptr, logits_.data(), lnf_.data(), p + wte_, N, C, s_.Vp);
    k::fill_zero(ctx_, dres_.data(), NC * int64_t{sizeof(A)});
    k::layernorm_backward(ctx_, dres_.data(), g + lnfw_, g + lnfb_, dln_.data(), res_[L].data(), p + lnfw_,
                          lnf_mean_.data(), lnf_rstd_.data(), N, C);
    for (int l = L - 1; l >= 0; l--) {
      const Layer& y = layers_[l];
      Acts& a = acts_[l];
      k::matmul_backward(ctx_, dfch_gelu_.data(), g + y.fcprojw, g + y.fcprojb, dres_.data(), a.fch_gelu.data(),
                         p + y.fcprojw, N, 4 * C, C);
      k::gelu_backward(ctx_, dfch_.data(), a.fch.data(), dfch_gelu_.data(), 4 * NC);
      k::matmul_backward(ctx_, dln_.data(), g + y.fcw, g + y.fcb, dfch_.data(), a.ln2.data(), p + y.fcw, N, C, 4 * C);
      k::layernorm_backward(ctx_, dres_.data(), g + y.ln2w, g + y.ln2b, dln_.data(), a.res2.data(), p + y.ln2w,
                            a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
      k::matmul_backward(ctx_, datty_.data(), g + y.projw, g + y.projb, dres_.data(), a.atty.data(), p + y.projw, N, C,
                         C);
      k::attention_backward(ctx_, dqkv_.data(), att_scratch_.data(), datty_.data(), a.qkv.data(), a.atty.data(),
                            a.att.data(), B, T, C, NH);
      k::matmul_backward(ctx_, dln_.data(), g + y.qkvw, g + y.qkvb, dqkv_.data(), a.ln1.data(), p + y.qkvw, N, C,
                         3 * C);
      k::layernorm_backward(ctx_, dres_.data(), g + y.ln1w, g + y.ln1b, dln_.data(), res_[l].data(), p + y.ln1w,
                            a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
    }
    k::encoder_backward(ctx_, g + wte_, g + wpe_, dres_.data(), inputs_.data(), B, T, C);
    // gradient norm, AdamW on the fp32 masters
    double sq = 0.0;
    k::sum_squares_accumulate(ctx_, &sq, grad_.data(), nparams_);
    const float clip = static_cast<float>(std::min(1.0, 1.0 / (std::sqrt(sq) + 1e-6)));
    k::adamw_update(ctx_, master_.data(), grad_.data(), m_.data(), v_.data(), nparams_, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f,
                    clip, t);
    float loss = 0.0f;
    k::sum(ctx_, &loss, losses_.data(), N);
    return loss / N;
  }

 private:
  struct Layer {
    int64_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  struct Acts {
    std::vector<A> ln1, qkv, atty, att, res2, ln2, fch, fch_gelu;
    std::vector<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
  };
  static hpct::DType act_dtype() { return std::is_same_v<A, float> ? hpct::DType::F32 : hpct::DType::BF16; }
  const A* params() const {
    if constexpr (std::is_same_v<A, float>) return master_.data();
    else
      return compute_;
  }

  GptShape s_;
  hpct::ExecContext ctx_;
  int64_t nparams_ = 0, wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
  std::vector<Layer> layers_;
  std::vector<float> master_, grad_, m_, v_;
  std::vector<bf16> copy_;
  const bf16* compute_ = nullptr;
  std::vector<std::vector<A>> res_;
  std::vector<Acts> acts_;
  std::vector<A> lnf_, logits_, scratch_, dres_, dln_, datty_, dqkv_, dfch_, dfch_gelu_;
  std::vector<float> lnf_mean_, lnf_rstd_, losses_, att_scratch_;
  std::vector<int32_t> inputs_, targets_;
};

void print_profile(const char* what, int steps) {
  auto rows = k::profile_take();
  double total = 0.0;
  for (const auto& r : rows) total += r.ms;
  std::printf("\nper-op profile, %s (ms per step, over %d steps):\n", what, steps);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  for (const auto& r : rows)
    std::printf("  %-36s %8.2f  (%4.1f%%, %lld calls/step)\n", r.name.c_str(), r.ms / steps, 100.0 * r.ms / total,
                static_cast<long long>(r.calls / steps));
  std::printf("  %-36s %8.2f\n", "total", total / steps);
}

int bench_gpt_step(int steps) {
  const GptShape s;
  std::printf("# bench_gemm --gpt-step: one GPT training step's kernel calls (L=%d C=%d NH=%d T=%d B=%d V=%d), median "
              "of %d steps after 3 warm-up steps, fp32 and bf16 alternated\n# cpu: %s | OpenMP threads: %d\n"
              "# bf16: %s\n",
              s.L, s.C, s.NH, s.T, s.B, s.V, steps, cpu_model().c_str(), omp_get_max_threads(),
              k::cpu_bf16_arithmetic().c_str());
  GptStep<float> f32(s);
  GptStep<bf16> b16(s);
  std::vector<double> t32, t16, c32, c16;  // wall and process CPU ms per step
  double loss32 = 0, loss16 = 0;
  int t = 1;
  for (int i = 0; i < 3; i++, t++) {
    f32.step(t);
    b16.step(t);
  }
  auto cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  };
  auto timed = [&](auto& model, std::vector<double>& times, std::vector<double>& cpu, double& loss) {
    const double c0 = cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    loss = model.step(t);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_ms() - c0);
  };
  for (int i = 0; i < steps; i++, t++) {
    timed(f32, t32, c32, loss32);
    timed(b16, t16, c16, loss16);
  }
  // the profile, in separate runs (its clock reads are cheap, but keep the timed steps free of them)
  const int psteps = std::max(3, steps / 4);
  k::profile_enable(true);
  for (int i = 0; i < psteps; i++) f32.step(t + i);
  print_profile("fp32", psteps);
  for (int i = 0; i < psteps; i++) b16.step(t + i);
  print_profile("bf16", psteps);
  k::profile_enable(false);
  const double m32 = median(t32), m16 = median(t16);
  std::sort(t32.begin(), t32.end());
  std::sort(t16.begin(), t16.end());
  std::printf("\nstep ms: fp32 median %.1f [%.1f-%.1f], bf16 median %.1f [%.1f-%.1f]; last loss fp32 %.4f bf16 %.4f\n",
              m32, t32.front(), t32.back(), m16, t16.front(), t16.back(), loss32, loss16);
  // with one thread the process CPU time is the step's work, whatever else runs on the machine; with several it
  // includes OpenMP's spin-waiting
  std::printf("step CPU ms (all threads): fp32 median %.1f, bf16 median %.1f\n", median(c32), median(c16));
  if (!(std::fabs(loss16 - loss32) <= 0.05 * std::fabs(loss32))) {
    std::printf("FAILED: bf16 loss %.5f is not within 5%% of fp32's %.5f\n", loss16, loss32);
    return 1;
  }
  std::printf("VERDICT: bf16 %.2f times faster than fp32 on the GPT step's kernels (%.1f ms vs %.1f ms)\n", m32 / m16,
              m16, m32);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30, steps = 20;
  bool bf16_linear = false, gpt_step = false;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(20, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::max(5, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--bf16") == 0) {
      bf16_linear = true;
    } else if (std::strcmp(argv[i], "--gpt-step") == 0) {
      gpt_step = true;
    } else {
      std::fprintf(stderr, "usage: OMP_NUM_THREADS=n %s [--reps N>=20] [--bf16] [--gpt-step [--steps N>=5]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (bf16_linear) return bench_bf16_linear(reps);
  if (gpt_step) return bench_gpt_step(steps);
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
