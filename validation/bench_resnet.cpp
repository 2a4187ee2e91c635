// bench_resnet: milliseconds of one ResNet training-mode forward + loss + backward (no optimizer: the SGD update of
// 0.27 M parameters is negligible) at batch B on 1x28x28 images, median of --iters after --warmup.
// usage: OMP_NUM_THREADS=2 bench_resnet [--depth 20] [--batch 128] [--iters 30] [--warmup 5] [--profile 1]
//                                       [--precision fp32|bf16] [--memory-format auto|nchw|nhwc]
// Prints one line: BENCH_RESNET depth=.. batch=.. threads=.. precision=.. memory_format=.. median_ms=.. min_ms=..
// max_ms=.. images_per_s=.. (memory_format: the layout the model chose, nchw or nhwc)
// --memory-format: the model's model.memory_format (default auto: channels-last where oneDNN runs every convolution).
// --precision bf16: bf16 activations (train.precision = bf16): each step starts with the cast of the fp32 masters into
// the bf16 compute copy (ResNet::refresh_compute_params), as a training step does.
// --profile 1: then `iters` more steps with the kernels' per-op profile on (kernels::profile_enable), printed as
// ms per step by kernel kind (conv fwd, conv bwd-weight, conv bwd-data, bn fwd, bn bwd, relu, ...) and by row
// (op, or conv phase and layer shape), largest first, then the implementation each conv shape runs (PROFILE_CONV:
// oneDNN's kernel names, or im2col and why). The timed steps above run with the profile off.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/timer.hpp"
#include "kernels/cpu/cpu_conv_dnnl.hpp"
#include "kernels/kernels.hpp"
#include "models/resnet/resnet.hpp"

using namespace hpct;

namespace {

// The kind of a profile row: its op name, conv phases by name, e.g. "conv2d_backward/weight 3x3s1 16>16 @28".
std::string kind_of(const std::string& row) {
  static const std::pair<const char*, const char*> kinds[] = {{"conv2d_forward", "conv fwd"},
                                                              {"conv2d_backward/weight", "conv bwd-weight"},
                                                              {"conv2d_backward/data", "conv bwd-data"},
                                                              {"batchnorm2d_forward", "bn fwd"},
                                                              {"batchnorm2d_backward", "bn bwd"},
                                                              {"relu_forward", "relu fwd"},
                                                              {"relu_backward", "relu bwd"},
                                                              {"residual_forward", "residual add"},
                                                              {"residual_relu_forward", "residual add"},
                                                              {"residual_relu_backward", "residual add + relu bwd"},
                                                              {"fill_zero", "zero_grad"},
                                                              {"cast", "cast (bf16 compute copy)"}};
  for (const auto& [prefix, kind] : kinds)
    if (row.rfind(prefix, 0) == 0) return kind;
  return "other (" + row.substr(0, row.find(' ')) + ")";
}

// One training step without the optimizer: the bf16 compute copy (a no-op in fp32), forward, loss, backward.
void step(resnet::ResNet& model, const ExecContext& ctx, const float* img, const int32_t* lab, int B) {
  model.refresh_compute_params(ctx);
  model.zero_grad(ctx);
  model.forward(ctx, img, B, true);
  model.loss_and_backward(ctx, lab, 1.0f / B, B);
}

// The conv implementation of a profile row "conv2d_forward KHxKWsS C>OC @H" (square images, torchvision's padding
// K/2), or "" for another row.
std::string conv_impl(const std::string& row, int B, DType act, bool nhwc) {
  int KH, KW, stride, C, OC, H;
  if (std::sscanf(row.c_str(), "conv2d_forward %dx%ds%d %d>%d @%d", &KH, &KW, &stride, &C, &OC, &H) != 6) return "";
  return kernels::cpu::dnnl_conv::describe({B, C, H, H, OC, KH, KW, stride, KH / 2, nhwc}, act);
}

void print_profile(resnet::ResNet& model, const ExecContext& ctx, const float* img, const int32_t* lab, int B,
                   int iters) {
  kernels::profile_take();
  kernels::profile_enable(true);
  Timer t;
  for (int it = 0; it < iters; ++it) step(model, ctx, img, lab, B);
  const double step_ms = t.ms() / iters;
  kernels::profile_enable(false);
  std::vector<kernels::ProfileRow> rows = kernels::profile_take();
  // the conv ops' own rows include their per-shape phase rows: keep the phase rows only
  std::erase_if(rows,
                [](const kernels::ProfileRow& r) { return r.name == "conv2d_forward" || r.name == "conv2d_backward"; });
  std::map<std::string, double> by_kind;
  double total = 0.0;
  for (const auto& r : rows) {
    by_kind[kind_of(r.name)] += r.ms / iters;
    total += r.ms / iters;
  }
  std::vector<std::pair<double, std::string>> kinds;
  for (const auto& [k, ms] : by_kind) kinds.push_back({ms, k});
  std::sort(kinds.rbegin(), kinds.rend());
  std::printf("PROFILE mean over %d steps: %.2f ms/step wall, %.2f ms/step in kernels\n", iters, step_ms, total);
  for (const auto& [ms, k] : kinds)
    std::printf("PROFILE_KIND %-22s %8.2f ms %5.1f%%\n", k.c_str(), ms, 100 * ms / step_ms);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  for (const auto& r : rows)
    std::printf("PROFILE_ROW  %-44s %8.2f ms %4lld calls/step\n", r.name.c_str(), r.ms / iters,
                static_cast<long long>(r.calls / iters));
  for (const auto& r : rows) {
    const std::string impl = conv_impl(r.name, B, model.activation_dtype(), model.channels_last());
    if (!impl.empty()) std::printf("PROFILE_CONV %s: %s\n", r.name.substr(r.name.find(' ') + 1).c_str(), impl.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int depth = 20, B = 128, iters = 30, warmup = 5, profile = 0;
  std::string precision = "fp32", memory_format = "auto";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--depth")) depth = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch"))
      B = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters"))
      iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--warmup"))
      warmup = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--profile"))
      profile = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--precision"))
      precision = argv[i + 1];
    else if (!std::strcmp(argv[i], "--memory-format"))
      memory_format = argv[i + 1];
  }
  if (precision != "fp32" && precision != "bf16") {
    std::fprintf(stderr, "bench_resnet: --precision %s: expected fp32 or bf16\n", precision.c_str());
    return 2;
  }
  const DType act = precision == "bf16" ? DType::BF16 : DType::F32;
  resnet::ResNetConfig c;
  c.depth = depth;
  c.memory_format = memory_format;
  const ExecContext ctx;
  resnet::ResNet model(c, B, Device::CPU, nullptr, true, act);
  model.init_parameters(ctx, 1);
  const int D = c.in_channels * c.height * c.width;
  std::vector<float> img(static_cast<size_t>(B) * D);
  std::vector<int32_t> lab(B);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>(rng::normal(1, 1, i));
  for (int i = 0; i < B; ++i) lab[i] = static_cast<int32_t>(rng::uniform_int(1, 2, i, c.num_classes));
  std::vector<double> ms;
  for (int it = 0; it < warmup + iters; ++it) {
    Timer t;
    step(model, ctx, img.data(), lab.data(), B);
    if (it >= warmup) ms.push_back(t.ms());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  std::printf("BENCH_RESNET depth=%d batch=%d threads=%d precision=%s memory_format=%s median_ms=%.2f min_ms=%.2f "
              "max_ms=%.2f images_per_s=%.1f\n",
              depth, B, omp_get_max_threads(), precision.c_str(), model.channels_last() ? "nhwc" : "nchw", med,
              ms.front(), ms.back(), B / (med / 1e3));
  if (profile) print_profile(model, ctx, img.data(), lab.data(), B, iters);
  return 0;
}
