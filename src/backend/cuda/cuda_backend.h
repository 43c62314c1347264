// The CUDA backend (docs/design.md "The op contract", docs/design.md "Memory and threads"): one GPU
// as a Backend. It owns the device's stream, the cuBLASLt engine, the op workspace and the graph
// cache (run_step) and nothing else; every op is queued on the stream and checked at its launch.
// Any thread may drive it, one at a time: the first thread to use it becomes its driver (the GPU is
// made current there); another thread using it while it is held is an error naming both threads,
// until release_thread(). Tested by tests/cuda/*_test.cpp.
#pragma once

#include <cstddef>
#include <memory>

#include "backend/backend.h"

struct CUstream_st;

namespace dflash::cuda {

struct CudaBackendOptions {
    size_t op_workspace_bytes = size_t{256} << 20;   // op temporaries (OpWorkspace)
    size_t gemm_workspace_bytes = size_t{32} << 20;  // cuBLASLt
    GraphOptions graphs;                             // the device's graph cache (run_step)
};

std::unique_ptr<Backend> make_cuda_backend(int index, const CudaBackendOptions& opt = {});

// Gives up the calling thread's hold on a CUDA backend (after its queued work finished) so another
// thread may drive it. No-op for other backends.
void release_thread(Backend& be);

// The stream a CUDA backend orders its work on, for code that queues work of its own on it
// (tests). Fails for other backends.
CUstream_st* stream_of(Backend& be);

}  // namespace dflash::cuda
