// Which backend a command runs on (runtime.backend = auto | cpu | cuda) and making one per device.
// The CUDA backend exists only in builds with CUDA (DFLASH_HAVE_CUDA); asking for it elsewhere, or
// on a machine without a GPU, is an error that says so. Tested by tests/backend/factory_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace dflash {

// The runtime.* settings (filled by runtime_options_from_settings, src/options/): where and how
// wide a command runs.
struct RuntimeOptions {
    std::string backend = "auto";     // auto | cpu | cuda (resolve_backend)
    int64_t threads = 0;              // CPU threads per worker; 0: the cores shared by the workers
    int64_t devices = 1;              // data-parallel workers of this process
    std::vector<int64_t> device_ids;  // one device per worker, or empty: by place on the node
    uint64_t seed = 42;               // every random stream of a run
    std::string log_level = "info";
    std::string gradient_exchange = "host";  // auto | device | host
    std::string nccl_library = "libnccl.so.2";
    double collective_timeout_s = 600;
    double gradient_bucket_mb = 64;
};

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

}  // namespace dflash
