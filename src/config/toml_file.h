// Settings from a TOML file (`--config run.toml`): nested tables map to dotted keys, every value is
// checked strictly against its declaration (a bool must be a TOML boolean, an int a TOML integer;
// a float also accepts an integer), and each assignment records `file:<path>:<line>`.
// Tested by tests/config/toml_file_test.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/registry.h"
#include "config/settings.h"

namespace dflash::config {

// Reads and checks `path`; `path` appears in sources as given.
std::vector<Assignment> load_toml_file(const Registry& registry, const std::string& path);

// The same for TOML text already in memory; `name` stands for the file in sources and errors.
std::vector<Assignment> parse_toml_text(const Registry& registry, std::string_view text,
                                        const std::string& name);

}  // namespace dflash::config
