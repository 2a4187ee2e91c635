// bench_resnet: milliseconds of one ResNet training-mode forward + loss + backward (no optimizer: the SGD update of
// 0.27 M parameters is negligible) at batch B on 1x28x28 images, median of --iters after --warmup.
// usage: OMP_NUM_THREADS=2 bench_resnet [--depth 20] [--batch 128] [--iters 30] [--warmup 5]
// Prints one line: BENCH_RESNET depth=.. batch=.. threads=.. median_ms=.. min_ms=.. max_ms=.. images_per_s=..
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/rng.hpp"
#include "core/timer.hpp"
#include "models/resnet/resnet.hpp"

using namespace hpct;

int main(int argc, char** argv) {
  int depth = 20, B = 128, iters = 30, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--depth")) depth = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch")) B = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
  }
  resnet::ResNetConfig c;
  c.depth = depth;
  const ExecContext ctx;
  resnet::ResNet model(c, B, Device::CPU);
  model.init_parameters(ctx, 1);
  const int D = c.in_channels * c.height * c.width;
  std::vector<float> img(static_cast<size_t>(B) * D);
  std::vector<int32_t> lab(B);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>(rng::normal(1, 1, i));
  for (int i = 0; i < B; ++i) lab[i] = static_cast<int32_t>(rng::uniform_int(1, 2, i, c.num_classes));
  std::vector<double> ms;
  for (int it = 0; it < warmup + iters; ++it) {
    Timer t;
    model.zero_grad(ctx);
    model.forward(ctx, img.data(), B, true);
    model.loss_and_backward(ctx, lab.data(), 1.0f / B, B);
    if (it >= warmup) ms.push_back(t.ms());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  std::printf("BENCH_RESNET depth=%d batch=%d threads=%d median_ms=%.2f min_ms=%.2f max_ms=%.2f images_per_s=%.1f\n",
              depth, B, omp_get_max_threads(), med, ms.front(), ms.back(), B / (med / 1e3));
  return 0;
}
