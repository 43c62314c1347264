// demo.* -> DemoDefaults (see demo_options.h). Tested by tests/options/options_test.cpp.
#include "options/demo_options.h"

namespace dflash {

DemoDefaults demo_defaults_from_settings(const config::Settings& s) {
    DemoDefaults o;
    o.output_dir = s.get<std::string>("demo.output_dir");
    o.quick = s.get<bool>("demo.quick");
    return o;
}

}  // namespace dflash
