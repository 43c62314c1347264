// What is in a target, drafter or checkpoint directory (`dflash inspect`): kind, architecture,
// parameter counts by group, dtypes and the tensor list, checked against the layout the config
// implies. Every problem found is listed (missing config.json, unreadable weights, missing,
// unexpected or misshapen tensors, config inconsistencies, NaN or infinite weights), not just the
// first. Lives in the
// library so tests call it directly; src/cli/cmd_inspect.cpp is the command around it.
// Tested by tests/cli/inspect_cli_test.cpp.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace dflash {

struct InspectOptions {
    bool list_tensors = true;
    // Read every float tensor and report NaN or infinite values (a pass over all the weights).
    bool check_values = true;
    // More of the report from a layer above this one (`dflash inspect` adds a checkpoint's
    // training state, train/checkpoint.h): lines appended after the model's, and problems.
    std::function<void(const std::filesystem::path& dir, std::string& text,
                       std::vector<std::string>& problems)>
        more = nullptr;
};

struct InspectReport {
    std::string kind;                   // "target", "drafter" or "unknown"
    std::string text;                   // the whole report, as printed
    std::vector<std::string> problems;  // each a full sentence; empty when the directory is sound
    bool ok() const { return problems.empty(); }
};

InspectReport inspect_directory(const std::filesystem::path& dir, const InspectOptions& opts = {});

// The printed report alone.
inline std::string inspect_report(const std::filesystem::path& dir) {
    return inspect_directory(dir).text;
}

}  // namespace dflash
