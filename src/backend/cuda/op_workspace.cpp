// Op temporaries. Tested by tests/cuda/cuda_backend_test.cpp.
#include "backend/cuda/op_workspace.h"

#include <algorithm>

#include "core/error.h"

namespace dflash::cuda {

void* OpWorkspace::take(size_t bytes, const char* what) {
    const size_t need = (bytes + 255) / 256 * 256;
    DF_CHECK(used_ + need <= capacity_,
             "CUDA op workspace exhausted: {} needs {} bytes with {} of {} in use (raise "
             "CudaBackendOptions::op_workspace_bytes)",
             what, bytes, used_, capacity_);
    void* p = base_ + used_;
    used_ += need;
    high_ = std::max(high_, used_);
    return p;
}

}  // namespace dflash::cuda
