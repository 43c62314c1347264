// Helpers shared by the tests: random tensors, comparisons and temporary directories.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/rng.h"
#include "core/tensor.h"

namespace dflash::test {

// A tensor of N(0, scale^2) values.
HostTensor random_tensor(Shape shape, Rng& rng, float scale = 1.0f);

// max |a - b| / max(1, max |b|); both f32 of equal numel.
double max_rel_diff(const Tensor& a, const Tensor& b);
double max_abs_diff(const Tensor& a, const Tensor& b);

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

// Runs the built `dflash` binary with the arguments (shell-quoted), capturing stdout+stderr.
struct RunResult {
    int exit_code;
    std::string output;
};
RunResult run_dflash(const std::string& args, const std::string& env_prefix = "");

}  // namespace dflash::test
