// Tiny random targets and drafters for tests (awkward sizes on purpose).
#pragma once

#include "model/drafter.h"
#include "model/hf_config.h"
#include "model/target.h"

namespace dflash::test {

// A tiny Qwen3-style (qk_norm) or Llama-style target.
inline TargetConfig tiny_target_config(bool qwen3 = true, int64_t layers = 3) {
    TargetConfig c;
    c.model_type = qwen3 ? "qwen3" : "llama";
    c.hidden_size = 24;
    c.intermediate_size = 40;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.vocab_size = 37;
    c.max_position_embeddings = 512;
    c.rms_norm_eps = 1e-6;
    c.rope.theta = 10000.0;
    if (!qwen3) {
        c.rope.scaling.type = RopeScalingType::llama3;
        c.rope.scaling.factor = 8.0;
        c.rope.scaling.low_freq_factor = 1.0;
        c.rope.scaling.high_freq_factor = 4.0;
        c.rope.scaling.original_max_position = 64;
    }
    c.tie_word_embeddings = !qwen3;
    c.attention_bias = false;
    c.qk_norm = qwen3;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

inline DrafterConfig tiny_drafter_config(const TargetConfig& t, int64_t layers = 2,
                                         int64_t block = 4) {
    return make_drafter_config(t, layers, block, /*mask_token_id=*/t.vocab_size - 1,
                               default_target_layer_ids(t.num_hidden_layers, 2));
}

}  // namespace dflash::test
