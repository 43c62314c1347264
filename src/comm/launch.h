// Where this process stands in a multi-process run (docs/training.md "Several processes (one per
// node)"), read from the launch.* settings, which also take torchrun's, mpirun's and Slurm's own
// variables (settings_catalog.cpp). One process per node runs runtime.devices workers; processes
// meet through a TcpGroup at launch.master_addr:launch.master_port. Tested by
// tests/comm/world_group_test.cpp and, end to end, tests/train/multiprocess_test.cpp; the launch
// secret by tests/comm/launch_secret_test.cpp.
#pragma once

#include <memory>
#include <string>

#include "comm/tcp_group.h"
#include "config/settings.h"

namespace dflash {

struct Launch {
    int rank = 0;
    int world = 1;
    int local_rank = 0;
    int local_world = 1;
    std::string master_addr;
    int master_port = 0;
    double timeout_s = 0;
    std::string rank_source;   // where launch.rank came from ("env:RANK", "default", ...)
    std::string world_source;  // likewise launch.world_size
    std::string secret_file;   // launch.secret_file: the rendezvous key ("" = none)
    std::string secret_file_source;
    double hello_timeout_s = 5;  // launch.hello_timeout_s
};

// What every process of a run must share: the settings apart from launch.* and the log level,
// one "key = value" per line (TcpGroup names the first line that differs).
std::string launch_agreement(const config::Settings& s);

// The launch secret kept in `path` (named with `source` in errors): the file's bytes without
// trailing white space, at least 16 of them. The file must be a regular file of this user that
// group and others cannot read (mode 600 or 400), else it is refused: a secret others can read
// admits them too.
std::string read_launch_secret(const std::string& path, const std::string& source);

// Joins the other processes (a no-op returning null for a world of 1). `agreement` is compared
// by process 0; the secret is read from l.secret_file; `log` gets the rendezvous's warnings.
std::unique_ptr<TcpGroup> join_processes(const Launch& l, const std::string& agreement,
                                         const Logger& log = {});

// The index of local worker w's device on this node: local_rank x workers + w (torchrun's
// one-process-per-GPU launch then gives process i GPU i with runtime.devices=1).
inline int node_device_index(const Launch& l, int workers, int w) {
    return l.local_rank * workers + w;
}

}  // namespace dflash
