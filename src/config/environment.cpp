// Environment layer (see environment.h). Tested by tests/config/environment_test.cpp.
#include "config/environment.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

extern "C" char** environ;  // POSIX; read only here, once, by from_process()

namespace dflash::config {
namespace {

// "DFLASH_CUDA_GRAPHS_ENABLD" -> the declared key whose env name is nearest, by edit distance over
// the lower-cased names (the env form of a full dotted path).
std::string nearest_env_suggestion(const Registry& registry, const std::string& var) {
    const Declaration* best = nullptr;
    size_t best_d = 0;
    for (const auto& d : registry.all()) {
        const size_t dist = edit_distance(var, d.env_name());
        if (!best || dist < best_d) {
            best = &d;
            best_d = dist;
        }
    }
    if (!best || best_d > std::max<size_t>(2, (var.size() - std::strlen(kEnvPrefix)) / 2)) {
        return "";
    }
    return fmt::format(" Did you mean {} (setting `{}`)?", best->env_name(), best->key);
}

}  // namespace

Environment Environment::from_process() {
    std::map<std::string, std::string> vars;
    for (char** e = environ; e && *e; ++e) {
        const char* eq = std::strchr(*e, '=');
        if (!eq) continue;
        vars.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
    }
    return Environment(std::move(vars));
}

std::vector<Assignment> environment_assignments(const Registry& registry, const Environment& env) {
    std::vector<Assignment> out;
    for (const auto& [name, text] : env.vars()) {
        if (!name.starts_with(kEnvPrefix)) continue;
        const std::string source = "env:" + name;
        const Declaration* decl = registry.find_by_env(name);
        DF_CHECK(decl != nullptr,
                 "unknown setting in environment variable {}.{} Every DFLASH_* variable must "
                 "mirror a setting (`dflash config list` shows them); unset it otherwise",
                 name, nearest_env_suggestion(registry, name));
        out.push_back({decl->key, registry.parse_text(*decl, text, source), source});
    }
    // Launchers' own variables, for settings whose mirror is absent. Prepended, so that a
    // DFLASH_ mirror (applied later in the same layer) would win anyway.
    std::vector<Assignment> aliased;
    for (const auto& d : registry.all()) {
        if (d.env_aliases.empty() || env.vars().contains(d.env_name())) continue;
        for (const auto& name : d.env_aliases) {
            const auto it = env.vars().find(name);
            if (it == env.vars().end()) continue;
            const std::string source = "env:" + name;
            aliased.push_back({d.key, registry.parse_text(d, it->second, source), source});
            break;
        }
    }
    out.insert(out.begin(), aliased.begin(), aliased.end());
    return out;
}

}  // namespace dflash::config
