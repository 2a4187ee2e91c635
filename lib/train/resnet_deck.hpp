#pragma once
// The deck schema of train_resnet: every key, its type, default, range and doc (printed by --help).
#include "core/config.hpp"

namespace hpct::train {

const ConfigSchema& resnet_deck_schema();

}  // namespace hpct::train
