// pretrain.* -> train::PretrainOptions (see pretrain_options.h). Tested by
// tests/options/options_test.cpp.
#include "options/pretrain_options.h"

namespace dflash {

train::PretrainOptions pretrain_options_from_settings(const config::Settings& s) {
    train::PretrainOptions o;
    o.architecture = s.get<std::string>("pretrain.architecture");
    o.rope_scaling = s.get<std::string>("pretrain.rope_scaling");
    o.rope_theta = s.get<double>("pretrain.rope_theta");
    o.tie_word_embeddings = s.get<bool>("pretrain.tie_word_embeddings");
    o.hidden_size = s.get<int64_t>("pretrain.hidden_size");
    o.num_layers = s.get<int64_t>("pretrain.num_layers");
    o.num_heads = s.get<int64_t>("pretrain.num_heads");
    o.num_kv_heads = s.get<int64_t>("pretrain.num_kv_heads");
    o.head_dim = s.get<int64_t>("pretrain.head_dim");
    o.intermediate_size = s.get<int64_t>("pretrain.intermediate_size");
    o.lr = s.get<double>("pretrain.lr");
    o.max_length = s.get<int64_t>("pretrain.max_length");
    o.epochs = s.get<int64_t>("pretrain.epochs");
    o.max_steps = s.get<int64_t>("pretrain.max_steps");
    o.loss_on_prompt = s.get<bool>("pretrain.loss_on_prompt");
    o.output_dir = s.get<std::string>("pretrain.output_dir");
    return o;
}

}  // namespace dflash
