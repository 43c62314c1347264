// The command-line layer of the settings and the split between settings flags and a command's own
// arguments. Settings flags are the ones whose name (after "--") contains a '.', or is `set`,
// `config` or `log-level`:
//   --train.lr 3e-4   --train.lr=3e-4   --set train.lr=3e-4   --config run.toml   --log-level debug
// A bool needs an explicit value (`--cuda_graphs.enabled false`). Everything else, in order, is
// the command's; "--" ends settings parsing and passes the rest through untouched.
// Tested by tests/config/command_line_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "config/registry.h"
#include "config/settings.h"

namespace dflash::config {

struct CommandLine {
    std::vector<std::string> config_files;  // --config, in order given
    std::vector<Assignment> assignments;    // checked, source "cli"
    std::vector<std::string> rest;          // the command's own arguments
};

// True for an argument that is a settings flag (see above).
bool is_settings_flag(const std::string& arg);

CommandLine split_command_line(const Registry& registry, const std::vector<std::string>& args);

}  // namespace dflash::config
