// `dflash pretrain`: trains a small Qwen3-architecture target from scratch on a tokenized dataset;
// a thin layer over train::run_pretraining (src/train/pretraining.h). Tested by
// tests/train/train_cli_test.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "core/worker_pool.h"
#include "options/training.h"
#include "train/pretraining.h"
#include "train/signal_watcher.h"

namespace dflash::cli {

int cmd_pretrain(CommandContext& ctx) {
    CLI::App app{"Train a small Qwen3-architecture target model from scratch.", "dflash pretrain"};
    app.footer(
        "Model dims and length are settings (pretrain.*); batch, schedule, optimizer, logging "
        "and checkpoints use train.* (`dflash config list 'pretrain|train'`).\n"
        "Ctrl-C saves a checkpoint at the end of the current step; --resume continues from it.");
    train::PretrainJob job;
    app.add_option("--data", job.data_dir, "training data directory (`dflash data prepare`)")
        ->required();
    app.add_option("--eval-data", job.eval_data_dir,
                   "held-out data directory (default: train.eval_data)");
    app.add_option("--output", job.output_dir,
                   "run directory (default: pretrain.output_dir, or the resumed run's)");
    app.add_option("--resume", job.resume,
                   "continue from a checkpoint or a run directory's latest");
    if (!parse_command_args(app, ctx, "pretrain")) return 0;
    // Armed before anything starts a thread, so that every later thread blocks the signals.
    StopSource stop;
    const train::SignalWatcher watcher(train::stop_on_signal(stop, ctx.log));
    job.hooks.stop = &stop;
    job.hooks.handle_signals = false;
    const train::TrainSummary s = pretrain_from_settings(job, ctx.settings, ctx.log);
    if (s.process != 0) return report_other_process(s);
    std::printf("%s after step %lld/%lld: loss %.4f (first %.4f), next-token acc %.3f, %.0fs\n",
                s.interrupted ? "stopped" : "trained", static_cast<long long>(s.steps),
                static_cast<long long>(s.total_steps), s.final_loss, s.first_loss,
                s.acc.empty() ? 0.0 : s.acc.front(), s.seconds);
    if (s.final_eval)
        std::printf("held-out: loss %.4f, next-token acc %.3f\n", s.final_eval->loss,
                    s.final_eval->acc.empty() ? 0.0 : s.final_eval->acc.front());
    std::printf("target:   %s\nmetrics:  %s\n", s.model_dir.c_str(), s.metrics_path.c_str());
    if (s.interrupted) {
        // The checkpoint carries the run's settings, so this continues the same run.
        std::string next = "dflash pretrain --data " + shell_quote(job.data_dir);
        if (!job.eval_data_dir.empty()) next += " --eval-data " + shell_quote(job.eval_data_dir);
        std::printf("next:     %s --resume %s\n", next.c_str(), shell_quote(s.run_dir).c_str());
    } else {
        std::printf("next:     dflash train --target %s --data %s\n",
                    shell_quote(s.model_dir).c_str(), shell_quote(job.data_dir).c_str());
    }
    return train_exit_status(s);
}

}  // namespace dflash::cli
