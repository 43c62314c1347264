// Backend selection. Tested by tests/backend/factory_test.cpp.
#include "backend/backend_factory.h"

#include "core/error.h"

#if DFLASH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#endif

namespace dflash {

int cuda_device_count() noexcept {
#if DFLASH_HAVE_CUDA
    return cuda::device_count();
#else
    return 0;
#endif
}

bool cuda_backend_built() noexcept {
    return DFLASH_HAVE_CUDA != 0;
}

DeviceKind resolve_backend(const std::string& setting, int devices) {
    if (setting == "cpu") return DeviceKind::cpu;
    const int gpus = cuda_device_count();
    if (setting == "auto") return gpus >= devices && gpus > 0 ? DeviceKind::cuda : DeviceKind::cpu;
    DF_CHECK(setting == "cuda", "runtime.backend='{}' is not one of auto, cpu, cuda", setting);
    DF_CHECK(cuda_backend_built(),
             "runtime.backend=cuda but this dflash was built without CUDA (no nvcc at build "
             "time); rebuild on a machine with the CUDA toolkit or use runtime.backend=cpu");
    DF_CHECK(gpus > 0,
             "runtime.backend=cuda but no CUDA device is visible (no driver or no GPU); use "
             "runtime.backend=cpu or auto");
    DF_CHECK(devices <= gpus,
             "runtime.devices={} but only {} CUDA device(s) are visible; lower runtime.devices",
             devices, gpus);
    return DeviceKind::cuda;
}

std::unique_ptr<Backend> make_backend(DeviceKind kind, int index, int cpu_threads,
                                      const GraphOptions& graphs) {
    if (kind == DeviceKind::cpu) return make_cpu_backend(cpu_threads);
#if DFLASH_HAVE_CUDA
    cuda::CudaBackendOptions opt;
    opt.graphs = graphs;
    return cuda::make_cuda_backend(index, opt);
#else
    (void)graphs;
    DF_FAIL("the CUDA backend is not built into this dflash (device cuda:{})", index);
#endif
}

}  // namespace dflash
