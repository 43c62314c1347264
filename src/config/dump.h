// Effective settings written out (`dflash config dump`, run directories, checkpoints) and compared
// with a file (`dflash config diff`). A TOML dump loaded back with --config reproduces settings
// with the identical hash. Tested by tests/config/dump_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/settings.h"

namespace dflash::config {

// Nested TOML tables, keys sorted; only values that differ from the default with `changed_only`.
std::string dump_toml(const Settings& settings, bool changed_only = false);
// Nested JSON objects with typed values.
nlohmann::json dump_json(const Settings& settings, bool changed_only = false);

struct Difference {
    std::string key;
    Value current;
    std::string current_source;
    Value other;
    std::string other_source;
};

// The assignments (e.g. from a TOML file) whose value differs from `settings`, in key order.
std::vector<Difference> differences(const Settings& settings, const std::vector<Assignment>& other);

}  // namespace dflash::config
