// Layering of the settings (see loader.h). Tested by tests/config/loader_test.cpp.
#include "config/loader.h"

#include "config/command_line.h"
#include "config/toml_file.h"

namespace dflash::config {

Loaded load_settings(std::shared_ptr<const Registry> registry, const std::vector<std::string>& args,
                     const Environment& env) {
    // The command line is split first (it names the config files) but applied last.
    CommandLine cli = split_command_line(*registry, args);
    Settings settings(registry);
    for (const auto& path : cli.config_files) {
        settings = settings.with(load_toml_file(*registry, path));
    }
    settings = settings.with(environment_assignments(*registry, env));
    settings = settings.with(cli.assignments);
    return {std::move(settings), std::move(cli.rest)};
}

}  // namespace dflash::config
