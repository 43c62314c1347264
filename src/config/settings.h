// The immutable settings snapshot the rest of the program receives (docs/design.md "Settings"):
// every key's value and where it came from, typed getters, and a stable hash over all values. Built
// by layering assignments (default < file < environment < command line, see loader.h).
// Tested by tests/config/settings_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/registry.h"
#include "config/value.h"
#include "core/hash.h"

namespace dflash::config {

// One value set by one layer: a file line, an environment variable or a command-line flag.
struct Assignment {
    std::string key;
    Value value;         // already checked against the declaration
    std::string source;  // "file:run.toml:12", "env:DFLASH_TRAIN_LR", "cli"
};

class Settings {
  public:
    // Every key at its default (source "default").
    explicit Settings(std::shared_ptr<const Registry> registry);

    // A new snapshot with the assignments applied in order (later ones win).
    Settings with(const std::vector<Assignment>& assignments) const;

    // Tests only: a new snapshot with values given in their text form (as on the command line),
    // source "override". Unknown keys and bad values are errors as everywhere else.
    Settings with_overrides(const std::vector<std::pair<std::string, std::string>>& kv) const;

    // T is bool, int64_t, double, std::string (string and enum), std::vector<int64_t>,
    // std::vector<double> or std::vector<std::string>. An unknown key or a T that is not the
    // key's type throws dflash::Error.
    template <class T>
    T get(std::string_view key) const;

    const Value& value(std::string_view key) const;
    const std::string& source(std::string_view key) const;
    // True when the value equals the declared default (whatever layer set it).
    bool is_default(std::string_view key) const;

    // "key = literal\n" for every key, sorted: what hash() is computed over.
    std::string canonical_text() const;
    // 16 hex digits of FNV-1a 64 (core/hash.h) over canonical_text(): identical settings give
    // identical hashes, in any process.
    std::string hash() const;

    const Registry& registry() const { return *registry_; }
    std::shared_ptr<const Registry> registry_ptr() const { return registry_; }

  private:
    struct Entry {
        Value value;
        std::string source;
    };
    std::shared_ptr<const Registry> registry_;
    std::vector<Entry> entries_;  // parallel to registry_->all()

    const Entry& entry(std::string_view key) const;
};

// Settings hashes are core/hash.h's FNV-1a 64. Kept under this name for callers that still write
// config::fnv1a64 (src/train/trainer.cpp); new code calls dflash::fnv1a64.
using ::dflash::fnv1a64;

}  // namespace dflash::config
