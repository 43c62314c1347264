// `dflash plot RUN_DIR [--output FILE.svg]`: renders RUN_DIR/metrics.jsonl as an SVG of training
// loss (eval loss as points) and draft accuracy at a few block positions (train/plot.h).
// Tested by tests/train/plot_test.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "train/plot.h"

namespace dflash::cli {

int cmd_plot(CommandContext& ctx) {
    CLI::App app{
        "Render a training run's loss and accuracy curves (RUN_DIR/metrics.jsonl) as a "
        "self-contained SVG.",
        "dflash plot"};
    std::string run_dir, output;
    app.add_option("RUN_DIR", run_dir, "run directory written by `dflash train`")->required();
    app.add_option("--output,-o", output, "SVG file to write (default RUN_DIR/curves.svg)");
    if (!parse_command_args(app, ctx, "plot")) return 0;
    const auto written = plot_run(run_dir, output);
    std::printf("wrote %s\n", written.string().c_str());
    return 0;
}

}  // namespace dflash::cli
