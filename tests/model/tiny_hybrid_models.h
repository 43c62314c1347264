// Tiny random hybrid linear-attention targets (qwen3_next, qwen3_5, qwen3_5_moe) for the model
// tests: every dimension differs from the others (dk != dv, H*Dh != D, 2I_e != D, Hv != Hk) and
// the rotary is partial (4 of 8 dims), so a layout or split mistake fails loudly.
#pragma once

#include "support/tiny_models.h"

namespace dflash::test {

// qwen3_5: 4 layers, 3 linear then 1 full attention (the published period), dense MLPs.
inline TargetConfig tiny_qwen3_5_config() {
    TargetConfig c = tiny_target_config(true, 4);
    c.model_type = "qwen3_5";
    c.tie_word_embeddings = false;
    c.layer_types = {"linear_attention", "linear_attention", "linear_attention", "full_attention"};
    c.partial_rotary_factor = 0.5;
    c.attn_output_gate = true;
    c.linear_num_key_heads = 2;
    c.linear_num_value_heads = 4;
    c.linear_key_head_dim = 6;
    c.linear_value_head_dim = 10;
    c.linear_conv_kernel_dim = 4;
    return c;
}

// qwen3_next: layers alternating linear / full, layer 2 dense (mlp_only_layers), the others 5
// experts of width 12, top-2, with a shared expert of width 20.
inline TargetConfig tiny_qwen3_next_config() {
    TargetConfig c = tiny_qwen3_5_config();
    c.model_type = "qwen3_next";
    c.layer_types = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
    c.num_experts = 5;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 12;
    c.shared_expert_intermediate_size = 20;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {2};
    return c;
}

// qwen3_5_moe: every layer 4 experts of width 12, top-2 (always renormalised), shared 20.
inline TargetConfig tiny_qwen3_5_moe_config() {
    TargetConfig c = tiny_qwen3_5_config();
    c.model_type = "qwen3_5_moe";
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 12;
    c.shared_expert_intermediate_size = 20;
    c.norm_topk_prob = true;
    return c;
}

}  // namespace dflash::test
