// The rendezvous of a TcpGroup and process 0's listener (see rendezvous.h, tcp_group.h). Tested by
// tests/comm/rendezvous_test.cpp and tests/comm/tcp_group_test.cpp.
#include "comm/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "core/error.h"

namespace dflash {
namespace rendezvous {
namespace {

constexpr int kPollSliceMs = 200;  // how soon a blocked wait notices abort()
// Connections process 0 reads at once; more wait in the listen backlog until one is done, so a
// flood of idle connections delays a real peer by at most launch.hello_timeout_s each round.
constexpr size_t kMaxPending = 64;
constexpr int kMaxLoggedDrops = 8;  // a flood does not flood the log

std::string sys_error(int err) {
    return std::system_category().message(err);
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

bool sockaddr_is_loopback(const sockaddr* a) {
    if (a->sa_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(a);
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (a->sa_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
        return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
    }
    return false;
}

std::string sockaddr_text(const sockaddr_storage& ss) {
    char host[NI_MAXHOST] = "?";
    char port[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), host, sizeof(host), port,
                  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
    return fmt::format("{}:{}", host, port);
}

std::string proof_message(const char* label, const Nonce& challenge, const void* fields,
                          size_t bytes) {
    std::string m(label);
    m.append(reinterpret_cast<const char*>(challenge.data()), challenge.size());
    m.append(static_cast<const char*>(fields), bytes);
    return m;
}

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

Sha256Digest hello_proof(const std::string& secret, const Nonce& challenge, const Hello& h) {
    return hmac_sha256(
        secret, proof_message("dflash rendezvous hello v2", challenge, &h, offsetof(Hello, proof)));
}

Sha256Digest accept_proof(const std::string& secret, const Nonce& challenge, const Hello& h) {
    return hmac_sha256(secret,
                       proof_message("dflash rendezvous accept v2", challenge, &h, sizeof(h)));
}

Nonce fresh_nonce() {
    Nonce n{};
    size_t got = 0;
    while (got < n.size()) {
        const ssize_t k = ::getrandom(n.data() + got, n.size() - got, 0);
        if (k < 0 && errno == EINTR) continue;
        DF_CHECK(k > 0, "cannot read the kernel's random source for a rendezvous nonce: {}",
                 sys_error(errno));
        got += static_cast<size_t>(k);
    }
    return n;
}

bool is_loopback_address(const std::string& addr, int port, bool passive) {
    AddrInfo ai(addr, port, passive);
    for (addrinfo* p = ai.list; p; p = p->ai_next)
        if (!sockaddr_is_loopback(p->ai_addr)) return false;
    return ai.list != nullptr;
}

bool socket_is_loopback(int fd, bool remote) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    auto* a = reinterpret_cast<sockaddr*>(&ss);
    const int rc = remote ? ::getpeername(fd, a, &len) : ::getsockname(fd, a, &len);
    return rc == 0 && sockaddr_is_loopback(a);
}

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

namespace {

// ---- Process 0 -------------------------------------------------------------------------------

// One connection whose hello is being read. Each stage reads exactly its message, so bytes a
// client sent early (a replay sends everything at once) are never taken for a later stage.
struct Pending {
    enum class Stage { open, hello, text };
    int fd = -1;
    std::string from;  // "addr:port", for the log
    Clock::time_point deadline;
    Stage stage = Stage::open;
    std::vector<uint8_t> buf;
    size_t have = 0;
    Nonce challenge{};
    Hello hello{};
};

enum class Step { more, done, drop_not_ours, drop_no_proof, drop_closed };

// Sends a whole small message on a fresh connection without waiting: a client that does not
// read even this much is not a peer.
bool send_now(int fd, const void* data, size_t bytes) {
    const ssize_t k = ::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    return k == static_cast<ssize_t>(bytes);
}

// Reads what has arrived and moves p through its stages.
Step advance(Pending& p, const TcpGroupOptions& opt) {
    while (true) {
        if (p.have < p.buf.size()) {
            const ssize_t k =
                ::recv(p.fd, p.buf.data() + p.have, p.buf.size() - p.have, MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return Step::more;
            if (k <= 0) return Step::drop_closed;
            p.have += static_cast<size_t>(k);
            if (p.have < p.buf.size()) continue;
        }
        switch (p.stage) {
            case Pending::Stage::open: {
                if (std::memcmp(p.buf.data(), kOpen.data(), kOpen.size()) != 0)
                    return Step::drop_not_ours;
                p.challenge = fresh_nonce();
                const Challenge c{kChallengeMagic, p.challenge};
                if (!send_now(p.fd, &c, sizeof(c))) return Step::drop_closed;
                p.stage = Pending::Stage::hello;
                p.buf.assign(sizeof(Hello), 0);
                p.have = 0;
                break;
            }
            case Pending::Stage::hello: {
                std::memcpy(&p.hello, p.buf.data(), sizeof(Hello));
                // Nothing in the hello is acted on before its proof is checked.
                if (p.hello.magic != kHelloMagic ||
                    !same_digest(p.hello.proof, hello_proof(opt.secret, p.challenge, p.hello)))
                    return Step::drop_no_proof;
                if (p.hello.agreement_len > kMaxAgreementBytes) return Step::drop_not_ours;
                const Accept a{kAcceptMagic, accept_proof(opt.secret, p.challenge, p.hello)};
                if (!send_now(p.fd, &a, sizeof(a))) return Step::drop_closed;
                p.stage = Pending::Stage::text;
                p.buf.assign(p.hello.agreement_len, 0);
                p.have = 0;
                break;
            }
            case Pending::Stage::text:
                // The text must be the one whose digest the proof covered.
                if (!same_digest(sha256(std::string_view(reinterpret_cast<char*>(p.buf.data()),
                                                         p.buf.size())),
                                 p.hello.agreement_digest))
                    return Step::drop_no_proof;
                return Step::done;
        }
    }
}

// What process 0 dropped, for the log and for the message when a peer never joins.
struct Drops {
    int not_ours = 0;  // did not open with the protocol's bytes
    int no_proof = 0;  // the hello's proof (or the text's digest) did not check
    int slow = 0;      // past launch.hello_timeout_s
    int closed = 0;    // closed or reset before finishing
    int total() const { return not_ours + no_proof + slow + closed; }
    std::string text() const {
        if (total() == 0) return "";
        return fmt::format(
            "; it dropped {} connection(s) meanwhile: {} without a valid proof of the launch "
            "secret (launch.secret_file differs?), {} slower than launch.hello_timeout_s, {} "
            "not speaking the rendezvous protocol, {} closed early",
            total(), no_proof, slow, not_ours, closed);
    }
};

}  // namespace

std::vector<int> admit_peers(const TcpGroupOptions& opt, const TcpListener& listener,
                             Clock::time_point deadline, const std::atomic<bool>& aborted) {
    std::vector<int> fds(static_cast<size_t>(opt.world), -1);
    std::vector<Pending> pending;
    Drops drops;
    const auto hello_time =
        std::chrono::microseconds(static_cast<int64_t>(opt.hello_timeout_s * 1e6));
    const auto close_all = [&](bool joined_too) {
        for (auto& p : pending) ::close(p.fd);
        pending.clear();
        if (joined_too)
            for (int& fd : fds)
                if (fd >= 0) ::close(std::exchange(fd, -1));
    };
    const auto drop = [&](Pending& p, const char* why, int& counter) {
        ++counter;
        if (drops.total() <= kMaxLoggedDrops)
            opt.log.warn("process 0 dropped a connection from {} at the rendezvous: {}{}", p.from,
                         why,
                         drops.total() == kMaxLoggedDrops ? " (later drops are not logged)" : "");
        ::close(p.fd);
        p.fd = -1;
    };
    std::string problem;
    int joined = 0;
    while (joined < opt.world - 1 && problem.empty()) {
        if (aborted.load()) {
            close_all(true);
            DF_FAIL("the rendezvous of process 0 was aborted");
        }
        const auto now = Clock::now();
        for (auto& p : pending)
            if (now >= p.deadline)
                drop(p, "no complete hello within launch.hello_timeout_s", drops.slow);
        std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
        if (now >= deadline) {
            std::vector<int> missing;
            for (int r = 1; r < opt.world; ++r)
                if (fds[static_cast<size_t>(r)] < 0) missing.push_back(r);
            close_all(true);
            DF_FAIL(
                "process 0 waited {} s for {} of the {} other processes (missing: {}); were they "
                "all started with launch.world_size={}, this launch.master_addr / "
                "launch.master_port and the same launch secret? launch.timeout_s sets the "
                "limit{}",
                opt.timeout_s, missing.size(), opt.world - 1, fmt::join(missing, ", "), opt.world,
                drops.text());
        }
        // Sleep until something arrives, the earliest deadline, or the abort check.
        auto wake = std::min(deadline, now + std::chrono::milliseconds(kPollSliceMs));
        for (const auto& p : pending) wake = std::min(wake, p.deadline);
        std::vector<pollfd> polls;
        const bool accepting = pending.size() < kMaxPending;
        if (accepting) polls.push_back({listener.fd(), POLLIN, 0});
        for (const auto& p : pending) polls.push_back({p.fd, POLLIN, 0});
        const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
        const int rc =
            ::poll(polls.data(), polls.size(), static_cast<int>(std::max<int64_t>(0, wait_ms)));
        if (rc <= 0) continue;  // a timeout or EINTR: the checks above run again
        const size_t first = accepting ? 1 : 0;
        for (size_t i = 0; i < pending.size() && problem.empty(); ++i) {
            if (polls[first + i].revents == 0) continue;
            Pending& p = pending[i];
            switch (advance(p, opt)) {
                case Step::more:
                    break;
                case Step::drop_not_ours:
                    drop(p, "it does not speak the rendezvous protocol", drops.not_ours);
                    break;
                case Step::drop_no_proof:
                    drop(p, "its hello has no valid proof of the launch secret", drops.no_proof);
                    break;
                case Step::drop_closed:
                    drop(p, "it closed the connection mid-hello", drops.closed);
                    break;
                case Step::done: {
                    // Authenticated: a disagreement now is a real error of this run.
                    const Hello& h = p.hello;
                    const std::string theirs(p.buf.begin(), p.buf.end());
                    const bool rank_free =
                        h.rank > 0 && h.rank < opt.world && fds[static_cast<size_t>(h.rank)] < 0;
                    if (h.world != opt.world)
                        problem = fmt::format(
                            "process {} was started with launch.world_size={}, process 0 with {}",
                            h.rank, h.world, opt.world);
                    else if (!rank_free)
                        problem =
                            fmt::format("two processes were started with launch.rank={}", h.rank);
                    else if (theirs != opt.agreement)
                        problem =
                            fmt::format("process {} runs with other settings than process 0: {}",
                                        h.rank, first_difference(opt.agreement, theirs));
                    if (rank_free) {
                        fds[static_cast<size_t>(h.rank)] = p.fd;
                        ++joined;
                    } else {
                        ::close(p.fd);
                    }
                    p.fd = -1;
                    break;
                }
            }
        }
        std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
        if (accepting && (polls[0].revents & POLLIN) && problem.empty()) {
            while (pending.size() < kMaxPending) {
                sockaddr_storage ss{};
                socklen_t len = sizeof(ss);
                const int fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&ss), &len,
                                         SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) break;  // EAGAIN: none left (or an aborted connection)
                set_nodelay(fd);
                Pending p;
                p.fd = fd;
                p.from = sockaddr_text(ss);
                p.deadline = Clock::now() + hello_time;
                p.buf.assign(kOpen.size(), 0);
                pending.push_back(std::move(p));
            }
        }
    }
    // Connections still mid-hello learn nothing: they are closed before any verdict is sent.
    close_all(false);
    for (int r = 1; r < opt.world; ++r) {
        const int fd = fds[static_cast<size_t>(r)];
        if (fd < 0) continue;
        const auto len = static_cast<uint32_t>(problem.size());
        std::string verdict(reinterpret_cast<const char*>(&len), sizeof(len));
        verdict += problem;
        // A peer that reads nothing within the deadline finds out from its own timeout.
        const char* at = verdict.data();
        size_t left = verdict.size();
        while (left > 0 && wait_fd(fd, POLLOUT, deadline, aborted) && !aborted.load()) {
            const ssize_t k = ::send(fd, at, left, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
            if (k <= 0) break;
            at += k;
            left -= static_cast<size_t>(k);
        }
    }
    if (!problem.empty()) {
        close_all(true);
        DF_FAIL("the processes of this run disagree: {}", problem);
    }
    return fds;
}

// ---- The other processes --------------------------------------------------------------------

namespace {

enum class Io { ok, closed, timeout };

Io send_exact(int fd, const void* data, size_t bytes, Clock::time_point deadline,
              const std::atomic<bool>& aborted) {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
        if (!wait_fd(fd, POLLOUT, deadline, aborted)) return Io::timeout;
        DF_CHECK(!aborted.load(), "the rendezvous was aborted");
        const ssize_t k = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (k <= 0) return Io::closed;
        p += k;
        bytes -= static_cast<size_t>(k);
    }
    return Io::ok;
}

Io recv_exact(int fd, void* data, size_t bytes, Clock::time_point deadline,
              const std::atomic<bool>& aborted) {
    auto* p = static_cast<char*>(data);
    while (bytes > 0) {
        if (!wait_fd(fd, POLLIN, deadline, aborted)) return Io::timeout;
        DF_CHECK(!aborted.load(), "the rendezvous was aborted");
        const ssize_t k = ::recv(fd, p, bytes, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (k <= 0) return Io::closed;
        p += k;
        bytes -= static_cast<size_t>(k);
    }
    return Io::ok;
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

int join_process_zero(const TcpGroupOptions& opt, Clock::time_point deadline,
                      const std::atomic<bool>& aborted) {
    const int fd = connect_with_retry(opt, deadline, aborted);
    const std::string where = fmt::format("{}:{}", opt.master_addr, opt.master_port);
    try {
        const auto check_io = [&](Io io, const char* waiting_for) {
            DF_CHECK(io != Io::timeout,
                     "process {} of {} waited {} s for {} from process 0 at {} "
                     "(launch.timeout_s sets the limit)",
                     opt.rank, opt.world, opt.timeout_s, waiting_for, where);
            DF_CHECK(io != Io::closed,
                     "process {} of {}: process 0 at {} closed the connection before {}; it "
                     "failed, or it is not a dflash process 0 of this version",
                     opt.rank, opt.world, where, waiting_for);
        };
        check_io(send_exact(fd, kOpen.data(), kOpen.size(), deadline, aborted), "the open");
        Challenge c{};
        check_io(recv_exact(fd, &c, sizeof(c), deadline, aborted), "its challenge");
        DF_CHECK(c.magic == kChallengeMagic,
                 "process {} of {}: what listens at {} is not a dflash rendezvous", opt.rank,
                 opt.world, where);
        Hello h{};
        h.magic = kHelloMagic;
        h.rank = opt.rank;
        h.world = opt.world;
        h.agreement_len = static_cast<uint32_t>(opt.agreement.size());
        h.agreement_digest = sha256(opt.agreement);
        h.peer_nonce = fresh_nonce();
        h.proof = hello_proof(opt.secret, c.nonce, h);
        check_io(send_exact(fd, &h, sizeof(h), deadline, aborted), "the hello");
        Accept a{};
        const Io got = recv_exact(fd, &a, sizeof(a), deadline, aborted);
        DF_CHECK(got != Io::closed,
                 "process {} of {} was dropped by process 0 at {} without a word: process 0 "
                 "found no valid proof of the launch secret in its hello (every process must "
                 "name the same secret in launch.secret_file, or none on loopback), or the "
                 "hello took longer than launch.hello_timeout_s ({} s)",
                 opt.rank, opt.world, where, opt.hello_timeout_s);
        check_io(got, "its acceptance");
        // Only our own run's process 0 can answer this nonce: a process squatting on the port
        // gets neither the settings nor, later, the gradients.
        DF_CHECK(
            a.magic == kAcceptMagic && same_digest(a.proof, accept_proof(opt.secret, c.nonce, h)),
            "process {} of {}: the process at {} did not prove the launch secret, so it is "
            "not this run's process 0 (another run on launch.master_port, or another "
            "launch.secret_file)",
            opt.rank, opt.world, where);
        check_io(send_exact(fd, opt.agreement.data(), opt.agreement.size(), deadline, aborted),
                 "the settings");
        uint32_t len = 0;
        check_io(recv_exact(fd, &len, sizeof(len), deadline, aborted), "the verdict");
        DF_CHECK(len <= kMaxAgreementBytes, "process {} of {}: a malformed verdict from {}",
                 opt.rank, opt.world, where);
        std::string verdict(len, '\0');
        check_io(recv_exact(fd, verdict.data(), len, deadline, aborted), "the verdict");
        DF_CHECK(verdict.empty(), "process {} of {} was refused by process 0: {}", opt.rank,
                 opt.world, verdict);
        return fd;
    } catch (...) {
        ::close(fd);
        throw;
    }
}

}  // namespace rendezvous

// ---- Process 0's listener -------------------------------------------------------------------

TcpListener::TcpListener(const std::string& addr, int port) {
    rendezvous::AddrInfo ai(addr, port, true);
    int last_err = 0;
    for (addrinfo* p = ai.list; p; p = p->ai_next) {
        // Non-blocking: the rendezvous accepts until the backlog is empty.
        const int fd =
            ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol);
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
             addr, port, rendezvous::sys_error(last_err));
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

TcpListener::~TcpListener() {
    if (fd_ >= 0) ::close(fd_);
}

}  // namespace dflash
