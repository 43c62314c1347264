// Settings from a TOML file (`--config run.toml`): nested tables map to dotted keys, every value is
// checked strictly against its declaration (a bool must be a TOML boolean, an int a TOML integer;
// a float also accepts an integer), and each assignment records `file:<path>:<line>`.
// Tested by tests/config/toml_file_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/registry.h"
#include "config/settings.h"
#include "core/input_file.h"

namespace dflash::config {

// Reads and checks `path`; `path` appears in sources as given. The file must be a regular file
// (symlinks followed) of at most `max_bytes`: `--config /dev/zero` or a FIFO is refused at once
// instead of being read until memory runs out or a writer comes.
std::vector<Assignment> load_toml_file(const Registry& registry, const std::string& path,
                                       uint64_t max_bytes = kMaxConfigFileBytes);

// The same for TOML text already in memory; `name` stands for the file in sources and errors.
std::vector<Assignment> parse_toml_text(const Registry& registry, std::string_view text,
                                        const std::string& name);

}  // namespace dflash::config
