// The CUDA backend's device-side sum over the workers of a run (Backend::make_device_all_reduce):
// NCCL, loaded at run time from `library` (runtime.nccl_library) so that the binary needs no NCCL
// unless a run has several GPU workers. One NCCL communicator per worker, made together by all
// the run's workers (NCCL's unique id travels over the host communicator, so across processes
// too). The sum is queued on the backend's stream and may be captured in a recorded step; while a
// step is replayed it queues nothing (the graph holds it). Tested by tests/cuda/nccl_cuda_test.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"

struct CUstream_st;

namespace dflash::cuda {

std::unique_ptr<DeviceAllReduce> make_nccl_all_reduce(int device, CUstream_st* stream,
                                                      Communicator& host,
                                                      const std::string& library,
                                                      std::function<bool()> replaying);

}  // namespace dflash::cuda
