#pragma once
// `train_gpt --dump FILE.h5`: everything an independent implementation needs to replay the run and
// compare (tests/reference/gpt_reference.py with PyTorch): the initial parameters (/init/<name>, logical
// shapes), every step's token batches (/batches/inputs, /batches/targets: (steps, global_batch, T)),
// per-step loss, lr and gradient norm (/steps/*), and the raw gradients of step 1 (/grads_step1/<name>,
// before clipping), and the parameters after the last step (/final/<name>). Attributes on / carry the model and optimizer settings. Serial HDF5, rank 0 only.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "kernels/exec_context.hpp"
#include "models/gpt/gpt.hpp"

namespace hpct::train {

class ReferenceDump {
 public:
  ReferenceDump(std::string path, const Config& deck, const gpt::GptConfig& cfg, int64_t steps, int64_t global_batch);
  void record_params(const ExecContext& ctx, gpt::Gpt& model,
                     const std::string& group);  // "init", "final" (parameters) or "grads_step1"
  void record_grads(const ExecContext& ctx, gpt::Gpt& model);
  // tokens of global samples [first, first+count) of step s (1-based), host arrays (count, T)
  void record_batch(int64_t step, int64_t first, int count, const int32_t* inputs, const int32_t* targets);
  void record_step(int64_t step, double loss, double lr, double grad_norm);
  void write();  // writes the file (write to .tmp then rename)

 private:
  struct Named {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::string path_;
  const Config& deck_;
  gpt::GptConfig cfg_;
  int64_t steps_, global_batch_;
  std::vector<Named> init_, final_, grads_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<double> loss_, lr_, grad_norm_;
};

}  // namespace hpct::train
