// `dflash train`: trains a DFlash drafter for a target on a tokenized dataset; a thin layer over
// train::run_drafter_training (src/train/drafter_training.h), its settings typed by
// src/options/training.h. Tested by
// tests/train/train_cli_test.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "core/error.h"
#include "core/worker_pool.h"
#include "options/drafter_options.h"
#include "options/training.h"
#include "train/drafter_training.h"
#include "train/signal_watcher.h"

namespace dflash::cli {

int cmd_train(CommandContext& ctx) {
    CLI::App app{"Train a DFlash drafter for a target model on a tokenized dataset.",
                 "dflash train"};
    app.footer(
        "Hyper-parameters are settings (train.*, drafter.*, runtime.*): `dflash config list "
        "train` lists them; set them with --train.lr 3e-4, --set KEY=VALUE or --config FILE.\n"
        "Ctrl-C saves a checkpoint at the end of the current step; --resume continues from it.");
    train::DrafterTrainJob job;
    app.add_option("--target", job.target_dir, "target model directory (HF layout)")->required();
    app.add_option("--data", job.data_dir, "training data directory (`dflash data prepare`)")
        ->required();
    app.add_option("--eval-data", job.eval_data_dir,
                   "held-out data directory (default: train.eval_data)");
    app.add_option("--eval-prompts", job.eval_prompts,
                   "prompts JSONL decoded speculatively at each evaluation, for the real "
                   "acceptance length (default: train.eval_prompts)");
    app.add_option("--output", job.output_dir,
                   "run directory (default: train.output_dir, or the resumed run's)");
    app.add_option("--resume", job.resume,
                   "continue from a checkpoint or a run directory's latest");
    app.add_option("--init-drafter", job.init_drafter,
                   "start from this drafter instead of a random one");
    if (!parse_command_args(app, ctx, "train")) return 0;
    DF_CHECK(job.resume.empty() || job.init_drafter.empty(),
             "give either --resume (continue a run) or --init-drafter (a new run from a "
             "drafter), not both");
    // Armed before anything starts a thread, so that every later thread blocks the signals.
    StopSource stop;
    const train::SignalWatcher watcher(train::stop_on_signal(stop, ctx.log));
    job.hooks.stop = &stop;
    job.hooks.handle_signals = false;
    const train::TrainSummary s = train_drafter_from_settings(job, ctx.settings, ctx.log);
    if (s.process != 0) return report_other_process(s);
    std::printf("%s after step %lld/%lld: loss %.4f (first %.4f), acc@1 %.3f, tau~%.2f, %.0fs\n",
                s.interrupted ? "stopped" : "trained", static_cast<long long>(s.steps),
                static_cast<long long>(s.total_steps), s.final_loss, s.first_loss,
                s.acc.empty() ? 0.0 : s.acc.front(), s.tau_implied, s.seconds);
    if (s.final_eval && s.final_eval->has_loss)
        std::printf("held-out: loss %.4f, acc@1 %.3f, tau~%.2f\n", s.final_eval->loss,
                    s.final_eval->acc.empty() ? 0.0 : s.final_eval->acc.front(),
                    s.final_eval->tau_implied);
    if (s.final_eval && s.final_eval->decode)
        std::printf("decoding: tau %.2f over %lld prompts (%lld steps)\n",
                    s.final_eval->decode->tau(),
                    static_cast<long long>(s.final_eval->decode->prompts),
                    static_cast<long long>(s.final_eval->decode->steps));
    std::printf("drafter:  %s\nmetrics:  %s\n", s.model_dir.c_str(), s.metrics_path.c_str());
    if (s.interrupted) {
        // The checkpoint carries the run's settings, so this continues the same run.
        std::string next = "dflash train --target " + shell_quote(job.target_dir) + " --data " +
                           shell_quote(job.data_dir);
        if (!job.eval_data_dir.empty()) next += " --eval-data " + shell_quote(job.eval_data_dir);
        if (!job.eval_prompts.empty()) next += " --eval-prompts " + shell_quote(job.eval_prompts);
        std::printf("next:     %s --resume %s\n", next.c_str(), shell_quote(s.run_dir).c_str());
    } else {
        std::printf("next:     dflash bench --target %s --drafter %s\n",
                    shell_quote(job.target_dir).c_str(), shell_quote(s.model_dir).c_str());
    }
    return train_exit_status(s);
}

}  // namespace dflash::cli
