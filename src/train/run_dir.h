// A run directory's life: where a run writes, its lock (one writer, core/dir_lock.h), the refusal
// of a fresh run into a directory that already holds checkpoints, and settings.toml. Tested by
// tests/train/resume_test.cpp and checkpoint_test.cpp.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "config/settings.h"
#include "core/dir_lock.h"

namespace dflash::train {

// Locks a run directory that exists and, for a fresh run, refuses one that already holds
// checkpoints: what run_trainer would refuse, found before minutes of model loading rather than
// after. A directory that does not exist yet is left to run_trainer (nullopt), so a run refused
// while loading leaves nothing behind; so is every process but process 0 of a multi-process run
// (`process`, launch.rank), which never writes there.
std::optional<DirLock> lock_run_dir(const std::filesystem::path& run_dir, const std::string& kind,
                                    bool resuming, int process);

// Makes <run> for a fresh run (refusing one that already holds checkpoints: a `latest` file or
// checkpoint-* directories) and writes <run>/settings.toml.
void prepare_run_dir(const std::filesystem::path& run_dir, const config::Settings& settings,
                     bool resuming);

// Where a run writes: `output` when given, else the run directory of the checkpoint it resumes,
// else `fallback` (the command's output_dir setting).
std::filesystem::path pick_run_dir(const std::filesystem::path& output,
                                   const std::optional<std::filesystem::path>& resume_from,
                                   const std::filesystem::path& fallback);

}  // namespace dflash::train
