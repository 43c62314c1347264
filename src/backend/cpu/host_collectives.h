// The CPU backend's device collectives over the worker's host communicator (see
// host_collectives.cpp). Tested by tests/train/optimizer_shard_test.cpp and
// tests/train/gradient_bucket_test.cpp.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace dflash::cpu {

std::unique_ptr<DeviceCollectives> make_host_collectives(Communicator& comm);

}  // namespace dflash::cpu
