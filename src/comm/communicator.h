// The host collective-communication interface every worker uses for data parallelism
// (docs/design.md "Memory and threads"): an in-process implementation for CPU threads
// (in_process.h) and, across processes, a WorldGroup over TCP (world_group.h, tcp_group.h). NCCL is
// not here: the GPUs' own sums live in the CUDA backend (Backend::make_device_collectives,
// backend/cuda/nccl_collectives.h), whose set-up travels over a Communicator. A Communicator
// belongs to one rank and is driven by that rank's thread only; every rank must call the same
// collectives in the same order. Implementations are tested by tests/comm/in_process_test.cpp and
// tests/comm/world_group_test.cpp.
#pragma once

#include <cstddef>

namespace dflash {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // In place: afterwards every rank holds the element-wise sum over all ranks. Implementations
    // must give the same bits on every rank and on every run with the same number of ranks.
    virtual void all_reduce_sum(float* data, size_t n) = 0;
    virtual void all_reduce_sum(double* data, size_t n) = 0;
    // Copies `bytes` bytes from rank `root`'s buffer into every other rank's buffer.
    virtual void broadcast(void* data, size_t bytes, int root) = 0;
    virtual void barrier() = 0;
};

}  // namespace dflash
