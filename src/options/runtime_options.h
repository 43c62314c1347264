// The runtime.* settings as RuntimeOptions (backend/backend_factory.h): the one place they are
// read by key. Tested by tests/options/options_test.cpp.
#pragma once

#include "backend/backend_factory.h"
#include "config/settings.h"

namespace dflash {

RuntimeOptions runtime_options_from_settings(const config::Settings& s);

}  // namespace dflash
