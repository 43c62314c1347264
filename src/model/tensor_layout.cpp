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

std::string LayoutDifference::sentence() const {
    switch (kind) {
        case Kind::missing:
            return fmt::format("missing tensor '{}' [{}]", name, fmt::join(expected, ", "));
        case Kind::misshapen:
            return fmt::format("tensor '{}' has shape [{}] but the config implies [{}]", name,
                               fmt::join(stored, ", "), fmt::join(expected, ", "));
        case Kind::unexpected:
            return fmt::format(
                "unexpected tensor '{}' [{}] (not part of the layout the config describes)", name,
                fmt::join(stored, ", "));
        case Kind::stored_embedding:
            return fmt::format(
                "unexpected tensor '{}' [{}]: a DFlash drafter borrows the target's embeddings "
                "and lm_head and must not store them",
                name, fmt::join(stored, ", "));
        case Kind::wrong_dtype:
            return fmt::format("tensor '{}' is {}; weights must be F32, BF16 or F16", name, dtype);
    }
    return name;
}

LayoutComparison compare_layout(const std::vector<TensorSpec>& layout,
                                const std::map<std::string, StoredTensor>& stored,
                                bool tied_embeddings, bool drafter) {
    using Kind = LayoutDifference::Kind;
    LayoutComparison out;
    std::map<std::string, const TensorSpec*> want;
    for (const auto& s : layout) want[s.name] = &s;
    for (const auto& s : layout) {
        const auto it = stored.find(s.name);
        if (it == stored.end())
            out.differences.push_back({Kind::missing, s.name, {}, s.shape, ""});
        else if (it->second.shape != s.shape)
            out.differences.push_back(
                {Kind::misshapen, s.name, it->second.shape, s.shape, it->second.dtype});
    }
    for (const auto& [name, t] : stored) {
        if (want.count(name)) {
            if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
                out.differences.push_back({Kind::wrong_dtype, name, t.shape, {}, t.dtype});
        } else if (name.ends_with("rotary_emb.inv_freq")) {
            out.notes.push_back(fmt::format("'{}' is a RoPE buffer; ignored", name));
        } else if (tied_embeddings && name == "lm_head.weight") {
            out.notes.push_back(
                "lm_head.weight is stored although tie_word_embeddings is true; the tied "
                "embedding is used");
        } else {
            const bool embedding = drafter && param_group(name) == ParamGroup::embeddings;
            out.differences.push_back({embedding ? Kind::stored_embedding : Kind::unexpected,
                                       name,
                                       t.shape,
                                       {},
                                       t.dtype});
        }
    }
    return out;
}

namespace {

// The loaders' check (tensor_layout.h): memory, then compare_layout on the stored tensors.
void check_model_files(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs,
                       bool tied_embeddings, bool drafter) {
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
    std::map<std::string, StoredTensor> stored;
    for (const auto& n : r.names()) stored[n] = {r.dtype(n), r.shape(n)};
    const LayoutComparison cmp = compare_layout(specs, stored, tied_embeddings, drafter);
    std::vector<std::string> wrong;
    std::string hint;
    for (const auto& d : cmp.differences) {
        using Kind = LayoutDifference::Kind;
        // DFlash2 modules next to a drafter config without them: the likely mistake, named.
        if (drafter && d.kind == Kind::unexpected &&
            (d.name.starts_with("candidate_selector.") ||
             d.name.find("_conv.") != std::string::npos))
            hint =
                " (DFlash2 modules: is this a DFlash2 drafter whose config.json says "
                "\"architectures\": [\"DFlashDraftModel\"] instead of [\"DFlash2DraftModel\"]?)";
        if (wrong.size() == 3) continue;
        // The loaders' compact wording for the common cases (the first few of many).
        if (d.kind == Kind::missing)
            wrong.push_back(
                fmt::format("'{}' [{}] is missing", d.name, fmt::join(d.expected, ", ")));
        else if (d.kind == Kind::misshapen)
            wrong.push_back(fmt::format("'{}' is [{}] but the config implies [{}]", d.name,
                                        fmt::join(d.stored, ", "), fmt::join(d.expected, ", ")));
        else
            wrong.push_back(d.sentence());
    }
    if (cmp.differences.size() > 3)
        wrong.push_back(fmt::format("and {} more", cmp.differences.size() - 3));
    DF_CHECK(wrong.empty(),
             "the weights in '{}' do not match its config.json: {}{}; `dflash inspect {}` lists "
             "every difference",
             dir.string(), fmt::join(wrong, "; "), hint, dir.string());
}

}  // namespace

void check_target_files(const std::filesystem::path& dir, const TargetConfig& c) {
    check_model_files(dir, target_tensor_specs(c), c.tie_word_embeddings, /*drafter=*/false);
}

void check_drafter_files(const std::filesystem::path& dir, const DrafterConfig& c) {
    check_model_files(dir, drafter_tensor_specs(c), /*tied_embeddings=*/false, /*drafter=*/true);
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
