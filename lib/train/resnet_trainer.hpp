#pragma once
// The ResNet training loop (apps/train_resnet): HDF5 image data -> this DP rank's block of the global batch ->
// micro-batches -> forward/backward (BatchNorm or SyncBN over DP) -> bucketed gradient sync (ZeRO-1 optional) ->
// clip -> SGD (momentum, Nesterov) -> metrics (loss, accuracy, images/s), test accuracy per epoch, checkpoints with
// the BN running statistics, signals and deadline (DESIGN.md §3, §4). Data-parallel only (parallel.tp = pp = 1).
#include "core/config.hpp"
#include "train/run_support.hpp"

namespace hpct::train {

// Runs the whole training job described by the deck (train/resnet_deck.hpp). Returns the exit code (0 finished,
// 3 stopped after a checkpoint on a signal or train.deadline).
int run_resnet(const Config& deck, const RunOptions& opts);

}  // namespace hpct::train
