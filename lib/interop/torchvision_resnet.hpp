#pragma once
// hpctrain's ResNet as a torchvision state dict in safetensors (`ckpt_tool export --format torchvision`;
// docs/contracts.md "Export formats").
//
// The mapping is the identity on names: lib/models/resnet already names every parameter and BatchNorm buffer as
// torchvision's ResNet does (conv1.weight, bn1.{weight,bias,running_mean,running_var}, layer<s>.<b>.conv<i>.weight,
// layer<s>.<b>.bn<i>.*, layer<s>.<b>.downsample.{0,1}.*, fc.{weight (K, C_last), bias (K)}), and the architecture is
// torchvision's (7x7/2 stem + BN + ReLU + 3x3/2 max-pool with padding 1; BasicBlock for 18/34, Bottleneck v1.5 with the
// stride on the 3x3 conv for 50/101/152; 1x1-conv + BN projections; bias-free convs; BN eps 1e-5, momentum 0.1, running
// var unbiased; global average pool + fc). What the export adds is torchvision's third BN buffer,
// `<bn>.num_batches_tracked` (I64, shape []), which hpctrain does not keep: it is the number of training-mode BN
// forwards one rank's module would have counted = optimizer steps x micro-batches per rank (global_batch / (DP x
// micro_batch), from the checkpoint's deck and layout; exact unless a resume changed that split). torchvision reads it
// only with momentum = None (cumulative averages), so it never changes eval-mode outputs.
//
// Loadable into torchvision's stock classes (torchvision.models.resnet<depth>(num_classes=K), strict=True): the
// imagenet style with 3 input channels and base width 64. Other models are written under the same naming, with
// config.json's `torchvision_loadable: false` and the reason: the cifar style (3x3 stride-1 stem, no max-pool, three
// stages: no torchvision class has it), in_channels != 3 (conv1 differs), base_width != 64 (every stage differs).
#include <cstdint>
#include <string>
#include <vector>

#include "models/resnet/resnet.hpp"
#include "tensor/tensor.hpp"

namespace hpct::interop {

// One entry of the exported state dict, in torchvision's state_dict() order.
struct StateDictEntry {
  std::string name;            // torchvision's key
  DType dtype = DType::F32;    // F32, or I64 for num_batches_tracked
  std::vector<int64_t> shape;  // {} for num_batches_tracked (a scalar)
  std::string source;          // the checkpoint dataset ("model/<name>"), "" for num_batches_tracked
};

// The whole state dict of a ResNet of this configuration (parameters and buffers), checkpoint sources included.
std::vector<StateDictEntry> torchvision_state_dict_layout(const resnet::ResNetConfig& cfg);

// "resnet18" ... "resnet152" for the imagenet style, "cifar_resnet20" ... for the cifar style.
std::string torchvision_architecture(const resnet::ResNetConfig& cfg);

// Why torchvision's stock class cannot load this model with strict=True; "" when it can.
std::string torchvision_unloadable_reason(const resnet::ResNetConfig& cfg);

struct TorchvisionExport {
  std::string architecture, safetensors_path, config_path;
  bool loadable = false;
  int64_t tensors = 0, bytes = 0, num_batches_tracked = 0;
};

// Reads the ResNet checkpoint in step_dir (every tensor checked against the deck's architecture) and writes
// out_dir/model.safetensors (F32 tensors, I64 num_batches_tracked) and out_dir/config.json (architecture, style, depth,
// num_classes, in_channels, base_width, the input normalisation, how to load it, or why torchvision cannot).
// out_dir is created if needed; both files are written atomically. A checkpoint of another app (train_gpt) is a
// UsageError naming the format to use.
TorchvisionExport export_torchvision_resnet(const std::string& step_dir, const std::string& out_dir);

}  // namespace hpct::interop
