// TcpGroup: collectives between the processes of a multi-process run (one process per node,
// docs/training.md "Several processes (one per node)"), over plain TCP sockets in a star around
// process 0. It carries what must agree across nodes on the CPU path (gradients, the step's loss
// sums, the stop vote, data positions) and, on GPUs, the NCCL unique id at start-up. Sums are
// deterministic: process 0 adds the ranks' buffers in rank order 0..N-1, so every process gets the
// same bits on every run.
//
// Process 0 admits only processes that prove the run's secret (launch.secret_file), reading every
// hello at once with its own short deadline; see rendezvous.h for the handshake.
//
// Every wait has a deadline (launch.timeout_s): a peer that died or hangs makes the collective
// throw dflash::Error naming that peer, never a hang. abort() (any thread) shuts every socket down,
// which wakes a blocked collective here and, through the closed connection, the peers' collectives.
// Every collective is checked: all processes must call the same one with the same sizes, as
// InProcessGroup checks its threads. Tested by tests/comm/tcp_group_test.cpp and
// tests/comm/rendezvous_test.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/logging.h"

namespace dflash {

struct TcpGroupOptions {
    int rank = 0;   // this process, 0..world-1
    int world = 1;  // processes
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;  // where process 0 listens
    double timeout_s = 1800;  // rendezvous and every collective
    // Must be equal on every process (process 0 compares them at the rendezvous and names the
    // first line that differs): the run's settings apart from launch.*, the worker count.
    std::string agreement;
    // The launch secret, the key of the rendezvous proofs (the same bytes on every process).
    // Empty is allowed only when process 0 listens on a loopback address (a warning is logged).
    std::string secret;
    // How long one connection may take over its hello before process 0 drops it (the others
    // are read meanwhile).
    double hello_timeout_s = 5;
    Logger log;  // the warnings of the rendezvous (no secret, dropped connections)
};

// Process 0's listening socket, made before the group so that a test can listen on port 0 and
// hand the port it got to the other ranks. Defined in rendezvous.cpp.
class TcpListener {
  public:
    // Binds addr:port (port 0: any free port) and listens. Errors name the address.
    TcpListener(const std::string& addr, int port);
    ~TcpListener();
    TcpListener(const TcpListener&) = delete;
    TcpListener& operator=(const TcpListener&) = delete;
    int port() const { return port_; }
    int fd() const { return fd_; }

  private:
    int fd_ = -1;
    int port_ = 0;
};

class TcpGroup {
  public:
    // Rendezvous: process 0 (which must be given its listener, or makes one on master_addr:
    // master_port) admits world-1 authenticated processes; the others connect, retrying until
    // the deadline. Returns once every process has joined and agreed.
    explicit TcpGroup(const TcpGroupOptions& opt, TcpListener* listener = nullptr);
    ~TcpGroup();
    TcpGroup(const TcpGroup&) = delete;
    TcpGroup& operator=(const TcpGroup&) = delete;

    int rank() const { return opt_.rank; }
    int size() const { return opt_.world; }
    // In place; afterwards every process holds the element-wise sum in rank order.
    void all_reduce_sum(float* data, size_t n);
    void all_reduce_sum(double* data, size_t n);
    void broadcast(void* data, size_t bytes, int root);
    void barrier();
    // Wakes any collective blocked now; every later one throws. Safe from any thread.
    void abort(const std::string& reason);

  private:
    enum class Op : uint32_t { barrier = 1, reduce_f32, reduce_f64, broadcast };
    struct Header {
        uint32_t magic;
        uint32_t op;
        uint64_t n;
        int64_t root;
        uint64_t seq;
    };
    template <typename T>
    void reduce(Op op, T* data, size_t n);
    // Process 0 reads every peer's header and tells each whether all agree; the peers send theirs
    // and read the verdict. Throws on a mismatch (on every process alike).
    void agree(const Header& h);
    void send_all(int peer_fd, const void* data, size_t bytes, int peer);
    void recv_all(int peer_fd, void* data, size_t bytes, int peer);
    void check_alive() const;
    std::string describe(const Header& h) const;
    int fd_of(int peer) const;  // process 0: the socket to `peer`; others: the socket to 0

    TcpGroupOptions opt_;
    std::vector<int> fds_;  // process 0: [world] (fds_[0] unused); others: [1], the link to 0
    uint64_t seq_ = 0;
    std::atomic<bool> aborted_{false};
    std::string abort_reason_;  // written once, before aborted_ is set
    std::atomic<bool> reason_set_{false};
    std::vector<unsigned char> scratch_;
};

}  // namespace dflash
