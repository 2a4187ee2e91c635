// train_resnet: trains a ResNet on an HDF5 image dataset from a TOML deck, data-parallel over the MPI ranks (its entry in
// lib/train/tasks/registry.cpp).
//   train_resnet DECK.toml [--out DIR] [--set section.key=value]... [--dump FILE.h5]
//                [--plan WORLD [--json] [--device-name NAME] [--auto --machine NAME|FILE [--top K]]]
#include "train_cli.hpp"

int main(int argc, char** argv) { return hpct::run_training_app(argc, argv, "train_resnet"); }
