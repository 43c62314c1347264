// Target and drafter tensor layouts. Tested by tests/model/tensor_layout_test.cpp.
#include "model/tensor_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "core/checkpoint_io.h"
#include "core/error.h"

namespace dflash {

namespace {

// The tensors of one decoder layer under `prefix` ("model.layers.3." or "layers.3.").
void append_layer(std::vector<TensorSpec>& out, const std::string& prefix, const TargetConfig& c) {
    const int64_t d = c.hidden_size, dh = c.head_dim, i = c.intermediate_size;
    const int64_t q = c.num_attention_heads * dh, kv = c.num_key_value_heads * dh;
    auto add = [&](const char* name, std::vector<int64_t> shape) {
        out.push_back({prefix + name, std::move(shape)});
    };
    add("input_layernorm.weight", {d});
    add("self_attn.q_proj.weight", {q, d});
    if (c.qkv_bias()) add("self_attn.q_proj.bias", {q});
    add("self_attn.k_proj.weight", {kv, d});
    if (c.qkv_bias()) add("self_attn.k_proj.bias", {kv});
    add("self_attn.v_proj.weight", {kv, d});
    if (c.qkv_bias()) add("self_attn.v_proj.bias", {kv});
    add("self_attn.o_proj.weight", {d, q});
    // HF LlamaAttention/Qwen3Attention build o_proj with bias=attention_bias as well (Qwen2: none).
    if (c.o_bias()) add("self_attn.o_proj.bias", {d});
    if (c.qk_norm) {
        add("self_attn.q_norm.weight", {dh});
        add("self_attn.k_norm.weight", {dh});
    }
    add("post_attention_layernorm.weight", {d});
    add("mlp.gate_proj.weight", {i, d});
    add("mlp.up_proj.weight", {i, d});
    add("mlp.down_proj.weight", {d, i});
}

}  // namespace

int64_t TensorSpec::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::vector<TensorSpec> target_tensor_specs(const TargetConfig& c) {
    std::vector<TensorSpec> out;
    out.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        append_layer(out, fmt::format("model.layers.{}.", l), c);
    out.push_back({"model.norm.weight", {c.hidden_size}});
    if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
    return out;
}

std::vector<TensorSpec> drafter_tensor_specs(const DrafterConfig& c) {
    const int64_t d = c.layer.hidden_size;
    std::vector<TensorSpec> out;
    out.push_back({"fc.weight", {d, c.num_features() * d}});
    out.push_back({"hidden_norm.weight", {d}});
    const int64_t k = c.d2.conv_kernel_size, g = c.d2.groups(d), r = c.d2.selector_rank;
    for (int64_t l = 0; l < c.layer.num_hidden_layers; ++l) {
        append_layer(out, fmt::format("layers.{}.", l), c.layer);
        if (!c.dflash2()) continue;
        for (const char* conv : {"attention_conv", "mlp_conv"}) {
            out.push_back({fmt::format("layers.{}.{}.base_kernel", l, conv), {2, k, d}});
            out.push_back(
                {fmt::format("layers.{}.{}.kernel_projection.weight", l, conv), {2 * k * g, d}});
        }
    }
    out.push_back({"norm.weight", {d}});
    if (c.dflash2()) {
        // The codebooks' stored names carry no ".weight" (docs/formats.md "DFlash2 drafter
        // directory").
        out.push_back({"candidate_selector.hidden_projection.weight", {r, d}});
        out.push_back({"candidate_selector.predecessor_codebook", {c.layer.vocab_size, r}});
        out.push_back({"candidate_selector.successor_codebook", {c.layer.vocab_size, r}});
    }
    return out;
}

ParamGroup param_group(std::string_view n) {
    if (n.find("embed_tokens") != std::string_view::npos || n.starts_with("lm_head."))
        return ParamGroup::embeddings;
    if (n.ends_with("norm.weight")) return ParamGroup::norms;
    if (n.find("self_attn.") != std::string_view::npos) return ParamGroup::attention;
    if (n.find("mlp.") != std::string_view::npos) return ParamGroup::mlp;
    if (n.starts_with("fc.")) return ParamGroup::fc;
    return ParamGroup::other;
}

void check_model_files(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs) {
    if (!std::filesystem::exists(dir / kSingleCheckpointFile) &&
        !std::filesystem::exists(dir / kCheckpointIndexFile))
        return;
    double bytes = 0;
    for (const auto& s : specs) bytes += static_cast<double>(s.numel()) * 4.0;
    const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                          static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    DF_CHECK(memory <= 0 || bytes <= memory,
             "'{}': the model needs {:.3g} GB for its weights in f32, more than this machine's "
             "{:.3g} GB of memory",
             dir.string(), bytes / 1e9, memory / 1e9);
    const CheckpointReader r = CheckpointReader::open(dir);
    std::vector<std::string> wrong;
    size_t count = 0;
    for (const auto& s : specs) {
        std::string what;
        if (!r.has(s.name))
            what = fmt::format("'{}' [{}] is missing", s.name, fmt::join(s.shape, ", "));
        else if (r.shape(s.name) != s.shape)
            what = fmt::format("'{}' is [{}] but the config implies [{}]", s.name,
                               fmt::join(r.shape(s.name), ", "), fmt::join(s.shape, ", "));
        if (what.empty()) continue;
        if (++count <= 3) wrong.push_back(what);
    }
    if (count > 3) wrong.push_back(fmt::format("and {} more", count - 3));
    DF_CHECK(wrong.empty(),
             "the weights in '{}' do not match its config.json: {}; `dflash inspect {}` lists "
             "every difference",
             dir.string(), fmt::join(wrong, "; "), dir.string());
}

std::string_view param_group_name(ParamGroup g) {
    switch (g) {
        case ParamGroup::embeddings:
            return "embeddings";
        case ParamGroup::attention:
            return "attention";
        case ParamGroup::mlp:
            return "mlp";
        case ParamGroup::norms:
            return "norms";
        case ParamGroup::fc:
            return "fc";
        case ParamGroup::other:
            return "other";
    }
    return "?";
}

}  // namespace dflash
