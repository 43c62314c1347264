// The `dflash` binary: picks the subcommand, builds the settings snapshot, runs the command, and
// turns a dflash::Error into one readable line and a non-zero exit status.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

namespace dflash::cli {
namespace {

constexpr CommandInfo kCommands[] = {
    {"demo", cmd_demo, "build a small target on a local corpus, train a drafter, measure it"},
    {"train", cmd_train, "train a DFlash drafter for a target model directory"},
    {"pretrain", cmd_pretrain, "train a small Qwen3/Llama-architecture target from scratch"},
    {"generate", cmd_generate, "speculative decoding of a prompt, streaming tokens"},
    {"bench", cmd_bench, "acceptance length, speed-up and a losslessness check"},
    {"data", cmd_data, "tokenize JSONL text/chat data into training shards"},
    {"inspect", cmd_inspect, "what is in a model, drafter or checkpoint directory"},
    {"config", cmd_config, "list / show / explain / dump / diff every setting"},
    {"plot", cmd_plot, "render a run's loss and accuracy curves"},
};

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

}  // namespace
}  // namespace dflash::cli

int main(int argc, char** argv) {
    using namespace dflash::cli;
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        print_usage(stdout);
        return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
        std::printf("dflash %s\n", DFLASH_VERSION);
        return 0;
    }
    std::fprintf(stderr, "dflash: settings are not wired yet\n");
    return 2;
}
