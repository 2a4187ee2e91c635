// The torchvision state dict of hpctrain's ResNets (lib/interop/torchvision_resnet.hpp): for every ImageNet-style depth
// the number of entries and of elements equal torchvision 0.14's resnet<depth>(num_classes=7).state_dict() (counted
// there: len(sd), sum(v.numel()); a num_batches_tracked scalar counts 1), in state_dict() order; the cifar style and
// the other non-stock cases are named not loadable, with their reason.
#include <gtest/gtest.h>

#include "interop/torchvision_resnet.hpp"

namespace hpct::interop {
namespace {

resnet::ResNetConfig imagenet(int depth, int channels = 3, int width = 64) {
  resnet::ResNetConfig c;
  c.style = "imagenet";
  c.depth = depth;
  c.in_channels = channels;
  c.base_width = width;
  c.num_classes = 7;
  c.height = c.width = 224;
  return c;
}

TEST(TorchvisionResNet, StateDictMatchesTorchvisionCounts) {
  const struct {
    int depth;
    size_t entries;
    int64_t elements;
  } want[] = {
      {18, 122, 11189723}, {34, 218, 21305323}, {50, 320, 23575548}, {101, 626, 42619951}, {152, 932, 58309730}};
  for (const auto& w : want) {
    const auto sd = torchvision_state_dict_layout(imagenet(w.depth));
    EXPECT_EQ(sd.size(), w.entries) << "resnet" << w.depth;
    int64_t n = 0;
    for (const auto& e : sd) {
      int64_t k = 1;
      for (int64_t d : e.shape) k *= d;
      n += k;
      const bool tracked = e.name.size() > 20 && e.name.rfind(".num_batches_tracked") == e.name.size() - 20;
      EXPECT_EQ(e.dtype, tracked ? DType::I64 : DType::F32) << e.name;
      EXPECT_EQ(e.source, tracked ? std::string() : "model/" + e.name) << e.name;
      if (tracked) {
        EXPECT_TRUE(e.shape.empty()) << e.name;
      }
    }
    EXPECT_EQ(n, w.elements) << "resnet" << w.depth;
    const std::vector<std::string> head = {"conv1.weight",         "bn1.weight",      "bn1.bias",
                                           "bn1.running_mean",     "bn1.running_var", "bn1.num_batches_tracked",
                                           "layer1.0.conv1.weight"};
    for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(sd[i].name, head[i]);
    EXPECT_EQ(sd[sd.size() - 2].name, "fc.weight");
    EXPECT_EQ(sd.back().name, "fc.bias");
    EXPECT_EQ(torchvision_architecture(imagenet(w.depth)), "resnet" + std::to_string(w.depth));
    EXPECT_EQ(torchvision_unloadable_reason(imagenet(w.depth)), "");
  }
  // a Bottleneck's projection: layer1.0.downsample.{0.weight (256, 64, 1, 1), 1.*}
  const auto sd50 = torchvision_state_dict_layout(imagenet(50));
  bool found = false;
  for (const auto& e : sd50)
    if (e.name == "layer1.0.downsample.0.weight") {
      found = true;
      EXPECT_EQ(e.shape, (std::vector<int64_t>{256, 64, 1, 1}));
    }
  EXPECT_TRUE(found);
}

TEST(TorchvisionResNet, NonStockModelsAreNamedNotLoadable) {
  resnet::ResNetConfig cifar;  // ResNet-20, base width 16
  cifar.in_channels = 3;
  EXPECT_EQ(torchvision_architecture(cifar), "cifar_resnet20");
  EXPECT_NE(torchvision_unloadable_reason(cifar).find("CIFAR-style ResNet-20"), std::string::npos);
  EXPECT_NE(torchvision_unloadable_reason(imagenet(50, 3, 32)).find("base width 32"), std::string::npos);
  EXPECT_NE(torchvision_unloadable_reason(imagenet(18, 1)).find("1 input channel:"), std::string::npos);
  // the same naming scheme: stem, stages, fc, every BN with its three buffers
  const auto sd = torchvision_state_dict_layout(cifar);
  EXPECT_EQ(sd.front().name, "conv1.weight");
  EXPECT_EQ(sd[5].name, "bn1.num_batches_tracked");
  EXPECT_EQ(sd.back().name, "fc.bias");
}

}  // namespace
}  // namespace hpct::interop
