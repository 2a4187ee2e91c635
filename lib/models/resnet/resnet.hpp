#pragma once
// ResNet (He et al. 2016), NCHW or channels-last (ResNetConfig::memory_format), forward and backward over kernels/ in llm.c's style, in two styles:
//   - "cifar" (small images): a 3x3 stride-1 stem conv + BN + ReLU, three stages of n = (depth - 2) / 6
//     BasicBlocks with widths w, 2w, 4w (w = base_width, 16 by default), stride 2 at the start of stages 2 and 3.
//     ResNet-20/32/44/56/110.
//   - "imagenet" (torchvision's resnet18/34/50/101/152): a 7x7 stride-2 stem conv + BN + ReLU + 3x3 stride-2
//     max-pool, four stages with widths w, 2w, 4w, 8w (w = 64), stride 2 at the start of stages 2-4; BasicBlocks for
//     depth 18/34, Bottlenecks (1x1 -> 3x3 (stride here, "v1.5") -> 1x1 with 4x expansion) for 50/101/152.
// A shortcut is the identity, or a 1x1-conv + BN projection where the stride or the width changes ("option B").
// Training-mode BatchNorm uses the micro-batch statistics; with a SyncBN group they are merged over the group with
// Chan's formula (docs/parallelism.md), and the same split code runs on one rank. Evaluation uses the running
// statistics (torch semantics: momentum 0.1, unbiased running var).
//
// Legend: B micro-batch, C channels, H x W image, K classes, w base width.
// Gradients: parameter gradients accumulate (+=) over micro-batches; the caller zeroes them once per step.
// Parameters (torchvision names): conv1.weight (w, Cin, k, k), bn1.{weight,bias}, layer<s>.<b>.conv<i>.weight,
// layer<s>.<b>.bn<i>.{weight,bias} (i = 1, 2 for BasicBlocks, 1..3 for Bottlenecks), layer<s>.<b>.downsample.{0.weight,
// 1.weight, 1.bias}, fc.{weight (K, C_last), bias (K)}. Weight decay applies to conv and fc weights only (not to
// BatchNorm parameters or biases).
// Buffers: every BN's running_mean and running_var (<bn name>.running_mean / .running_var), in layout order.
// Storage (train.precision, docs/precision.md): activations of type A = float, bf16 or fp16 (the constructor's `act`;
// fp16 on CUDA only); under bf16 and fp16 the kernels read a compute copy of the parameters in A
// (refresh_compute_params(), once per step), the images are rounded to A on entry, and everything kept between forward
// and backward is of type A except the BatchNorm statistics; parameters, gradients, BN running statistics and the
// optimizer state stay fp32.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "parallel/data_parallel.hpp"
#include "kernels/conv_algorithms.hpp"
#include "kernels/exec_context.hpp"
#include "models/recompute.hpp"
#include "tensor/tensor.hpp"

namespace hpct::resnet {

struct ResNetConfig {
  std::string style = "cifar";  // "cifar" | "imagenet"
  int depth = 20;               // cifar: 6n + 2; imagenet: 18, 34, 50, 101, 152
  int in_channels = 1, height = 28, width = 28, num_classes = 10;
  int base_width = 16;  // w: the first stage's width (cifar 16, imagenet 64)
  float bn_eps = 1e-5f, bn_momentum = 0.1f;
  float label_smoothing = 0.0f;  // of the cross-entropy (torch's label_smoothing): target (1 - eps) one-hot + eps / K
  // The activations' memory layout (model.memory_format): "nchw", "nhwc" (channels-last: CUDA, or the CPU with
  // oneDNN, where the convolutions run without reordering the activations) or "auto" (nhwc where every convolution of
  // the model runs channels-last, except CUDA with fp32 storage; else nchw). The parameters, checkpoints and exports do
  // not depend on it.
  std::string memory_format = "auto";

  bool bottleneck() const { return style == "imagenet" && depth >= 50; }
  int expansion() const { return bottleneck() ? 4 : 1; }
  // blocks per stage: cifar {n, n, n}; imagenet per torchvision
  std::vector<int> stage_blocks() const;
  void validate(const std::string& where) const;  // UsageError naming the key
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool decay = false;
};
std::vector<ParamSpec> parameter_layout(const ResNetConfig& cfg);
int64_t num_parameters(const ResNetConfig& cfg);
// Multiply-accumulates x 2 of one image's forward pass (convs and fc), for images/s -> FLOP/s and MFU.
double forward_flops_per_image(const ResNetConfig& cfg);
// Training FLOPs of one image: forward + backward = 3 x forward (backward = 2 x forward; docs/performance.md).
double training_flops_per_image(const ResNetConfig& cfg);

// Bytes of every planned slab of a ResNet at micro_batch B (docs/invariants.md, invariant 7), the model's own sizing
// function: it builds the same plan the constructor allocates, without allocating.
struct MemoryPlan {
  int64_t num_params = 0;
  size_t param_bytes = 0, grad_bytes = 0, buffer_bytes = 0, compute_param_bytes = 0, activation_bytes = 0,
         activation_grad_bytes = 0, workspace_bytes = 0;
  size_t total() const {
    return param_bytes + grad_bytes + buffer_bytes + compute_param_bytes + activation_bytes + activation_grad_bytes +
           workspace_bytes;
  }
};
// act: the activation storage type (DType::F32, DType::BF16 or DType::F16). The sizes are the CPU backend's (an f16
// plan sizes the convolution workspace as bf16's, the CPU having no fp16 storage). bn_ranks: the SyncBN group's size
// (each BatchNorm gathers every rank's statistics), 1 for per-rank BatchNorm.
MemoryPlan memory_plan(const ResNetConfig& cfg, int micro_batch, DType act = DType::F32, int bn_ranks = 1);

class ResNet final : public parallel::DataParallelModel {
 public:
  // bn_group: the SyncBN group (the DP communicator) or null for per-rank BatchNorm.
  // allocate = false: plan the slabs only (memory_plan()); such a model cannot run.
  // act: the activation storage type, DType::F32, DType::BF16 or DType::F16 (the header comment; f16 needs device CUDA
  // unless allocate = false). arithmetic: the precision of the ExecContext the model will run with (train.precision);
  // the convolution workspace is sized for its math (on CUDA, TF32 tensor-core algorithms need more than fp32's).
  // planned_bn_ranks: with allocate = false, the SyncBN group size to plan for (bn_group is null then).
  // shard_params = true (ZeRO-3): the parameters and the 16-bit copy are not allocated; read_params() is bound by the
  // parameter gather (parallel/param_gather.hpp), which the read hook (set_param_read_hook) fills layer by layer, and
  // init_parameters stores through its `store` argument (as Gpt's).
  // recompute (models/recompute.hpp): None, or Full: keep each residual block's output only (the next block's input)
  // and recompute the block's forward right before its backward, into one copy of the largest block's activations (the
  // recomputed BatchNorms leave the running statistics alone: they were updated by the forward).
  ResNet(const ResNetConfig& cfg, int micro_batch, Device device, comm::Communicator* bn_group = nullptr,
         bool allocate = true, DType act = DType::F32, Precision arithmetic = Precision::FP32, int planned_bn_ranks = 1,
         bool allocate_grads = true, bool shard_params = false, models::Recompute recompute = models::Recompute::None);
  ResNet(const ResNet&) = delete;
  ResNet& operator=(const ResNet&) = delete;

  const ResNetConfig& config() const { return cfg_; }
  // The activations' layout chosen from config().memory_format: true for channels-last (N,H,W,C).
  bool channels_last() const { return channels_last_; }
  int micro_batch() const { return B_; }
  DType activation_dtype() const { return act_; }
  // Counter-based init keyed by (seed, name, element): convs kaiming-normal (fan_out, ReLU gain, torchvision),
  // BN gamma 1 beta 0, fc weight and bias uniform(+-1/sqrt(fan_in)) (torch.nn.Linear); running var 1, mean 0.
  void init_parameters(const ExecContext& ctx, uint64_t seed,
                       const std::function<void(int tensor, const float* host)>& store = {}) override;
  // Under bf16 and fp16: casts the fp32 masters into the compute copy the kernels read (models/compute_copy.hpp); call
  // it after every change of the masters, before the next forward (ResNetStage does, once per step and before
  // evaluation). A no-op in fp32.
  void refresh_compute_params(const ExecContext& ctx);

  // images (b, Cin, H, W) fp32 on the device, b <= micro_batch; train: batch statistics (and running-stat update).
  void forward(const ExecContext& ctx, const float* images, int b, bool train);
  // per-sample losses (b) of the last forward against labels (b), label-smoothed when config().label_smoothing > 0
  const float* loss(const ExecContext& ctx, const int32_t* labels, int b);
  // fused loss + backward of the last (training) forward; every parameter gradient += dloss * d(sum losses)/dp
  const float* loss_and_backward(const ExecContext& ctx, const int32_t* labels, float dloss, int b);
  void zero_grad(const ExecContext& ctx);
  // Called during backward when the gradients of parameter tensors [first, end) are final (first == end: only a
  // progress point), for the data-parallel gradient sync's overlap (parallel/grad_sync.hpp).
  void set_grad_ready_hook(std::function<void(int, int)> hook) override { hook_ = std::move(hook); }
  // Called right before backward writes the gradients of tensors [first, end), one call per range of
  // grad_write_groups() in that order (ZeRO-2 readies the buckets they live in). allocate_grads = false (constructor):
  // the gradient slab is planned only, and its owner binds it (Slab::bind) and zeroes it (zero_grad leaves it).
  void set_grad_write_hook(std::function<void(int, int)> hook) override { write_hook_ = std::move(hook); }
  // The ranges backward writes, in its order: fc, the blocks from the last to the first, the stem.
  std::vector<std::pair<int, int>> grad_write_groups() const;
  // Called right before forward or backward reads the parameters of tensors [first, end) (the stem, a block, fc), with
  // [next_first, next_end) the range it reads next (empty: none): ZeRO-3 gathers the one and prefetches the other.
  void set_param_read_hook(std::function<void(int, int, int, int)> hook) override { read_hook_ = std::move(hook); }
  // What the kernels read: the 16-bit compute copy under bf16 / fp16, else the fp32 parameters.
  Slab& read_params() override { return act_ == DType::F32 ? params_ : compute_; }
  bool params_sharded() const { return shard_params_; }

  Slab& params() override { return params_; }
  Slab& grads() override { return grads_; }
  parallel::GradWriteOrder grad_write_order() const override { return {grad_write_groups(), {}}; }
  Slab& buffers() { return buffers_; }
  const std::vector<ParamSpec>& layout() const { return layout_; }
  const Tensor& logits() const { return *logits_; }  // (B, K) of the activation type
  MemoryPlan memory() const;

  // CUDA: times cuDNN's deterministic algorithms of every distinct convolution of the model at its micro-batch
  // (kernels::conv2d_time_algorithms, `repeats` measured runs each) on the backward scratch buffers, which hold nothing
  // between steps: no parameter, gradient or statistic changes and no hook runs (nothing collective). One timing per
  // distinct convolution, in forward order. Where a filter is larger than a scratch buffer (a tiny micro-batch), the
  // real weights are read, and under ZeRO-3 (no weights at hand) that convolution is left out: it runs cuDNN's order.
  std::vector<kernels::ConvTiming> time_conv_algorithms(const ExecContext& ctx, int repeats);
  // The table keys of the model's distinct convolutions under ctx (its precision), in forward order.
  std::vector<kernels::ConvAlgoKey> conv_algo_keys(const ExecContext& ctx) const;
  // The table every later kernel call of the model runs with (ExecContext::conv_algorithms); empty: none.
  void set_conv_algorithms(kernels::ConvAlgorithms table) { conv_algorithms_ = std::move(table); }
  const kernels::ConvAlgorithms& conv_algorithms() const { return conv_algorithms_; }

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
  // conv -> BN (-> ReLU in place, except the block's last unit, whose ReLU follows the residual sum)
  struct Unit {
    Conv conv;
    Bn bn;
    Tensor *xc, *xb;  // conv output; BN + ReLU output (inner units; the last unit's BN writes the block's output)
  };
  struct Block {
    std::vector<Unit> main;  // 2 (BasicBlock) or 3 (Bottleneck) units
    bool downsample = false;
    Conv ds;
    Bn bds;
    Tensor *xdsc = nullptr, *xdsb = nullptr, *out = nullptr;
    int first_param = 0, end_param = 0;  // the block's parameter tensors [first, end) in layout order
  };
  template <typename A>
  void forward_impl(const ExecContext& ctx, const A* images, int b, bool train);
  template <typename A>
  const float* loss_impl(const ExecContext& ctx, const int32_t* labels, int b);
  template <typename A>
  const float* loss_and_backward_impl(const ExecContext& ctx, const int32_t* labels, float dloss, int b);
  // A residual block's forward from its input x into the block's activations (the read hook is the caller's);
  // update_running: the BatchNorms update their running statistics (the forward's, not full recompute's).
  template <typename A>
  void block_forward(const ExecContext& ctx, Block& blk, const A* x, int b, bool train, bool update_running);
  // relu: the ReLU that follows the BatchNorm, in its passes where the kernels fuse them (kernels.hpp)
  template <typename A>
  // relu: the ReLU that follows, in the BatchNorm's passes; residual (not null): the block's end, out =
  // relu(BN(inp) + residual) (kernels.hpp, batchnorm2d_add_relu)
  void bn_forward(const ExecContext& ctx, Bn& bn, A* out, const A* inp, int b, bool train, bool update_running,
                  bool relu, const A* residual = nullptr);
  // relu_out: the output of the ReLU that followed the BatchNorm (null: none); dout is then that ReLU's output
  // gradient, and left unspecified (kernels.hpp, batchnorm2d_relu_backward)
  template <typename A>
  void bn_backward(const ExecContext& ctx, Bn& bn, A* dinp, A* dout, const A* inp, int b, const A* relu_out = nullptr);
  template <typename A>
  void conv_forward(const ExecContext& ctx, const Conv& c, A* out, const A* inp, int b);
  template <typename A>
  void conv_backward(const ExecContext& ctx, const Conv& c, A* dinp, const A* dout, const A* inp, int b);
  Conv make_conv(const std::string& name, int C, int OC, int H, int W, int K, int stride, int pad);
  Bn make_bn(const std::string& name, int C, int HW);
  void ready(int first, int end) {
    if (hook_) hook_(first, end);
  }
  void writing(int first, int end) {
    if (write_hook_) write_hook_(first, end);
  }
  void reading(int first, int end, int next_first = 0, int next_end = 0) {
    if (read_hook_) read_hook_(first, end, next_first, next_end);
  }
  // The layers' parameter ranges in forward order: the stem, the blocks, fc (grad_write_groups: the reverse).
  std::vector<std::pair<int, int>> layer_ranges() const;
  // the parameter range of layer g (layers_) and of the next the pass reads (forward: g + 1, backward: g - 1)
  void reading_group(int g, bool backward);
  // The model's distinct convolutions under ctx (the model's layout), in forward order (the stem, then per block its
  // shortcut and its units), each with its table key: one convolution per key.
  std::vector<std::pair<const Conv*, kernels::ConvAlgoKey>> distinct_convs(const ExecContext& ctx) const;

  ResNetConfig cfg_;
  int B_;
  Device device_;
  DType act_;
  Precision arithmetic_;  // the precision its workspace is sized for (the constructor)
  comm::Communicator* bn_group_;
  int planned_bn_ranks_ = 1;  // allocate = false: the SyncBN group size planned for
  std::vector<ParamSpec> layout_;
  Slab params_, grads_, compute_, buffers_, acts_, dacts_, work_;  // compute_: 16-bit copy of params_ (empty in fp32)
  Conv stem_conv_;
  Bn stem_bn_;
  bool stem_pool_ = false;  // imagenet: 3x3 stride-2 max-pool after the stem
  int pool_C_ = 0, pool_H_ = 0, pool_W_ = 0, pool_OH_ = 0, pool_OW_ = 0;
  std::vector<Block> blocks_;
  Tensor *x0c_, *x0b_, *x0p_ = nullptr, *pool_idx_ = nullptr, *pooled_, *logits_, *losses_, *ws_;
  Tensor* images_ = nullptr;                 // (B, Cin, H, W) of the activation type: the images rounded on entry
                                             // (bf16 and fp16), or channels-last (B, H, W, Cin) (Cin > 1 or 16-bit)
  Tensor *dA_, *dB_, *dC_, *dD_, *dpooled_;  // backward scratch: the largest activation, several
  const void* last_images_ = nullptr;        // (B, Cin, H, W) of the last forward, of the activation type (the
                                             // stem's weight gradient)
  int fc_w_ = 0, fc_b_ = 0;
  int64_t ws_floats_ = 0;
  int C_last_ = 0, HW_last_ = 0;
  std::function<void(int, int)> hook_, write_hook_;
  std::function<void(int, int, int, int)> read_hook_;
  std::vector<std::pair<int, int>> layers_;  // layer_ranges(), once the blocks are planned
  bool shard_params_ = false;
  models::Recompute recompute_ = models::Recompute::None;
  bool channels_last_ = false;  // channels_last(): set before any convolution is planned
  kernels::ConvAlgorithms conv_algorithms_;
  // ctx with the model's activation layout (ExecContext::channels_last) and convolution algorithms: what every kernel
  // call of the model runs on
  ExecContext in_layout(const ExecContext& ctx) const {
    ExecContext c = ctx;
    c.channels_last = channels_last_;
    c.conv_algorithms = conv_algorithms_.empty() ? nullptr : &conv_algorithms_;
    return c;
  }
};

}  // namespace hpct::resnet
