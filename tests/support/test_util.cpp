// Shared test helpers (see test_util.h).
#include "support/test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dflash::test {

std::vector<cpu::CpuIsa> supported_isas() {
    std::vector<cpu::CpuIsa> v;
    for (cpu::CpuIsa isa : {cpu::CpuIsa::avx512, cpu::CpuIsa::avx2, cpu::CpuIsa::portable})
        if (cpu::isa_supported(isa)) v.push_back(isa);
    return v;
}

HostTensor random_tensor(Shape shape, Rng& rng, float scale) {
    HostTensor t(shape, DType::f32);
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal() * scale;
    return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.numel(), b.numel());
    double m = 0;
    for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
        const double d = std::fabs(static_cast<double>(a.f32()[i]) - b.f32()[i]);
        if (std::isnan(d)) return INFINITY;
        m = std::max(m, d);
    }
    return m;
}

HostTensor vec_tensor(const std::vector<float>& v) {
    return HostTensor::from_f32({static_cast<int64_t>(v.size())}, v);
}

HostTensor ids_tensor(const std::vector<int32_t>& v) {
    return HostTensor::from_i32({static_cast<int64_t>(v.size())}, v);
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
    double ref = 1.0;
    for (int64_t i = 0; i < b.numel(); ++i) ref = std::max(ref, std::fabs((double)b.f32()[i]));
    return max_abs_diff(a, b) / ref;
}

double max_rel_diff(const float* got, const std::vector<double>& ref) {
    double scale = 1.0, err = 0.0;
    for (double x : ref) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < ref.size(); ++i) {
        const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
        if (std::isnan(e)) return INFINITY;
        err = std::max(err, e);
    }
    return err / scale;
}

std::vector<double> to_double(const Tensor& t) {
    return std::vector<double>(t.f32(), t.f32() + t.numel());
}

void write_file(const std::filesystem::path& path, const std::string& text) {
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << "cannot write " << path;
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot read " << path;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool has(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TempDir::TempDir(const std::string& tag) {
    const auto base = std::filesystem::temp_directory_path();
    for (int i = 0;; ++i) {
        auto p = base / (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(i));
        if (std::filesystem::create_directory(p)) {
            path_ = p;
            break;
        }
    }
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

RunResult run_dflash(const std::string& args, const std::string& env_prefix) {
    const std::string cmd = env_prefix + " " + DFLASH_BINARY + " " + args + " 2>&1";
    RunResult r{-1, ""};
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (!pipe) return r;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
    const int status = ::pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

DflashProcess::DflashProcess(const std::vector<std::string>& args, const std::string& stdout_path) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (stdout_path.empty()) {
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    } else {
        posix_spawn_file_actions_addopen(&fa, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                         0644);
    }
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    std::vector<std::string> argv_s = {DFLASH_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The child starts with default signal handling and nothing blocked, as from a shell.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, DFLASH_BINARY, &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(fds[1]);
    if (rc != 0) {
        ::close(fds[0]);
        throw Error(std::string("posix_spawn failed: ") + std::strerror(rc));
    }
    pid_ = pid;
    fd_ = fds[0];
}

DflashProcess::~DflashProcess() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) ::close(fd_);
}

bool DflashProcess::read_some(double timeout_s) {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    std::array<char, 4096> buf;
    const ssize_t n = ::read(fd_, buf.data(), buf.size());
    if (n <= 0) {
        ::close(fd_);
        fd_ = -1;
        return false;
    }
    output_.append(buf.data(), static_cast<size_t>(n));
    return true;
}

bool DflashProcess::wait_for_output(const std::string& needle, double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (output_.find(needle) == std::string::npos) {
        const double left =
            std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0 || !read_some(left)) return output_.find(needle) != std::string::npos;
    }
    return true;
}

void DflashProcess::send_signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
}

RunResult DflashProcess::finish() {
    while (read_some(600)) {
    }
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                       : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1);
    return {code, output_};
}

}  // namespace dflash::test
