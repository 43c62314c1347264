// The rendezvous of a TcpGroup (tcp_group.h): how process 0 admits the other processes of its run,
// and nobody else, on a port that anyone who can reach it may connect to.
//
// Each connection is a challenge-response keyed by the launch secret (launch.secret_file):
//   peer -> 0  Open       8 bytes that name the protocol; anything else is dropped at once
//   0 -> peer  Challenge  a fresh random nonce for this connection
//   peer -> 0  Hello      rank, world, the digest of its settings agreement, its own nonce and
//                         HMAC-SHA256(secret, label | challenge nonce | the fields above)
//   0 -> peer  Accept     HMAC-SHA256(secret, label | both nonces | the hello): process 0's proof,
//                         so that a peer sends its settings only to its own run's process 0
//   peer -> 0  the agreement text (its digest was in the authenticated hello)
//   0 -> peer  Verdict    after every process has joined: empty, or why the run cannot start
// Process 0 reads all pending connections at once (poll), each with its own deadline from accept
// (launch.hello_timeout_s). A connection that is silent, slow, not speaking the protocol or
// without a valid proof is closed having received nothing but, at most, the challenge: it can
// neither stall nor end the run, and learns nothing of it. A replayed hello fails because the
// nonce it answered is not the one this connection was given. Only an authenticated peer that
// disagrees (world size, duplicate rank, settings) ends the run, as a real error on both sides.
//
// This authenticates the processes at start-up; it does not encrypt or sign the collectives that
// follow, so a run across nodes still belongs on a network only the job's nodes share.
// Tested by tests/comm/rendezvous_test.cpp (rogue clients) and tests/comm/tcp_group_test.cpp.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/sha256.h"
#include "comm/tcp_group.h"

namespace dflash::rendezvous {

using Clock = std::chrono::steady_clock;
using Nonce = std::array<uint8_t, 32>;

// The wire format (both ends run this code, so host byte order; tests build rogue messages
// from it).
constexpr std::array<char, 8> kOpen = {'d', 'f', 'l', 'r', 'd', 'v', '0', '2'};
constexpr uint32_t kChallengeMagic = 0x64666332;  // "dfc2"
constexpr uint32_t kHelloMagic = 0x64666832;      // "dfh2"
constexpr uint32_t kAcceptMagic = 0x64666132;     // "dfa2"
// An authenticated peer's agreement text may be at most this long (settings text is kilobytes).
constexpr uint32_t kMaxAgreementBytes = 16u << 20;

struct Challenge {
    uint32_t magic;
    Nonce nonce;
};
struct Hello {
    uint32_t magic;
    int32_t rank;
    int32_t world;
    uint32_t agreement_len;
    Sha256Digest agreement_digest;
    Nonce peer_nonce;
    Sha256Digest proof;  // hello_proof(); the fields above are what it covers
};
struct Accept {
    uint32_t magic;
    Sha256Digest proof;  // accept_proof()
};
static_assert(sizeof(Challenge) == 36 && sizeof(Hello) == 112 && sizeof(Accept) == 36,
              "the wire structs have no padding");

// The peer's proof: the key is the secret (empty when none is configured on loopback).
Sha256Digest hello_proof(const std::string& secret, const Nonce& challenge, const Hello& h);
// Process 0's proof, over both nonces and the whole hello.
Sha256Digest accept_proof(const std::string& secret, const Nonce& challenge, const Hello& h);
// 32 bytes from the kernel's random source.
Nonce fresh_nonce();

// True when every address `addr` resolves to (for listening when `passive`) is a loopback one,
// so that only processes of this machine can connect.
bool is_loopback_address(const std::string& addr, int port, bool passive);
// True when the socket's own (local) or remote address is loopback.
bool socket_is_loopback(int fd, bool remote);

// Waits until fd is ready for `events` or the deadline passes; wakes every 200 ms to notice an
// abort. Returns false on timeout (true also when aborted: the caller's next check throws).
bool wait_fd(int fd, short events, Clock::time_point deadline, const std::atomic<bool>& aborted);

// Process 0: admits opt.world - 1 peers through `listener` until `deadline`; returns each rank's
// socket (index 0 unused), the verdict sent. Throws naming the missing ranks, or the
// disagreement of an authenticated peer.
std::vector<int> admit_peers(const TcpGroupOptions& opt, const TcpListener& listener,
                             Clock::time_point deadline, const std::atomic<bool>& aborted);
// Any other process: connects (retrying until `deadline`), proves the secret, checks process
// 0's proof, sends its agreement and reads the verdict. Returns the socket to process 0.
int join_process_zero(const TcpGroupOptions& opt, Clock::time_point deadline,
                      const std::atomic<bool>& aborted);

}  // namespace dflash::rendezvous
