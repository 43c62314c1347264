// The settings registry: every tunable declared once with its dotted key, type, default, doc,
// range or choices, environment mirror and readers (docs/design.md "Settings"). The registry
// validates values ("set time" checks) and suggests the nearest key for a misspelt one.
// make_registry() returns the registry of every dflash setting (settings_catalog.cpp). Tested by
// tests/config/registry_test.cpp.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/value.h"

namespace dflash::config {

// One setting. Build with the typed factories and the chained modifiers, e.g.
//   Declaration::integer("train.epochs", 6, "passes over the data").range(1, 10000)
//       .read_by("train::Trainer");
struct Declaration {
    std::string key;  // dotted path, e.g. "cuda_graphs.capture_mode"
    Type type = Type::string;
    Value default_value;               // stored under storage_index(type)
    std::string doc;                   // one line
    std::optional<double> min;         // numbers and numeric list elements; inclusive
    std::optional<double> max;         // inclusive
    std::vector<std::string> choices;  // enum only
    std::string readers;               // free text: which components read it (`config explain`)
    // Variables other programs set that also give this setting's value when its DFLASH_ mirror is
    // absent, the first present one winning (launchers: torchrun's RANK, mpirun's
    // OMPI_COMM_WORLD_RANK, Slurm's SLURM_PROCID). Their values come from outside, so they are
    // parsed and range-checked like the mirror, with the variable named as the source.
    std::vector<std::string> env_aliases;

    static Declaration boolean(std::string key, bool def, std::string doc);
    static Declaration integer(std::string key, int64_t def, std::string doc);
    static Declaration real(std::string key, double def, std::string doc);
    static Declaration string(std::string key, std::string def, std::string doc);
    static Declaration enumeration(std::string key, std::string def,
                                   std::vector<std::string> choices, std::string doc);
    static Declaration int_list(std::string key, std::vector<int64_t> def, std::string doc);
    static Declaration float_list(std::string key, std::vector<double> def, std::string doc);
    static Declaration string_list(std::string key, std::vector<std::string> def, std::string doc);

    Declaration& range(std::optional<double> lo, std::optional<double> hi);
    Declaration& read_by(std::string who);
    Declaration& also_from_env(std::vector<std::string> names);

    // "DFLASH_" + key upper-cased, '.' and '-' turned into '_'.
    std::string env_name() const;
    // "[0, 1]", "[1, ...)", "auto|cpu|cuda", or "" when unconstrained.
    std::string constraint_text() const;
};

// The environment variable that mirrors `key`.
std::string env_name_for(std::string_view key);

// Levenshtein distance (insert/delete/substitute, each cost 1).
size_t edit_distance(std::string_view a, std::string_view b);

class Registry {
  public:
    // Adds a declaration; a bad declaration (malformed key, duplicate key or env name, default
    // outside its own range/choices) is an internal error.
    Registry& add(Declaration decl);

    // Declarations sorted by key.
    const std::vector<Declaration>& all() const { return decls_; }
    size_t size() const { return decls_.size(); }
    const Declaration* find(std::string_view key) const;
    // Position of `key` in all(); throws dflash::Error with the nearest key for an unknown key.
    size_t index_of(std::string_view key, std::string_view where) const;
    const Declaration* find_by_env(std::string_view env_var) const;
    // True when `path` is a namespace of some key ("cuda_graphs" for "cuda_graphs.enabled").
    bool is_namespace(std::string_view path) const;

    // The declared key nearest to `key` by edit distance over full dotted paths, if it is close
    // enough to be a plausible misspelling.
    std::optional<std::string> nearest_key(std::string_view key) const;
    // "unknown setting `x` (from SOURCE); did you mean `y`? ..." as a dflash::Error.
    [[noreturn]] void fail_unknown(std::string_view key, std::string_view where) const;

    // Set-time checks: the value has the declared type, lies in the range, is one of the choices.
    // Errors name the key, the value, `where` (the source) and what was expected.
    void check(const Declaration& decl, const Value& value, std::string_view where) const;
    // Parses an environment/command-line text form for `decl` and checks it.
    Value parse_text(const Declaration& decl, std::string_view text, std::string_view where) const;

  private:
    std::vector<Declaration> decls_;
    std::map<std::string, size_t, std::less<>> by_key_;
    std::map<std::string, size_t, std::less<>> by_env_;
    void reindex();
};

// Every dflash setting (settings_catalog.cpp).
Registry make_registry();

}  // namespace dflash::config
