// cuda_graphs.* -> GraphOptions (see cuda_graphs_options.h). Tested by
// tests/options/options_test.cpp.
#include "options/cuda_graphs_options.h"

namespace dflash {

GraphOptions graph_options_from_settings(const config::Settings& s) {
    GraphOptions g;
    g.enabled = s.get<bool>("cuda_graphs.enabled");
    g.mode = parse_capture_mode(s.get<std::string>("cuda_graphs.capture_mode"));
    g.warmup_runs = static_cast<int>(s.get<int64_t>("cuda_graphs.warmup_runs"));
    g.max_rerecords = static_cast<int>(s.get<int64_t>("cuda_graphs.max_rerecords"));
    g.max_graphs = static_cast<int>(s.get<int64_t>("cuda_graphs.max_graphs"));
    g.programmatic_launch = s.get<bool>("cuda_graphs.programmatic_launch");
    return g;
}

}  // namespace dflash
