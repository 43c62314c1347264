// The train.* settings as train::TrainOptions (train/train_options.h): every train.* key, read
// in this one place. Tested by tests/options/options_test.cpp.
#pragma once

#include "config/settings.h"
#include "train/train_options.h"

namespace dflash {

train::TrainOptions train_options_from_settings(const config::Settings& s);

}  // namespace dflash
