// `dflash bench --target DIR --drafter DIR --prompts FILE.jsonl [--json OUT.json [--json-steps]]
// [--limit N]`: plain and speculative decoding of every prompt with the same engine and infer.*
// settings; prints the table of infer/bench.h (tau, histogram, tokens/s, speed-up measured and
// predicted), writes it as JSON on request (with --json-steps, every speculative step's drafts
// too), and fails loudly when greedy outputs differ (the engine must be lossless).
// Tested by tests/infer/bench_test.cpp (library) and tests/cli/generate_cli_test.cpp (binary).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "backend/backend.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/output_file.h"
#include "infer/bench.h"
#include "infer/prompts.h"
#include "infer/stop_tokens.h"
#include "model/drafter.h"
#include "model/target.h"
#include "options/chat_options.h"
#include "options/infer_options.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash::cli {

int cmd_bench(CommandContext& ctx) {
    CLI::App app{
        "Speculative decoding against plain decoding with the same engine: acceptance "
        "length tau and its histogram, tokens/s, speed-up (measured and predicted), and "
        "a losslessness check under greedy decoding.",
        "dflash bench"};
    std::string target_dir, drafter_dir, prompts_path, json_path;
    int64_t limit = 0;
    bool json_steps = false;
    app.add_option("--target", target_dir, "target model directory")->required();
    app.add_option("--drafter", drafter_dir, "DFlash drafter directory")->required();
    app.add_option("--prompts", prompts_path,
                   "JSONL, one prompt a line: {\"prompt\": ...}, {\"messages\": [...]} or "
                   "{\"prompt_ids\": [...]}")
        ->required();
    app.add_option("--json", json_path, "also write the report as JSON to this file");
    app.add_flag("--json-steps", json_steps,
                 "with --json: also write every speculative step of every prompt (the drafts "
                 "the target verified, how many it accepted, the token it added)");
    app.add_option("--limit", limit, "only the first N prompts (0: all)")
        ->check(CLI::NonNegativeNumber);
    if (!parse_command_args(app, ctx, "bench")) return 0;
    // Before minutes of decoding, not after: a --json that cannot be written fails now.
    DF_CHECK(!json_steps || !json_path.empty(), "--json-steps needs --json OUT.json");
    if (!json_path.empty()) check_output_file(json_path, "--json");
    auto be = make_backend_from_settings(ctx);
    const TargetModel target = TargetModel::load(*be, target_dir);
    const DrafterModel drafter = DrafterModel::load(*be, drafter_dir);
    std::unique_ptr<Tokenizer> tok;
    if (has_tokenizer_spec(target_dir))
        tok = load_tokenizer_for_model(target_dir, chat_options_from_settings(ctx.settings));
    std::vector<Prompt> prompts = read_prompts(prompts_path, tok.get(), target.config().vocab_size);
    if (limit > 0 && static_cast<int64_t>(prompts.size()) > limit) prompts.resize(limit);

    GenerateOptions opt = generate_options_from_settings(ctx.settings);
    opt.stop_tokens = default_stop_tokens(target.config(), tok.get());
    ctx.log.info("bench on {}: {} prompts, max {} new tokens, temperature {}", be->name(),
                 prompts.size(), opt.max_new_tokens, opt.sampling.temperature);
    const BenchReport rep = run_bench(target, drafter, *be, prompts, opt, ctx.log, json_steps);
    std::fputs(format_bench_table(rep).c_str(), stdout);
    std::fflush(stdout);
    if (!json_path.empty()) {
        write_text_atomic(json_path, bench_to_json(rep).dump(2) + "\n");
        ctx.log.info("wrote {}", json_path);
    }
    DF_CHECK(rep.lossless(),
             "outputs differ: {}{}; speculative decoding must reproduce greedy decoding token for "
             "token, so this is a bug in the engine, the drafter/target pairing or the numerics",
             rep.mismatches.front().to_string(),
             rep.mismatches.size() > 1
                 ? fmt::format(" (and {} more prompts)", rep.mismatches.size() - 1)
                 : std::string());
    return 0;
}

}  // namespace dflash::cli
