// The device check every CUDA op shares. Tested by tests/cuda/cuda_backend_test.cpp.
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace dflash::cuda {

void check_device(const Exec& ex, const Tensor& t, const char* op, const char* name) {
    DF_CHECK(t.empty() || (t.device().kind == DeviceKind::cuda && t.device().index == ex.device),
             "{}: {} is {}, expected a tensor on cuda:{} (copy it there with Backend::upload)", op,
             name, t.describe(), ex.device);
}

}  // namespace dflash::cuda
