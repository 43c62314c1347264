// Helpers shared by the tests: random tensors, comparisons, temporary directories, files, error
// messages and the built binary. Used by most tests/<group>/*_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace dflash::test {

// The CPU kernel families this machine can run (backend/cpu/isa.h), best first: the kernel tests
// run every one.
std::vector<cpu::CpuIsa> supported_isas();

// A tensor of N(0, scale^2) values.
HostTensor random_tensor(Shape shape, Rng& rng, float scale = 1.0f);
// A 1-D f32 / i32 tensor holding `v` (RoPE frequencies, anchors, lengths for CPU ops).
HostTensor vec_tensor(const std::vector<float>& v);
HostTensor ids_tensor(const std::vector<int32_t>& v);

// max |a - b| / max(1, max |b|); both f32 of equal numel.
double max_rel_diff(const Tensor& a, const Tensor& b);
double max_abs_diff(const Tensor& a, const Tensor& b);
// The same against a double-precision reference: max |got - ref| / max(1, max |ref|); NaN gives
// infinity. `got` holds ref.size() values.
double max_rel_diff(const float* got, const std::vector<double>& ref);
// The f32 values of `t`, widened.
std::vector<double> to_double(const Tensor& t);

// A fresh, empty directory under the system temp dir, removed when the object dies.
class TempDir {
  public:
    explicit TempDir(const std::string& tag = "dflash");
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  private:
    std::filesystem::path path_;
};

// Whole-file text I/O (binary mode, so "\r\n" stays as written); write_file creates missing
// parent directories.
void write_file(const std::filesystem::path& path, const std::string& text);
std::string read_file(const std::filesystem::path& path);

// Whether `text` contains `needle`.
bool has(const std::string& text, const std::string& needle);

// The message of the dflash::Error that `fn` throws, "" when it throws none.
std::string error_of(const std::function<void()>& fn);

// Runs the built `dflash` binary with `args` as one shell word list (the caller quotes what needs
// quoting), capturing stdout+stderr.
struct RunResult {
    int exit_code;
    std::string output;
};
RunResult run_dflash(const std::string& args, const std::string& env_prefix = "");

// The built `dflash` binary started in the background (no shell), for tests that act while it
// runs: send it a signal once it has printed something, start a second writer next to it. Output
// (stdout and stderr) is read through a pipe; with `stdout_path`, stdout goes to that file
// instead (e.g. /dev/full). The destructor kills and reaps a process still running.
class DflashProcess {
  public:
    explicit DflashProcess(const std::vector<std::string>& args,
                           const std::string& stdout_path = "");
    ~DflashProcess();
    DflashProcess(const DflashProcess&) = delete;
    DflashProcess& operator=(const DflashProcess&) = delete;

    int pid() const { return pid_; }
    // Reads output until it contains `needle`; false when the process closes its output first or
    // `timeout_s` passes (a deadline for a hung test, not a synchronisation).
    bool wait_for_output(const std::string& needle, double timeout_s = 300);
    void send_signal(int sig);
    // Reads the rest of the output and reaps the process. exit_code is the exit status, or 128 +
    // the signal that killed it.
    RunResult finish();
    const std::string& output() const { return output_; }

  private:
    bool read_some(double timeout_s);  // false at end of output or on timeout

    int pid_ = -1;
    int fd_ = -1;  // read end of the output pipe
    std::string output_;
};

}  // namespace dflash::test
