// The cuda_graphs.* settings as the CUDA backend's graph-cache options (GraphOptions,
// backend/step_graph.h; warn left empty): the one place they are read by key.
// Tested by tests/options/options_test.cpp.
#pragma once

#include "backend/step_graph.h"
#include "config/settings.h"

namespace dflash {

GraphOptions graph_options_from_settings(const config::Settings& s);

}  // namespace dflash
