// The environment layer of the settings. This directory is the only place that reads the process
// environment (docs/design.md "Settings"); everything else receives the Settings snapshot. Every
// variable that starts with DFLASH_ must be a setting's mirror (strict: a typo is an error, not a
// no-op). Tested by tests/config/environment_test.cpp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/registry.h"
#include "config/settings.h"

namespace dflash::config {

class Environment {
  public:
    Environment() = default;
    explicit Environment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}
    // A copy of the process environment, taken once at start-up.
    static Environment from_process();

    const std::map<std::string, std::string>& vars() const { return vars_; }

  private:
    std::map<std::string, std::string> vars_;
};

inline constexpr const char* kEnvPrefix = "DFLASH_";

// The DFLASH_* variables as checked assignments with source "env:<NAME>", and, for settings
// declared with also_from_env whose mirror is unset, the first of those variables present.
std::vector<Assignment> environment_assignments(const Registry& registry, const Environment& env);

}  // namespace dflash::config
