#pragma once
// The ResNet's layout planner (`train_resnet DECK --plan WORLD --auto --machine M`, train/plan/auto_plan.hpp), over
// the axes a data-parallel model has: ZeRO stage and group, recompute, micro-batch and gradient dtype.
#include "core/config.hpp"
#include "models/resnet/resnet.hpp"
#include "train/loop/run_config.hpp"
#include "train/plan/auto_plan.hpp"

namespace hpct::train {

// The predicted step of the ResNet `cfg` trained as `run` lays it out at `world` ranks on `machine`: per micro-batch
// the convolutions' and the classifier's products (3 x the forward's FLOPs, 3 kernel calls per layer: forward, data
// and weight gradients), the memory-bound BatchNorm and ReLU passes (6 passes over the stored activations), the full
// recompute's extra forward, SyncBN's statistics allreduces (2 per BatchNorm, reported as tp_comm), then the
// data-parallel part and SGD's update (train/plan/auto_plan.hpp). `work`, when given, receives the compute work.
StepTime predict_resnet_step(const resnet::ResNetConfig& cfg, const RunConfig& run, int world, bool sync_bn,
                             const Machine& machine, DType act, Work* work = nullptr);

// `train_resnet DECK --plan WORLD --auto ...`: rank 0 only, reads the dataset's header; the exit code.
int auto_plan_resnet(const Config& deck, int world, const AutoPlanOptions& options);

}  // namespace hpct::train
