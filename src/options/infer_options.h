// The infer.* settings as GenerateOptions (infer/spec_decode.h: temperature, top_k, top_p,
// max_new_tokens, max_context, block_size, draft_sampling, seed, cpu_draft_precision; stop tokens
// are left to the caller): the one place they are read by key.
// Tested by tests/options/options_test.cpp and tests/infer/bench_test.cpp.
#pragma once

#include "config/settings.h"
#include "infer/spec_decode.h"

namespace dflash {

GenerateOptions generate_options_from_settings(const config::Settings& s);

}  // namespace dflash
