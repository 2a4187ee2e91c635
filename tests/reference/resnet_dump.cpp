// Writes what tests/reference/resnet_reference.py needs to replay one ResNet training-mode forward/backward in
// PyTorch: the config, the initial parameters and BN buffers (torchvision-style names), a random batch, and
// hpctrain's per-sample losses, every parameter gradient (dloss = 1/B: the mean loss) and the running statistics
// after the step.
//   usage: resnet_dump OUT.h5 [depth base_width height num_classes batch [style channels]]   (style cifar | imagenet)
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/h5_check.hpp"
#include "core/rng.hpp"
#include "models/resnet/resnet.hpp"
#include "train/tasks/h5_write.hpp"

using namespace hpct;

namespace {
using train::h5::attr_i64;
using train::h5::write_dataset;
std::vector<float> copy(const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: resnet_dump OUT.h5 [depth base_width height num_classes batch [style channels]]\n");
    return 2;
  }
  resnet::ResNetConfig c;
  c.depth = argc > 2 ? std::atoi(argv[2]) : 8;
  c.base_width = argc > 3 ? std::atoi(argv[3]) : 4;
  c.height = c.width = argc > 4 ? std::atoi(argv[4]) : 12;
  c.num_classes = argc > 5 ? std::atoi(argv[5]) : 10;
  const int B = argc > 6 ? std::atoi(argv[6]) : 6;
  if (argc > 7) c.style = argv[7];
  if (argc > 8) c.in_channels = std::atoi(argv[8]);
  const int D = c.in_channels * c.height * c.width;
  const ExecContext ctx;
  resnet::ResNet model(c, B, Device::CPU);
  model.init_parameters(ctx, 1234);
  std::vector<float> img(static_cast<size_t>(B) * D);
  std::vector<int32_t> lab(B);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>(rng::normal(3, 1, i));
  for (int i = 0; i < B; ++i) lab[i] = static_cast<int32_t>(rng::uniform_int(3, 2, i, c.num_classes));

  hid_t f = H5_CHECK(H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  attr_i64(f, "depth", c.depth);
  attr_i64(f, "base_width", c.base_width);
  attr_i64(f, "height", c.height);
  attr_i64(f, "num_classes", c.num_classes);
  attr_i64(f, "batch", B);
  attr_i64(f, "channels", c.in_channels);
  attr_i64(f, "imagenet_style", c.style == "imagenet" ? 1 : 0);
  for (auto& t : model.params().tensors())
    write_dataset(f, "init/" + t.name, t.shape, H5T_NATIVE_FLOAT, copy(t).data());
  write_dataset(f, "batch/images", {B, c.in_channels, c.height, c.width}, H5T_NATIVE_FLOAT, img.data());
  write_dataset(f, "batch/labels", {B}, H5T_NATIVE_INT32, lab.data());
  model.zero_grad(ctx);
  model.forward(ctx, img.data(), B, true);
  const float* losses = model.loss_and_backward(ctx, lab.data(), 1.0f / B, B);
  write_dataset(f, "losses", {B}, H5T_NATIVE_FLOAT, losses);
  for (auto& t : model.grads().tensors())
    write_dataset(f, "grads/" + t.name, t.shape, H5T_NATIVE_FLOAT, copy(t).data());
  for (auto& t : model.buffers().tensors())
    write_dataset(f, "buffers/" + t.name, t.shape, H5T_NATIVE_FLOAT, copy(t).data());
  H5_CHECK(H5Fclose(f));
  return 0;
}
