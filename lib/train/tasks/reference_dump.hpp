#pragma once
// The reference dumps (`--dump FILE.h5`, one rank): what an independent implementation needs to replay a run and
// compare, in PyTorch (tests/reference/). Serial HDF5, written to FILE.h5.tmp and renamed when complete.
//   DumpRecorder  what both apps' dumps hold alike: named host copies of tensors (/init, /final, ...) and every step's
//                 loss, lr and gradient norm (/steps/*)
//   ReferenceDump train_gpt: the initial parameters (/init/<name>, logical shapes), every step's token batches
//                 (/batches/inputs, /batches/targets: (steps, global_batch, T)), the raw gradients of step 1
//                 (/grads_step1/<name>, before clipping), the parameters after the last step (/final/<name>),
//                 the logits of the starting weights on step 1's first micro-batch (/logits/inputs, /logits/values);
//                 attributes on / carry the model and optimizer settings
//   ResNetDump    train_resnet (train/tasks/resnet/resnet_dump.hpp)
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/exec_context.hpp"
#include "models/gpt/gpt.hpp"
#include "optim/adamw.hpp"
#include "tensor/tensor.hpp"

namespace hpct::train {

class DumpRecorder {
 public:
  DumpRecorder(std::string path, int64_t steps);
  void record_step(int64_t step, double loss, double lr, double grad_norm);  // step is 1-based

 protected:
  struct Named {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  using Group = std::vector<Named>;
  // Host copies of every tensor of the slabs, in order (synchronized: valid on return).
  static Group host_copies(const ExecContext& ctx, std::initializer_list<Slab*> slabs);
  // Creates FILE.h5.tmp, lets fill() write the app's attributes and datasets, adds /steps/*, closes, renames.
  void write_file(const std::function<void(hid_t)>& fill) const;
  static void write_group(hid_t file, const std::string& group, const Group& tensors);

  std::string path_;
  int64_t steps_;

 private:
  std::vector<double> loss_, lr_, grad_norm_;
};

class ReferenceDump final : public DumpRecorder {
 public:
  ReferenceDump(std::string path, const gpt::GptConfig& cfg, const optim::AdamWConfig& adamw, int micro_batch,
                std::string deck_toml, int64_t steps, int64_t global_batch);
  void record_params(const ExecContext& ctx, gpt::Gpt& model, const std::string& group);  // "init" or "final"
  void record_grads(const ExecContext& ctx, gpt::Gpt& model);                             // "grads_step1"
  // tokens of global samples [first, first+count) of step s (1-based), host arrays (count, T)
  void record_batch(int64_t step, int64_t first, int count, const int32_t* inputs, const int32_t* targets);
  // the logits (b, T, Vp) of the run's first forward at its starting weights on tokens (b, T): /logits/inputs,
  // /logits/values
  void record_logits(std::vector<int32_t> tokens, std::vector<float> logits, int b);
  void write() const;

 private:
  gpt::GptConfig cfg_;
  optim::AdamWConfig adamw_;
  int micro_batch_;
  std::string deck_toml_;
  int64_t global_batch_;
  Group init_, final_, grads_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<int32_t> logit_tokens_;
  std::vector<float> logits_;
  int logit_rows_ = 0;
};

}  // namespace hpct::train
