// Process collectives over TCP (see tcp_group.h). Tested by tests/comm/tcp_group_test.cpp.
#include "comm/tcp_group.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <system_error>

#include "comm/rendezvous.h"
#include "core/error.h"

namespace dflash {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::wait_fd;
constexpr uint32_t kOpMagic = 0x64666f70;  // "dfop"
constexpr size_t kChunkBytes = size_t{4} << 20;

std::string sys_error(int err) {
    return std::system_category().message(err);
}

Clock::time_point deadline_after(double seconds) {
    return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

}  // namespace

void TcpGroup::check_alive() const {
    if (aborted_.load())
        throw Error(fmt::format("collective between processes aborted on process {} of {}: {}",
                                opt_.rank, opt_.world, abort_reason_));
}

int TcpGroup::fd_of(int peer) const {
    return opt_.rank == 0 ? fds_[static_cast<size_t>(peer)] : fds_[0];
}

void TcpGroup::send_all(int fd, const void* data, size_t bytes, int peer) {
    const auto* p = static_cast<const unsigned char*>(data);
    const auto deadline = deadline_after(opt_.timeout_s);
    while (bytes > 0) {
        check_alive();
        if (!wait_fd(fd, POLLOUT, deadline, aborted_)) {
            DF_FAIL(
                "process {} waited {} s to send to process {}, which reads nothing: it hangs "
                "or is far behind (launch.timeout_s sets the limit)",
                opt_.rank, opt_.timeout_s, peer);
        }
        check_alive();
        const ssize_t k = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            check_alive();
            DF_FAIL(
                "process {} lost its connection to process {}: {}; that process stopped or "
                "failed (see its own log)",
                opt_.rank, peer, sys_error(errno));
        }
        p += k;
        bytes -= static_cast<size_t>(k);
    }
}

void TcpGroup::recv_all(int fd, void* data, size_t bytes, int peer) {
    auto* p = static_cast<unsigned char*>(data);
    const auto deadline = deadline_after(opt_.timeout_s);
    while (bytes > 0) {
        check_alive();
        if (!wait_fd(fd, POLLIN, deadline, aborted_)) {
            DF_FAIL(
                "process {} waited {} s for process {}, which sent nothing: it hangs, is far "
                "behind, or is stuck elsewhere (launch.timeout_s sets the limit)",
                opt_.rank, opt_.timeout_s, peer);
        }
        check_alive();
        const ssize_t k = ::recv(fd, p, bytes, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (k <= 0) {
            check_alive();
            DF_FAIL(
                "process {} lost its connection to process {} ({}): that process stopped or "
                "failed (see its own log)",
                opt_.rank, peer, k == 0 ? "closed" : sys_error(errno));
        }
        p += k;
        bytes -= static_cast<size_t>(k);
    }
}

TcpGroup::TcpGroup(const TcpGroupOptions& opt, TcpListener* listener) : opt_(opt) {
    DF_CHECK(opt.world >= 1 && opt.rank >= 0 && opt.rank < opt.world,
             "launch.rank={} but launch.world_size={}: the rank must be in 0..{}", opt.rank,
             opt.world, opt.world - 1);
    DF_CHECK(opt.timeout_s > 0, "launch.timeout_s must be positive");
    DF_CHECK(opt.hello_timeout_s > 0, "launch.hello_timeout_s must be positive");
    if (opt.world == 1) return;
    // Without a secret anyone who can reach the port could join; that is accepted only where
    // "anyone" means this machine's users: process 0 listening on a loopback address (a
    // separately started process cannot be handed a generated secret, so a local run without
    // one stays possible).
    if (opt.secret.empty()) {
        const bool loopback =
            opt.rank == 0 && listener
                ? rendezvous::socket_is_loopback(listener->fd(), false)
                : rendezvous::is_loopback_address(opt.master_addr, opt.master_port, opt.rank == 0);
        DF_CHECK(loopback,
                 "process {} of {}: no launch secret, but the rendezvous at {}:{} is not on a "
                 "loopback address, so anyone who can reach that port could join the run; give "
                 "every process the same secret in a file only you can read "
                 "(launch.secret_file, or DFLASH_LAUNCH_SECRET_FILE; README, \"Several GPUs, "
                 "several nodes\")",
                 opt.rank, opt.world, opt.master_addr, opt.master_port);
        opt.log.warn(
            "no launch secret (launch.secret_file): any user of this machine could join the "
            "rendezvous at {}:{}; allowed because it is on a loopback address",
            opt.master_addr, opt.master_port);
    }
    const auto deadline = deadline_after(opt.timeout_s);
    if (opt.rank != 0) {
        fds_.push_back(rendezvous::join_process_zero(opt_, deadline, aborted_));
        return;
    }
    std::optional<TcpListener> own;
    if (!listener) listener = &own.emplace(opt.master_addr, opt.master_port);
    fds_ = rendezvous::admit_peers(opt_, *listener, deadline, aborted_);
}

TcpGroup::~TcpGroup() {
    for (int fd : fds_)
        if (fd >= 0) ::close(fd);
}

void TcpGroup::abort(const std::string& reason) {
    if (!reason_set_.exchange(true)) {
        abort_reason_ = reason;
        aborted_.store(true);
    }
    for (int fd : fds_)
        if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

std::string TcpGroup::describe(const Header& h) const {
    switch (static_cast<Op>(h.op)) {
        case Op::barrier:
            return fmt::format("barrier() (#{})", h.seq);
        case Op::reduce_f32:
            return fmt::format("all_reduce_sum(float*, n={}) (#{})", h.n, h.seq);
        case Op::reduce_f64:
            return fmt::format("all_reduce_sum(double*, n={}) (#{})", h.n, h.seq);
        case Op::broadcast:
            return fmt::format("broadcast(bytes={}, root={}) (#{})", h.n, h.root, h.seq);
    }
    return fmt::format("op {} (#{})", h.op, h.seq);
}

void TcpGroup::agree(const Header& h) {
    check_alive();
    if (opt_.rank != 0) {
        send_all(fds_[0], &h, sizeof(h), 0);
        uint32_t len = 0;
        recv_all(fds_[0], &len, sizeof(len), 0);
        std::string verdict(len, '\0');
        recv_all(fds_[0], verdict.data(), len, 0);
        DF_CHECK(verdict.empty(), "{}", verdict);
        return;
    }
    std::string problem;
    for (int r = 1; r < opt_.world; ++r) {
        Header theirs{};
        recv_all(fd_of(r), &theirs, sizeof(theirs), r);
        if (problem.empty() && (theirs.magic != kOpMagic || theirs.op != h.op || theirs.n != h.n ||
                                theirs.root != h.root || theirs.seq != h.seq))
            problem = fmt::format(
                "collective mismatch between processes: process 0 called {} but process {} "
                "called {}; every process must call the same collectives, with the same sizes, in "
                "the same order",
                describe(h), r, describe(theirs));
    }
    const auto len = static_cast<uint32_t>(problem.size());
    for (int r = 1; r < opt_.world; ++r) {
        send_all(fd_of(r), &len, sizeof(len), r);
        send_all(fd_of(r), problem.data(), problem.size(), r);
    }
    DF_CHECK(problem.empty(), "{}", problem);
}

template <typename T>
void TcpGroup::reduce(Op op, T* data, size_t n) {
    DF_CHECK(data != nullptr || n == 0, "all_reduce_sum on process {}: null buffer with n={}",
             opt_.rank, n);
    if (opt_.world == 1) return;
    agree({kOpMagic, static_cast<uint32_t>(op), n, -1, seq_++});
    const size_t bytes = n * sizeof(T);
    if (opt_.rank != 0) {
        send_all(fds_[0], data, bytes, 0);
        recv_all(fds_[0], data, bytes, 0);
        return;
    }
    // Chunk by chunk, peers in rank order: every element is ((x0 + x1) + x2) + ...
    const size_t chunk = std::max<size_t>(1, kChunkBytes / sizeof(T));
    scratch_.resize(std::min(n, chunk) * sizeof(T));
    auto* tmp = reinterpret_cast<T*>(scratch_.data());
    for (size_t lo = 0; lo < n; lo += chunk) {
        const size_t m = std::min(chunk, n - lo);
        for (int r = 1; r < opt_.world; ++r) {
            recv_all(fd_of(r), tmp, m * sizeof(T), r);
            for (size_t i = 0; i < m; ++i) data[lo + i] += tmp[i];
        }
    }
    // Only now: a peer reads its result after it has sent all of its buffer.
    for (int r = 1; r < opt_.world; ++r) send_all(fd_of(r), data, bytes, r);
}

void TcpGroup::all_reduce_sum(float* data, size_t n) {
    reduce(Op::reduce_f32, data, n);
}

void TcpGroup::all_reduce_sum(double* data, size_t n) {
    reduce(Op::reduce_f64, data, n);
}

void TcpGroup::broadcast(void* data, size_t bytes, int root) {
    DF_CHECK(root >= 0 && root < opt_.world, "broadcast root={} but there are processes 0..{}",
             root, opt_.world - 1);
    DF_CHECK(data != nullptr || bytes == 0, "broadcast on process {}: null buffer", opt_.rank);
    if (opt_.world == 1) return;
    agree({kOpMagic, static_cast<uint32_t>(Op::broadcast), bytes, root, seq_++});
    if (opt_.rank == 0) {
        if (root != 0) recv_all(fd_of(root), data, bytes, root);
        for (int r = 1; r < opt_.world; ++r)
            if (r != root) send_all(fd_of(r), data, bytes, r);
    } else if (opt_.rank == root) {
        send_all(fds_[0], data, bytes, 0);
    } else {
        recv_all(fds_[0], data, bytes, 0);
    }
}

void TcpGroup::barrier() {
    if (opt_.world == 1) return;
    agree({kOpMagic, static_cast<uint32_t>(Op::barrier), 0, -1, seq_++});
}

}  // namespace dflash
