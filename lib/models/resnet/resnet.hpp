#pragma once
// ResNet for small images (He et al. 2016, the CIFAR variant: depth = 6n + 2, three stages of n BasicBlocks with
// widths w, 2w, 4w, stride 2 at the start of stages 2 and 3 with a 1x1-conv + BN projection shortcut), NCHW,
// forward and backward over kernels/ in llm.c's style. Training-mode BatchNorm uses the micro-batch statistics;
// with a SyncBN group they are merged over the group with Chan's formula (DESIGN.md §6), and the same split code
// runs on one rank. Evaluation uses the running statistics (torch semantics: momentum 0.1, unbiased running var).
//
// Legend: B micro-batch, C channels, H x W image, K classes, w base width.
// Gradients: parameter gradients accumulate (+=) over micro-batches; the caller zeroes them once per step.
// Parameters (names as torchvision's cifar ports): conv1.weight (w, Cin, 3, 3), bn1.{weight,bias},
// layer<s>.<b>.{conv1,conv2}.weight, layer<s>.<b>.{bn1,bn2}.{weight,bias}, layer<s>.<b>.downsample.{0.weight,
// 1.weight, 1.bias}, fc.{weight (K, 4w), bias (K)}. Weight decay applies to conv and fc weights only.
// Buffers: every BN's running_mean and running_var (<bn name>.running_mean / .running_var).
// Not yet: ImageNet-style ResNet-18/34/50 (Bottleneck, 7x7 stem, max-pool): issue 5 continues.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "kernels/exec_context.hpp"
#include "tensor/tensor.hpp"

namespace hpct::resnet {

struct ResNetConfig {
  int depth = 20;  // 6n + 2
  int in_channels = 1, height = 28, width = 28, num_classes = 10;
  int base_width = 16;
  float bn_eps = 1e-5f, bn_momentum = 0.1f;
  int blocks_per_stage() const { return (depth - 2) / 6; }
  void validate(const std::string& where) const;  // UsageError naming the key
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool decay = false;
};
std::vector<ParamSpec> parameter_layout(const ResNetConfig& cfg);
int64_t num_parameters(const ResNetConfig& cfg);

class ResNet {
 public:
  // bn_group: the SyncBN group (the DP communicator) or null for per-rank BatchNorm.
  ResNet(const ResNetConfig& cfg, int micro_batch, Device device, comm::Communicator* bn_group = nullptr);
  ResNet(const ResNet&) = delete;
  ResNet& operator=(const ResNet&) = delete;

  const ResNetConfig& config() const { return cfg_; }
  int micro_batch() const { return B_; }
  // Counter-based init keyed by (seed, name, element): convs kaiming-normal (fan_out, ReLU gain, torchvision),
  // BN gamma 1 beta 0, fc weight and bias uniform(+-1/sqrt(fan_in)) (torch.nn.Linear); running var 1, mean 0.
  void init_parameters(const ExecContext& ctx, uint64_t seed);

  // images (b, Cin, H, W) on the device, b <= micro_batch; train: batch statistics (and running-stat update).
  void forward(const ExecContext& ctx, const float* images, int b, bool train);
  // per-sample losses (b) of the last forward against labels (b)
  const float* loss(const ExecContext& ctx, const int32_t* labels, int b);
  // fused loss + backward of the last (training) forward; every parameter gradient += dloss * d(sum losses)/dp
  const float* loss_and_backward(const ExecContext& ctx, const int32_t* labels, float dloss, int b);
  void zero_grad(const ExecContext& ctx);

  Slab& params() { return params_; }
  Slab& grads() { return grads_; }
  Slab& buffers() { return buffers_; }
  const std::vector<ParamSpec>& layout() const { return layout_; }
  const float* logits() const { return logits_->f32(); }  // (B, K)

 private:
  struct Conv {
    int pidx;  // parameter index of the weight
    int C, OC, H, W, K, stride, pad, OH, OW;
  };
  struct Bn {
    int pidx;  // gamma; beta = pidx + 1
    int bidx;  // running_mean; running_var = bidx + 1
    int C, HW;
    Tensor *mean, *rstd, *stats, *gathered, *sums;
  };
  struct Block {
    Conv c1, c2, ds;
    Bn b1, b2, bds;
    bool downsample = false;
    Tensor *xc1, *xb1, *xr1, *xc2, *xb2, *xdsc, *xdsb, *out;  // activations of the block
  };
  void bn_forward(const ExecContext& ctx, Bn& bn, float* out, const float* inp, int b, bool train);
  void bn_backward(const ExecContext& ctx, Bn& bn, float* dinp, const float* dout, const float* inp, int b);
  void conv_forward(const ExecContext& ctx, const Conv& c, float* out, const float* inp, int b);
  void conv_backward(const ExecContext& ctx, const Conv& c, float* dinp, const float* dout, const float* inp, int b);
  Conv make_conv(const std::string& name, int C, int OC, int H, int W, int K, int stride, int pad);
  Bn make_bn(const std::string& name, int C, int HW);

  ResNetConfig cfg_;
  int B_;
  Device device_;
  comm::Communicator* bn_group_;
  std::vector<ParamSpec> layout_;
  Slab params_, grads_, buffers_, acts_, dacts_, work_;
  Conv stem_conv_;
  Bn stem_bn_;
  std::vector<Block> blocks_;
  Tensor *x0c_, *x0b_, *x0r_, *pooled_, *logits_, *losses_, *ws_;
  Tensor *dA_, *dB_, *dC_, *dD_, *dpooled_;  // backward scratch: the largest activation, several
  const float* last_images_ = nullptr;  // (B, Cin, H, W) of the last forward (the stem's weight gradient)
  int fc_w_ = 0, fc_b_ = 0;
  int64_t ws_floats_ = 0;
  int C_last_ = 0, HW_last_ = 0;
};

}  // namespace hpct::resnet
