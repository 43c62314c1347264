// `dflash demo`: the embedded default (see src/demo/demo.h). Tested by
// tests/cli/demo_slow_test.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "demo/demo.h"
#include "options/demo_options.h"

namespace dflash::cli {

int cmd_demo(CommandContext& ctx) {
    CLI::App app{
        "Build a small target on a local corpus (the project's own sources and docs), train a "
        "DFlash drafter for it, and measure speculative decoding. CPU; about 5 minutes on 2 cores "
        "(--quick: under one).",
        "dflash demo"};
    const DemoDefaults defaults = demo_defaults_from_settings(ctx.settings);
    bool quick = defaults.quick;
    std::string output = defaults.output_dir.string();
    std::vector<std::string> corpus;
    app.add_flag("--quick", quick, "the one-minute version (same as --demo.quick true)");
    app.add_option("--output", output, "where everything is written (demo.output_dir)");
    app.add_option("--corpus", corpus,
                   "text directories to learn from instead of the project's sources");
    if (!parse_command_args(app, ctx, "demo")) return 0;
    demo::DemoOptions opt;
    opt.output_dir = output;
    opt.quick = quick;
    for (const auto& c : corpus) opt.corpus_roots.emplace_back(c);
    std::printf("dflash demo%s: everything goes to %s/\n", quick ? " --quick" : "", output.c_str());
    const demo::DemoReport r = demo::run_demo(opt, ctx.settings, ctx.log, stdout);
    const auto& b = r.bench.total;
    std::printf(
        "\n== dflash demo: done in %.0f s ==\n"
        "built:\n"
        "  target   %s  (Qwen3 layout, loss %.3f -> %.3f)\n"
        "  drafter  %s  (%s, block %lld, loss %.3f -> %.3f)\n"
        "measured on %lld held-out prompts: tau %.2f, speed-up %.2fx over plain decoding "
        "(predicted %.2fx), lossless: %s\n"
        "next:\n"
        "  build/dflash generate --target %s --drafter %s --prompt 'int main('\n"
        "  build/dflash bench --target %s --drafter %s --prompts PROMPTS.jsonl\n"
        "  build/dflash plot %s && build/dflash plot %s\n"
        "  build/dflash inspect %s\n",
        r.seconds, r.target.model_dir.c_str(), r.target.first_loss, r.target.final_loss,
        r.drafter.model_dir.c_str(), r.drafter_architecture.c_str(),
        static_cast<long long>(r.bench.block_size), r.drafter.first_loss, r.drafter.final_loss,
        static_cast<long long>(b.requests), b.tau(), b.speedup(), b.predicted_speedup(),
        r.bench.lossless() ? "yes" : "NO", r.target.model_dir.c_str(), r.drafter.model_dir.c_str(),
        r.target.model_dir.c_str(), r.drafter.model_dir.c_str(), r.target.run_dir.c_str(),
        r.drafter.run_dir.c_str(), r.drafter.model_dir.c_str());
    return r.bench.lossless() ? 0 : 1;
}

}  // namespace dflash::cli
