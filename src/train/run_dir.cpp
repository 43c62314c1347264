// Run directories (see run_dir.h). Tested by tests/train/resume_test.cpp and checkpoint_test.cpp.
#include "train/run_dir.h"

#include <fmt/format.h>

#include "config/dump.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "train/checkpoint.h"

namespace dflash::train {
namespace {

namespace fs = std::filesystem;

// Whether `dir` holds checkpoints (a `latest` file, or checkpoint-* directories without one).
bool holds_checkpoints(const fs::path& dir) {
    if (fs::exists(dir / kLatestFile)) return true;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().filename().string().starts_with("checkpoint-")) return true;
    return false;
}

void check_fresh_run_dir(const fs::path& run_dir, bool resuming) {
    if (resuming) return;
    DF_CHECK(!holds_checkpoints(run_dir),
             "the run directory '{}' already holds checkpoints; continue it with --resume {} "
             "or choose another --output",
             run_dir.string(), run_dir.string());
}

}  // namespace

std::optional<DirLock> lock_run_dir(const fs::path& run_dir, const std::string& kind, bool resuming,
                                    int process) {
    // In a multi-process run only process 0 writes the run directory (it may be shared).
    if (process != 0) return std::nullopt;
    if (!fs::exists(run_dir)) return std::nullopt;
    DirLock lock = DirLock::acquire(run_dir, "run directory", fmt::format("{} training", kind));
    check_fresh_run_dir(run_dir, resuming);
    return lock;
}

void prepare_run_dir(const fs::path& run_dir, const config::Settings& settings, bool resuming) {
    fs::create_directories(run_dir);
    check_fresh_run_dir(run_dir, resuming);
    write_text_atomic(run_dir / kRunSettingsFile, config::dump_toml(settings));
}

fs::path pick_run_dir(const fs::path& output, const std::optional<fs::path>& resume_from,
                      const fs::path& fallback) {
    if (!output.empty()) return output;
    if (resume_from) return resume_from->parent_path();
    return fallback;
}

}  // namespace dflash::train
