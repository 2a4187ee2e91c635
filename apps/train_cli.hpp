#pragma once
// The command line every training app shares (docs/contracts.md):
//   APP DECK.toml [--out DIR] [--set section.key=value]... [--dump FILE.h5] [app options]
// with every deck key (type, default, doc) in --help, printed by rank 0 only. A parse error is a UsageError that
// names the app's --help.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "app_main.hpp"
#include "train/loop/run_environment.hpp"
#include "train/plan/memory_plan.hpp"
#include "train/tasks/registry.hpp"

namespace hpct {

struct TrainCli {
  std::string deck_path, out_dir, dump_path;
  std::vector<std::string> overrides;

  // --out, defaulting to runs/<deck file stem> (stable across jobs, so checkpoint.resume=latest finds it)
  train::RunOptions run_options() const {
    train::RunOptions o;
    o.out_dir = out_dir.empty() ? ("runs/" + std::filesystem::path(deck_path).stem().string()) : out_dir;
    o.dump_path = dump_path;
    return o;
  }
};

// Adds the shared options; dump_doc says what --dump writes for this app.
inline void add_train_options(CLI::App& app, TrainCli& cli, const char* deck_example, const char* dump_doc,
                              const ConfigSchema& schema) {
  app.add_option("deck", cli.deck_path, std::string("input deck (TOML), e.g. ") + deck_example)->required();
  app.add_option("--out", cli.out_dir, "output directory (default runs/<deck file stem>)");
  app.add_option("--set", cli.overrides, "override a deck key: --set section.key=value (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--dump", cli.dump_path, dump_doc);
  app.footer("Deck keys (type, default, doc):\n" + schema.help_text());
}

// --plan WORLD, --json and --device-name (both apps; docs/contracts.md): plan_doc says what --plan prints, json_doc
// what the JSON line holds. plan_world stays 0 without --plan. --auto, --machine and --top: the layout planner
// (train/plan/auto_plan.hpp); `automatic` stays false without --auto.
inline void add_plan_options(CLI::App& app, int& plan_world, train::PlanOutput& out, bool& automatic,
                             train::AutoPlanOptions& auto_options, const char* plan_doc, const char* json_doc) {
  CLI::Option* plan_opt = app.add_option("--plan", plan_world, plan_doc)->check(CLI::PositiveNumber);
  app.add_flag("--json", out.json, json_doc)->needs(plan_opt);
  app.add_option("--device-name", out.device_name,
                 "with --plan: the device whose peak TFLOP/s the JSON line gives at train.precision, as nvidia-smi "
                 "names it (e.g. \"NVIDIA H100 80GB HBM3\")")
      ->needs(plan_opt);
  CLI::Option* auto_opt =
      app.add_flag("--auto", automatic,
                   "with --plan: rank every layout valid for the deck at WORLD ranks by predicted step time on "
                   "--machine, memory checked by the plan; print the best --top with the --set arguments that select "
                   "them (with --json: one JSON object per candidate)")
          ->needs(plan_opt);
  app.add_option("--machine", auto_options.machine,
                 "with --auto: a machine preset (inputs/machines/NAME.toml: h100_dgx, a100_dgx, this_cpu) or a machine "
                 "file (TOML)")
      ->needs(auto_opt);
  app.add_option("--top", auto_options.top, "with --auto: how many fitting layouts to print (0: all; default 10)")
      ->check(CLI::NonNegativeNumber)
      ->needs(auto_opt);
}

// Parses argv; false when --help was printed (the app exits 0).
inline bool parse_train_cli(CLI::App& app, int argc, char** argv, const char* name) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (process_identity().rank == 0) std::printf("%s", app.help().c_str());
    return false;
  } catch (const CLI::ParseError& e) {
    HPCT_USAGE_FAIL("{} (see {} --help)", e.what(), name);
  }
  return true;
}

// The main() of a training app: the registry's entry `name` (train/tasks/registry.hpp) gives its --help, deck schema,
// --plan and run; every rank parses the command line, rank 0 alone prints the plan.
inline int run_training_app(int argc, char** argv, const char* name) {
  return run_mpi_app(argc, argv, name, [name](int argc, char** argv) {
    const train::TrainingApp& entry = train::training_app(name);
    CLI::App app{entry.summary};
    TrainCli cli;
    add_train_options(app, cli, entry.example_deck.c_str(), entry.dump_help.c_str(), entry.schema());
    int plan_world = 0;
    train::PlanOutput plan_out;
    bool automatic = false;
    train::AutoPlanOptions auto_options;
    add_plan_options(app, plan_world, plan_out, automatic, auto_options, entry.plan_help.c_str(),
                     entry.plan_json_help.c_str());
    if (!parse_train_cli(app, argc, argv, name)) return 0;
    const Config deck = Config::load(entry.schema(), cli.deck_path, cli.overrides);
    if (plan_world > 0 && automatic) {
      HPCT_USAGE_CHECK(!auto_options.machine.empty(),
                       "--auto needs --machine NAME|FILE (presets: inputs/machines/*.toml, e.g. --machine this_cpu or "
                       "--machine h100_dgx)");
      auto_options.json = plan_out.json;
      return process_identity().rank == 0 ? entry.auto_plan(deck, plan_world, auto_options) : 0;
    }
    if (plan_world > 0) return process_identity().rank == 0 ? entry.plan(deck, plan_world, plan_out) : 0;
    return entry.run(deck, cli.run_options());
  });
}

}  // namespace hpct
