// Argument parsing and backend set-up shared by the subcommands (cli_util.h).
// Tested through the binary by tests/cli/*_cli_test.cpp and tests/train/train_cli_test.cpp.
#include "cli/cli_util.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "config/settings.h"
#include "core/error.h"
#include "options/cuda_graphs_options.h"
#include "options/runtime_options.h"

namespace dflash::cli {

bool parse_command_args(CLI::App& app, const CommandContext& ctx, const char* name) {
    std::vector<std::string> reversed(ctx.args.rbegin(), ctx.args.rend());  // CLI11 pops the back
    try {
        app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        std::fputs(app.help().c_str(), stdout);
        return false;
    } catch (const CLI::ParseError& e) {
        throw Error(fmt::format("{}: {} (see `dflash {} --help`)", name, e.what(), name));
    }
    return true;
}

std::string shell_quote(const std::filesystem::path& path) {
    const std::string s = path.string();
    const bool plain = !s.empty() && s.find_first_not_of(
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                         "0123456789_-+=.,:/@%") == std::string::npos;
    if (plain) return s;
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

int train_exit_status(const train::TrainSummary& s) {
    if (!s.interrupted) return 0;
    return s.stop_signal > 0 ? 128 + s.stop_signal : 1;
}

int report_other_process(const train::TrainSummary& s) {
    std::printf("process %d of %d: %s after step %lld/%lld: loss %.4f, %.0fs\n", s.process,
                s.processes, s.interrupted ? "stopped" : "trained", static_cast<long long>(s.steps),
                static_cast<long long>(s.total_steps), s.final_loss, s.seconds);
    return train_exit_status(s);
}

std::unique_ptr<Backend> make_backend_from_settings(const CommandContext& ctx) {
    const RuntimeOptions rt = runtime_options_from_settings(ctx.settings);
    const int64_t threads = rt.threads;
    const DeviceKind kind = resolve_backend(rt.backend);
    GraphOptions graphs = graph_options_from_settings(ctx.settings);
    const Logger& log = ctx.log;
    graphs.warn = [&log](const std::string& m) { log.warn("{}", m); };
    auto be = make_backend(kind, 0,
                           threads > 0 ? static_cast<int>(threads)
                                       : static_cast<int>(std::thread::hardware_concurrency()),
                           graphs);
    ctx.log.debug("backend: {}", be->name());
    return be;
}

}  // namespace dflash::cli
