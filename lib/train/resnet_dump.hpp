#pragma once
// `train_resnet --dump FILE.h5` (one rank): what tests/reference/resnet_train_reference.py needs to replay the run
// in PyTorch: the initial parameters and BN buffers (/init/<name>), every step's augmented, normalised global batch
// (/batches/images (steps, GB, C, H, W), /batches/labels (steps, GB)), per-step loss, lr and gradient norm (/steps/*),
// and the parameters and BN buffers after the last step (/final/<name>). Attributes carry the model and optimizer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/h5_check.hpp"
#include "kernels/exec_context.hpp"
#include "kernels/kernels.hpp"
#include "models/resnet/resnet.hpp"
#include "train/h5_write.hpp"

namespace hpct::train {

class ResNetDump {
 public:
  ResNetDump(std::string path, const Config& deck, const resnet::ResNetConfig& cfg, int64_t steps, int64_t gb)
      : path_(std::move(path)), deck_(deck), cfg_(cfg), steps_(steps), gb_(gb) {
    img_elems_ = static_cast<int64_t>(cfg.in_channels) * cfg.height * cfg.width;
    images_.assign(static_cast<size_t>(steps * gb * img_elems_), 0.0f);
    labels_.assign(static_cast<size_t>(steps * gb), 0);
    loss_.assign(static_cast<size_t>(steps), 0.0);
    lr_ = grad_norm_ = loss_;
  }
  void record_state(const ExecContext& ctx, resnet::ResNet& model, const std::string& group) {
    auto& dst = group == "init" ? init_ : final_;
    dst.clear();
    for (Slab* slab : {&model.params(), &model.buffers()})
      for (auto& t : slab->tensors()) {
        Named n{t.name, t.shape, std::vector<float>(static_cast<size_t>(t.numel()))};
        kernels::copy_to_host(ctx, n.data.data(), t.data, static_cast<int64_t>(t.bytes()));
        dst.push_back(std::move(n));
      }
    kernels::synchronize(ctx);  // the copies are asynchronous on CUDA: dst is valid only now
  }
  void record_batch(int64_t step, int64_t first, int count, const float* images, const int32_t* labels) {
    const int64_t row = (step - 1) * gb_ + first;
    std::copy(images, images + count * img_elems_, images_.begin() + row * img_elems_);
    std::copy(labels, labels + count, labels_.begin() + row);
  }
  void record_step(int64_t step, double loss, double lr, double norm) {
    loss_[static_cast<size_t>(step - 1)] = loss;
    lr_[static_cast<size_t>(step - 1)] = lr;
    grad_norm_[static_cast<size_t>(step - 1)] = norm;
  }
  void write() {
    const std::string tmp = path_ + ".tmp";
    hid_t f = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    HPCT_USAGE_CHECK(f >= 0, "--dump: cannot create {} (does its directory exist and is it writable?)", tmp);
    h5::attr_str(f, "style", cfg_.style);
    h5::attr_i64(f, "depth", cfg_.depth);
    h5::attr_i64(f, "base_width", cfg_.base_width);
    h5::attr_i64(f, "channels", cfg_.in_channels);
    h5::attr_i64(f, "height", cfg_.height);
    h5::attr_i64(f, "width", cfg_.width);
    h5::attr_i64(f, "num_classes", cfg_.num_classes);
    h5::attr_i64(f, "steps", steps_);
    h5::attr_i64(f, "global_batch", gb_);
    h5::attr_i64(f, "micro_batch", deck_.get_int("train.micro_batch"));
    h5::attr_f64(f, "momentum", deck_.get_float("optim.momentum"));
    h5::attr_i64(f, "nesterov", deck_.get_bool("optim.nesterov") ? 1 : 0);
    h5::attr_f64(f, "dampening", deck_.get_float("optim.dampening"));
    h5::attr_f64(f, "weight_decay", deck_.get_float("optim.weight_decay"));
    h5::attr_f64(f, "grad_clip", deck_.get_float("optim.grad_clip"));
    h5::attr_f64(f, "label_smoothing", deck_.get_float("optim.label_smoothing"));
    h5::attr_str(f, "deck", deck_.effective_toml());
    for (const auto& n : init_) h5::write_dataset(f, "init/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
    for (const auto& n : final_) h5::write_dataset(f, "final/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
    h5::write_dataset(f, "batches/images", {steps_, gb_, cfg_.in_channels, cfg_.height, cfg_.width}, H5T_NATIVE_FLOAT,
                      images_.data());
    h5::write_dataset(f, "batches/labels", {steps_, gb_}, H5T_NATIVE_INT32, labels_.data());
    h5::write_dataset(f, "steps/loss", {steps_}, H5T_NATIVE_DOUBLE, loss_.data());
    h5::write_dataset(f, "steps/lr", {steps_}, H5T_NATIVE_DOUBLE, lr_.data());
    h5::write_dataset(f, "steps/grad_norm", {steps_}, H5T_NATIVE_DOUBLE, grad_norm_.data());
    H5_CHECK(H5Fclose(f));
    HPCT_CHECK(std::rename(tmp.c_str(), path_.c_str()) == 0, "cannot rename {} to {}", tmp, path_);
  }

 private:
  struct Named {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::string path_;
  const Config& deck_;
  resnet::ResNetConfig cfg_;
  int64_t steps_, gb_, img_elems_ = 0;
  std::vector<Named> init_, final_;
  std::vector<float> images_;
  std::vector<int32_t> labels_;
  std::vector<double> loss_, lr_, grad_norm_;
};

}  // namespace hpct::train
