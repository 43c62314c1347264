// The demo.* settings: the defaults of `dflash demo`'s --output and --quick. The struct lives
// here, not in src/demo, because the demo layer sits above this one and only the command reads
// them. Tested by tests/options/options_test.cpp.
#pragma once

#include <filesystem>

#include "config/settings.h"

namespace dflash {

struct DemoDefaults {
    std::filesystem::path output_dir;  // demo.output_dir
    bool quick = false;                // demo.quick
};

DemoDefaults demo_defaults_from_settings(const config::Settings& s);

}  // namespace dflash
