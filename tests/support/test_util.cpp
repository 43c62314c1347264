// Shared test helpers (see test_util.h).
#include "support/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace dflash::test {

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

double max_rel_diff(const Tensor& a, const Tensor& b) {
    double ref = 1.0;
    for (int64_t i = 0; i < b.numel(); ++i) ref = std::max(ref, std::fabs((double)b.f32()[i]));
    return max_abs_diff(a, b) / ref;
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

}  // namespace dflash::test
