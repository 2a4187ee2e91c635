// bench_attention_cuda: the CUDA backend's two causal self-attentions side by side on one GPU, at GPT-2 124M's shape
// (T = 1024, C = 768, NH = 12, HS = 64) in bf16: the own flash kernels (train.attention = own: cuda_flash_attention
// *.cuh on the tensor cores) against cuDNN's fused attention with its deterministic backward (train.attention = cudnn:
// cuda_attention_cudnn.cpp). For each micro-batch B: the median of --reps timed calls (after two warm-ups, the first
// of which builds cuDNN's graphs) of forward, and of backward, for each, alternated; the attention's TFLOP/s (causal:
// forward 2 B NH T^2 HS, backward 2.5 times that); and how far apart they are (max |cudnn - own| / max |own| of out
// and dqkv), so that a fast wrong kernel shows. Timed through the kernels' dispatch (kernels.hpp) with a
// kernels::synchronize before and after each call, on the default stream: what the model's step sees.
//
// Usage: bench_attention_cuda [--reps N] [--batches 16,32,64] [--md FILE]
// Output: one table row per B (also as markdown into FILE), then
// `VERDICT: forward + backward, cudnn / own time: x.xx at B=..` per B and `faster: cudnn|own`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_probe.hpp"
#include "kernels/kernels.hpp"

namespace {
using namespace hpct;
using namespace hpct::kernels;

constexpr int kT = 1024, kC = 768, kNH = 12;

struct Buffer {
  explicit Buffer(size_t bytes) : bytes(bytes), p(device_alloc(Device::CUDA, bytes)) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { device_free(Device::CUDA, p); }
  size_t bytes;
  void* p;
};

std::vector<bf16> random_bf16(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<bf16> v(n);
  for (auto& x : v) x = to_bf16(dist(gen));
  return v;
}

std::vector<float> download(const ExecContext& ctx, const Buffer& b) {
  std::vector<bf16> h(b.bytes / sizeof(bf16));
  copy_to_host(ctx, h.data(), b.p, static_cast<int64_t>(b.bytes));
  synchronize(ctx);
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = to_f32(h[i]);
  return f;
}

double max_rel(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

double time_ms(const ExecContext& ctx, const std::function<void()>& call) {
  synchronize(ctx);
  const auto t0 = std::chrono::steady_clock::now();
  call();
  synchronize(ctx);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One implementation's buffers and calls at batch B.
struct Attention {
  Attention(AttentionImpl impl, int B) : ctx{Device::CUDA, nullptr}, B(B), out(bytes_out(B)), dqkv(bytes_qkv(B)) {
    ctx.precision = Precision::BF16;
    ctx.attention = impl;
    stats = std::make_unique<Buffer>(static_cast<size_t>(attention_stats_bytes(ctx, B, kT, kC, kNH, DType::BF16)));
    scratch = std::make_unique<Buffer>(static_cast<size_t>(attention_scratch_bytes(ctx, B, kT, kC, kNH, DType::BF16)));
  }
  static size_t bytes_out(int B) { return static_cast<size_t>(B) * kT * kC * sizeof(bf16); }
  static size_t bytes_qkv(int B) { return 3 * bytes_out(B); }
  void forward(const Buffer& qkv) {
    attention_forward(ctx, static_cast<bf16*>(out.p), stats->p, static_cast<const bf16*>(qkv.p), B, kT, kC, kNH);
  }
  void backward(const Buffer& qkv, const Buffer& dout) {
    attention_backward(ctx, static_cast<bf16*>(dqkv.p), scratch->p, static_cast<const bf16*>(dout.p),
                       static_cast<const bf16*>(qkv.p), static_cast<const bf16*>(out.p), stats->p, B, kT, kC, kNH);
  }
  ExecContext ctx;
  int B;
  Buffer out, dqkv;
  std::unique_ptr<Buffer> stats, scratch;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  std::vector<int> batches = {16, 32, 64};
  std::string md_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--batches" && i + 1 < argc) {
      batches.clear();
      for (char* tok = std::strtok(argv[++i], ","); tok; tok = std::strtok(nullptr, ","))
        batches.push_back(std::atoi(tok));
    } else if (a == "--md" && i + 1 < argc) {
      md_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_attention_cuda [--reps N] [--batches 16,32,64] [--md FILE]\n");
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_attention_cuda: no usable CUDA device\n");
    return 1;
  }
  const bool with_cudnn = cudnn_attention_built();
  std::string table = "| B | own fwd ms | cudnn fwd ms | own bwd ms | cudnn bwd ms | own TFLOP/s | cudnn TFLOP/s | "
                      "cudnn / own (fwd+bwd) | "
                      "out diff | dqkv diff |\n|---|---|---|---|---|---|---|---|---|---|\n";
  std::string verdicts;
  double own_total = 0.0, cudnn_total = 0.0;
  for (int B : batches) {
    const ExecContext ctx{Device::CUDA, nullptr};
    Buffer qkv(Attention::bytes_qkv(B)), dout(Attention::bytes_out(B));
    const auto h_qkv = random_bf16(qkv.bytes / sizeof(bf16), 11u + B, -2.0f, 2.0f);
    const auto h_dout = random_bf16(dout.bytes / sizeof(bf16), 17u + B, -1.0f, 1.0f);
    copy_from_host(ctx, qkv.p, h_qkv.data(), static_cast<int64_t>(qkv.bytes));
    copy_from_host(ctx, dout.p, h_dout.data(), static_cast<int64_t>(dout.bytes));
    synchronize(ctx);
    Attention own(AttentionImpl::Own, B);
    std::unique_ptr<Attention> cud;
    if (with_cudnn) cud = std::make_unique<Attention>(AttentionImpl::Cudnn, B);
    std::vector<double> of, ob, cf, cb;
    for (int r = -2; r < reps; ++r) {  // two warm-ups: cuDNN builds its graphs at the first call of a shape
      const double a = time_ms(own.ctx, [&] { own.forward(qkv); }),
                   b = time_ms(own.ctx, [&] { own.backward(qkv, dout); });
      double c = 0.0, d = 0.0;
      if (cud) {
        c = time_ms(cud->ctx, [&] { cud->forward(qkv); });
        d = time_ms(cud->ctx, [&] { cud->backward(qkv, dout); });
      }
      if (r < 0) continue;
      of.push_back(a), ob.push_back(b), cf.push_back(c), cb.push_back(d);
    }
    const double flops_fwd = 2.0 * B * kNH * double(kT) * kT * (kC / kNH), flops = 3.5 * flops_fwd;
    const double own_ms = median(of) + median(ob);
    own_total += own_ms;
    std::string row;
    if (cud) {
      const double cud_ms = median(cf) + median(cb);
      cudnn_total += cud_ms;
      const double out_diff = max_rel(download(ctx, cud->out), download(ctx, own.out));
      const double dqkv_diff = max_rel(download(ctx, cud->dqkv), download(ctx, own.dqkv));
      char buf[512];
      std::snprintf(buf, sizeof buf, "| %d | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f | %.3f | %.2e | %.2e |\n", B,
                    median(of), median(cf), median(ob), median(cb), flops / own_ms * 1e-9, flops / cud_ms * 1e-9,
                    cud_ms / own_ms, out_diff, dqkv_diff);
      row = buf;
      std::snprintf(buf, sizeof buf, "VERDICT: forward + backward, cudnn / own time: %.3f at B=%d\n", cud_ms / own_ms,
                    B);
      verdicts += buf;
    } else {
      char buf[512];
      std::snprintf(buf, sizeof buf, "| %d | %.3f | (not built) | %.3f | (not built) | %.1f | | | | |\n", B, median(of),
                    median(ob), flops / own_ms * 1e-9);
      row = buf;
    }
    table += row;
    std::fputs(row.c_str(), stdout);
    std::fflush(stdout);
  }
  std::printf("\n%s", table.c_str());
  std::fputs(verdicts.c_str(), stdout);
  const std::string faster = !with_cudnn ? "own (cuDNN attention not built)"
                                         : (cudnn_total < own_total ? "cudnn" : "own");
  std::printf("faster: %s (forward + backward over the micro-batches: own %.3f ms, cudnn %.3f ms)\n", faster.c_str(),
              own_total, cudnn_total);
  if (!md_path.empty()) {
    if (FILE* f = std::fopen(md_path.c_str(), "w")) {
      std::fprintf(f,
                   "# Causal self-attention on CUDA, own flash kernels against cuDNN's fused attention\n\n"
                   "GPT-2 124M's shape (T = %d, C = %d, NH = %d), bf16, medians of %d calls "
                   "(`bench_attention_cuda --reps %d`).\n\n%s\nfaster: %s\n",
                   kT, kC, kNH, reps, reps, table.c_str(), faster.c_str());
      std::fclose(f);
    }
  }
  return 0;
}
