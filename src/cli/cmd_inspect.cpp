// `dflash inspect DIR`: prints what a target, drafter or checkpoint directory holds and every
// problem with it; exits 1 when there are problems. The report itself is model/inspect.h; for a
// training checkpoint the training state is added (train/checkpoint.h describe_training_state).
// Tested by tests/cli/inspect_cli_test.cpp and tests/train/resume_test.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "model/inspect.h"
#include "train/checkpoint.h"

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
    InspectOptions opts{.list_tensors = !no_tensors, .check_values = !no_values};
    opts.more = [&](const std::filesystem::path& d, std::string& text,
                    std::vector<std::string>& problems) {
        if (std::filesystem::exists(d / train::kTrainingStateJson))
            train::describe_training_state(d, opts.check_values, text, problems);
    };
    const InspectReport report = inspect_directory(dir, opts);
    std::fputs(report.text.c_str(), stdout);
    return report.ok() ? 0 : 1;
}

}  // namespace dflash::cli
