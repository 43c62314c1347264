// Which backend a command runs on (runtime.backend = auto | cpu | cuda) and making one per device.
// The CUDA backend exists only in builds with CUDA (DFLASH_HAVE_CUDA); asking for it elsewhere, or
// on a machine without a GPU, is an error that says so. Tested by tests/backend/factory_test.cpp.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace dflash {

namespace config {
class Settings;
}

// Visible CUDA devices; 0 in a build without CUDA or without a driver/GPU. Never throws.
int cuda_device_count() noexcept;
// Whether this build contains the CUDA backend.
bool cuda_backend_built() noexcept;

// runtime.backend resolved: "auto" is cuda when a GPU is visible, else cpu. `devices` workers are
// needed (runtime.devices): cuda with fewer GPUs than that is an error naming both numbers.
DeviceKind resolve_backend(const std::string& setting, int devices = 1);

// A backend for device `index` of `kind`. cpu_threads: the CPU backend's threads (>= 1); graphs:
// the CUDA backend's graph cache (the CPU backend has none).
std::unique_ptr<Backend> make_backend(DeviceKind kind, int index, int cpu_threads,
                                      const GraphOptions& graphs = {});

// The cuda_graphs.* settings as graph-cache options (warn left empty).
GraphOptions graph_options_from_settings(const config::Settings& s);

}  // namespace dflash
