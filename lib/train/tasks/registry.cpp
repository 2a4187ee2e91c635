#include "train/tasks/registry.hpp"

#include "core/error.hpp"
#include "train/tasks/gpt/gpt_trainer.hpp"
#include "train/tasks/resnet/resnet_trainer.hpp"

namespace hpct::train {

const std::vector<TrainingApp>& training_apps() {
  static const std::vector<TrainingApp> apps = {
      gpt_training_app(),     // tasks/gpt/
      resnet_training_app(),  // tasks/resnet/
  };
  return apps;
}

const TrainingApp& training_app(const std::string& name) {
  std::string known;
  for (const TrainingApp& a : training_apps()) {
    if (a.name == name) return a;
    known += (known.empty() ? "" : ", ") + a.name;
  }
  HPCT_FAIL("no training app named {} is registered (lib/train/tasks/registry.cpp has {})", name, known);
}

}  // namespace hpct::train
