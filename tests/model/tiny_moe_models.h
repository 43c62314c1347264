// Tiny random Qwen3-MoE and gpt-oss targets for the model tests: every dimension differs from the
// others (2I_e != D, H*Dh != D) so a layout mistake fails loudly.
#pragma once

#include "support/tiny_models.h"

namespace dflash::test {

// The tiny Qwen3 target (3 layers, D 24) with layer 1 dense (mlp_only_layers) and the others 5
// experts of width 12, top-2.
inline TargetConfig tiny_qwen3_moe_config(bool norm_topk_prob = true) {
    TargetConfig c = tiny_target_config(true, 3);
    c.model_type = "qwen3_moe";
    c.num_experts = 5;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 12;
    c.norm_topk_prob = norm_topk_prob;
    c.decoder_sparse_step = 1;
    c.mlp_only_layers = {1};
    return c;
}

// 4 layers alternating sliding (window 3) and full attention, sinks, attention biases, YaRN
// (factor 4 over an original context of 8), 4 experts of width 32 (MXFP4 needs multiples of
// 32), top-2, H*Dh = 48 != D = 64.
inline TargetConfig tiny_gpt_oss_config() {
    TargetConfig c = tiny_target_config(false, 4);
    c.model_type = "gpt_oss";
    c.hidden_size = 64;
    c.intermediate_size = 32;
    c.num_attention_heads = 6;
    c.vocab_size = 41;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5;
    c.rope.theta = 150000.0;
    c.rope.scaling = RopeScaling();
    c.rope.scaling.type = RopeScalingType::yarn;
    c.rope.scaling.factor = 4.0;
    c.rope.scaling.original_max_position = 8;
    c.rope.scaling.truncate = false;
    c.tie_word_embeddings = false;
    c.attention_bias = true;
    c.attention_sinks = true;
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 32;
    c.norm_topk_prob = true;
    c.swiglu_limit = 7.0;
    c.sliding_window = 3;
    for (int i = 0; i < 4; ++i)
        c.layer_types.emplace_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    return c;
}

}  // namespace dflash::test
