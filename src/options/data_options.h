// The data.* settings as train::DataOptions (train/train_options.h): the one place they are
// read by key. Tested by tests/options/options_test.cpp and tests/train/data_order_test.cpp.
#pragma once

#include "config/settings.h"
#include "train/train_options.h"

namespace dflash {

train::DataOptions data_options_from_settings(const config::Settings& s);

}  // namespace dflash
