#include "train/tasks/reference_dump.hpp"

#include <algorithm>
#include <cstdio>

#include "core/h5_check.hpp"
#include "kernels/kernels.hpp"
#include "train/tasks/h5_write.hpp"

namespace hpct::train {

using h5::attr_f64;
using h5::attr_i64;
using h5::attr_str;
using h5::write_dataset;

DumpRecorder::DumpRecorder(std::string path, int64_t steps)
    : path_(std::move(path)), steps_(steps), loss_(static_cast<size_t>(steps), 0.0), lr_(loss_), grad_norm_(loss_) {}

void DumpRecorder::record_step(int64_t step, double loss, double lr, double grad_norm) {
  loss_[static_cast<size_t>(step - 1)] = loss;
  lr_[static_cast<size_t>(step - 1)] = lr;
  grad_norm_[static_cast<size_t>(step - 1)] = grad_norm;
}

DumpRecorder::Group DumpRecorder::host_copies(const ExecContext& ctx, std::initializer_list<Slab*> slabs) {
  Group out;
  for (Slab* slab : slabs)
    for (auto& t : slab->tensors()) {
      Named n{t.name, t.shape, std::vector<float>(static_cast<size_t>(t.numel()))};
      kernels::copy_to_host(ctx, n.data.data(), t.data, static_cast<int64_t>(t.bytes()));
      out.push_back(std::move(n));
    }
  kernels::synchronize(ctx);  // the copies are asynchronous on CUDA: out is valid only now
  return out;
}

void DumpRecorder::write_group(hid_t file, const std::string& group, const Group& tensors) {
  for (const auto& n : tensors) write_dataset(file, group + "/" + n.name, n.shape, H5T_NATIVE_FLOAT, n.data.data());
}

void DumpRecorder::write_file(const std::function<void(hid_t)>& fill) const {
  const std::string tmp = path_ + ".tmp";
  hid_t f = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  HPCT_USAGE_CHECK(f >= 0, "--dump: cannot create {} (does its directory exist and is it writable?)", tmp);
  attr_i64(f, "steps", steps_);
  fill(f);
  write_dataset(f, "steps/loss", {steps_}, H5T_NATIVE_DOUBLE, loss_.data());
  write_dataset(f, "steps/lr", {steps_}, H5T_NATIVE_DOUBLE, lr_.data());
  write_dataset(f, "steps/grad_norm", {steps_}, H5T_NATIVE_DOUBLE, grad_norm_.data());
  H5_CHECK(H5Fclose(f));
  HPCT_CHECK(std::rename(tmp.c_str(), path_.c_str()) == 0, "cannot rename {} to {}", tmp, path_);
}

ReferenceDump::ReferenceDump(std::string path, const gpt::GptConfig& cfg, const optim::AdamWConfig& adamw,
                             int micro_batch, std::string deck_toml, int64_t steps, int64_t global_batch)
    : DumpRecorder(std::move(path), steps),
      cfg_(cfg),
      adamw_(adamw),
      micro_batch_(micro_batch),
      deck_toml_(std::move(deck_toml)),
      global_batch_(global_batch) {
  const size_t n = static_cast<size_t>(steps * global_batch * cfg.seq_len);
  inputs_.assign(n, 0);
  targets_.assign(n, 0);
}

void ReferenceDump::record_params(const ExecContext& ctx, gpt::Gpt& model, const std::string& group) {
  (group == "init" ? init_ : final_) = host_copies(ctx, {&model.params()});
}

void ReferenceDump::record_grads(const ExecContext& ctx, gpt::Gpt& model) {
  grads_ = host_copies(ctx, {&model.grads()});
}

void ReferenceDump::record_batch(int64_t step, int64_t first, int count, const int32_t* inputs,
                                 const int32_t* targets) {
  const int64_t T = cfg_.seq_len;
  const size_t off = static_cast<size_t>(((step - 1) * global_batch_ + first) * T);
  std::copy(inputs, inputs + count * T, inputs_.begin() + static_cast<int64_t>(off));
  std::copy(targets, targets + count * T, targets_.begin() + static_cast<int64_t>(off));
}

void ReferenceDump::record_logits(std::vector<int32_t> tokens, std::vector<float> logits, int b) {
  logit_tokens_ = std::move(tokens);
  logits_ = std::move(logits);
  logit_rows_ = b;
}

void ReferenceDump::write() const {
  write_file([&](hid_t f) {
    attr_i64(f, "n_layer", cfg_.n_layer);
    attr_i64(f, "n_head", cfg_.n_head);
    attr_i64(f, "n_embd", cfg_.n_embd);
    attr_i64(f, "seq_len", cfg_.seq_len);
    attr_i64(f, "vocab_size", cfg_.vocab_size);
    attr_i64(f, "padded_vocab", cfg_.padded_vocab);
    attr_i64(f, "bias", cfg_.bias ? 1 : 0);
    attr_i64(f, "global_batch", global_batch_);
    attr_i64(f, "micro_batch", micro_batch_);
    attr_f64(f, "weight_decay", adamw_.weight_decay);
    attr_f64(f, "beta1", adamw_.beta1);
    attr_f64(f, "beta2", adamw_.beta2);
    attr_f64(f, "eps", adamw_.eps);
    attr_f64(f, "grad_clip", adamw_.grad_clip);
    attr_str(f, "deck", deck_toml_);
    write_group(f, "init", init_);
    write_group(f, "final", final_);
    write_group(f, "grads_step1", grads_);
    const std::vector<int64_t> bshape{steps_, global_batch_, cfg_.seq_len};
    write_dataset(f, "batches/inputs", bshape, H5T_NATIVE_INT32, inputs_.data());
    write_dataset(f, "batches/targets", bshape, H5T_NATIVE_INT32, targets_.data());
    if (logit_rows_ > 0) {
      write_dataset(f, "logits/inputs", {logit_rows_, cfg_.seq_len}, H5T_NATIVE_INT32, logit_tokens_.data());
      write_dataset(f, "logits/values", {logit_rows_, cfg_.seq_len, cfg_.padded_vocab}, H5T_NATIVE_FLOAT,
                    logits_.data());
    }
  });
}

}  // namespace hpct::train
