// `dflash init`: a randomly initialised model in the HF format, of any size — a Qwen3- or
// Llama-layout target from the pretrain.* settings, or a DFlash drafter for a given target from the
// drafter.* settings. What tests, experiments and a first `dflash train --init-drafter` start from.
// Tested by tests/cli/init_cli_test.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "model/drafter.h"
#include "model/target.h"
#include "tokenizer/model_tokenizer.h"
#include "train/drafter_training.h"
#include "train/pretraining.h"

namespace dflash::cli {

namespace {

void require_empty(const std::filesystem::path& dir) {
    DF_CHECK(!std::filesystem::exists(dir) || std::filesystem::is_empty(dir),
             "'{}' is not empty; choose a new output directory", dir.string());
}

DType parse_dtype(const std::string& s) {
    DF_CHECK(s == "bf16" || s == "f32", "--dtype {} is not one of bf16, f32", s);
    return s == "bf16" ? DType::bf16 : DType::f32;
}

}  // namespace

int cmd_init(CommandContext& ctx) {
    CLI::App app{"Write a randomly initialised model (HF layout) for tests and experiments",
                 "dflash init"};
    app.require_subcommand(1);
    std::string output, target_dir, tokenizer = "byte", dtype = "bf16";
    int64_t vocab = 0;
    auto* tgt = app.add_subcommand(
        "target",
        "a Qwen3- or Llama-layout target (pretrain.architecture) with the pretrain.* dims "
        "(--pretrain.hidden_size ...)");
    tgt->add_option("--output,-o", output, "directory to write")->required();
    tgt->add_option("--tokenizer", tokenizer, "tokenizer it is paired with")->capture_default_str();
    tgt->add_option("--vocab", vocab, "vocabulary size (default: the tokenizer's)");
    auto* dft =
        app.add_subcommand("drafter", "a DFlash drafter for --target with the drafter.* settings");
    dft->add_option("--target", target_dir, "target model directory")->required();
    dft->add_option("--output,-o", output, "directory to write")->required();
    for (auto* sub : {tgt, dft})
        sub->add_option("--dtype", dtype, "storage dtype: bf16 or f32")->capture_default_str();
    if (!parse_command_args(app, ctx, "init")) return 0;
    require_empty(output);
    const DType store = parse_dtype(dtype);
    const uint64_t seed = static_cast<uint64_t>(ctx.settings.get<int64_t>("runtime.seed"));
    // Weights are drawn and written in host memory.
    const std::unique_ptr<Backend> host = make_cpu_backend(1);
    if (tgt->parsed()) {
        const auto tok = make_tokenizer(tokenizer);
        const TargetConfig cfg = train::pretrain_target_config(ctx.settings, *tok, vocab);
        const TargetModel m = TargetModel::random(*host, cfg, seed);
        m.save(output, store);
        save_tokenizer_spec(output, *tok);
        std::printf("target: %s (%lld layers, hidden %lld, vocab %lld, %.2fM parameters)\n",
                    output.c_str(), static_cast<long long>(cfg.num_hidden_layers),
                    static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size),
                    m.params().numel() / 1e6);
        return 0;
    }
    const TargetModel target = TargetModel::load(*host, target_dir);
    const auto tok = load_tokenizer_for_model(target_dir);
    const DrafterModel d = train::make_initial_drafter(*host, target, *tok, ctx.settings);
    d.save(output, store);
    save_tokenizer_spec(output, *tok);
    std::printf("drafter: %s (%lld layers, block %lld, %zu target features, %.2fM parameters)\n",
                output.c_str(), static_cast<long long>(d.config().layer.num_hidden_layers),
                static_cast<long long>(d.block_size()), d.config().target_layer_ids.size(),
                d.params().numel() / 1e6);
    return 0;
}

}  // namespace dflash::cli
