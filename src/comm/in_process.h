// InProcessGroup: N ranks that are N threads of one process, each driving its own Communicator.
// Gives the multi-worker training logic the same shape on CPU threads as on GPUs, so it is tested
// without a GPU (docs/design.md "Memory and threads"). Sums are bitwise deterministic: every
// element is added in rank order 0..N-1 whatever the thread timing. abort() wakes every rank
// blocked in a collective (a failed worker must not leave its peers hanging, docs/design.md
// "Errors"). Tested by tests/comm/in_process_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dflash {

namespace detail {
struct InProcessState;
class InProcessComm;
}  // namespace detail

class InProcessGroup {
  public:
    explicit InProcessGroup(int size);
    ~InProcessGroup();
    InProcessGroup(const InProcessGroup&) = delete;
    InProcessGroup& operator=(const InProcessGroup&) = delete;

    int size() const;
    // One communicator per rank, used by that rank's thread only. Valid while the group lives.
    Communicator& rank(int r);
    // Every collective that is blocked now, or called later, throws dflash::Error carrying the
    // reason. The first reason wins; later calls are ignored. Safe from any thread.
    void abort(const std::string& reason);
    bool aborted() const;

  private:
    std::unique_ptr<detail::InProcessState> state_;
    std::vector<std::unique_ptr<detail::InProcessComm>> comms_;
};

}  // namespace dflash
