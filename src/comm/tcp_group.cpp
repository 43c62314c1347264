// Process collectives over TCP (see tcp_group.h). Tested by tests/comm/tcp_group_test.cpp.
#include "comm/tcp_group.h"

#include <arpa/inet.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include "core/error.h"

namespace dflash {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kHelloMagic = 0x64666c31;  // "dfl1"
constexpr uint32_t kOpMagic = 0x64666f70;     // "dfop"
constexpr size_t kChunkBytes = size_t{4} << 20;
constexpr int kPollSliceMs = 200;  // how soon a blocked wait notices abort()

std::string sys_error(int err) {
    return std::system_category().message(err);
}

Clock::time_point deadline_after(double seconds) {
    return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

void set_nodelay(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// addrinfo of addr:port for TCP; errors name the address.
struct AddrInfo {
    addrinfo* list = nullptr;
    AddrInfo(const std::string& addr, int port, bool passive) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        if (passive) hints.ai_flags = AI_PASSIVE;
        const std::string service = std::to_string(port);
        const int rc =
            ::getaddrinfo(addr.empty() ? nullptr : addr.c_str(), service.c_str(), &hints, &list);
        DF_CHECK(rc == 0, "cannot resolve launch.master_addr '{}' (port {}): {}", addr, port,
                 ::gai_strerror(rc));
    }
    ~AddrInfo() {
        if (list) ::freeaddrinfo(list);
    }
    AddrInfo(const AddrInfo&) = delete;
    AddrInfo& operator=(const AddrInfo&) = delete;
};

// The first line in which two "key = value" texts differ, as "`a` here, `b` there".
std::string first_difference(const std::string& mine, const std::string& theirs) {
    std::istringstream a(mine), b(theirs);
    std::string la, lb;
    while (true) {
        const bool ga = static_cast<bool>(std::getline(a, la));
        const bool gb = static_cast<bool>(std::getline(b, lb));
        if (!ga && !gb) return "";
        if (!ga) la = "(nothing)";
        if (!gb) lb = "(nothing)";
        if (la != lb) return fmt::format("process 0 has `{}`, it has `{}`", la, lb);
    }
}

}  // namespace

TcpListener::TcpListener(const std::string& addr, int port) {
    AddrInfo ai(addr, port, true);
    int last_err = 0;
    for (addrinfo* p = ai.list; p; p = p->ai_next) {
        const int fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (fd < 0) {
            last_err = errno;
            continue;
        }
        int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, p->ai_addr, p->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
            fd_ = fd;
            break;
        }
        last_err = errno;
        ::close(fd);
    }
    DF_CHECK(fd_ >= 0,
             "process 0 cannot listen on {}:{} for the other processes: {} (another run may use "
             "the port: set launch.master_port, or MASTER_PORT)",
             addr, port, sys_error(last_err));
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

TcpListener::~TcpListener() {
    if (fd_ >= 0) ::close(fd_);
}

namespace {

// Waits until fd is ready for `events` or the deadline passes; wakes every slice to notice an
// abort. Returns false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline, const std::atomic<bool>& aborted) {
    while (true) {
        if (aborted.load()) return true;  // the caller's next check throws
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kPollSliceMs)));
        if (rc > 0) return true;
        if (rc < 0 && errno != EINTR) return true;  // the read or write reports the error
    }
}

int connect_with_retry(const TcpGroupOptions& opt, Clock::time_point deadline,
                       const std::atomic<bool>& aborted) {
    std::string last = "no attempt";
    while (Clock::now() < deadline && !aborted.load()) {
        AddrInfo ai(opt.master_addr, opt.master_port, false);
        for (addrinfo* p = ai.list; p; p = p->ai_next) {
            const int fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
            if (fd < 0) continue;
            if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0) {
                set_nodelay(fd);
                return fd;
            }
            last = sys_error(errno);
            ::close(fd);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    DF_FAIL(
        "process {} of {} could not reach process 0 at {}:{} within {} s (last error: {}); is "
        "process 0 running, and are launch.master_addr / launch.master_port (MASTER_ADDR / "
        "MASTER_PORT) the same for every process? launch.timeout_s sets the limit",
        opt.rank, opt.world, opt.master_addr, opt.master_port, opt.timeout_s, last);
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

namespace {

// Hello: magic, rank, world, agreement length, agreement bytes. Verdict: length + message
// (empty = joined).
struct Hello {
    uint32_t magic;
    int32_t rank;
    int32_t world;
    uint32_t agreement_len;
};

}  // namespace

TcpGroup::TcpGroup(const TcpGroupOptions& opt, TcpListener* listener) : opt_(opt) {
    DF_CHECK(opt.world >= 1 && opt.rank >= 0 && opt.rank < opt.world,
             "launch.rank={} but launch.world_size={}: the rank must be in 0..{}", opt.rank,
             opt.world, opt.world - 1);
    DF_CHECK(opt.timeout_s > 0, "launch.timeout_s must be positive");
    const auto deadline = deadline_after(opt.timeout_s);
    if (opt.rank != 0) {
        fds_.push_back(connect_with_retry(opt_, deadline, aborted_));
        const Hello h{kHelloMagic, opt.rank, opt.world,
                      static_cast<uint32_t>(opt.agreement.size())};
        send_all(fds_[0], &h, sizeof(h), 0);
        send_all(fds_[0], opt.agreement.data(), opt.agreement.size(), 0);
        uint32_t len = 0;
        recv_all(fds_[0], &len, sizeof(len), 0);
        std::string verdict(len, '\0');
        recv_all(fds_[0], verdict.data(), len, 0);
        DF_CHECK(verdict.empty(), "process {} of {} was refused by process 0: {}", opt.rank,
                 opt.world, verdict);
        return;
    }
    std::optional<TcpListener> own;
    if (!listener) listener = &own.emplace(opt.master_addr, opt.master_port);
    fds_.assign(static_cast<size_t>(opt.world), -1);
    std::string problem;
    int joined = 0;
    while (joined < opt.world - 1) {
        if (!wait_fd(listener->fd(), POLLIN, deadline, aborted_)) {
            std::vector<int> missing;
            for (int r = 1; r < opt.world; ++r)
                if (fds_[static_cast<size_t>(r)] < 0) missing.push_back(r);
            for (int fd : fds_)
                if (fd >= 0) ::close(fd);
            DF_FAIL(
                "process 0 waited {} s for {} of the {} other processes (missing: {}); were they "
                "all started with launch.world_size={} and this launch.master_addr / "
                "launch.master_port? launch.timeout_s sets the limit",
                opt.timeout_s, missing.size(), opt.world - 1, fmt::join(missing, ", "), opt.world);
        }
        check_alive();
        const int fd = ::accept4(listener->fd(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        set_nodelay(fd);
        Hello h{};
        try {
            recv_all(fd, &h, sizeof(h), -1);
        } catch (const Error&) {
            ::close(fd);
            continue;
        }
        if (h.magic != kHelloMagic || h.agreement_len > (64u << 20)) {  // not one of ours
            ::close(fd);
            continue;
        }
        std::string theirs(h.agreement_len, '\0');
        recv_all(fd, theirs.data(), theirs.size(), h.rank);
        if (h.world != opt.world)
            problem = fmt::format(
                "process {} was started with launch.world_size={}, process 0 "
                "with {}",
                h.rank, h.world, opt.world);
        else if (h.rank <= 0 || h.rank >= opt.world || fds_[static_cast<size_t>(h.rank)] >= 0)
            problem = fmt::format("two processes were started with launch.rank={}", h.rank);
        else if (theirs != opt.agreement)
            problem = fmt::format("process {} runs with other settings than process 0: {}", h.rank,
                                  first_difference(opt.agreement, theirs));
        if (h.rank > 0 && h.rank < opt.world && fds_[static_cast<size_t>(h.rank)] < 0) {
            fds_[static_cast<size_t>(h.rank)] = fd;
            ++joined;
        } else {
            ::close(fd);
        }
        if (!problem.empty()) break;
    }
    for (int r = 1; r < opt.world; ++r) {
        const int fd = fds_[static_cast<size_t>(r)];
        if (fd < 0) continue;
        const auto len = static_cast<uint32_t>(problem.size());
        try {
            send_all(fd, &len, sizeof(len), r);
            send_all(fd, problem.data(), problem.size(), r);
        } catch (const Error&) {
        }
    }
    DF_CHECK(problem.empty(), "the processes of this run disagree: {}", problem);
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
