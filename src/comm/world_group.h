// WorldGroup: every worker of a run, whether it is a thread of this process or of another
// process (docs/training.md "Several processes (one per node)": one process per node, one worker
// thread per device). Worker w of process p is global rank p * local + w; every process runs the
// same number of workers. A collective is taken in three parts: the process's threads combine
// through an InProcessGroup, process leaders (local worker 0) combine those results through a
// TcpGroup, and the leader hands the result back to its threads. Sums are therefore deterministic
// for a given (processes, workers) layout, and with one process they are exactly InProcessGroup's;
// with one worker per process they are the global rank-order sum. Tested by
// tests/comm/world_group_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/in_process.h"
#include "comm/tcp_group.h"

namespace dflash {

namespace detail {
class WorldComm;
}

class WorldGroup {
  public:
    // `processes` may be null for a run of one process.
    WorldGroup(int local_workers, std::unique_ptr<TcpGroup> processes);
    ~WorldGroup();
    WorldGroup(const WorldGroup&) = delete;
    WorldGroup& operator=(const WorldGroup&) = delete;

    int size() const { return local_ * processes_count(); }
    int local_size() const { return local_; }
    int process_rank() const { return tcp_ ? tcp_->rank() : 0; }
    int processes_count() const { return tcp_ ? tcp_->size() : 1; }
    int global_rank(int local) const { return process_rank() * local_ + local; }
    // The communicator of local worker `local` (its rank() is the global rank). Used by that
    // worker's thread only.
    Communicator& local(int local);
    // Wakes every collective of this process's workers, and through the closed connections those
    // of the other processes. Safe from any thread.
    void abort(const std::string& reason);

  private:
    int local_;
    std::unique_ptr<TcpGroup> tcp_;
    InProcessGroup threads_;
    std::vector<std::unique_ptr<detail::WorldComm>> comms_;
};

}  // namespace dflash
