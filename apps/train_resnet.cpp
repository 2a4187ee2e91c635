// train_resnet: trains a ResNet on an HDF5 image dataset from a TOML deck, data-parallel over the MPI ranks.
//   train_resnet DECK.toml [--out DIR] [--set section.key=value]... [--dump FILE.h5]
//                [--plan WORLD [--json] [--device-name NAME]]
#include "app_main.hpp"
#include "train_cli.hpp"
#include "core/config.hpp"
#include "train/plan/app_plan.hpp"
#include "train/tasks/resnet/resnet_deck.hpp"
#include "train/tasks/resnet/resnet_trainer.hpp"

int main(int argc, char** argv) {
  return hpct::run_mpi_app(argc, argv, "train_resnet", [](int argc, char** argv) {
    CLI::App app{"hpctrain train_resnet: trains a ResNet described by a TOML deck on an HDF5 image dataset"};
    hpct::TrainCli cli;
    hpct::add_train_options(app, cli, "inputs/resnet20_fmnist.toml",
                            "write initial weights, every step's batch, losses and final weights to this HDF5 file "
                            "(for the PyTorch cross-check; one rank)",
                            hpct::train::resnet_deck_schema());
    int plan_world = 0;
    hpct::train::PlanOutput plan_out;
    hpct::add_plan_options(
        app, plan_world, plan_out,
        "print the model and the memory plan by kind (the memory record's) of every rank of a world of this "
        "many ranks, from the deck and the dataset's header, without training",
        "with --plan: also print one JSON line {\"plan\":{...}} (parameters, FLOPs per image and per step, "
        "memory by kind, the device's peak TFLOP/s)");
    if (!hpct::parse_train_cli(app, argc, argv, "train_resnet")) return 0;
    const hpct::Config deck = hpct::Config::load(hpct::train::resnet_deck_schema(), cli.deck_path, cli.overrides);
    if (plan_world > 0)
      return hpct::process_identity().rank == 0 ? hpct::train::plan_resnet(deck, plan_world, plan_out) : 0;
    return hpct::train::run_resnet(deck, cli.run_options());
  });
}
