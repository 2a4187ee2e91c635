// train_gpt: trains a GPT-2-family model from a TOML deck.
//   train_gpt DECK.toml [--out DIR] [--set section.key=value]... [--dump FILE.h5]
//             [--plan WORLD [--json] [--device-name NAME]]
#include "app_main.hpp"
#include "train_cli.hpp"
#include "core/config.hpp"
#include "train/tasks/gpt/gpt_deck.hpp"
#include "train/plan/app_plan.hpp"
#include "train/tasks/gpt/gpt_trainer.hpp"

int main(int argc, char** argv) {
  return hpct::run_mpi_app(argc, argv, "train_gpt", [](int argc, char** argv) {
    CLI::App app{"hpctrain train_gpt: trains a GPT-2-family model described by a TOML deck"};
    hpct::TrainCli cli;
    hpct::add_train_options(app, cli, "inputs/gpt_tiny.toml",
                            "write initial weights, batches, losses and step-1 gradients to this HDF5 file (for the "
                            "PyTorch cross-check)",
                            hpct::train::gpt_deck_schema());
    int plan_world = 0;
    hpct::train::PlanOutput plan_out;
    hpct::add_plan_options(
        app, plan_world, plan_out,
        "validate the layout for a world of this many ranks and print every rank's memory plan by kind (the memory "
        "record's), without data or training (e.g. --plan 8 --set parallel.tp=4)",
        "with --plan: also print one JSON line {\"plan\":{...}} (parameters, FLOPs per token and per step, "
        "memory by kind, the device's peak TFLOP/s)");
    if (!hpct::parse_train_cli(app, argc, argv, "train_gpt")) return 0;
    const hpct::Config deck = hpct::Config::load(hpct::train::gpt_deck_schema(), cli.deck_path, cli.overrides);
    if (plan_world > 0)
      return hpct::process_identity().rank == 0 ? hpct::train::plan_gpt(deck, plan_world, plan_out) : 0;
    return hpct::train::run_gpt(deck, cli.run_options());
  });
}
