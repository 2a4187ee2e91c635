#include "models/resnet/resnet.hpp"

#include <algorithm>
#include <cmath>

#include "core/rng.hpp"
#include "kernels/kernels.hpp"

namespace hpct::resnet {

namespace k = hpct::kernels;

void ResNetConfig::validate(const std::string& where) const {
  HPCT_USAGE_CHECK(depth >= 8 && (depth - 2) % 6 == 0,
                   "{}: model.depth = {}: a CIFAR-style ResNet has depth 6n + 2 (20, 32, 44, 56, 110)", where, depth);
  HPCT_USAGE_CHECK(in_channels >= 1 && height >= 4 && width >= 4 && num_classes >= 2 && base_width >= 1,
                   "{}: image {}x{}x{}, {} classes, base width {}: all must be positive (image >= 4x4, >= 2 classes)",
                   where, in_channels, height, width, num_classes, base_width);
}

std::vector<ParamSpec> parameter_layout(const ResNetConfig& c) {
  std::vector<ParamSpec> out;
  const int64_t w = c.base_width;
  out.push_back({"conv1.weight", {w, c.in_channels, 3, 3}, true});
  out.push_back({"bn1.weight", {w}, false});
  out.push_back({"bn1.bias", {w}, false});
  int64_t in = w;
  for (int s = 0; s < 3; ++s) {
    const int64_t width = w << s;
    for (int b = 0; b < c.blocks_per_stage(); ++b) {
      const std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(b) + ".";
      out.push_back({p + "conv1.weight", {width, in, 3, 3}, true});
      out.push_back({p + "bn1.weight", {width}, false});
      out.push_back({p + "bn1.bias", {width}, false});
      out.push_back({p + "conv2.weight", {width, width, 3, 3}, true});
      out.push_back({p + "bn2.weight", {width}, false});
      out.push_back({p + "bn2.bias", {width}, false});
      if (b == 0 && s > 0) {
        out.push_back({p + "downsample.0.weight", {width, in, 1, 1}, true});
        out.push_back({p + "downsample.1.weight", {width}, false});
        out.push_back({p + "downsample.1.bias", {width}, false});
      }
      in = width;
    }
  }
  out.push_back({"fc.weight", {c.num_classes, in}, true});
  out.push_back({"fc.bias", {c.num_classes}, false});
  return out;
}

int64_t num_parameters(const ResNetConfig& cfg) {
  int64_t n = 0;
  for (const auto& p : parameter_layout(cfg)) {
    int64_t e = 1;
    for (auto d : p.shape) e *= d;
    n += e;
  }
  return n;
}

namespace {
int index_of(const std::vector<ParamSpec>& layout, const std::string& name) {
  for (size_t i = 0; i < layout.size(); ++i)
    if (layout[i].name == name) return static_cast<int>(i);
  HPCT_FAIL("no parameter {}", name);
}
}  // namespace

ResNet::Conv ResNet::make_conv(const std::string& name, int C, int OC, int H, int W, int K, int stride, int pad) {
  Conv c{index_of(layout_, name), C, OC, H, W, K, stride, pad, (H + 2 * pad - K) / stride + 1,
         (W + 2 * pad - K) / stride + 1};
  const ExecContext ctx{device_, nullptr};
  ws_floats_ = std::max(ws_floats_, k::conv2d_workspace_floats(ctx, B_, C, H, W, OC, K, K, stride, pad));
  return c;
}

ResNet::Bn ResNet::make_bn(const std::string& name, int C, int HW) {
  Bn b{index_of(layout_, name + ".weight"), static_cast<int>(buffers_.tensors().size()), C, HW, nullptr, nullptr,
       nullptr, nullptr, nullptr};
  buffers_.add(name + ".running_mean", {C});
  buffers_.add(name + ".running_var", {C});
  const int R = bn_group_ ? bn_group_->size() : 1;
  b.mean = &acts_.add(name + ".save_mean", {C});
  b.rstd = &acts_.add(name + ".save_rstd", {C});
  b.stats = &acts_.add(name + ".stats", {C, 3});
  b.gathered = &acts_.add(name + ".gathered", {R, C, 3});
  b.sums = &acts_.add(name + ".sums", {C, 2});
  return b;
}

ResNet::ResNet(const ResNetConfig& cfg, int micro_batch, Device device, comm::Communicator* bn_group)
    : cfg_(cfg),
      B_(micro_batch),
      device_(device),
      bn_group_(bn_group),
      layout_(parameter_layout(cfg)),
      params_("params", device),
      grads_("grads", device),
      buffers_("bn_buffers", device),
      acts_("activations", device),
      dacts_("activation_grads", device),
      work_("conv_workspace", device) {
  cfg_.validate("ResNet");
  HPCT_CHECK(micro_batch >= 1, "micro_batch must be >= 1, is {}", micro_batch);
  for (const auto& p : layout_) {
    params_.add(p.name, p.shape);
    grads_.add(p.name, p.shape);
  }
  const int B = B_, w = cfg_.base_width;
  int H = cfg_.height, W = cfg_.width, C = w;
  int64_t largest = 0;
  auto act = [&](const std::string& name, int ch, int h, int ww) {
    largest = std::max<int64_t>(largest, static_cast<int64_t>(B) * ch * h * ww);
    return &acts_.add(name, {B, ch, h, ww});
  };
  stem_conv_ = make_conv("conv1.weight", cfg_.in_channels, w, H, W, 3, 1, 1);
  stem_bn_ = make_bn("bn1", w, H * W);
  x0c_ = act("stem.conv", w, H, W);
  x0b_ = act("stem.bn", w, H, W);
  x0r_ = act("stem.relu", w, H, W);
  for (int s = 0; s < 3; ++s) {
    const int width = w << s;
    for (int b = 0; b < cfg_.blocks_per_stage(); ++b) {
      const std::string p = "layer" + std::to_string(s + 1) + "." + std::to_string(b) + ".";
      const int stride = (b == 0 && s > 0) ? 2 : 1;
      Block blk;
      blk.c1 = make_conv(p + "conv1.weight", C, width, H, W, 3, stride, 1);
      const int OH = blk.c1.OH, OW = blk.c1.OW;
      blk.b1 = make_bn(p + "bn1", width, OH * OW);
      blk.c2 = make_conv(p + "conv2.weight", width, width, OH, OW, 3, 1, 1);
      blk.b2 = make_bn(p + "bn2", width, OH * OW);
      blk.downsample = stride != 1 || C != width;
      if (blk.downsample) {
        blk.ds = make_conv(p + "downsample.0.weight", C, width, H, W, 1, stride, 0);
        blk.bds = make_bn(p + "downsample.1", width, OH * OW);
        blk.xdsc = act(p + "ds.conv", width, OH, OW);
        blk.xdsb = act(p + "ds.bn", width, OH, OW);
      }
      blk.xc1 = act(p + "c1", width, OH, OW);
      blk.xb1 = act(p + "b1", width, OH, OW);
      blk.xr1 = act(p + "r1", width, OH, OW);
      blk.xc2 = act(p + "c2", width, OH, OW);
      blk.xb2 = act(p + "b2", width, OH, OW);
      blk.out = act(p + "out", width, OH, OW);
      blocks_.push_back(blk);
      H = OH;
      W = OW;
      C = width;
    }
  }
  C_last_ = C;
  HW_last_ = H * W;
  fc_w_ = index_of(layout_, "fc.weight");
  fc_b_ = index_of(layout_, "fc.bias");
  pooled_ = &acts_.add("pooled", {B, C});
  logits_ = &acts_.add("logits", {B, cfg_.num_classes});
  losses_ = &acts_.add("losses", {B});
  dA_ = &dacts_.add("dA", {largest});
  dB_ = &dacts_.add("dB", {largest});
  dC_ = &dacts_.add("dC", {largest});
  dD_ = &dacts_.add("dD", {largest});
  dpooled_ = &dacts_.add("dpooled", {B, C});
  ws_ = &work_.add("workspace", {std::max<int64_t>(ws_floats_, 1)});
  params_.allocate();
  grads_.allocate();
  buffers_.allocate();
  acts_.allocate();
  dacts_.allocate();
  work_.allocate();
}

void ResNet::init_parameters(const ExecContext& ctx, uint64_t seed) {
  std::vector<float> host;
  for (size_t i = 0; i < layout_.size(); ++i) {
    const ParamSpec& spec = layout_[i];
    Tensor& t = params_.tensors()[i];
    host.assign(static_cast<size_t>(t.numel()), 0.0f);
    const uint64_t stream = rng::stream_of(spec.name);
    if (spec.shape.size() == 4) {  // kaiming_normal_(mode=fan_out, nonlinearity=relu): std = sqrt(2 / fan_out)
      const double fan_out = static_cast<double>(spec.shape[0] * spec.shape[2] * spec.shape[3]);
      rng::fill_normal(host.data(), t.numel(), 0.0f, static_cast<float>(std::sqrt(2.0 / fan_out)), seed, stream, 0);
    } else if (spec.name.rfind("fc.", 0) == 0) {  // torch.nn.Linear default: U(-1/sqrt(in), 1/sqrt(in))
      const double bound = 1.0 / std::sqrt(static_cast<double>(layout_[static_cast<size_t>(fc_w_)].shape[1]));
      for (int64_t j = 0; j < t.numel(); ++j)
        host[static_cast<size_t>(j)] = static_cast<float>((2.0 * rng::uniform(seed, stream, static_cast<uint64_t>(j)) - 1.0) * bound);
    } else if (spec.name.find(".weight") != std::string::npos) {  // BN gamma
      std::fill(host.begin(), host.end(), 1.0f);
    }  // BN beta: 0
    k::copy_from_host(ctx, t.data, host.data(), static_cast<int64_t>(t.bytes()));
  }
  for (size_t i = 0; i < buffers_.tensors().size(); ++i) {  // running_mean 0, running_var 1
    Tensor& t = buffers_.tensors()[i];
    host.assign(static_cast<size_t>(t.numel()), i % 2 == 0 ? 0.0f : 1.0f);
    k::copy_from_host(ctx, t.data, host.data(), static_cast<int64_t>(t.bytes()));
  }
}

void ResNet::zero_grad(const ExecContext& ctx) { k::fill_zero(ctx, grads_.base(), static_cast<int64_t>(grads_.bytes())); }

void ResNet::conv_forward(const ExecContext& ctx, const Conv& c, float* out, const float* inp, int b) {
  k::conv2d_forward(ctx, out, inp, params_.tensors()[static_cast<size_t>(c.pidx)].f32(), nullptr, ws_->f32(),
                    ws_->numel(), b, c.C, c.H, c.W, c.OC, c.K, c.K, c.stride, c.pad);
}

void ResNet::conv_backward(const ExecContext& ctx, const Conv& c, float* dinp, const float* dout, const float* inp,
                           int b) {
  k::conv2d_backward(ctx, dinp, grads_.tensors()[static_cast<size_t>(c.pidx)].f32(), nullptr, dout, inp,
                     params_.tensors()[static_cast<size_t>(c.pidx)].f32(), ws_->f32(), ws_->numel(), b, c.C, c.H,
                     c.W, c.OC, c.K, c.K, c.stride, c.pad);
}

// BatchNorm, training mode: local (count, mean, M2) per channel; with a SyncBN group, allgathered and merged
// with Chan's formula (the same code at group size 1); running statistics from the merged ones.
void ResNet::bn_forward(const ExecContext& ctx, Bn& bn, float* out, const float* inp, int b, bool train) {
  const float* gamma = params_.tensors()[static_cast<size_t>(bn.pidx)].f32();
  const float* beta = params_.tensors()[static_cast<size_t>(bn.pidx) + 1].f32();
  float* rmean = buffers_.tensors()[static_cast<size_t>(bn.bidx)].f32();
  float* rvar = buffers_.tensors()[static_cast<size_t>(bn.bidx) + 1].f32();
  if (!train) {
    k::batchnorm2d_forward_eval(ctx, out, inp, gamma, beta, rmean, rvar, b, bn.C, bn.HW, cfg_.bn_eps);
    return;
  }
  if (!bn_group_) {
    k::batchnorm2d_forward_train(ctx, out, bn.stats->f32(), bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta, b, bn.C,
                                 bn.HW, cfg_.bn_eps);
  } else {
    k::batchnorm2d_local_stats(ctx, bn.gathered->f32() + static_cast<int64_t>(bn_group_->rank()) * bn.C * 3, inp, b,
                               bn.C, bn.HW);
    float* mine = bn.gathered->f32() + static_cast<int64_t>(bn_group_->rank()) * bn.C * 3;
    bn_group_->allgather(mine, bn.gathered->f32(), static_cast<int64_t>(bn.C) * 3, DType::F32, "SyncBN statistics");
    k::batchnorm2d_merge_stats(ctx, bn.stats->f32(), bn.gathered->f32(), bn_group_->size(), bn.C);
    k::batchnorm2d_forward_apply(ctx, out, bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta, bn.stats->f32(), b, bn.C,
                                 bn.HW, cfg_.bn_eps);
  }
  k::batchnorm2d_update_running(ctx, rmean, rvar, bn.stats->f32(), bn.C, cfg_.bn_momentum);
}

void ResNet::bn_backward(const ExecContext& ctx, Bn& bn, float* dinp, const float* dout, const float* inp, int b) {
  const float* gamma = params_.tensors()[static_cast<size_t>(bn.pidx)].f32();
  float* dgamma = grads_.tensors()[static_cast<size_t>(bn.pidx)].f32();
  float* dbeta = grads_.tensors()[static_cast<size_t>(bn.pidx) + 1].f32();
  if (!bn_group_) {
    k::batchnorm2d_backward(ctx, dinp, dgamma, dbeta, dout, inp, bn.mean->f32(), bn.rstd->f32(), gamma, b, bn.C,
                            bn.HW);
    return;
  }
  k::batchnorm2d_backward_local_sums(ctx, bn.sums->f32(), dgamma, dbeta, dout, inp, bn.mean->f32(), bn.rstd->f32(), b,
                                     bn.C, bn.HW);
  bn_group_->allreduce(bn.sums->f32(), static_cast<int64_t>(bn.C) * 2, DType::F32, comm::ReduceOp::Sum,
                       "SyncBN gradient sums");
  float count = 0.0f;  // the merged element count per channel (exact in float up to 2^24)
  k::copy_to_host(ctx, &count, bn.stats->f32(), 4);
  k::batchnorm2d_backward_apply(ctx, dinp, dout, inp, bn.mean->f32(), bn.rstd->f32(), gamma, bn.sums->f32(),
                                static_cast<int64_t>(count), b, bn.C, bn.HW);
}

void ResNet::forward(const ExecContext& ctx, const float* images, int b, bool train) {
  HPCT_CHECK(b >= 1 && b <= B_, "forward of {} images on a model planned for micro_batch {}", b, B_);
  last_images_ = images;
  conv_forward(ctx, stem_conv_, x0c_->f32(), images, b);
  bn_forward(ctx, stem_bn_, x0b_->f32(), x0c_->f32(), b, train);
  const int64_t n0 = static_cast<int64_t>(b) * stem_bn_.C * stem_bn_.HW;
  k::relu_forward(ctx, x0r_->f32(), x0b_->f32(), n0);
  const float* x = x0r_->f32();
  for (Block& blk : blocks_) {
    const int64_t n = static_cast<int64_t>(b) * blk.b1.C * blk.b1.HW;
    conv_forward(ctx, blk.c1, blk.xc1->f32(), x, b);
    bn_forward(ctx, blk.b1, blk.xb1->f32(), blk.xc1->f32(), b, train);
    k::relu_forward(ctx, blk.xr1->f32(), blk.xb1->f32(), n);
    conv_forward(ctx, blk.c2, blk.xc2->f32(), blk.xr1->f32(), b);
    bn_forward(ctx, blk.b2, blk.xb2->f32(), blk.xc2->f32(), b, train);
    const float* shortcut = x;
    if (blk.downsample) {
      conv_forward(ctx, blk.ds, blk.xdsc->f32(), x, b);
      bn_forward(ctx, blk.bds, blk.xdsb->f32(), blk.xdsc->f32(), b, train);
      shortcut = blk.xdsb->f32();
    }
    k::residual_forward(ctx, blk.out->f32(), blk.xb2->f32(), shortcut, n);
    k::relu_forward(ctx, blk.out->f32(), blk.out->f32(), n);  // in place
    x = blk.out->f32();
  }
  k::global_avgpool_forward(ctx, pooled_->f32(), x, b, C_last_, HW_last_);
  k::matmul_forward(ctx, logits_->f32(), pooled_->f32(), params_.tensors()[static_cast<size_t>(fc_w_)].f32(),
                    params_.tensors()[static_cast<size_t>(fc_b_)].f32(), b, C_last_, cfg_.num_classes);
}

const float* ResNet::loss(const ExecContext& ctx, const int32_t* labels, int b) {
  k::crossentropy_forward(ctx, losses_->f32(), logits_->f32(), labels, b, cfg_.num_classes, cfg_.num_classes);
  return losses_->f32();
}

const float* ResNet::loss_and_backward(const ExecContext& ctx, const int32_t* labels, float dloss, int b) {
  const int K = cfg_.num_classes;
  k::crossentropy_forward_backward(ctx, losses_->f32(), logits_->f32(), labels, dloss, b, K, K);
  // head, in reverse: fc, average pool
  k::matmul_backward(ctx, dpooled_->f32(), grads_.tensors()[static_cast<size_t>(fc_w_)].f32(),
                     grads_.tensors()[static_cast<size_t>(fc_b_)].f32(), logits_->f32(), pooled_->f32(),
                     params_.tensors()[static_cast<size_t>(fc_w_)].f32(), b, C_last_, K);
  float* dx = dA_->f32();  // gradient w.r.t. the current block output
  k::global_avgpool_backward(ctx, dx, dpooled_->f32(), b, C_last_, HW_last_);
  for (int i = static_cast<int>(blocks_.size()) - 1; i >= 0; --i) {
    Block& blk = blocks_[static_cast<size_t>(i)];
    const float* x = i == 0 ? x0r_->f32() : blocks_[static_cast<size_t>(i) - 1].out->f32();
    const int64_t n = static_cast<int64_t>(b) * blk.b1.C * blk.b1.HW;
    float* dsum = dB_->f32();
    k::relu_backward(ctx, dsum, dx, blk.out->f32(), n);  // through the block's final ReLU
    // main branch: bn2 <- conv2 <- relu <- bn1 <- conv1
    float* t1 = dC_->f32();
    float* t2 = dD_->f32();
    bn_backward(ctx, blk.b2, t1, dsum, blk.xc2->f32(), b);
    conv_backward(ctx, blk.c2, t2, t1, blk.xr1->f32(), b);
    k::relu_backward(ctx, t2, t2, blk.xr1->f32(), n);
    bn_backward(ctx, blk.b1, t1, t2, blk.xc1->f32(), b);
    float* dxin = dx;  // reuse: dx (the block output's gradient) is no longer needed
    conv_backward(ctx, blk.c1, dxin, t1, x, b);
    // shortcut branch, summed into the input gradient
    if (blk.downsample) {
      bn_backward(ctx, blk.bds, t1, dsum, blk.xdsc->f32(), b);
      conv_backward(ctx, blk.ds, t2, t1, x, b);
      const int64_t nin = static_cast<int64_t>(b) * blk.ds.C * blk.ds.H * blk.ds.W;
      k::residual_forward(ctx, dxin, dxin, t2, nin);
    } else {
      k::residual_forward(ctx, dxin, dxin, dsum, n);
    }
  }
  // stem: relu <- bn <- conv (no gradient w.r.t. the images)
  const int64_t n0 = static_cast<int64_t>(b) * stem_bn_.C * stem_bn_.HW;
  k::relu_backward(ctx, dx, dx, x0r_->f32(), n0);
  bn_backward(ctx, stem_bn_, dC_->f32(), dx, x0c_->f32(), b);
  conv_backward(ctx, stem_conv_, nullptr, dC_->f32(), last_images_, b);
  return losses_->f32();
}

}  // namespace hpct::resnet
