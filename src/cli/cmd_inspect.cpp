// `dflash inspect DIR`: prints what a target, drafter or checkpoint directory holds and every
// problem with it; exits 1 when there are problems. The report itself is model/inspect.h.
// Tested by tests/cli/inspect_cli_test.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "model/inspect.h"

namespace dflash::cli {

int cmd_inspect(CommandContext& ctx) {
    CLI::App app{
        "What is in a target model, DFlash drafter or checkpoint directory: kind, "
        "architecture, parameter counts, dtypes, tensors, and every problem found.",
        "dflash inspect"};
    std::string dir;
    bool no_tensors = false, no_values = false;
    app.add_option("DIR", dir, "HF model / drafter / checkpoint directory")->required();
    app.add_flag("--no-tensors", no_tensors, "omit the tensor list");
    app.add_flag("--no-values", no_values,
                 "skip reading the weights for NaN / infinite values (faster on large models)");
    if (!parse_command_args(app, ctx, "inspect")) return 0;
    const InspectReport report =
        inspect_directory(dir, {.list_tensors = !no_tensors, .check_values = !no_values});
    std::fputs(report.text.c_str(), stdout);
    return report.ok() ? 0 : 1;
}

}  // namespace dflash::cli
