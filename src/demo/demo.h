// `dflash demo`, the embedded default: on a machine with no model and no network, take a local
// text corpus (the project's own sources and docs), pretrain a small Qwen3-layout target on it,
// regenerate training responses with that target, train a DFlash drafter for it, and measure
// speculative decoding (tau, speed-up, losslessness) on held-out prompts.
// Tested by tests/cli/demo_slow_test.cpp (the --quick version).
#pragma once

#include <cstdio>
#include <filesystem>
#include <vector>

#include "config/settings.h"
#include "core/logging.h"
#include "infer/bench.h"
#include "train/trainer.h"

namespace dflash::demo {

struct DemoOptions {
    std::filesystem::path output_dir;                 // every artefact goes here
    bool quick = false;                               // the one-minute version (CI smoke test)
    std::vector<std::filesystem::path> corpus_roots;  // empty: the project's docs/, src/, tests/
};

struct DemoReport {
    std::string backend;  // where the training and decoding ran ("cpu", "cuda:0")
    int64_t corpus_documents = 0;
    int64_t corpus_bytes = 0;
    train::TrainSummary target;
    train::TrainSummary drafter;
    std::string drafter_architecture = "DFlash";  // "DFlash" or "DFlash2" (drafter.architecture)
    std::vector<double> drafter_first_acc;        // per block position, first logged step
    std::vector<std::pair<int64_t, double>> eval_tau;  // real tau on held-out prompts, by step
    BenchReport bench;
    double seconds = 0;
};

// Where the default corpus lives: the source tree this binary was built from.
std::vector<std::filesystem::path> default_corpus_roots();

// Runs every stage, printing progress for a person to `out`. Settings the user left at their
// defaults are replaced by the demo's choices (source "demo"); anything set explicitly wins.
DemoReport run_demo(const DemoOptions& opt, const config::Settings& settings, const Logger& log,
                    std::FILE* out);

}  // namespace dflash::demo
