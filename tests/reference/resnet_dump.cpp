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

using namespace hpct;

namespace {
void write(hid_t f, const std::string& name, const std::vector<int64_t>& shape, hid_t type, const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t lcpl = H5_CHECK(H5Pcreate(H5P_LINK_CREATE));
  H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  hid_t space = H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  hid_t d = H5_CHECK(H5Dcreate2(f, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  H5_CHECK(H5Dclose(d));
  H5_CHECK(H5Sclose(space));
  H5_CHECK(H5Pclose(lcpl));
}
void attr(hid_t f, const char* name, int64_t v) {
  hid_t s = H5_CHECK(H5Screate(H5S_SCALAR));
  hid_t a = H5_CHECK(H5Acreate2(f, name, H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, &v));
  H5_CHECK(H5Aclose(a));
  H5_CHECK(H5Sclose(s));
}
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
  attr(f, "depth", c.depth);
  attr(f, "base_width", c.base_width);
  attr(f, "height", c.height);
  attr(f, "num_classes", c.num_classes);
  attr(f, "batch", B);
  attr(f, "channels", c.in_channels);
  attr(f, "imagenet_style", c.style == "imagenet" ? 1 : 0);
  for (auto& t : model.params().tensors()) write(f, "init/" + t.name, t.shape, H5T_NATIVE_FLOAT, copy(t).data());
  write(f, "batch/images", {B, c.in_channels, c.height, c.width}, H5T_NATIVE_FLOAT, img.data());
  write(f, "batch/labels", {B}, H5T_NATIVE_INT32, lab.data());
  model.zero_grad(ctx);
  model.forward(ctx, img.data(), B, true);
  const float* losses = model.loss_and_backward(ctx, lab.data(), 1.0f / B, B);
  write(f, "losses", {B}, H5T_NATIVE_FLOAT, losses);
  for (auto& t : model.grads().tensors()) write(f, "grads/" + t.name, t.shape, H5T_NATIVE_FLOAT, copy(t).data());
  for (auto& t : model.buffers().tensors()) write(f, "buffers/" + t.name, t.shape, H5T_NATIVE_FLOAT, copy(t).data());
  H5_CHECK(H5Fclose(f));
  return 0;
}
