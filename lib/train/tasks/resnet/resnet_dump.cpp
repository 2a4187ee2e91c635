#include "train/tasks/resnet/resnet_dump.hpp"

#include <algorithm>

#include "train/tasks/h5_write.hpp"

namespace hpct::train {

ResNetDump::ResNetDump(std::string path, const resnet::ResNetConfig& cfg, const optim::SgdConfig& sgd, int micro_batch,
                       std::string deck_toml, int64_t steps, int64_t global_batch)
    : DumpRecorder(std::move(path), steps),
      cfg_(cfg),
      sgd_(sgd),
      micro_batch_(micro_batch),
      deck_toml_(std::move(deck_toml)),
      gb_(global_batch) {
  img_elems_ = static_cast<int64_t>(cfg.in_channels) * cfg.height * cfg.width;
  images_.assign(static_cast<size_t>(steps * gb_ * img_elems_), 0.0f);
  labels_.assign(static_cast<size_t>(steps * gb_), 0);
}

void ResNetDump::record_state(const ExecContext& ctx, resnet::ResNet& model, const std::string& group) {
  (group == "init" ? init_ : final_) = host_copies(ctx, {&model.params(), &model.buffers()});
}

void ResNetDump::record_grads(const ExecContext& ctx, resnet::ResNet& model) {
  grads_ = host_copies(ctx, {&model.grads()});
}

void ResNetDump::record_batch(int64_t step, int64_t first, int count, const float* images, const int32_t* labels) {
  const int64_t row = (step - 1) * gb_ + first;
  std::copy(images, images + count * img_elems_, images_.begin() + row * img_elems_);
  std::copy(labels, labels + count, labels_.begin() + row);
}

void ResNetDump::write() const {
  write_file([&](hid_t f) {
    h5::attr_str(f, "style", cfg_.style);
    h5::attr_i64(f, "depth", cfg_.depth);
    h5::attr_i64(f, "base_width", cfg_.base_width);
    h5::attr_i64(f, "channels", cfg_.in_channels);
    h5::attr_i64(f, "height", cfg_.height);
    h5::attr_i64(f, "width", cfg_.width);
    h5::attr_i64(f, "num_classes", cfg_.num_classes);
    h5::attr_i64(f, "global_batch", gb_);
    h5::attr_i64(f, "micro_batch", micro_batch_);
    h5::attr_f64(f, "momentum", sgd_.momentum);
    h5::attr_i64(f, "nesterov", sgd_.nesterov ? 1 : 0);
    h5::attr_f64(f, "dampening", sgd_.dampening);
    h5::attr_f64(f, "weight_decay", sgd_.weight_decay);
    h5::attr_f64(f, "grad_clip", sgd_.grad_clip);
    h5::attr_f64(f, "label_smoothing", cfg_.label_smoothing);
    h5::attr_str(f, "deck", deck_toml_);
    write_group(f, "init", init_);
    write_group(f, "grads_step1", grads_);
    write_group(f, "final", final_);
    h5::write_dataset(f, "batches/images", {steps_, gb_, cfg_.in_channels, cfg_.height, cfg_.width}, H5T_NATIVE_FLOAT,
                      images_.data());
    h5::write_dataset(f, "batches/labels", {steps_, gb_}, H5T_NATIVE_INT32, labels_.data());
  });
}

}  // namespace hpct::train
