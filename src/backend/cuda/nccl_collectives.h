// The CUDA backend's device collectives over the workers of a run
// (Backend::make_device_collectives): NCCL, loaded at run time from CollectiveOptions::library
// (runtime.nccl_library) so that the binary needs no NCCL unless a run has several GPU workers.
// One NCCL communicator per worker, made together by all the run's workers (NCCL's unique id
// travels over the host communicator, so across processes too). The communicator is
// non-blocking: neither its set-up nor a collective can keep a thread inside NCCL, and every host
// wait of the backend goes through CollectiveWatch::check_wait, so a dead or failed peer ends the
// run with a named error after CollectiveOptions::timeout_s (or at once, on abort()) instead of
// hanging it. Ops are queued on the backend's stream and may be captured in a recorded step;
// while a step is replayed they queue nothing (the graph holds them). Tested by
// tests/cuda/nccl_cuda_test.cpp.
#pragma once

#include <functional>
#include <memory>

#include "backend/backend.h"

struct CUstream_st;

namespace dflash::cuda {

// What a CudaBackend asks while it waits for its stream with collectives alive.
class CollectiveWatch {
  public:
    virtual ~CollectiveWatch() = default;
    // Throws dflash::Error, after aborting the collectives, when the wait must end: abort() was
    // called, NCCL reported an error, or `waited_s` passed the timeout.
    virtual void check_wait(double waited_s) = 0;
};

// The backend a communicator serves.
struct NcclBinding {
    int device = 0;
    CUstream_st* stream = nullptr;
    std::function<bool()> replaying;  // true while a recorded step replays (queue nothing)
    // Called with the collectives' watch once they are made, and with null when they go.
    std::function<void(CollectiveWatch*)> watch;
};

std::unique_ptr<DeviceCollectives> make_nccl_collectives(const NcclBinding& b, Communicator& host,
                                                         const CollectiveOptions& opt);

}  // namespace dflash::cuda
