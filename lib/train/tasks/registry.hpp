#pragma once
// The models hpctrain trains, one entry each (docs/recipes.md "Add a model"): everything an app needs to parse its
// command line, print its memory plan and train. The training loop, the checkpoint protocol and the memory plan know no
// model; an app knows one name (apps/train_cli.hpp, run_training_app).
#include <string>
#include <vector>

#include "core/config.hpp"
#include "train/loop/run_environment.hpp"
#include "train/plan/auto_plan.hpp"
#include "train/plan/memory_plan.hpp"

namespace hpct::train {

struct TrainingApp {
  std::string name;                 // the executable: "train_gpt"
  std::string summary;              // the headline of its --help
  std::string example_deck;         // the deck its --help names as an example
  std::string dump_help;            // what --dump FILE.h5 writes (the PyTorch cross-check's reference state)
  std::string plan_help;            // what --plan WORLD prints
  std::string plan_json_help;       // what --plan's --json line holds
  const ConfigSchema& (*schema)();  // every deck key (--help prints it)
  int (*run)(const Config& deck, const RunOptions& options);          // trains; collective over MPI_COMM_WORLD
  int (*plan)(const Config& deck, int world, const PlanOutput& out);  // --plan WORLD, on one rank; exit code
  // --plan WORLD --auto --machine M: every valid layout ranked by predicted step time (train/plan/auto_plan.hpp)
  int (*auto_plan)(const Config& deck, int world, const AutoPlanOptions& options);
};

// Every model, in the order of this list.
const std::vector<TrainingApp>& training_apps();
// The entry of the app called `name`; an error naming the registered apps otherwise.
const TrainingApp& training_app(const std::string& name);

}  // namespace hpct::train
