#pragma once
// The deck schema of train_gpt: every key, its type, default, range and doc (printed by --help).
#include "core/config.hpp"

namespace hpct::train {

const ConfigSchema& gpt_deck_schema();

}  // namespace hpct::train
