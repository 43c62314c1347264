// `dflash data`: `prepare` tokenizes JSONL text/chat files into shards (src/data/prepare.h) with
// the byte tokenizer or a model's tokenizer.json and chat template; `verify` checks a dataset
// directory against its manifest.json and re-reads every sample (src/data/manifest.h);
// `regenerate` replaces the responses of a prompt set with the target's own
// (src/infer/regenerate.h). The logic lives in the library and is tested by
// tests/data/prepare_test.cpp, tests/data/manifest_test.cpp and tests/infer/regenerate_test.cpp;
// the command itself by tests/cli/data_cli_test.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "core/error.h"
#include "core/staged_dir.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "infer/bench.h"
#include "infer/prompts.h"
#include "infer/regenerate.h"
#include "infer/stop_tokens.h"
#include "model/target.h"
#include "options/chat_options.h"
#include "options/infer_options.h"
#include "options/runtime_options.h"
#include "tokenizer/model_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace dflash::cli {

namespace {

// The tokenizer of `data prepare`: the model directory's (with its chat template) or one by name.
std::unique_ptr<Tokenizer> prepare_tokenizer(const std::string& model, const std::string& name,
                                             CommandContext& ctx) {
    if (model.empty())
        return make_tokenizer_with_chat(name, chat_options_from_settings(ctx.settings),
                                        "--tokenizer " + name);
    return load_tokenizer_for_model(model, chat_options_from_settings(ctx.settings));
}

int run_prepare(const PrepareOptions& opt, const Tokenizer& tok, CommandContext& ctx) {
    const PrepareStats st = prepare_dataset(opt, tok, ctx.log);
    std::printf(
        "prepared %s: %lld samples, %lld tokens (%lld response tokens), %lld skipped (no "
        "response to train on), %lld records read, %lld shard(s), tokenizer %s, chat template "
        "%s\n",
        opt.output_dir.string().c_str(), static_cast<long long>(st.samples),
        static_cast<long long>(st.tokens), static_cast<long long>(st.response_tokens),
        static_cast<long long>(st.skipped), static_cast<long long>(st.records),
        static_cast<long long>(st.shards), tok.name().c_str(), tok.chat_template_name().c_str());
    return 0;
}

int run_verify(const std::string& dir) {
    const DatasetCheck c = verify_dataset(dir);
    if (!c.ok()) {
        std::printf("%s: BROKEN, %zu problem(s):\n", dir.c_str(), c.problems.size());
        for (const auto& p : c.problems) std::printf("  - %s\n", p.c_str());
        return 1;
    }
    const DatasetManifest& m = c.manifest;
    std::printf(
        "%s: ok, %zu shard(s), %lld samples, %lld tokens (%lld response), tokenizer %s "
        "(vocab %lld); every shard matches %s\n",
        dir.c_str(), m.shards.size(), static_cast<long long>(m.samples),
        static_cast<long long>(m.tokens), static_cast<long long>(c.response_tokens),
        m.tokenizer.c_str(), static_cast<long long>(m.vocab_size), kManifestFile);
    return 0;
}

struct RegenerateArgs {
    std::string target, prompts, output;
};

int run_regenerate(const RegenerateArgs& a, CommandContext& ctx) {
    // Locked and checked before the model loads; written in a staging sibling, swapped in at the
    // end, so an interrupted run leaves the directory as it was.
    StagedDirectory out(a.output, "output directory", "dflash data regenerate");
    DF_CHECK(!holds_files(out.target()), "output directory '{}' is not empty; choose a new one",
             a.output);
    const auto be = make_backend_from_settings(ctx);
    const TargetModel target = TargetModel::load(*be, a.target);
    const auto tok = load_tokenizer_for_model(a.target, chat_options_from_settings(ctx.settings));
    const auto prompts = read_prompts(a.prompts, tok.get(), target.config().vocab_size);
    RegenerateOptions ro;
    ro.generate = generate_options_from_settings(ctx.settings);
    ro.generate.stop_tokens = default_stop_tokens(target.config(), tok.get());
    ro.workers = static_cast<int>(runtime_options_from_settings(ctx.settings).devices);
    std::vector<std::vector<int32_t>> ids;
    for (const auto& p : prompts) ids.push_back(p.tokens);
    RegenerateStats st;
    const auto samples = regenerate_responses(target, ids, ro, ctx.log, &st);
    write_samples_shard(out.path(), samples, *tok, {a.prompts});
    out.commit();
    std::printf("regenerated %s: %lld samples, %lld prompt + %lld response tokens in %.1f s\n",
                a.output.c_str(), static_cast<long long>(st.samples),
                static_cast<long long>(st.prompt_tokens),
                static_cast<long long>(st.response_tokens), st.seconds);
    return 0;
}

}  // namespace

int cmd_data(CommandContext& ctx) {
    CLI::App app{"Tokenize JSONL text/chat data into training shards", "dflash data"};
    app.require_subcommand(1);

    PrepareOptions opt;
    std::vector<std::string> inputs;
    std::string output, tokenizer = "byte", model;
    auto* prep = app.add_subcommand(
        "prepare",
        "JSONL ({\"messages\"}, {\"conversations\"}, {\"prompt\", \"response\"} or {\"text\"} "
        "per line) -> *.dfshard, with the chat template of --model (chat.* settings)");
    prep->add_option("--input,-i", inputs, "JSONL file (repeat for several)")->required();
    prep->add_option("--output,-o", output, "output directory for the shards")->required();
    prep->add_option("--samples-per-shard", opt.samples_per_shard, "samples per shard file")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    auto* model_opt = prep->add_option(
        "--model", model,
        "model directory whose tokenizer (tokenizer.json) and chat template to use");
    prep->add_option("--tokenizer", tokenizer, "tokenizer by name, without --model: byte")
        ->capture_default_str()
        ->excludes(model_opt);
    prep->add_flag("--overwrite", opt.overwrite,
                   "replace a dataset already in the output directory (kept until the new one is "
                   "complete)");

    std::string verify_dir;
    auto* verify = app.add_subcommand(
        "verify", "check a dataset directory against its manifest.json, re-read every sample");
    verify->add_option("dir", verify_dir, "dataset directory")->required();

    RegenerateArgs regen;
    auto* rg = app.add_subcommand(
        "regenerate",
        "the target's own responses to a prompts JSONL -> *.dfshard (infer.* settings sample; "
        "runtime.devices workers)");
    rg->add_option("--target", regen.target, "target model directory")->required();
    rg->add_option("--prompts", regen.prompts,
                   "JSONL of {\"prompt\"}, {\"messages\"} or {\"prompt_ids\"}")
        ->required();
    rg->add_option("--output,-o", regen.output, "output directory for the shards")->required();

    if (!parse_command_args(app, ctx, "data")) return 0;
    if (prep->parsed()) {
        opt.inputs.assign(inputs.begin(), inputs.end());
        opt.output_dir = output;
        return run_prepare(opt, *prepare_tokenizer(model, tokenizer, ctx), ctx);
    }
    if (rg->parsed()) return run_regenerate(regen, ctx);
    return run_verify(verify_dir);
}

}  // namespace dflash::cli
