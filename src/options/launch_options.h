// The launch.* settings as a Launch (comm/launch.h): the one place they are read by key. Tested by
// tests/comm/world_group_test.cpp and tests/comm/launch_secret_test.cpp.
#pragma once

#include "comm/launch.h"
#include "config/settings.h"

namespace dflash {

// Validates the launch.* settings together (rank < world, local rank < local world).
Launch launch_from_settings(const config::Settings& s);

}  // namespace dflash
