#include "models/resnet/resnet.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <type_traits>

#include "core/rng.hpp"
#include "kernels/kernels.hpp"
#include "models/compute_copy.hpp"

namespace hpct::resnet {

namespace k = hpct::kernels;

namespace {

// The architecture as data, walked once by parameter_layout(), forward_flops_per_image() and the constructor.
struct UnitSpec {
  int C, OC, K, stride, pad;
  int H, W, OH, OW;  // input and output spatial size
};
struct BlockSpec {
  std::string prefix;           // "layer<s>.<b>."
  std::vector<UnitSpec> units;  // conv<i>/bn<i>, i = 1..
  bool downsample = false;
  UnitSpec ds{};  // 1x1 stride-s projection
};
struct ArchSpec {
  UnitSpec stem{};
  bool pool = false;
  int pool_H = 0, pool_W = 0, pool_OH = 0, pool_OW = 0;  // 3x3 stride-2 pad-1 max-pool (imagenet)
  std::vector<BlockSpec> blocks;
  int C_last = 0, H_last = 0, W_last = 0;
};

int out_size(int n, int K, int stride, int pad) { return (n + 2 * pad - K) / stride + 1; }

UnitSpec unit(int C, int OC, int K, int stride, int pad, int H, int W) {
  return {C, OC, K, stride, pad, H, W, out_size(H, K, stride, pad), out_size(W, K, stride, pad)};
}

ArchSpec arch(const ResNetConfig& c) {
  ArchSpec a;
  const bool imagenet = c.style == "imagenet";
  int H = c.height, W = c.width;
  a.stem = imagenet ? unit(c.in_channels, c.base_width, 7, 2, 3, H, W)
                    : unit(c.in_channels, c.base_width, 3, 1, 1, H, W);
  H = a.stem.OH;
  W = a.stem.OW;
  if (imagenet) {
    a.pool = true;
    a.pool_H = H;
    a.pool_W = W;
    H = a.pool_OH = out_size(H, 3, 2, 1);
    W = a.pool_OW = out_size(W, 3, 2, 1);
  }
  int in = c.base_width;
  const std::vector<int> blocks = c.stage_blocks();
  for (size_t s = 0; s < blocks.size(); ++s) {
    const int planes = c.base_width << s;
    const int out = planes * c.expansion();
    for (int b = 0; b < blocks[s]; ++b) {
      const int stride = (b == 0 && s > 0) ? 2 : 1;
      BlockSpec blk;
      blk.prefix = "layer" + std::to_string(s + 1) + "." + std::to_string(b) + ".";
      if (c.bottleneck()) {
        blk.units.push_back(unit(in, planes, 1, 1, 0, H, W));
        blk.units.push_back(unit(planes, planes, 3, stride, 1, H, W));
        const UnitSpec& u = blk.units.back();
        blk.units.push_back(unit(planes, out, 1, 1, 0, u.OH, u.OW));
      } else {
        blk.units.push_back(unit(in, planes, 3, stride, 1, H, W));
        const UnitSpec& u = blk.units.back();
        blk.units.push_back(unit(planes, planes, 3, 1, 1, u.OH, u.OW));
      }
      blk.downsample = stride != 1 || in != out;
      if (blk.downsample) blk.ds = unit(in, out, 1, stride, 0, H, W);
      H = blk.units.back().OH;
      W = blk.units.back().OW;
      in = out;
      a.blocks.push_back(std::move(blk));
    }
  }
  a.C_last = in;
  a.H_last = H;
  a.W_last = W;
  return a;
}

}  // namespace

std::vector<int> ResNetConfig::stage_blocks() const {
  if (style == "cifar") {
    const int n = (depth - 2) / 6;
    return {n, n, n};
  }
  switch (depth) {
    case 18: return {2, 2, 2, 2};
    case 34:
    case 50: return {3, 4, 6, 3};
    case 101: return {3, 4, 23, 3};
    case 152: return {3, 8, 36, 3};
    default: return {};
  }
}

void ResNetConfig::validate(const std::string& where) const {
  HPCT_USAGE_CHECK(style == "cifar" || style == "imagenet", "{}: model.style = \"{}\": use \"cifar\" or \"imagenet\"",
                   where, style);
  if (style == "cifar")
    HPCT_USAGE_CHECK(depth >= 8 && (depth - 2) % 6 == 0,
                     "{}: model.depth = {}: a CIFAR-style ResNet has depth 6n + 2 (8, 20, 32, 44, 56, 110)", where,
                     depth);
  else
    HPCT_USAGE_CHECK(!stage_blocks().empty(),
                     "{}: model.depth = {}: an ImageNet-style ResNet has depth 18, 34 (BasicBlock), 50, 101 or 152 "
                     "(Bottleneck)",
                     where, depth);
  HPCT_USAGE_CHECK(memory_format == "auto" || memory_format == "nchw" || memory_format == "nhwc",
                   "{}: model.memory_format = \"{}\": use \"auto\", \"nchw\" or \"nhwc\"", where, memory_format);
  HPCT_USAGE_CHECK(label_smoothing >= 0.0f && label_smoothing < 1.0f,
                   "{}: optim.label_smoothing = {} must be in [0, 1)", where, label_smoothing);
  HPCT_USAGE_CHECK(in_channels >= 1 && height >= 4 && width >= 4 && num_classes >= 2 && base_width >= 1,
                   "{}: image {}x{}x{}, {} classes, base width {}: all must be positive (image >= 4x4, >= 2 classes)",
                   where, in_channels, height, width, num_classes, base_width);
  const ArchSpec a = arch(*this);
  HPCT_USAGE_CHECK(
      a.H_last >= 1 && a.W_last >= 1,
      "{}: a {}x{} image is too small for a {}-style ResNet-{} (the last stage would be {}x{}); use larger "
      "images or the cifar style",
      where, height, width, style, depth, a.H_last, a.W_last);
}

std::vector<ParamSpec> parameter_layout(const ResNetConfig& c) {
  const ArchSpec a = arch(c);
  std::vector<ParamSpec> out;
  auto conv_bn = [&](const std::string& conv, const std::string& bn, const UnitSpec& u) {
    out.push_back({conv, {u.OC, u.C, u.K, u.K}, true});
    out.push_back({bn + ".weight", {u.OC}, false});
    out.push_back({bn + ".bias", {u.OC}, false});
  };
  conv_bn("conv1.weight", "bn1", a.stem);
  for (const BlockSpec& b : a.blocks) {
    for (size_t i = 0; i < b.units.size(); ++i)
      conv_bn(b.prefix + "conv" + std::to_string(i + 1) + ".weight", b.prefix + "bn" + std::to_string(i + 1),
              b.units[i]);
    if (b.downsample) conv_bn(b.prefix + "downsample.0.weight", b.prefix + "downsample.1", b.ds);
  }
  out.push_back({"fc.weight", {c.num_classes, a.C_last}, true});
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

double forward_flops_per_image(const ResNetConfig& cfg) {
  const ArchSpec a = arch(cfg);
  auto conv = [](const UnitSpec& u) { return 2.0 * u.OC * u.OH * u.OW * u.C * u.K * u.K; };
  double f = conv(a.stem);
  for (const BlockSpec& b : a.blocks) {
    for (const UnitSpec& u : b.units) f += conv(u);
    if (b.downsample) f += conv(b.ds);
  }
  return f + 2.0 * a.C_last * cfg.num_classes;
}

double training_flops_per_image(const ResNetConfig& cfg) { return 3.0 * forward_flops_per_image(cfg); }

MemoryPlan memory_plan(const ResNetConfig& cfg, int micro_batch, DType act, int bn_ranks) {
  const ResNet planned(cfg, micro_batch, Device::CPU, nullptr, /*allocate=*/false, act, Precision::FP32, bn_ranks);
  return planned.memory();
}

MemoryPlan ResNet::memory() const {
  MemoryPlan m;
  m.num_params = num_parameters(cfg_);
  m.param_bytes = shard_params_ ? 0 : params_.bytes();  // sharded (ZeRO-3): the parameter gather's
  m.grad_bytes = grads_.bound() ? 0 : grads_.bytes();   // bound: in the gradient sync's buckets (ZeRO-2)
  m.buffer_bytes = buffers_.bytes();
  m.compute_param_bytes = shard_params_ ? 0 : compute_.bytes();
  m.activation_bytes = acts_.bytes();
  m.activation_grad_bytes = dacts_.bytes();
  m.workspace_bytes = work_.bytes();
  return m;
}

namespace {
int index_of(const std::vector<ParamSpec>& layout, const std::string& name) {
  for (size_t i = 0; i < layout.size(); ++i)
    if (layout[i].name == name) return static_cast<int>(i);
  HPCT_FAIL("no parameter {}", name);
}
}  // namespace

namespace {
// The context a convolution's workspace is planned under. The CPU's workspace depends on the shape and the layout
// (oneDNN's or im2col's); CUDA's is the filter scratch and a budget for cuDNN (kernels.hpp), computed on the host, so
// that a plan for CUDA needs no GPU.
ExecContext planning_context(Device device, Precision arithmetic, bool channels_last) {
  ExecContext ctx{device, nullptr, device == Device::CPU ? Precision::FP32 : arithmetic};
  ctx.channels_last = channels_last;
  return ctx;
}
// The storage type the workspace is planned for. A CPU model that only plans memory (memory_plan) may be f16, which the
// CPU backend has no workspace formula for: it plans bf16's, the same 2-byte elements.
DType workspace_type(Device device, DType act) {
  return device == Device::CPU && act == DType::F16 ? DType::BF16 : act;
}

// model.memory_format: nchw; nhwc where every convolution of the net runs channels-last on this device (else a
// UsageError naming the first that does not); auto: nhwc exactly where it would run, except CUDA with fp32 storage,
// which stays NCHW: channels-last pays on CUDA through cuDNN's 16-bit tensor-core kernels, whose native layout it is
// (PyTorch's advice too: channels_last with AMP), and the fp32 path keeps the layout it was validated in.
bool choose_channels_last(const ResNetConfig& cfg, const ArchSpec& a, int B, Device device, DType act) {
  if (cfg.memory_format == "nchw") return false;
  if (cfg.memory_format == "auto" && device == Device::CUDA && act == DType::F32) return false;
  const ExecContext ctx = planning_context(device, Precision::FP32, /*channels_last=*/true);
  std::vector<UnitSpec> convs{a.stem};
  for (const BlockSpec& b : a.blocks) {
    convs.insert(convs.end(), b.units.begin(), b.units.end());
    if (b.downsample) convs.push_back(b.ds);
  }
  for (const UnitSpec& u : convs) {
    if (k::conv2d_channels_last_runs(ctx, B, u.C, u.H, u.W, u.OC, u.K, u.K, u.stride, u.pad,
                                     workspace_type(device, act)))
      continue;
    HPCT_USAGE_CHECK(cfg.memory_format == "auto",
                     "model.memory_format = nhwc: the {}x{} stride-{} convolution {} -> {} channels at {}x{} does not "
                     "run channels-last on {} with {} activations (channels-last needs CUDA, or the CPU backend built "
                     "with oneDNN, HPCT_CONV unset, and channel counts that are multiples of 16); use "
                     "model.memory_format = auto or nchw",
                     u.K, u.K, u.stride, u.C, u.OC, u.H, u.W, device_name(device), dtype_name(act));
    return false;
  }
  return true;
}
}  // namespace

ResNet::Conv ResNet::make_conv(const std::string& name, int C, int OC, int H, int W, int K, int stride, int pad) {
  Conv c{index_of(layout_, name),       C, OC, H, W, K, stride, pad, (H + 2 * pad - K) / stride + 1,
         (W + 2 * pad - K) / stride + 1};
  const ExecContext ctx = planning_context(device_, arithmetic_, channels_last_);
  ws_floats_ = std::max(ws_floats_, k::conv2d_workspace_floats(ctx, B_, C, H, W, OC, K, K, stride, pad,
                                                               workspace_type(device_, act_)));
  return c;
}

ResNet::Bn ResNet::make_bn(const std::string& name, int C, int HW) {
  Bn b{index_of(layout_, name + ".weight"),
       static_cast<int>(buffers_.tensors().size()),
       C,
       HW,
       nullptr,
       nullptr,
       nullptr,
       nullptr,
       nullptr};
  buffers_.add(name + ".running_mean", {C});
  buffers_.add(name + ".running_var", {C});
  const int R = bn_group_ ? bn_group_->size() : planned_bn_ranks_;
  b.mean = &acts_.add(name + ".save_mean", {C});
  b.rstd = &acts_.add(name + ".save_rstd", {C});
  b.stats = &acts_.add(name + ".stats", {C, 3});
  b.gathered = &acts_.add(name + ".gathered", {R, C, 3});
  b.sums = &acts_.add(name + ".sums", {C, 2});
  return b;
}

ResNet::ResNet(const ResNetConfig& cfg, int micro_batch, Device device, comm::Communicator* bn_group, bool allocate,
               DType act, Precision arithmetic, int planned_bn_ranks, bool allocate_grads, bool shard_params,
               models::Recompute recompute)
    : cfg_(cfg),
      B_(micro_batch),
      device_(device),
      act_(act),
      arithmetic_(arithmetic),
      bn_group_(bn_group),
      planned_bn_ranks_(planned_bn_ranks),
      layout_(parameter_layout(cfg)),
      params_("params", device),
      grads_("grads", device),
      compute_(fmt::format("params ({} compute copy)", dtype_name(act)), device),
      buffers_("bn_buffers", device),
      acts_("activations", device),
      dacts_("activation_grads", device),
      work_("conv_workspace", device) {
  cfg_.validate("ResNet");
  HPCT_CHECK(micro_batch >= 1, "micro_batch must be >= 1, is {}", micro_batch);
  HPCT_CHECK(act == DType::F32 || act == DType::BF16 || act == DType::F16,
             "ResNet activations are f32, bf16 or f16, not {}", dtype_name(act));
  HPCT_CHECK(
      act != DType::F16 || device == Device::CUDA || !allocate,
      "ResNet with f16 activations on {}: fp16 storage is CUDA-only; use train.precision=fp32 or bf16 on the CPU",
      device_name(device));
  for (const auto& p : layout_) {
    params_.add(p.name, p.shape);
    grads_.add(p.name, p.shape);
    if (act != DType::F32) compute_.add(p.name, p.shape, act);
  }
  const ArchSpec a = arch(cfg_);
  const int B = B_;
  channels_last_ = choose_channels_last(cfg_, a, B, device, act);
  int64_t largest = 0;
  auto activation = [&](const std::string& name, int ch, int h, int ww) {
    largest = std::max<int64_t>(largest, static_cast<int64_t>(B) * ch * h * ww);
    return &acts_.add(name, channels_last_ ? std::vector<int64_t>{B, h, ww, ch} : std::vector<int64_t>{B, ch, h, ww},
                      act);
  };
  // Full recompute: a block's inner activations live in one copy per unit position, as large as the largest block's,
  // which each block's forward and recompute overwrite (the block's output stays its own).
  HPCT_CHECK(recompute == models::Recompute::None || recompute == models::Recompute::Full,
             "ResNet recompute is none or full, not {}", models::recompute_name(recompute));
  recompute_ = recompute;
  const bool full = recompute == models::Recompute::Full;
  std::map<std::string, int64_t> shared_numel;  // "block.conv1" -> the largest numel of that unit position
  std::map<std::string, Tensor*> shared;        // ... -> its one tensor, once added
  if (full)
    for (const BlockSpec& bs : a.blocks) {
      auto grow = [&](const std::string& n, const UnitSpec& u) {
        int64_t& m = shared_numel[n];
        m = std::max<int64_t>(m, static_cast<int64_t>(B) * u.OC * u.OH * u.OW);
      };
      for (size_t i = 0; i < bs.units.size(); ++i) {
        grow("block.conv" + std::to_string(i + 1), bs.units[i]);
        grow("block.bn" + std::to_string(i + 1), bs.units[i]);
      }
      if (bs.downsample) {
        grow("block.downsample.conv", bs.ds);
        grow("block.downsample.bn", bs.ds);
      }
    }
  // a block's inner activation: its own, or (full recompute) the shared copy of its unit position
  auto inner = [&](const std::string& name, const std::string& position, int ch, int h, int ww) {
    if (!full) return activation(name, ch, h, ww);
    largest = std::max<int64_t>(largest, static_cast<int64_t>(B) * ch * h * ww);
    Tensor*& t = shared[position];
    if (!t) t = &acts_.add(position, {shared_numel.at(position)}, act);
    return t;
  };
  auto conv_of = [&](const std::string& name, const UnitSpec& u) {
    return make_conv(name, u.C, u.OC, u.H, u.W, u.K, u.stride, u.pad);
  };
  stem_conv_ = conv_of("conv1.weight", a.stem);
  stem_bn_ = make_bn("bn1", a.stem.OC, a.stem.OH * a.stem.OW);
  x0c_ = activation("stem.conv", a.stem.OC, a.stem.OH, a.stem.OW);
  x0b_ = activation("stem.bn_relu", a.stem.OC, a.stem.OH, a.stem.OW);
  if (a.pool) {
    stem_pool_ = true;
    pool_C_ = a.stem.OC;
    pool_H_ = a.pool_H;
    pool_W_ = a.pool_W;
    pool_OH_ = a.pool_OH;
    pool_OW_ = a.pool_OW;
    x0p_ = activation("stem.maxpool", pool_C_, pool_OH_, pool_OW_);
    pool_idx_ = &acts_.add("stem.maxpool_index",
                           channels_last_ ? std::vector<int64_t>{B, pool_OH_, pool_OW_, pool_C_}
                                          : std::vector<int64_t>{B, pool_C_, pool_OH_, pool_OW_},
                           DType::I32);
  }
  for (const BlockSpec& bs : a.blocks) {
    Block blk;
    blk.first_param = index_of(layout_, bs.prefix + "conv1.weight");
    for (size_t i = 0; i < bs.units.size(); ++i) {
      const UnitSpec& u = bs.units[i];
      const std::string n = std::to_string(i + 1);
      Unit un;
      un.conv = conv_of(bs.prefix + "conv" + n + ".weight", u);
      un.bn = make_bn(bs.prefix + "bn" + n, u.OC, u.OH * u.OW);
      un.xc = inner(bs.prefix + "conv" + n, "block.conv" + n, u.OC, u.OH, u.OW);
      // the last unit's BatchNorm writes the block's output (with the residual add and ReLU): no output of its own
      un.xb = i + 1 < bs.units.size() ? inner(bs.prefix + "bn" + n, "block.bn" + n, u.OC, u.OH, u.OW) : nullptr;
      blk.main.push_back(un);
    }
    const UnitSpec& last = bs.units.back();
    blk.downsample = bs.downsample;
    if (bs.downsample) {
      blk.ds = conv_of(bs.prefix + "downsample.0.weight", bs.ds);
      blk.bds = make_bn(bs.prefix + "downsample.1", bs.ds.OC, bs.ds.OH * bs.ds.OW);
      blk.xdsc = inner(bs.prefix + "downsample.conv", "block.downsample.conv", bs.ds.OC, bs.ds.OH, bs.ds.OW);
      blk.xdsb = inner(bs.prefix + "downsample.bn", "block.downsample.bn", bs.ds.OC, bs.ds.OH, bs.ds.OW);
      blk.end_param = index_of(layout_, bs.prefix + "downsample.1.bias") + 1;
    } else {
      blk.end_param = index_of(layout_, bs.prefix + "bn" + std::to_string(bs.units.size()) + ".bias") + 1;
    }
    blk.out = activation(bs.prefix + "out", last.OC, last.OH, last.OW);
    blocks_.push_back(std::move(blk));
  }
  C_last_ = a.C_last;
  HW_last_ = a.H_last * a.W_last;
  fc_w_ = index_of(layout_, "fc.weight");
  fc_b_ = index_of(layout_, "fc.bias");
  if (act != DType::F32 || (channels_last_ && cfg_.in_channels > 1))
    images_ = activation("images", cfg_.in_channels, cfg_.height, cfg_.width);
  pooled_ = &acts_.add("pooled", {B, C_last_}, act);
  logits_ = &acts_.add("logits", {B, cfg_.num_classes}, act);
  losses_ = &acts_.add("losses", {B});
  dA_ = &dacts_.add("dA", {largest}, act);
  dB_ = &dacts_.add("dB", {largest}, act);
  dC_ = &dacts_.add("dC", {largest}, act);
  dD_ = &dacts_.add("dD", {largest}, act);
  dpooled_ = &dacts_.add("dpooled", {B, C_last_}, act);
  ws_ = &work_.add("workspace", {std::max<int64_t>(ws_floats_, 1)});
  layers_ = layer_ranges();
  shard_params_ = shard_params;
  if (!allocate) return;
  if (!shard_params) params_.allocate();
  if (allocate_grads) grads_.allocate();
  if (act != DType::F32 && !shard_params) compute_.allocate();
  buffers_.allocate();
  acts_.allocate();
  dacts_.allocate();
  work_.allocate();
}

void ResNet::init_parameters(const ExecContext& ctx, uint64_t seed,
                             const std::function<void(int tensor, const float* host)>& store) {
  HPCT_CHECK(!shard_params_ || store, "ResNet with sharded parameters: init_parameters needs the shards' store");
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
        host[static_cast<size_t>(j)] = static_cast<float>(
            (2.0 * rng::uniform(seed, stream, static_cast<uint64_t>(j)) - 1.0) * bound);
    } else if (spec.name.find(".weight") != std::string::npos) {  // BN gamma
      std::fill(host.begin(), host.end(), 1.0f);
    }  // BN beta: 0
    if (store) {
      store(static_cast<int>(i), host.data());
      continue;
    }
    k::copy_from_host(ctx, t.data, host.data(), static_cast<int64_t>(t.bytes()));
    k::synchronize(ctx);  // `host` is refilled for the next tensor: the (asynchronous on CUDA) copy must be done
  }
  for (size_t i = 0; i < buffers_.tensors().size(); ++i) {  // running_mean 0, running_var 1
    Tensor& t = buffers_.tensors()[i];
    host.assign(static_cast<size_t>(t.numel()), i % 2 == 0 ? 0.0f : 1.0f);
    k::copy_from_host(ctx, t.data, host.data(), static_cast<int64_t>(t.bytes()));
    k::synchronize(ctx);  // as above
  }
}

void ResNet::refresh_compute_params(const ExecContext& ctx) {
  if (!shard_params_) models::refresh_compute_copy(ctx, compute_, params_);  // sharded: the gather's refresh()
}

void ResNet::reading_group(int g, bool backward) {
  const int next = backward ? g - 1 : g + 1;
  const auto [first, end] = layers_[static_cast<size_t>(g)];
  const auto [nf, ne] = next >= 0 && next < static_cast<int>(layers_.size()) ? layers_[static_cast<size_t>(next)]
                                                                             : std::make_pair(0, 0);
  reading(first, end, nf, ne);
}

void ResNet::zero_grad(const ExecContext& ctx) {
  if (grads_.bound()) return;  // bound to the gradient sync's buckets, which it zeroes as they fill (ZeRO-2)
  k::fill_zero(ctx, grads_.base(), static_cast<int64_t>(grads_.bytes()));
}

std::vector<std::pair<const ResNet::Conv*, k::ConvAlgoKey>> ResNet::distinct_convs(const ExecContext& ctx) const {
  std::vector<const Conv*> convs{&stem_conv_};
  for (const Block& blk : blocks_) {
    if (blk.downsample) convs.push_back(&blk.ds);
    for (const Unit& u : blk.main) convs.push_back(&u.conv);
  }
  std::vector<std::pair<const Conv*, k::ConvAlgoKey>> distinct;
  for (const Conv* c : convs) {
    const k::ConvAlgoKey key = k::conv_algo_key(ctx, B_, c->C, c->H, c->W, c->OC, c->K, c->K, c->stride, c->pad, act_);
    const auto same = [&key](const auto& d) { return d.second == key; };
    if (std::none_of(distinct.begin(), distinct.end(), same)) distinct.emplace_back(c, key);
  }
  return distinct;
}

std::vector<k::ConvAlgoKey> ResNet::conv_algo_keys(const ExecContext& ctx) const {
  std::vector<k::ConvAlgoKey> keys;
  for (const auto& [conv, key] : distinct_convs(in_layout(ctx))) keys.push_back(key);
  return keys;
}

std::vector<k::ConvTiming> ResNet::time_conv_algorithms(const ExecContext& ctx_in, int repeats) {
  HPCT_CHECK(dacts_.allocated(), "time_conv_algorithms on a ResNet built only to plan memory (allocate = false)");
  const ExecContext ctx = in_layout(ctx_in);
  // the scratch the candidates read is zeroed: uninitialised bytes could hold NaNs, which no step ever computes on
  k::fill_zero(ctx, dacts_.base(), static_cast<int64_t>(dacts_.bytes()));
  const int64_t room = dA_->numel();  // each of dA..dD holds the largest activation (the images' included)
  std::vector<k::ConvTiming> timings;
  with_activation_type(act_, [&](auto type) {
    using A = typename decltype(type)::type;
    for (const auto& [c, key] : distinct_convs(ctx)) {
      const int64_t filter = static_cast<int64_t>(c->OC) * c->C * c->K * c->K;
      const A* w = filter <= room   ? dD_->as<A>()
                   : !shard_params_ ? read_params().tensors()[static_cast<size_t>(c->pidx)].as<A>()
                                    : nullptr;
      if (!w) continue;
      // the backward-filter's float output, where conv2d writes dweight directly: dC's bytes, between its uses as dx
      float* dw = filter * static_cast<int64_t>(sizeof(float)) <= static_cast<int64_t>(dC_->bytes())
                      ? static_cast<float*>(dC_->data)
                      : nullptr;
      timings.push_back(k::conv2d_time_algorithms(ctx, dA_->as<A>(), w, dB_->as<A>(), dC_->as<A>(), dw, ws_->f32(),
                                                  ws_->numel(), B_, c->C, c->H, c->W, c->OC, c->K, c->K, c->stride,
                                                  c->pad, repeats));
    }
  });
  return timings;
}

std::vector<std::pair<int, int>> ResNet::layer_ranges() const {
  std::vector<std::pair<int, int>> ranges{{0, 3}};  // conv1.weight, bn1.weight, bn1.bias
  for (const Block& b : blocks_) ranges.emplace_back(b.first_param, b.end_param);
  ranges.emplace_back(fc_w_, fc_b_ + 1);
  return ranges;
}

std::vector<std::pair<int, int>> ResNet::grad_write_groups() const { return {layers_.rbegin(), layers_.rend()}; }

template <typename A>
void ResNet::conv_forward(const ExecContext& ctx, const Conv& c, A* out, const A* inp, int b) {
  k::conv2d_forward(ctx, out, inp, read_params().tensors()[static_cast<size_t>(c.pidx)].as<A>(),
                    static_cast<const A*>(nullptr), ws_->f32(), ws_->numel(), b, c.C, c.H, c.W, c.OC, c.K, c.K,
                    c.stride, c.pad);
}

template <typename A>
void ResNet::conv_backward(const ExecContext& ctx, const Conv& c, A* dinp, const A* dout, const A* inp, int b) {
  k::conv2d_backward(ctx, dinp, grads_.tensors()[static_cast<size_t>(c.pidx)].f32(), nullptr, dout, inp,
                     read_params().tensors()[static_cast<size_t>(c.pidx)].as<A>(), ws_->f32(), ws_->numel(), b, c.C,
                     c.H, c.W, c.OC, c.K, c.K, c.stride, c.pad);
}

// BatchNorm, training mode: local (count, mean, M2) per channel; with a SyncBN group, allgathered and merged
// with Chan's formula (the same code at group size 1); running statistics from the merged ones.
template <typename A>
void ResNet::bn_forward(const ExecContext& ctx, Bn& bn, A* out, const A* inp, int b, bool train, bool update_running,
                        bool relu, const A* residual) {
  const A* gamma = read_params().tensors()[static_cast<size_t>(bn.pidx)].as<A>();
  const A* beta = read_params().tensors()[static_cast<size_t>(bn.pidx) + 1].as<A>();
  float* rmean = buffers_.tensors()[static_cast<size_t>(bn.bidx)].f32();
  float* rvar = buffers_.tensors()[static_cast<size_t>(bn.bidx) + 1].f32();
  if (!train) {
    if (residual)
      k::batchnorm2d_add_relu_forward_eval(ctx, out, inp, gamma, beta, residual, rmean, rvar, b, bn.C, bn.HW,
                                           cfg_.bn_eps);
    else if (relu)
      k::batchnorm2d_relu_forward_eval(ctx, out, inp, gamma, beta, rmean, rvar, b, bn.C, bn.HW, cfg_.bn_eps);
    else
      k::batchnorm2d_forward_eval(ctx, out, inp, gamma, beta, rmean, rvar, b, bn.C, bn.HW, cfg_.bn_eps);
    return;
  }
  if (!bn_group_) {
    if (residual)
      k::batchnorm2d_add_relu_forward_train(ctx, out, bn.stats->f32(), bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta,
                                            residual, b, bn.C, bn.HW, cfg_.bn_eps);
    else if (relu)
      k::batchnorm2d_relu_forward_train(ctx, out, bn.stats->f32(), bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta, b,
                                        bn.C, bn.HW, cfg_.bn_eps);
    else
      k::batchnorm2d_forward_train(ctx, out, bn.stats->f32(), bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta, b, bn.C,
                                   bn.HW, cfg_.bn_eps);
  } else {
    k::batchnorm2d_local_stats(ctx, bn.gathered->f32() + static_cast<int64_t>(bn_group_->rank()) * bn.C * 3, inp, b,
                               bn.C, bn.HW);
    float* mine = bn.gathered->f32() + static_cast<int64_t>(bn_group_->rank()) * bn.C * 3;
    bn_group_->allgather(mine, bn.gathered->f32(), static_cast<int64_t>(bn.C) * 3, DType::F32, "SyncBN statistics");
    k::batchnorm2d_merge_stats(ctx, bn.stats->f32(), bn.gathered->f32(), bn_group_->size(), bn.C);
    if (residual)
      k::batchnorm2d_add_relu_forward_apply(ctx, out, bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta, residual,
                                            bn.stats->f32(), b, bn.C, bn.HW, cfg_.bn_eps);
    else if (relu)
      k::batchnorm2d_relu_forward_apply(ctx, out, bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta, bn.stats->f32(), b,
                                        bn.C, bn.HW, cfg_.bn_eps);
    else
      k::batchnorm2d_forward_apply(ctx, out, bn.mean->f32(), bn.rstd->f32(), inp, gamma, beta, bn.stats->f32(), b, bn.C,
                                   bn.HW, cfg_.bn_eps);
  }
  if (update_running) k::batchnorm2d_update_running(ctx, rmean, rvar, bn.stats->f32(), bn.C, cfg_.bn_momentum);
}

template <typename A>
void ResNet::bn_backward(const ExecContext& ctx, Bn& bn, A* dinp, A* dout, const A* inp, int b, const A* relu_out) {
  const A* gamma = read_params().tensors()[static_cast<size_t>(bn.pidx)].as<A>();
  float* dgamma = grads_.tensors()[static_cast<size_t>(bn.pidx)].f32();
  float* dbeta = grads_.tensors()[static_cast<size_t>(bn.pidx) + 1].f32();
  if (!bn_group_) {
    if (relu_out)
      k::batchnorm2d_relu_backward(ctx, dinp, dgamma, dbeta, dout, relu_out, inp, bn.mean->f32(), bn.rstd->f32(), gamma,
                                   b, bn.C, bn.HW);
    else
      k::batchnorm2d_backward(ctx, dinp, dgamma, dbeta, dout, inp, bn.mean->f32(), bn.rstd->f32(), gamma, b, bn.C,
                              bn.HW);
    return;
  }
  if (relu_out)
    k::batchnorm2d_relu_backward_local_sums(ctx, bn.sums->f32(), dgamma, dbeta, dout, relu_out, inp, bn.mean->f32(),
                                            bn.rstd->f32(), b, bn.C, bn.HW);
  else
    k::batchnorm2d_backward_local_sums(ctx, bn.sums->f32(), dgamma, dbeta, dout, inp, bn.mean->f32(), bn.rstd->f32(), b,
                                       bn.C, bn.HW);
  bn_group_->allreduce(bn.sums->f32(), static_cast<int64_t>(bn.C) * 2, DType::F32, comm::ReduceOp::Sum,
                       "SyncBN gradient sums");
  float count = 0.0f;  // the merged element count per channel (exact in float up to 2^24)
  k::copy_to_host(ctx, &count, bn.stats->f32(), 4);
  k::synchronize(ctx);  // count is read on the host next (CUDA copies are asynchronous; a no-op on the CPU)
  if (relu_out)
    k::batchnorm2d_relu_backward_apply(ctx, dinp, dout, relu_out, inp, bn.mean->f32(), bn.rstd->f32(), gamma,
                                       bn.sums->f32(), static_cast<int64_t>(count), b, bn.C, bn.HW);
  else
    k::batchnorm2d_backward_apply(ctx, dinp, dout, inp, bn.mean->f32(), bn.rstd->f32(), gamma, bn.sums->f32(),
                                  static_cast<int64_t>(count), b, bn.C, bn.HW);
}

void ResNet::forward(const ExecContext& ctx_in, const float* images, int b, bool train) {
  const ExecContext ctx = in_layout(ctx_in);
  with_activation_type(act_, [&](auto type) {
    using A = typename decltype(type)::type;
    if (!images_) {  // fp32 NCHW, or fp32 channels-last with one input channel (the same bytes): the images themselves
      if constexpr (std::is_same_v<A, float>) forward_impl<float>(ctx, images, b, train);
      return;
    }
    // the images arrive as fp32 NCHW (the data pipeline's) and enter the model in its layout, rounded once to a 16-bit
    // type (normalised images are within a few units: far inside fp16's range)
    HPCT_CHECK(b >= 1 && b <= B_, "forward of {} images on a model planned for micro_batch {}", b, B_);
    if (channels_last_) {
      k::images_to_channels_last(ctx, images_->as<A>(), images, b, cfg_.in_channels, cfg_.height * cfg_.width);
    } else if constexpr (!std::is_same_v<A, float>) {  // (fp32 NCHW has no images_)
      k::cast(ctx, images_->as<A>(), images, static_cast<int64_t>(b) * cfg_.in_channels * cfg_.height * cfg_.width);
    }
    forward_impl<A>(ctx, images_->as<A>(), b, train);
  });
}

template <typename A>
void ResNet::forward_impl(const ExecContext& ctx, const A* images, int b, bool train) {
  HPCT_CHECK(b >= 1 && b <= B_, "forward of {} images on a model planned for micro_batch {}", b, B_);
  HPCT_CHECK(acts_.allocated(), "forward on a ResNet built only to plan memory (allocate = false)");
  last_images_ = images;  // the stem conv's weight gradient reads them
  // stem: conv -> BN -> ReLU (-> max-pool)
  reading_group(0, false);
  conv_forward(ctx, stem_conv_, x0c_->as<A>(), images, b);
  bn_forward(ctx, stem_bn_, x0b_->as<A>(), x0c_->as<A>(), b, train, /*update_running=*/true, /*relu=*/true);
  const A* x = x0b_->as<A>();
  if (stem_pool_) {
    k::maxpool2d_forward(ctx, x0p_->as<A>(), pool_idx_->i32(), x0b_->as<A>(), b, pool_C_, pool_H_, pool_W_, 3, 2, 1);
    x = x0p_->as<A>();
  }
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    Block& blk = blocks_[bi];
    reading_group(static_cast<int>(bi) + 1, false);
    block_forward(ctx, blk, x, b, train, true);
    x = blk.out->as<A>();
  }
  k::global_avgpool_forward(ctx, pooled_->as<A>(), x, b, C_last_, HW_last_);
  reading_group(static_cast<int>(blocks_.size()) + 1, false);
  k::matmul_forward(ctx, logits_->as<A>(), pooled_->as<A>(),
                    read_params().tensors()[static_cast<size_t>(fc_w_)].as<A>(),
                    read_params().tensors()[static_cast<size_t>(fc_b_)].as<A>(), b, C_last_, cfg_.num_classes);
}

template <typename A>
void ResNet::block_forward(const ExecContext& ctx, Block& blk, const A* x, int b, bool train, bool update_running) {
  // the shortcut first: the main branch's last BatchNorm adds it
  const A* shortcut = x;
  if (blk.downsample) {
    conv_forward(ctx, blk.ds, blk.xdsc->as<A>(), x, b);
    bn_forward(ctx, blk.bds, blk.xdsb->as<A>(), blk.xdsc->as<A>(), b, train, update_running, /*relu=*/false);
    shortcut = blk.xdsb->as<A>();
  }
  // main branch: (conv -> BN -> ReLU) ..., conv -> BN -> + shortcut -> ReLU: each BatchNorm's pass applies what
  // follows it, the last one writing the block's output
  const A* in = x;
  for (size_t j = 0; j < blk.main.size(); ++j) {
    Unit& u = blk.main[j];
    conv_forward(ctx, u.conv, u.xc->as<A>(), in, b);
    if (j + 1 < blk.main.size()) {
      bn_forward(ctx, u.bn, u.xb->as<A>(), u.xc->as<A>(), b, train, update_running, /*relu=*/true);
      in = u.xb->as<A>();
    } else {
      bn_forward(ctx, u.bn, blk.out->as<A>(), u.xc->as<A>(), b, train, update_running, /*relu=*/true, shortcut);
    }
  }
}

const float* ResNet::loss(const ExecContext& ctx, const int32_t* labels, int b) {
  return with_activation_type(act_,
                              [&](auto type) { return loss_impl<typename decltype(type)::type>(ctx, labels, b); });
}

template <typename A>
const float* ResNet::loss_impl(const ExecContext& ctx, const int32_t* labels, int b) {
  const int K = cfg_.num_classes;
  if (cfg_.label_smoothing > 0.0f)
    k::crossentropy_smoothed_forward(ctx, losses_->f32(), logits_->as<A>(), labels, cfg_.label_smoothing, b, K);
  else
    k::crossentropy_forward(ctx, losses_->f32(), logits_->as<A>(), labels, b, K, K);
  return losses_->f32();
}

// Backward walks forward in reverse. Scratch: dA holds the gradient of the current block's output and becomes
// that of its input; dB the gradient after the block's last ReLU (dsum, also the shortcut's); dC and dD alternate
// inside the main branch (BN backward writes dC, conv backward writes dD, or dA for the block's first conv).
// Under fp16 dloss carries the loss scale (train/loop/loss_scaling.hpp): the activation gradients stored below are scaled.
const float* ResNet::loss_and_backward(const ExecContext& ctx_in, const int32_t* labels, float dloss, int b) {
  const ExecContext ctx = in_layout(ctx_in);
  return with_activation_type(act_, [&](auto type) {
    return loss_and_backward_impl<typename decltype(type)::type>(ctx, labels, dloss, b);
  });
}

template <typename A>
const float* ResNet::loss_and_backward_impl(const ExecContext& ctx, const int32_t* labels, float dloss, int b) {
  const int K = cfg_.num_classes;
  if (cfg_.label_smoothing > 0.0f)
    k::crossentropy_smoothed_forward_backward(ctx, losses_->f32(), logits_->as<A>(), labels, dloss,
                                              cfg_.label_smoothing, b, K);
  else
    k::crossentropy_forward_backward(ctx, losses_->f32(), logits_->as<A>(), labels, dloss, b, K, K);
  // head, in reverse: fc, average pool
  writing(fc_w_, fc_b_ + 1);
  reading_group(static_cast<int>(blocks_.size()) + 1, true);
  k::matmul_backward(ctx, dpooled_->as<A>(), grads_.tensors()[static_cast<size_t>(fc_w_)].f32(),
                     grads_.tensors()[static_cast<size_t>(fc_b_)].f32(), logits_->as<A>(), pooled_->as<A>(),
                     read_params().tensors()[static_cast<size_t>(fc_w_)].as<A>(), b, C_last_, K);
  ready(fc_w_, fc_b_ + 1);
  A* dx = dA_->as<A>();
  k::global_avgpool_backward(ctx, dx, dpooled_->as<A>(), b, C_last_, HW_last_);
  const A* stem_out = stem_pool_ ? x0p_->as<A>() : x0b_->as<A>();
  bool dsum_ready = false;  // dB holds the gradient through this block's final ReLU already (the previous iteration's)
  for (int i = static_cast<int>(blocks_.size()) - 1; i >= 0; --i) {
    Block& blk = blocks_[static_cast<size_t>(i)];
    const A* x = i == 0 ? stem_out : blocks_[static_cast<size_t>(i) - 1].out->as<A>();
    writing(blk.first_param, blk.end_param);
    reading_group(i + 1, true);
    // full recompute: the block's activations again, bitwise as the forward made them (the same kernels on the same
    // input; SyncBN gathers the same statistics again), between the parameters' gather and the block's backward
    if (recompute_ == models::Recompute::Full) block_forward(ctx, blk, x, b, true, false);
    const Bn& lastbn = blk.main.back().bn;
    const int64_t n = static_cast<int64_t>(b) * lastbn.C * lastbn.HW;
    A* dsum = dB_->as<A>();
    if (!dsum_ready) k::relu_backward(ctx, dsum, dx, blk.out->as<A>(), n);  // through the block's final ReLU
    // main branch, last unit first: (ReLU <-) BN <- conv; dsum stays intact for the shortcut (no ReLU on that unit)
    A* cur = dsum;
    for (int j = static_cast<int>(blk.main.size()) - 1; j >= 0; --j) {
      Unit& u = blk.main[static_cast<size_t>(j)];
      const bool inner = j + 1 < static_cast<int>(blk.main.size());  // cur is dD then (written by the conv below)
      bn_backward(ctx, u.bn, dC_->as<A>(), cur, u.xc->as<A>(), b, inner ? u.xb->as<A>() : nullptr);
      const A* in = j == 0 ? x : blk.main[static_cast<size_t>(j) - 1].xb->as<A>();
      A* dst = j == 0 ? dx : dD_->as<A>();  // dx (the block output's gradient) was consumed into dsum
      conv_backward(ctx, u.conv, dst, dC_->as<A>(), in, b);
      cur = dst;
      ready(0, 0);  // a progress point for in-flight gradient buckets
    }
    // shortcut branch, summed into the input gradient; where the input is the previous block's output, the same pass
    // takes the sum through that block's final ReLU into dB (its dsum: the next iteration skips its relu_backward)
    const A* shortcut_grad = dsum;
    if (blk.downsample) {
      bn_backward(ctx, blk.bds, dC_->as<A>(), dsum, blk.xdsc->as<A>(), b);
      conv_backward(ctx, blk.ds, dD_->as<A>(), dC_->as<A>(), x, b);
      shortcut_grad = dD_->as<A>();
    }
    const Conv& first = blk.main.front().conv;
    const int64_t nin = static_cast<int64_t>(b) * first.C * first.H * first.W;
    if (i > 0) {
      k::residual_relu_backward(ctx, dB_->as<A>(), dx, shortcut_grad, blocks_[static_cast<size_t>(i) - 1].out->as<A>(),
                                nin);
      dsum_ready = true;
    } else {
      k::residual_forward(ctx, dx, dx, shortcut_grad, nin);
    }
    ready(blk.first_param, blk.end_param);
  }
  // stem: (max-pool <-) ReLU <- BN <- conv (no gradient w.r.t. the images)
  A* g = dx;
  if (stem_pool_) {
    k::maxpool2d_backward(ctx, dB_->as<A>(), dx, pool_idx_->i32(), b, pool_C_, pool_H_, pool_W_, 3, 2, 1);
    g = dB_->as<A>();
  }
  writing(0, 3);
  reading_group(0, true);
  bn_backward(ctx, stem_bn_, dC_->as<A>(), g, x0c_->as<A>(), b, /*relu_out=*/x0b_->as<A>());
  conv_backward(ctx, stem_conv_, static_cast<A*>(nullptr), dC_->as<A>(), static_cast<const A*>(last_images_), b);
  ready(0, 3);  // conv1.weight, bn1.weight, bn1.bias
  return losses_->f32();
}

}  // namespace hpct::resnet
