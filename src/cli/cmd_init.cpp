// `dflash init`: a randomly initialised model in the HF format, of any size — a Qwen3- or
// Llama-layout target from the pretrain.* settings, or a DFlash drafter for a given target from the
// drafter.* settings (drafter.architecture=dflash2: a DFlash2 drafter, also converted from a
// DFlash one with --from-drafter). What tests, experiments and a first `dflash train
// --init-drafter` start from. Tested by tests/cli/init_cli_test.cpp.
#include <CLI/CLI.hpp>

#include <fmt/ranges.h>
#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "core/dir_lock.h"
#include "core/staged_dir.h"
#include "model/drafter.h"
#include "model/target.h"
#include "options/drafter_options.h"
#include "options/pretrain_options.h"
#include "options/runtime_options.h"
#include "tokenizer/model_tokenizer.h"
#include "train/drafter_training.h"
#include "train/pretraining.h"

namespace dflash::cli {

namespace {

// Locked before the emptiness check, so two inits into one directory cannot both pass it; taken
// once the model is made, so a refused init creates nothing.
DirLock lock_empty_output(const std::filesystem::path& dir) {
    DirLock lock = DirLock::acquire(dir, "output directory", "dflash init");
    DF_CHECK(!holds_files(dir), "'{}' is not empty; choose a new output directory", dir.string());
    return lock;
}

// `dflash init drafter`: a random DFlash drafter from the drafter.* settings, or the one in
// --from-drafter; with drafter.architecture=dflash2, converted (DrafterModel::from_dflash).
DrafterModel initial_drafter(Backend& be, const TargetModel& target, const Tokenizer& tok,
                             const std::string& from, const train::DrafterOptions& s,
                             uint64_t seed) {
    // A fresh drafter of either architecture is made as `dflash train` makes one.
    if (from.empty()) return train::make_initial_drafter(be, target, tok, s, seed);
    DrafterModel d = DrafterModel::load(be, from);
    DF_CHECK(!d.config().dflash2(), "'{}' is already a DFlash2 drafter", from);
    DF_CHECK(s.architecture == "dflash2",
             "--from-drafter converts a DFlash drafter to DFlash2: add --set "
             "drafter.architecture=dflash2");
    const auto mismatch = drafter_target_mismatches(d.config(), target.config());
    DF_CHECK(mismatch.empty(), "'{}' does not fit the target: {}", from, mismatch.front());
    return DrafterModel::from_dflash(be, d, train::dflash2_config(d.config(), s), seed);
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
    std::string from_drafter;
    dft->add_option("--from-drafter", from_drafter,
                    "a DFlash drafter directory to convert (with drafter.architecture=dflash2): "
                    "its weights, plus identity convolutions and a neutral selector");
    for (auto* sub : {tgt, dft})
        sub->add_option("--dtype", dtype, "storage dtype: bf16 or f32")->capture_default_str();
    if (!parse_command_args(app, ctx, "init")) return 0;
    // Checked again under the lock, once the model is made.
    DF_CHECK(!std::filesystem::exists(output) ||
                 (std::filesystem::is_directory(output) && !holds_files(output)),
             "'{}' is not empty; choose a new output directory", output);
    const DType store = parse_dtype(dtype);
    const RuntimeOptions rt = runtime_options_from_settings(ctx.settings);
    const uint64_t seed = rt.seed;
    // Weights are drawn and written in host memory, on runtime.threads threads (0: every core;
    // fill_normal_hash draws the same weights on any number).
    const std::unique_ptr<Backend> host = make_cpu_backend(
        rt.threads > 0 ? static_cast<int>(rt.threads)
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    if (tgt->parsed()) {
        const auto tok = make_tokenizer(tokenizer);
        const TargetConfig cfg = train::pretrain_target_config(
            pretrain_options_from_settings(ctx.settings), *tok, vocab);
        const TargetModel m = TargetModel::random(*host, cfg, seed);
        const DirLock lock = lock_empty_output(output);
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
    const DrafterModel d = initial_drafter(*host, target, *tok, from_drafter,
                                           drafter_options_from_settings(ctx.settings), seed);
    const DirLock lock = lock_empty_output(output);
    d.save(output, store);
    save_tokenizer_spec(output, *tok);
    std::printf(
        "drafter: %s (%s, %lld layers, block %lld, %zu target features, %.2fM parameters)\n",
        output.c_str(), d.config().dflash2() ? "DFlash2" : "DFlash",
        static_cast<long long>(d.config().layer.num_hidden_layers),
        static_cast<long long>(d.block_size()), d.config().target_layer_ids.size(),
        d.params().numel() / 1e6);
    return 0;
}

}  // namespace dflash::cli
