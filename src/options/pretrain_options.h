// The pretrain.* settings as train::PretrainOptions (train/train_options.h): the one place they
// are read by key. Tested by tests/options/options_test.cpp.
#pragma once

#include "config/settings.h"
#include "train/train_options.h"

namespace dflash {

train::PretrainOptions pretrain_options_from_settings(const config::Settings& s);

}  // namespace dflash
