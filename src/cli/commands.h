// The `dflash` subcommands: one file each (cmd_<name>.cpp), dispatched by main.cpp.
// Every command receives the immutable settings snapshot taken at start-up and its own arguments
// (the settings flags --config/--set/--<key> were already taken out by the registry).
// Tested through the binary by tests/cli/*_test.cpp and tests/train/train_cli_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/logging.h"

namespace dflash::config {
class Registry;
class Settings;
}  // namespace dflash::config

namespace dflash::cli {

struct CommandContext {
    const config::Registry& registry;
    const config::Settings& settings;
    std::vector<std::string> args;  // the command's own arguments, in order
    std::shared_ptr<LogSink> sink;
    Logger log;
};

using CommandFn = int (*)(CommandContext&);

struct CommandInfo {
    const char* name;
    CommandFn fn;
    const char* summary;
};

int cmd_config(CommandContext& ctx);
int cmd_inspect(CommandContext& ctx);
int cmd_init(CommandContext& ctx);
int cmd_data(CommandContext& ctx);
int cmd_train(CommandContext& ctx);
int cmd_pretrain(CommandContext& ctx);
int cmd_generate(CommandContext& ctx);
int cmd_bench(CommandContext& ctx);
int cmd_demo(CommandContext& ctx);
int cmd_plot(CommandContext& ctx);
int cmd_tokenize(CommandContext& ctx);

}  // namespace dflash::cli
