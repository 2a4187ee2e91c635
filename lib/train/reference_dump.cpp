#include "train/reference_dump.hpp"

#include <cstdio>

#include "core/h5_check.hpp"
#include "kernels/kernels.hpp"
#include "train/h5_write.hpp"

namespace hpct::train {

using h5::attr_f64;
using h5::attr_i64;
using h5::attr_str;
using h5::write_dataset;

ReferenceDump::ReferenceDump(std::string path, const Config& deck, const gpt::GptConfig& cfg, int64_t steps,
                             int64_t global_batch)
    : path_(std::move(path)), deck_(deck), cfg_(cfg), steps_(steps), global_batch_(global_batch) {
  const size_t n = static_cast<size_t>(steps * global_batch * cfg.seq_len);
  inputs_.assign(n, 0);
  targets_.assign(n, 0);
  loss_.assign(static_cast<size_t>(steps), 0.0);
  lr_ = grad_norm_ = loss_;
}

void ReferenceDump::record_params(const ExecContext& ctx, gpt::Gpt& model, const std::string& group) {
  auto& dst = group == "init" ? init_ : group == "final" ? final_ : grads_;
  Slab& slab = group == "grads_step1" ? model.grads() : model.params();
  dst.clear();
  for (auto& t : slab.tensors()) {
    Named n{t.name, t.shape, std::vector<float>(static_cast<size_t>(t.numel()))};
    kernels::copy_to_host(ctx, n.data.data(), t.data, static_cast<int64_t>(t.bytes()));
    dst.push_back(std::move(n));
  }
  kernels::synchronize(ctx);  // the copies are asynchronous on CUDA: dst is valid only now
}

void ReferenceDump::record_grads(const ExecContext& ctx, gpt::Gpt& model) { record_params(ctx, model, "grads_step1"); }

void ReferenceDump::record_batch(int64_t step, int64_t first, int count, const int32_t* inputs,
                                 const int32_t* targets) {
  const int64_t T = cfg_.seq_len;
  const size_t off = static_cast<size_t>(((step - 1) * global_batch_ + first) * T);
  std::copy(inputs, inputs + count * T, inputs_.begin() + static_cast<int64_t>(off));
  std::copy(targets, targets + count * T, targets_.begin() + static_cast<int64_t>(off));
}

void ReferenceDump::record_step(int64_t step, double loss, double lr, double grad_norm) {
  loss_[step - 1] = loss;
  lr_[step - 1] = lr;
  grad_norm_[step - 1] = grad_norm;
}

void ReferenceDump::write() {
  const std::string tmp = path_ + ".tmp";
  hid_t f = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  HPCT_USAGE_CHECK(f >= 0, "--dump: cannot create {} (does its directory exist and is it writable?)", tmp);
  attr_i64(f, "n_layer", cfg_.n_layer);
  attr_i64(f, "n_head", cfg_.n_head);
  attr_i64(f, "n_embd", cfg_.n_embd);
  attr_i64(f, "seq_len", cfg_.seq_len);
  attr_i64(f, "vocab_size", cfg_.vocab_size);
  attr_i64(f, "padded_vocab", cfg_.padded_vocab);
  attr_i64(f, "bias", cfg_.bias ? 1 : 0);
  attr_i64(f, "steps", steps_);
  attr_i64(f, "global_batch", global_batch_);
  attr_i64(f, "micro_batch", deck_.get_int("train.micro_batch"));
  attr_f64(f, "weight_decay", deck_.get_float("optim.weight_decay"));
  attr_f64(f, "beta1", deck_.get_float("optim.beta1"));
  attr_f64(f, "beta2", deck_.get_float("optim.beta2"));
  attr_f64(f, "eps", deck_.get_float("optim.eps"));
  attr_f64(f, "grad_clip", deck_.get_float("optim.grad_clip"));
  attr_str(f, "deck", deck_.effective_toml());
  for (const auto& n : init_) write_dataset(f, "init/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
  for (const auto& n : final_) write_dataset(f, "final/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
  for (const auto& n : grads_) write_dataset(f, "grads_step1/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
  const std::vector<int64_t> bshape{steps_, global_batch_, cfg_.seq_len};
  write_dataset(f, "batches/inputs", bshape, H5T_NATIVE_INT32, inputs_.data());
  write_dataset(f, "batches/targets", bshape, H5T_NATIVE_INT32, targets_.data());
  write_dataset(f, "steps/loss", {steps_}, H5T_NATIVE_DOUBLE, loss_.data());
  write_dataset(f, "steps/lr", {steps_}, H5T_NATIVE_DOUBLE, lr_.data());
  write_dataset(f, "steps/grad_norm", {steps_}, H5T_NATIVE_DOUBLE, grad_norm_.data());
  H5_CHECK(H5Fclose(f));
  HPCT_CHECK(std::rename(tmp.c_str(), path_.c_str()) == 0, "cannot rename {} to {}", tmp, path_);
}

}  // namespace hpct::train
