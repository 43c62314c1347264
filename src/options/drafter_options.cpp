// drafter.* -> train::DrafterOptions (see drafter_options.h). Tested by
// tests/options/options_test.cpp.
#include "options/drafter_options.h"

namespace dflash {

train::DrafterOptions drafter_options_from_settings(const config::Settings& s) {
    train::DrafterOptions o;
    o.architecture = s.get<std::string>("drafter.architecture");
    o.block_size = s.get<int64_t>("drafter.block_size");
    o.num_layers = s.get<int64_t>("drafter.num_layers");
    o.target_layer_ids = s.get<std::vector<int64_t>>("drafter.target_layer_ids");
    o.mask_token_id = s.get<int64_t>("drafter.mask_token_id");
    o.num_target_features = s.get<int64_t>("drafter.num_target_features");
    o.conv_kernel_size = s.get<int64_t>("drafter.conv_kernel_size");
    o.conv_group_size = s.get<int64_t>("drafter.conv_group_size");
    o.selector_rank = s.get<int64_t>("drafter.selector_rank");
    o.selector_top_k = s.get<int64_t>("drafter.selector_top_k");
    o.markov_rank = s.get<int64_t>("drafter.markov_rank");
    o.markov_head_type = s.get<std::string>("drafter.markov_head_type");
    o.confidence_head = s.get<bool>("drafter.confidence_head");
    o.confidence_head_with_markov = s.get<bool>("drafter.confidence_head_with_markov");
    o.dialect = s.get<std::string>("drafter.dialect");
    o.layer_types = s.get<std::vector<std::string>>("drafter.layer_types");
    o.sliding_window = s.get<int64_t>("drafter.sliding_window");
    return o;
}

}  // namespace dflash
