// The rendezvous against rogue clients (src/comm/rendezvous.h): a real run of two processes
// (threads, each with its own TcpGroup, on 127.0.0.1 only) with a launch secret, and a rogue
// connection that reaches process 0 first: one without the secret, one with a wrong secret, one
// replaying the bytes of a real peer's hello captured from an earlier run, an idle one, one
// sending garbage, one sending the old 21-byte hello of another world, and one with a well-formed
// disagreeing hello it cannot prove. In every case both processes join promptly (the rogue never
// waits out anything but its own short deadline), a collective then sums over exactly the two real
// processes, and the rogue receives nothing but the challenge nonce (or nothing at all) before its
// connection is closed: no acceptance, no verdict, no settings. An authenticated disagreement
// still fails the run on both sides, and two real processes with different secrets are told why.
#include "comm/rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <thread>

#include "comm/rank_threads.h"
#include "comm/tcp_group.h"
#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kSecret = "the launch secret of this test run";
constexpr const char* kAgreement = "train.lr = 0.001\n";
// Short, so that a rogue held for its whole deadline would show in the timings below; the run
// deadline is long, so that a rogue that stalled the rendezvous (the old behaviour) shows too.
constexpr double kHelloTimeoutS = 2.0;
constexpr double kRunTimeoutS = 12.0;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

TcpGroupOptions options(int rank, int port, const std::string& secret = kSecret) {
    TcpGroupOptions o;
    o.rank = rank;
    o.world = 2;
    o.master_addr = "127.0.0.1";
    o.master_port = port;
    o.timeout_s = kRunTimeoutS;
    o.hello_timeout_s = kHelloTimeoutS;
    o.agreement = kAgreement;
    o.secret = secret;
    return o;
}

// A client of the rendezvous played by the test, on 127.0.0.1.
class Rogue {
  public:
    explicit Rogue(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    }
    ~Rogue() { ::close(fd_); }
    Rogue(const Rogue&) = delete;
    Rogue& operator=(const Rogue&) = delete;

    int fd() const { return fd_; }
    void send(const void* data, size_t bytes) {
        // MSG_NOSIGNAL: process 0 may already have closed on us.
        ::send(fd_, data, bytes, MSG_NOSIGNAL);
    }
    void send(const std::string& s) { send(s.data(), s.size()); }

    struct Heard {
        std::string bytes;
        bool closed = false;  // EOF or reset, rather than the limit
        double after_s = 0;   // when it was closed, from the start of listen()
    };
    // Everything that arrives until the connection is closed, or `limit_s` passes.
    Heard listen(double limit_s, size_t at_most = 1 << 20) {
        Heard h;
        const auto t0 = Clock::now();
        while (seconds_since(t0) < limit_s && h.bytes.size() < at_most) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            char buf[4096];
            const size_t want = std::min(sizeof(buf), at_most - h.bytes.size());
            const ssize_t k = ::recv(fd_, buf, want, 0);
            if (k <= 0) {  // 0: closed; < 0: reset (process 0 closed with our bytes unread)
                h.closed = true;
                break;
            }
            h.bytes.append(buf, static_cast<size_t>(k));
        }
        h.after_s = seconds_since(t0);
        return h;
    }
    // Opens the protocol and reads the challenge, as a real peer does.
    rendezvous::Challenge open() {
        send(rendezvous::kOpen.data(), rendezvous::kOpen.size());
        return read_challenge();
    }
    rendezvous::Challenge read_challenge() {
        const Heard h = listen(kRunTimeoutS, sizeof(rendezvous::Challenge));
        rendezvous::Challenge c{};
        EXPECT_EQ(h.bytes.size(), sizeof(c));
        if (h.bytes.size() == sizeof(c)) std::memcpy(&c, h.bytes.data(), sizeof(c));
        EXPECT_EQ(c.magic, rendezvous::kChallengeMagic);
        return c;
    }

  private:
    int fd_ = -1;
};

// A well-formed hello answering `c`, proved with `key`.
rendezvous::Hello hello_for(const rendezvous::Challenge& c, const std::string& key, int rank,
                            const std::string& agreement) {
    rendezvous::Hello h{};
    h.magic = rendezvous::kHelloMagic;
    h.rank = rank;
    h.world = 2;
    h.agreement_len = static_cast<uint32_t>(agreement.size());
    h.agreement_digest = sha256(agreement);
    h.peer_nonce = rendezvous::fresh_nonce();
    h.proof = rendezvous::hello_proof(key, c.nonce, h);
    return h;
}

struct Outcome {
    std::vector<std::string> errors;
    std::vector<double> join_s{0, 0};  // how long each process took to join
    std::vector<float> sums{0, 0};     // 1 + 2 when exactly the two real processes took part
    Rogue::Heard heard;                // what the rogue received after its last message
    std::vector<std::string> log0;     // process 0's warnings
};

// A two-process run with a rogue that connects before either process starts and has done `act`
// (on its own thread, talking to process 0) before process 1 starts, so that process 0 meets the
// rogue's hello first, as the tester's replayed hello was met before the real process 1.
Outcome run_with_rogue(const std::function<void(Rogue&, Outcome&)>& act) {
    TcpListener listener("127.0.0.1", 0);
    Rogue rogue(listener.port());
    Outcome out;
    std::promise<void> acted;
    auto sink = LogSink::capturing(LogLevel::warn);
    std::thread rogue_thread([&] {
        act(rogue, out);
        acted.set_value();
        out.heard = rogue.listen(3 * kHelloTimeoutS);
    });
    const auto t0 = Clock::now();
    out.errors = test::run_ranks(2, [&](int r) {
        if (r == 1) acted.get_future().wait_for(std::chrono::seconds(5));
        TcpGroupOptions o = options(r, listener.port());
        if (r == 0) o.log = Logger(sink, "process 0");
        TcpGroup g(o, r == 0 ? &listener : nullptr);
        out.join_s[static_cast<size_t>(r)] = seconds_since(t0);
        float x = static_cast<float>(r + 1);
        g.all_reduce_sum(&x, 1);
        out.sums[static_cast<size_t>(r)] = x;
    });
    rogue_thread.join();
    out.log0 = sink->captured();
    return out;
}

// The run went ahead with the two real processes, without waiting on the rogue, and the rogue
// was closed having heard nothing (beyond the challenge it was sent before it had to prove
// anything). `dropped_because`: what process 0 logged on dropping it ("" when the rendezvous
// ended first and closed it, as with an idle connection).
void expect_run_unharmed(const Outcome& out, const std::string& dropped_because) {
    EXPECT_EQ(out.errors, (std::vector<std::string>{"", ""}));
    EXPECT_EQ(out.sums, (std::vector<float>{3, 3}));
    for (double s : out.join_s) EXPECT_LT(s, kHelloTimeoutS) << "the rogue held up the run";
    EXPECT_EQ(out.heard.bytes.size(), 0u) << "the rogue was sent something after its hello";
    EXPECT_TRUE(out.heard.closed) << "the rogue's connection was left open";
    EXPECT_LT(out.heard.after_s, 1.5 * kHelloTimeoutS);
    if (dropped_because.empty()) {
        EXPECT_EQ(out.log0, std::vector<std::string>{});
    } else {
        ASSERT_EQ(out.log0.size(), 1u);
        EXPECT_TRUE(test::has(out.log0[0], dropped_because)) << out.log0[0];
    }
}

constexpr const char* kNoProof = "its hello has no valid proof of the launch secret";
constexpr const char* kNotOurs = "it does not speak the rendezvous protocol";

TEST(RendezvousRogue, AHelloWithoutTheSecretIsDroppedUnanswered) {
    const Outcome out = run_with_rogue([](Rogue& rogue, Outcome& o) {
        const auto c = rogue.open();
        const auto h = hello_for(c, "", 1, kAgreement);  // the key a run without a secret uses
        rogue.send(&h, sizeof(h));
        rogue.send(kAgreement);
    });
    expect_run_unharmed(out, kNoProof);
}

TEST(RendezvousRogue, AHelloWithAWrongSecretIsDroppedUnanswered) {
    const Outcome out = run_with_rogue([](Rogue& rogue, Outcome&) {
        const auto c = rogue.open();
        const auto h = hello_for(c, "the launch secret of this test rum", 1, kAgreement);
        rogue.send(&h, sizeof(h));
        rogue.send(kAgreement);
    });
    expect_run_unharmed(out, kNoProof);
}

// Relays one connection from its own port to `target`, keeping what the client sent.
class RecordingProxy {
  public:
    explicit RecordingProxy(int target) : listener_("127.0.0.1", 0) {
        thread_ = std::thread([this, target] { relay(target); });
    }
    ~RecordingProxy() {
        if (thread_.joinable()) thread_.join();
    }
    int port() const { return listener_.port(); }
    // Once the relayed connection has closed.
    std::string client_bytes() {
        thread_.join();
        return from_client_;
    }

  private:
    void relay(int target) {
        const auto t0 = Clock::now();
        int client = -1;
        while (client < 0 && seconds_since(t0) < kRunTimeoutS) {
            pollfd p{listener_.fd(), POLLIN, 0};
            if (::poll(&p, 1, 50) > 0) client = ::accept4(listener_.fd(), nullptr, nullptr, 0);
        }
        if (client < 0) return;
        Rogue server(target);  // a plain client socket to process 0
        const int server_fd = server.fd();
        while (seconds_since(t0) < kRunTimeoutS) {
            pollfd p[2] = {{client, POLLIN, 0}, {server_fd, POLLIN, 0}};
            if (::poll(p, 2, 50) <= 0) continue;
            char buf[4096];
            if (p[0].revents) {
                const ssize_t k = ::recv(client, buf, sizeof(buf), 0);
                if (k <= 0) break;
                from_client_.append(buf, static_cast<size_t>(k));
                ::send(server_fd, buf, static_cast<size_t>(k), MSG_NOSIGNAL);
            }
            if (p[1].revents) {
                const ssize_t k = ::recv(server_fd, buf, sizeof(buf), 0);
                if (k <= 0) break;
                ::send(client, buf, static_cast<size_t>(k), MSG_NOSIGNAL);
            }
        }
        ::close(client);
    }
    TcpListener listener_;
    std::thread thread_;
    std::string from_client_;
};

TEST(RendezvousRogue, AReplayedHelloOfARealPeerIsDroppedUnanswered) {
    // An earlier run, process 1 going through a proxy that keeps its bytes.
    std::string captured;
    {
        TcpListener listener("127.0.0.1", 0);
        RecordingProxy proxy(listener.port());
        const auto errors = test::run_ranks(2, [&](int r) {
            TcpGroup g(options(r, r == 0 ? listener.port() : proxy.port()),
                       r == 0 ? &listener : nullptr);
        });
        ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
        captured = proxy.client_bytes();
    }
    // Its open, its proved hello and its settings: a hello process 0 once accepted.
    ASSERT_EQ(captured.size(),
              rendezvous::kOpen.size() + sizeof(rendezvous::Hello) + std::strlen(kAgreement));
    const Outcome out = run_with_rogue([&](Rogue& rogue, Outcome&) {
        // The same bytes, the challenge read in between, as a real peer would.
        rogue.send(captured.substr(0, rendezvous::kOpen.size()));
        rogue.read_challenge();  // a fresh one; the captured hello answered another
        rogue.send(captured.substr(rendezvous::kOpen.size()));
    });
    expect_run_unharmed(out, kNoProof);
}

TEST(RendezvousRogue, AnIdleConnectionNeitherStallsTheRunNorHearsAnything) {
    const Outcome out = run_with_rogue([](Rogue&, Outcome&) {});
    expect_run_unharmed(out, "");
}

TEST(RendezvousRogue, GarbageIsDroppedUnanswered) {
    // A few bytes and a held connection (a reader of fixed-size hellos would wait for the rest),
    // then a stream of junk.
    const Outcome few = run_with_rogue([](Rogue& rogue, Outcome&) { rogue.send("GET /\r"); });
    expect_run_unharmed(few, "");
    const Outcome many = run_with_rogue([](Rogue& rogue, Outcome&) {
        std::string junk;
        for (int i = 0; i < 5000; ++i) junk += static_cast<char>((i * 131) % 251);
        rogue.send(junk);
    });
    expect_run_unharmed(many, kNotOurs);
}

TEST(RendezvousRogue, TheOld21ByteDisagreementNoLongerEndsTheRun) {
    // The hello of the first protocol: magic, rank 1, world 2, 5 bytes of other settings. It
    // used to end the run and be answered with process 0's first differing settings line.
    const Outcome out = run_with_rogue([](Rogue& rogue, Outcome&) {
        const uint32_t magic = 0x64666c31;
        const int32_t rank = 1, world = 2;
        const uint32_t len = 5;
        std::string bytes;
        bytes.append(reinterpret_cast<const char*>(&magic), 4);
        bytes.append(reinterpret_cast<const char*>(&rank), 4);
        bytes.append(reinterpret_cast<const char*>(&world), 4);
        bytes.append(reinterpret_cast<const char*>(&len), 4);
        bytes += "x = 1";
        ASSERT_EQ(bytes.size(), 21u);
        rogue.send(bytes);
    });
    expect_run_unharmed(out, kNotOurs);
}

TEST(RendezvousRogue, AnUnprovedDisagreementNeitherEndsTheRunNorHearsTheSettings) {
    // A well-formed hello of process 1 with other settings, and of another world size, neither
    // proved: before the fix either ended the run.
    for (const int world : {2, 3}) {
        const Outcome out = run_with_rogue([&](Rogue& rogue, Outcome&) {
            const auto c = rogue.open();
            auto h = hello_for(c, "", 1, "train.lr = 0.5\n");
            h.world = world;
            h.proof = rendezvous::hello_proof("", c.nonce, h);
            rogue.send(&h, sizeof(h));
            rogue.send("train.lr = 0.5\n");
        });
        expect_run_unharmed(out, kNoProof);
    }
}

TEST(RendezvousRogue, ADroppedIdleConnectionIsClosedAtItsOwnDeadline) {
    // Process 1 comes late; the idle connection is closed when its hello deadline passes, not
    // when the run's does, and the late process still joins.
    TcpListener listener("127.0.0.1", 0);
    Rogue rogue(listener.port());
    Rogue::Heard heard;
    std::thread rogue_thread([&] { heard = rogue.listen(kRunTimeoutS); });
    const auto errors = test::run_ranks(2, [&](int r) {
        if (r == 1)
            std::this_thread::sleep_for(
                std::chrono::milliseconds(static_cast<int>(kHelloTimeoutS * 1500)));
        TcpGroup g(options(r, listener.port()), r == 0 ? &listener : nullptr);
    });
    rogue_thread.join();
    EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
    EXPECT_TRUE(heard.closed);
    EXPECT_EQ(heard.bytes, "");
    EXPECT_GT(heard.after_s, 0.8 * kHelloTimeoutS);
    EXPECT_LT(heard.after_s, 1.4 * kHelloTimeoutS);
}

TEST(Rendezvous, AnAuthenticatedDisagreementStillFailsTheRunOnBothSides) {
    TcpListener listener("127.0.0.1", 0);
    const auto errors = test::run_ranks(2, [&](int r) {
        TcpGroupOptions o = options(r, listener.port());
        if (r == 1) o.agreement = "train.lr = 0.002\n";
        TcpGroup g(o, r == 0 ? &listener : nullptr);
    });
    for (const auto& e : errors) {
        EXPECT_TRUE(test::has(e, "process 1 runs with other settings than process 0")) << e;
        EXPECT_TRUE(test::has(e, "process 0 has `train.lr = 0.001`, it has `train.lr = 0.002`"))
            << e;
    }
}

TEST(Rendezvous, ProcessesWithDifferentSecretsAreToldWhy) {
    TcpListener listener("127.0.0.1", 0);
    const auto errors = test::run_ranks(2, [&](int r) {
        TcpGroupOptions o = options(r, listener.port(), r == 0 ? kSecret : "another secret!!");
        o.timeout_s = 1.0;
        TcpGroup g(o, r == 0 ? &listener : nullptr);
    });
    EXPECT_TRUE(test::has(errors[0], "(missing: 1)")) << errors[0];
    EXPECT_TRUE(test::has(errors[0], "1 without a valid proof of the launch secret")) << errors[0];
    EXPECT_TRUE(test::has(errors[1], "was dropped by process 0 at 127.0.0.1")) << errors[1];
    EXPECT_TRUE(test::has(errors[1], "launch.secret_file")) << errors[1];
}

TEST(Rendezvous, AProcessZeroWithoutTheSecretIsNotSentTheSettings) {
    // Something else listens on the port and answers like process 0 without knowing the
    // secret: process 1 refuses it before sending its settings.
    TcpListener listener("127.0.0.1", 0);
    std::string heard_by_squatter;
    std::thread squatter([&] {
        const auto t0 = Clock::now();
        int fd = -1;
        while (fd < 0 && seconds_since(t0) < kRunTimeoutS) {
            pollfd p{listener.fd(), POLLIN, 0};
            if (::poll(&p, 1, 50) > 0) fd = ::accept4(listener.fd(), nullptr, nullptr, 0);
        }
        ASSERT_GE(fd, 0);
        rendezvous::Challenge c{rendezvous::kChallengeMagic, rendezvous::fresh_nonce()};
        char open[8];
        ASSERT_EQ(::recv(fd, open, sizeof(open), MSG_WAITALL), 8);
        ::send(fd, &c, sizeof(c), MSG_NOSIGNAL);
        rendezvous::Hello h{};
        ASSERT_EQ(::recv(fd, &h, sizeof(h), MSG_WAITALL), static_cast<ssize_t>(sizeof(h)));
        const rendezvous::Accept a{rendezvous::kAcceptMagic,
                                   rendezvous::accept_proof("a guess", c.nonce, h)};
        ::send(fd, &a, sizeof(a), MSG_NOSIGNAL);
        char buf[256];
        ssize_t k;
        while ((k = ::recv(fd, buf, sizeof(buf), 0)) > 0) heard_by_squatter.append(buf, k);
        ::close(fd);
    });
    const std::string e = test::error_of([&] { TcpGroup g(options(1, listener.port())); });
    squatter.join();
    EXPECT_TRUE(test::has(e, "did not prove the launch secret")) << e;
    EXPECT_EQ(heard_by_squatter, "");
}

TEST(Rendezvous, NoSecretIsRefusedOffLoopbackAndWarnedOnIt) {
    // Both checks come before any socket is bound or connected.
    TcpGroupOptions zero = options(0, 29999, "");
    zero.master_addr = "0.0.0.0";
    std::string e = test::error_of([&] { TcpGroup g(zero); });
    EXPECT_TRUE(test::has(e, "no launch secret")) << e;
    EXPECT_TRUE(test::has(e, "launch.secret_file")) << e;
    TcpGroupOptions one = options(1, 29999, "");
    one.master_addr = "192.0.2.1";  // a documentation address, never routed
    e = test::error_of([&] { TcpGroup g(one); });
    EXPECT_TRUE(test::has(e, "is not on a loopback address")) << e;

    auto sink = LogSink::capturing(LogLevel::warn);
    TcpListener listener("127.0.0.1", 0);
    const auto errors = test::run_ranks(2, [&](int r) {
        TcpGroupOptions o = options(r, listener.port(), "");
        o.log = Logger(sink, fmt::format("process {}", r));
        TcpGroup g(o, r == 0 ? &listener : nullptr);
    });
    EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
    const auto lines = sink->captured();
    EXPECT_EQ(lines.size(), 2u);
    for (const auto& l : lines) EXPECT_TRUE(test::has(l, "no launch secret")) << l;
}

}  // namespace
}  // namespace dflash
