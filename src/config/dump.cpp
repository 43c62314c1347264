// Dumping and diffing settings (see dump.h). Tested by tests/config/dump_test.cpp.
#include "config/dump.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace dflash::config {
namespace {

// "a.b.c" -> {"a.b", "c"}; a key without a namespace has an empty one.
std::pair<std::string, std::string> split_key(const std::string& key) {
    const size_t dot = key.rfind('.');
    if (dot == std::string::npos) return {"", key};
    return {key.substr(0, dot), key.substr(dot + 1)};
}

}  // namespace

std::string dump_toml(const Settings& settings, bool changed_only) {
    // Grouped by table; std::map orders the tables, and "" (top-level keys) comes first as TOML
    // requires.
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> tables;
    for (const auto& d : settings.registry().all()) {
        if (changed_only && settings.is_default(d.key)) continue;
        auto [table, name] = split_key(d.key);
        tables[table].emplace_back(name, toml_literal(settings.value(d.key)));
    }
    std::string out = fmt::format(
        "# dflash settings{} (hash {} of the full settings).\n"
        "# Load with: dflash COMMAND --config THIS_FILE\n",
        changed_only ? ", only values that differ from the defaults" : "", settings.hash());
    for (const auto& [table, entries] : tables) {
        if (!table.empty()) out += fmt::format("\n[{}]\n", table);
        for (const auto& [name, literal] : entries) out += fmt::format("{} = {}\n", name, literal);
    }
    return out;
}

nlohmann::json dump_json(const Settings& settings, bool changed_only) {
    nlohmann::json root = nlohmann::json::object();
    for (const auto& d : settings.registry().all()) {
        if (changed_only && settings.is_default(d.key)) continue;
        root[nlohmann::json::json_pointer("/" + [&] {
            std::string p = d.key;
            std::replace(p.begin(), p.end(), '.', '/');
            return p;
        }())] = to_json(settings.value(d.key));
    }
    return root;
}

std::vector<Difference> differences(const Settings& settings,
                                    const std::vector<Assignment>& other) {
    std::vector<Difference> out;
    for (const auto& a : other) {
        const Value& current = settings.value(a.key);
        if (current == a.value) continue;
        out.push_back({a.key, current, settings.source(a.key), a.value, a.source});
    }
    std::sort(out.begin(), out.end(),
              [](const Difference& x, const Difference& y) { return x.key < y.key; });
    return out;
}

}  // namespace dflash::config
