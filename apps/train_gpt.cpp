// train_gpt: trains a GPT-2-family model from a TOML deck.
//   train_gpt DECK.toml [--out DIR] [--set section.key=value]... [--dump FILE.h5] [--plan WORLD]
#include <CLI/CLI.hpp>

#include <filesystem>

#include "app_main.hpp"
#include "core/config.hpp"
#include "train/gpt_deck.hpp"
#include "train/gpt_trainer.hpp"

int main(int argc, char** argv) {
  return hpct::run_mpi_app(argc, argv, "train_gpt", [](int argc, char** argv) {
    CLI::App app{"hpctrain train_gpt: trains a GPT-2-family model described by a TOML deck"};
    std::string deck_path, out_dir, dump_path;
    std::vector<std::string> overrides;
    app.add_option("deck", deck_path, "input deck (TOML), e.g. inputs/gpt_tiny.toml")->required();
    app.add_option("--out", out_dir, "output directory (default runs/<deck file stem>)");
    app.add_option("--set", overrides, "override a deck key: --set section.key=value (repeatable)")
        ->take_all()
        ->allow_extra_args(false);
    app.add_option("--dump", dump_path, "write initial weights, batches, losses and step-1 gradients to this HDF5 "
                                        "file (for the PyTorch cross-check)");
    int plan_world = 0;
    app.add_option("--plan", plan_world, "validate the layout for a world of this many ranks and print every rank's "
                                         "memory plan, without data or training (e.g. --plan 8 --set parallel.tp=4)")
        ->check(CLI::PositiveNumber);
    app.footer("Deck keys (type, default, doc):\n" + hpct::train::gpt_deck_schema().help_text());
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      if (hpct::process_identity().rank == 0) std::printf("%s", app.help().c_str());
      return 0;
    } catch (const CLI::ParseError& e) {
      HPCT_USAGE_FAIL("{} (see train_gpt --help)", e.what());
    }
    const hpct::Config deck = hpct::Config::load(hpct::train::gpt_deck_schema(), deck_path, overrides);
    if (plan_world > 0) return hpct::process_identity().rank == 0 ? hpct::train::plan_gpt(deck, plan_world) : 0;
    hpct::train::RunOptions opts;
    opts.out_dir = out_dir.empty() ? ("runs/" + std::filesystem::path(deck_path).stem().string()) : out_dir;
    opts.dump_path = dump_path;
    return hpct::train::run_gpt(deck, opts);
  });
}
