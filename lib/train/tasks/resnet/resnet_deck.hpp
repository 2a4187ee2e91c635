#pragma once
// The deck of train_resnet: its schema (every key, type, default, range and doc, printed by --help) and its typed
// sections, read and validated once (read_resnet_deck) next to the shared ones (train/loop/run_config.hpp).
#include <cstdint>
#include <string>

#include "core/config.hpp"
#include "data/image_dataset.hpp"
#include "models/resnet/resnet.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/sgd.hpp"
#include "train/loop/run_config.hpp"

namespace hpct::train {

const ConfigSchema& resnet_deck_schema();

// The datasets and what the deck derives from them: the model (its input shape and classes come from the data),
// normalisation, augmentation, the step count (train.epochs x steps per epoch when set) and the LR schedule (epoch
// milestones become steps).
struct ResNetDeck {
  data::ImageDataset train_set, test_set;
  resnet::ResNetConfig cfg;
  data::ImageNormalization norm;
  data::ImageAugmentation aug;
  int64_t steps = 0, n_eval = 0, epochs = 0;
  optim::LrSchedule sched;
  optim::SgdConfig sgd;
  bool sync_bn = false;         // model.sync_bn
  std::string lr_kind;          // optim.schedule: "cosine" | "step"
  std::string conv_algorithms;  // train.conv_algorithms (train/tasks/resnet/conv_algorithm_choice.hpp)
};

// The [model] section (and optim.label_smoothing) for images of in_channels x height x width; num_classes 0 takes the
// dataset's. Validated (UsageError naming the key on failure).
resnet::ResNetConfig resnet_model_config(const Config& deck, int in_channels, int height, int width,
                                         int dataset_classes);

// Opens data.train and data.test and validates every [model], [data] and [optim] key against them.
ResNetDeck read_resnet_deck(const Config& deck, const RunConfig& run);
// The ResNet is data-parallel only: parallel.tp and parallel.pp other than 1 are a UsageError naming both (the run and
// --plan check it alike).
void check_resnet_layout(const RunConfig& run);

}  // namespace hpct::train
