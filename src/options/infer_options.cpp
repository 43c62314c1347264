// infer.* -> GenerateOptions (see infer_options.h). Tested by tests/options/options_test.cpp and
// tests/infer/bench_test.cpp.
#include "options/infer_options.h"

#include "model/prepared_weights.h"

namespace dflash {

GenerateOptions generate_options_from_settings(const config::Settings& s) {
    GenerateOptions o;
    // The one rounding of the settings' doubles to the floats sampling computes with (ops.h).
    o.sampling.temperature = static_cast<float>(s.get<double>("infer.temperature"));
    o.sampling.top_k = s.get<int64_t>("infer.top_k");
    o.sampling.top_p = static_cast<float>(s.get<double>("infer.top_p"));
    o.max_new_tokens = s.get<int64_t>("infer.max_new_tokens");
    o.block_size = s.get<int64_t>("infer.block_size");
    o.max_context = s.get<int64_t>("infer.max_context");
    o.draft_sampling = s.get<bool>("infer.draft_sampling");
    o.confidence_threshold = s.get<double>("infer.dspark_confidence_threshold");
    o.seed = static_cast<uint64_t>(s.get<int64_t>("infer.seed"));
    o.draft_precision = parse_draft_precision(s.get<std::string>("infer.cpu_draft_precision"));
    o.target_panels = s.get<bool>("infer.cpu_target_panels");
    o.fused_decode = s.get<bool>("infer.cuda_fused_decode");
    return o;
}

}  // namespace dflash
