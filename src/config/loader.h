// Builds the settings snapshot a command receives: defaults, then each --config TOML file, then the
// DFLASH_* environment, then command-line flags (later layers win; every value keeps its source).
// Tested by tests/config/loader_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/environment.h"
#include "config/registry.h"
#include "config/settings.h"

namespace dflash::config {

struct Loaded {
    Settings settings;
    std::vector<std::string> args;  // the command's own arguments (settings flags removed)
};

// `args` are the arguments after the command name.
Loaded load_settings(std::shared_ptr<const Registry> registry, const std::vector<std::string>& args,
                     const Environment& env);

}  // namespace dflash::config
