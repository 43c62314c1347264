// The `dflash` binary: picks the subcommand, builds the settings snapshot (defaults < --config
// files < DFLASH_* environment < command-line flags), runs the command, and turns any error into
// one readable line and exit status 1, worded by its kind (core/error.h): `dflash: error: ...` for
// bad input, `dflash: internal error: ...` for a bug in dflash, `dflash: device error: ...` for a
// failed CUDA/cuBLASLt/NCCL call. Output that cannot be written to stdout (`> /dev/full`) is an
// error too. Tested by tests/cli/config_cli_test.cpp and tests/cli/main_cli_test.cpp (the wording
// per kind by tests/core/error_test.cpp).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "config/environment.h"
#include "config/loader.h"
#include "config/registry.h"
#include "core/error.h"
#include "core/logging.h"
#include "options/runtime_options.h"

namespace dflash::cli {
namespace {

constexpr CommandInfo kCommands[] = {
    {"demo", cmd_demo, "build a small target on a local corpus, train a drafter, measure it"},
    {"train", cmd_train, "train a DFlash drafter for a target model directory"},
    {"pretrain", cmd_pretrain, "train a small Qwen3/Llama-architecture target from scratch"},
    {"generate", cmd_generate, "speculative decoding of a prompt, streaming tokens"},
    {"bench", cmd_bench, "acceptance length, speed-up and a losslessness check"},
    {"data", cmd_data, "tokenize JSONL text/chat data into training shards"},
    {"tokenize", cmd_tokenize, "the token ids a model sees for a text, or the text of ids"},
    {"inspect", cmd_inspect, "what is in a model, drafter or checkpoint directory"},
    {"init", cmd_init, "write a randomly initialised target or drafter (HF layout)"},
    {"config", cmd_config, "list / show / explain / dump / diff every setting"},
    {"plot", cmd_plot, "render a run's loss and accuracy curves"},
};

constexpr const char* kSettingsFlagsHelp =
    "settings flags (any command, anywhere after it):\n"
    "  --config FILE.toml     load settings from a TOML file (nested tables = dotted keys)\n"
    "  --KEY VALUE, --KEY=VALUE, --set KEY=VALUE\n"
    "                         set one setting, e.g. --train.lr 3e-4 (bools need true/false)\n"
    "  --log-level LEVEL      same as --runtime.log_level LEVEL\n"
    "  environment            DFLASH_<KEY> (dots to '_', upper case), e.g. DFLASH_TRAIN_LR\n"
    "Order: default < --config < environment < command line. "
    "`dflash config list [REGEX]` shows every KEY.\n";

void print_usage(std::FILE* out) {
    std::fprintf(out,
                 "dflash %s: train and serve DFlash drafters for speculative decoding\n\n"
                 "usage: dflash COMMAND [--config FILE.toml] [--set KEY=VALUE] [--KEY VALUE] "
                 "[args]\n\ncommands:\n",
                 DFLASH_VERSION);
    for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
    std::fprintf(out,
                 "\nEvery setting can be listed with `dflash config list [REGEX]`.\n"
                 "`dflash COMMAND --help` describes a command.\n");
}

const CommandInfo& find_command(const std::string& name) {
    const CommandInfo* best = nullptr;
    size_t best_d = 0;
    for (const auto& c : kCommands) {
        if (name == c.name) return c;
        const size_t d = config::edit_distance(name, c.name);
        if (!best || d < best_d) {
            best = &c;
            best_d = d;
        }
    }
    DF_FAIL("unknown command `{}`{}; `dflash --help` lists the commands", name,
            best && best_d <= 2 ? fmt::format(" (did you mean `{}`?)", best->name) : "");
}

bool wants_help(const std::vector<std::string>& args) {
    for (const auto& a : args) {
        if (a == "--") return false;
        if (a == "--help" || a == "-h") return true;
    }
    return false;
}

// `dflash COMMAND --help`: the part every command shares, then the command's own options. A
// command that has no option parser yet answers --help with an error; that is reported as a note
// so that --help still works.
int run_help(const CommandInfo& cmd, CommandContext& ctx) {
    std::printf("usage: dflash %s [settings flags] [args]\n%s\n\n%s\n", cmd.name, cmd.summary,
                kSettingsFlagsHelp);
    std::fflush(stdout);
    try {
        return cmd.fn(ctx);
    } catch (const Error& e) {
        std::printf("(no command-specific help: %s)\n", e.what());
        return 0;
    }
}

// Errors are one line: the kind and the message, no stack, no noise.
void print_error(const std::exception& e, bool with_origin = false) {
    std::fprintf(stderr, "dflash: %s\n", describe_error(e, with_origin).c_str());
}

// `--log-level debug|trace` anywhere on the line (the settings may not have loaded).
bool wants_debug(const std::vector<std::string>& args) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
        if ((args[i] == "--log-level" || args[i] == "--runtime.log_level") &&
            (args[i + 1] == "debug" || args[i + 1] == "trace"))
            return true;
    return false;
}

int run(const std::vector<std::string>& args) {
    const CommandInfo& cmd = find_command(args[0]);
    auto registry = std::make_shared<const config::Registry>(config::make_registry());
    config::Loaded loaded =
        config::load_settings(registry, std::vector<std::string>(args.begin() + 1, args.end()),
                              config::Environment::from_process());
    const auto level = parse_log_level(runtime_options_from_settings(loaded.settings).log_level);
    DF_ASSERT(level.has_value());
    auto sink = std::make_shared<LogSink>(*level);
    CommandContext ctx{*registry, loaded.settings, std::move(loaded.args), sink, Logger(sink, "")};
    if (wants_help(ctx.args)) return run_help(cmd, ctx);
    return cmd.fn(ctx);
}

// Output that could not be written is a failure, not a success with nothing to show: a full disk
// or a closed pipe behind stdout turns status 0 into 1, with the reason on stderr.
int finish(int status) {
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
    const int err = errno;
    print_error(UserError(fmt::format("writing to standard output failed: {}",
                                      err != 0 ? std::strerror(err) : "unknown error")));
    return status != 0 ? status : 1;
}

int run_main(const std::vector<std::string>& args) {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        print_usage(stdout);
        return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
        std::printf("dflash %s\n", DFLASH_VERSION);
        return 0;
    }
    try {
        return run(args);
    } catch (const std::bad_alloc&) {
        print_error(UserError(
            "out of memory: an allocation failed (the inputs may be larger than this machine's "
            "memory; `dflash inspect DIR` shows a model's size)"));
    } catch (const std::exception& e) {  // dflash::Error by its kind; CLI::Error and the rest alike
        print_error(e, wants_debug(args));
    }
    return 1;
}

}  // namespace
}  // namespace dflash::cli

int main(int argc, char** argv) {
    using namespace dflash::cli;
    return finish(run_main(std::vector<std::string>(argv + 1, argv + argc)));
}
