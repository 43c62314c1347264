// Command-line settings flags (see command_line.h). Tested by tests/config/command_line_test.cpp.
#include "config/command_line.h"

#include <fmt/format.h>

#include "core/error.h"

namespace dflash::config {
namespace {

constexpr const char* kSource = "cli";

std::string flag_name(const std::string& arg) {
    const size_t eq = arg.find('=');
    return arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
}

}  // namespace

bool is_settings_flag(const std::string& arg) {
    if (arg.size() <= 2 || !arg.starts_with("--")) return false;
    const std::string name = flag_name(arg);
    return name.find('.') != std::string::npos || name == "set" || name == "config" ||
           name == "log-level";
}

CommandLine split_command_line(const Registry& registry, const std::vector<std::string>& args) {
    CommandLine out;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--") {
            out.rest.insert(out.rest.end(), args.begin() + static_cast<long>(i), args.end());
            break;
        }
        if (!is_settings_flag(arg)) {
            out.rest.push_back(arg);
            continue;
        }
        const std::string name = flag_name(arg);
        std::string value;
        if (const size_t eq = arg.find('='); eq != std::string::npos) {
            value = arg.substr(eq + 1);
        } else {
            DF_CHECK(i + 1 < args.size(), "command-line flag --{} needs a value{}", name,
                     name.find('.') != std::string::npos
                         ? fmt::format(" (e.g. --{} VALUE or --{}=VALUE; bools need true/false)",
                                       name, name)
                         : "");
            value = args[++i];
        }
        if (name == "config") {
            out.config_files.push_back(value);
            continue;
        }
        std::string key = name;
        std::string where = fmt::format("{} --{}", kSource, name);
        if (name == "log-level") {
            key = "runtime.log_level";
        } else if (name == "set") {
            const size_t eq = value.find('=');
            DF_CHECK(eq != std::string::npos && eq > 0,
                     "--set `{}` is not KEY=VALUE (e.g. --set train.lr=3e-4)", value);
            key = value.substr(0, eq);
            value = value.substr(eq + 1);
            where = fmt::format("{} --set", kSource);
        }
        const Declaration* decl = registry.find(key);
        if (!decl) registry.fail_unknown(key, where);
        out.assignments.push_back({key, registry.parse_text(*decl, value, where), kSource});
    }
    return out;
}

}  // namespace dflash::config
