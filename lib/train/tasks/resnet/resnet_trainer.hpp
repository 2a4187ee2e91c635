#pragma once
// train_resnet: the ResNet as a task of the one training loop (train/loop/training_loop.hpp): HDF5 image data -> this DP
// rank's micro-batches -> forward/backward (BatchNorm or SyncBN over DP) -> SGD (momentum, Nesterov); accuracy,
// test loss and accuracy per epoch, checkpoints with the BN running statistics (docs/architecture.md,
// docs/contracts.md). Data-parallel only (parallel.tp = pp = 1).
#include "core/config.hpp"
#include "train/loop/run_environment.hpp"

namespace hpct::train {

// Runs the whole training job described by the deck (train/tasks/resnet/resnet_deck.hpp). Returns the exit code (0 finished,
// 3 stopped after a checkpoint on a signal or train.deadline).
int run_resnet(const Config& deck, const RunOptions& opts);
// Its entry in the registry (train/tasks/registry.hpp).
struct TrainingApp;
TrainingApp resnet_training_app();

}  // namespace hpct::train
