// Shared test helpers (see test_util.h).
#include "support/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

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

}  // namespace dflash::test
