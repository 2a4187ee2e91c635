#pragma once
// `train_resnet --dump FILE.h5` (one rank; train/tasks/reference_dump.hpp): what tests/reference/resnet_train_reference.py
// needs to replay the run in PyTorch: the initial parameters and BN buffers (/init/<name>), every step's augmented,
// normalised global batch (/batches/images (steps, GB, C, H, W), /batches/labels (steps, GB)), per-step loss, lr and
// gradient norm (/steps/*), step 1's gradients before the optimizer (/grads_step1/<name>, as the GPT's dump), and the
// parameters and BN buffers after the last step (/final/<name>). Attributes carry the model and optimizer.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/exec_context.hpp"
#include "models/resnet/resnet.hpp"
#include "optim/sgd.hpp"
#include "train/tasks/reference_dump.hpp"

namespace hpct::train {

class ResNetDump final : public DumpRecorder {
 public:
  ResNetDump(std::string path, const resnet::ResNetConfig& cfg, const optim::SgdConfig& sgd, int micro_batch,
             std::string deck_toml, int64_t steps, int64_t global_batch);
  void record_state(const ExecContext& ctx, resnet::ResNet& model, const std::string& group);  // "init" or "final"
  void record_grads(const ExecContext& ctx, resnet::ResNet& model);                            // step 1's
  void record_batch(int64_t step, int64_t first, int count, const float* images, const int32_t* labels);
  void write() const;

 private:
  resnet::ResNetConfig cfg_;
  optim::SgdConfig sgd_;
  int micro_batch_;
  std::string deck_toml_;
  int64_t gb_, img_elems_ = 0;
  Group init_, final_, grads_;
  std::vector<float> images_;
  std::vector<int32_t> labels_;
};

}  // namespace hpct::train
