// train_gpt: trains a GPT-2-family model from a TOML deck (its entry in lib/train/tasks/registry.cpp).
//   train_gpt DECK.toml [--out DIR] [--set section.key=value]... [--dump FILE.h5]
//             [--plan WORLD [--json] [--device-name NAME] [--auto --machine NAME|FILE [--top K]]]
#include "train_cli.hpp"

int main(int argc, char** argv) { return hpct::run_training_app(argc, argv, "train_gpt"); }
