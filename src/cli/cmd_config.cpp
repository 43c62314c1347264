// `dflash config`: list / show / explain / dump / diff / hash of every setting (docs/design.md
// "Settings"). Tested by tests/cli/config_cli_test.cpp.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/dump.h"
#include "config/registry.h"
#include "config/settings.h"
#include "config/toml_file.h"
#include "core/error.h"

namespace dflash::cli {
namespace {

using config::Declaration;
using config::Settings;

struct Options {
    std::string pattern;
    bool json = false;
    std::string key;
    bool changed = false;
    std::string format = "toml";
    std::string file;
};

void print_table(const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> width(rows.front().size(), 0);
    for (const auto& row : rows)
        for (size_t c = 0; c + 1 < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    for (const auto& row : rows) {
        std::string line;
        for (size_t c = 0; c < row.size(); ++c) {
            line += row[c];
            if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
        }
        std::puts(line.c_str());
    }
}

nlohmann::json declaration_json(const Declaration& d, const Settings& s) {
    nlohmann::json j = {{"key", d.key},
                        {"value", config::to_json(s.value(d.key))},
                        {"default", config::to_json(d.default_value)},
                        {"type", config::type_name(d.type)},
                        {"source", s.source(d.key)},
                        {"env", d.env_name()},
                        {"doc", d.doc},
                        {"readers", d.readers}};
    if (!d.choices.empty()) j["choices"] = d.choices;
    if (d.min) j["min"] = *d.min;
    if (d.max) j["max"] = *d.max;
    return j;
}

int do_list(const CommandContext& ctx, const Options& o) {
    std::regex re;
    try {
        re = std::regex(o.pattern, std::regex::ECMAScript | std::regex::icase);
    } catch (const std::regex_error& e) {
        DF_FAIL("config list: `{}` is not a valid regex ({})", o.pattern, e.what());
    }
    std::vector<const Declaration*> matches;
    for (const auto& d : ctx.registry.all())
        if (std::regex_search(d.key, re)) matches.push_back(&d);
    if (matches.empty()) {
        const auto near = ctx.registry.nearest_key(o.pattern);
        DF_FAIL("config list: no setting key matches `{}`{}", o.pattern,
                near ? fmt::format(" (did you mean `{}`?)", *near) : "");
    }
    if (o.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto* d : matches) out.push_back(declaration_json(*d, ctx.settings));
        std::puts(out.dump(2).c_str());
        return 0;
    }
    std::vector<std::vector<std::string>> rows = {
        {"KEY", "VALUE", "DEFAULT", "TYPE", "SOURCE", "ENV", "DOC"}};
    for (const auto* d : matches) {
        rows.push_back({d->key, config::display_value(ctx.settings.value(d->key)),
                        config::display_value(d->default_value), std::string(type_name(d->type)),
                        ctx.settings.source(d->key), d->env_name(), d->doc});
    }
    print_table(rows);
    return 0;
}

const Declaration& find_key(const CommandContext& ctx, const std::string& key,
                            const char* subcommand) {
    return ctx.registry.all()[ctx.registry.index_of(key, fmt::format("config {}", subcommand))];
}

int do_show(const CommandContext& ctx, const Options& o) {
    const Declaration& d = find_key(ctx, o.key, "show");
    std::printf("%s = %s  (source: %s)\n", d.key.c_str(),
                config::toml_literal(ctx.settings.value(d.key)).c_str(),
                ctx.settings.source(d.key).c_str());
    return 0;
}

int do_explain(const CommandContext& ctx, const Options& o) {
    const Declaration& d = find_key(ctx, o.key, "explain");
    const std::string constraint = d.constraint_text();
    std::string out = fmt::format("{}\n  {}\n", d.key, d.doc);
    out += fmt::format("  type:     {}\n", config::type_name(d.type));
    if (!constraint.empty()) {
        out += fmt::format("  {}  {}\n", d.choices.empty() ? "range:  " : "choices:", constraint);
    }
    out += fmt::format("  default:  {}\n", config::toml_literal(d.default_value));
    out += fmt::format("  env:      {}\n", d.env_name());
    out += fmt::format("  read by:  {}\n", d.readers.empty() ? "(not recorded)" : d.readers);
    out += fmt::format("  value:    {}  (source: {})\n",
                       config::toml_literal(ctx.settings.value(d.key)), ctx.settings.source(d.key));
    out += fmt::format("  set with: --{} VALUE | --set {}=VALUE | {}=VALUE | --config FILE.toml\n",
                       d.key, d.key, d.env_name());
    std::fputs(out.c_str(), stdout);
    return 0;
}

int do_dump(const CommandContext& ctx, const Options& o) {
    if (o.format == "json") {
        std::puts(config::dump_json(ctx.settings, o.changed).dump(2).c_str());
    } else {
        std::fputs(config::dump_toml(ctx.settings, o.changed).c_str(), stdout);
    }
    return 0;
}

int do_diff(const CommandContext& ctx, const Options& o) {
    const auto diffs =
        config::differences(ctx.settings, config::load_toml_file(ctx.registry, o.file));
    if (diffs.empty()) {
        std::printf("no differences: every value in %s equals the current setting\n",
                    o.file.c_str());
        return 0;
    }
    std::vector<std::vector<std::string>> rows = {
        {"KEY", "CURRENT", "CURRENT SOURCE", "IN FILE", "FILE SOURCE"}};
    for (const auto& d : diffs) {
        rows.push_back({d.key, config::display_value(d.current), d.current_source,
                        config::display_value(d.other), d.other_source});
    }
    print_table(rows);
    return 0;
}

}  // namespace

int cmd_config(CommandContext& ctx) {
    CLI::App app{"List, show, explain, dump and diff every dflash setting.", "dflash config"};
    app.require_subcommand(1);
    app.footer("Settings flags (--config, --set KEY=VALUE, --KEY VALUE) apply here too.");
    Options o;
    auto* list = app.add_subcommand("list", "settings whose dotted key matches REGEX");
    list->add_option("REGEX", o.pattern, "case-insensitive regex searched in the full key");
    list->add_flag("--json", o.json, "a JSON array of objects instead of a table");
    auto* show = app.add_subcommand("show", "the value of KEY and where it came from");
    show->add_option("KEY", o.key, "dotted key, e.g. train.lr")->required();
    auto* explain = app.add_subcommand("explain", "everything about KEY");
    explain->add_option("KEY", o.key, "dotted key, e.g. cuda_graphs.enabled")->required();
    auto* dump = app.add_subcommand("dump", "the effective settings (load back with --config)");
    dump->add_flag("--changed", o.changed, "only values that differ from the defaults");
    dump->add_option("--format", o.format, "toml or json")->check(CLI::IsMember({"toml", "json"}));
    auto* diff = app.add_subcommand("diff", "keys whose value in FILE differs from the current");
    diff->add_option("FILE", o.file, "a TOML settings file")->required();
    auto* hash = app.add_subcommand("hash", "the stable hash of the effective settings");

    if (!parse_command_args(app, ctx, "config")) return 0;
    if (list->parsed()) return do_list(ctx, o);
    if (show->parsed()) return do_show(ctx, o);
    if (explain->parsed()) return do_explain(ctx, o);
    if (dump->parsed()) return do_dump(ctx, o);
    if (diff->parsed()) return do_diff(ctx, o);
    DF_ASSERT(hash->parsed());
    std::printf("%s\n", ctx.settings.hash().c_str());
    return 0;
}

}  // namespace dflash::cli
