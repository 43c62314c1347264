// What several subcommands share: parsing their own arguments with CLI11 the same way (--help
// prints and exits 0; a usage error is a dflash::Error, so main prints one `dflash: error:` line
// and exits 1), the CPU backend sized by runtime.threads, shell quoting for printed commands and
// the exit status of a training command.
// Tested through the binary by tests/cli/*_cli_test.cpp and tests/train/train_cli_test.cpp.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "cli/commands.h"
#include "train/trainer.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dflash::cli {

// Parses ctx.args into `app`. Returns false when --help was asked for and the help is already
// printed (the command then returns 0). `name` is the subcommand, for the error's hint.
bool parse_command_args(CLI::App& app, const CommandContext& ctx, const char* name);

// `path` as one word for a POSIX shell: unchanged when it holds only safe characters, else in
// single quotes (a quote inside becomes '\''), so a printed `next:` command can be pasted.
std::string shell_quote(const std::filesystem::path& path);

// A training command's exit status: 0 when it ran to the end; 128 + the signal when SIGINT or
// SIGTERM stopped it (130, 143: what a shell reports for a process the signal killed), after its
// checkpoint was written.
int train_exit_status(const train::TrainSummary& s);
// A process other than process 0 of a multi-process run: one line (process 0 prints the run's
// results and writes its files); returns the exit status.
int report_other_process(const train::TrainSummary& s);

// The backend runtime.backend names (auto: the first GPU when one is visible, else the CPU with
// runtime.threads threads, 0 = every core: the CPU backend's own pool), logged at debug level.
std::unique_ptr<Backend> make_backend_from_settings(const CommandContext& ctx);

}  // namespace dflash::cli
