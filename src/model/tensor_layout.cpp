// Target and drafter tensor layouts. Tested by tests/model/tensor_layout_test.cpp.
#include "model/tensor_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "core/checkpoint_io.h"
#include "core/error.h"
#include "model/dspark_heads.h"

namespace dflash {

namespace {

// The experts of one MoE layer under `prefix` ("model.layers.3.mlp.") as format f stores them
// (ExpertFormat::none: the model's own layout).
void append_experts(std::vector<TensorSpec>& out, const std::string& prefix, const TargetConfig& c,
                    ExpertFormat f) {
    const int64_t d = c.hidden_size, i = c.moe_intermediate_size, e = c.num_experts;
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
        out.push_back({prefix + name, std::move(shape)});
    };
    if (c.gpt_oss()) {
        add("router.weight", {e, d});
        add("router.bias", {e});
    } else {
        add("gate.weight", {e, d});
    }
    switch (f) {
        case ExpertFormat::none:
        case ExpertFormat::fused:
            add("experts.gate_up_proj", {e, 2 * i, d});
            add("experts.down_proj", {e, d, i});
            break;
        case ExpertFormat::per_expert:
            for (int64_t x = 0; x < e; ++x) {
                add(fmt::format("experts.{}.gate_proj.weight", x), {i, d});
                add(fmt::format("experts.{}.up_proj.weight", x), {i, d});
                add(fmt::format("experts.{}.down_proj.weight", x), {d, i});
            }
            break;
        case ExpertFormat::gpt_oss:
            add("experts.gate_up_proj", {e, d, 2 * i});
            add("experts.down_proj", {e, i, d});
            break;
        case ExpertFormat::mxfp4:
            // Groups of 32 inputs: 16 bytes of two 4-bit codes each, and one scale byte.
            add("experts.gate_up_proj_blocks", {e, 2 * i, d / 32, 16});
            add("experts.gate_up_proj_scales", {e, 2 * i, d / 32});
            add("experts.down_proj_blocks", {e, d, i / 32, 16});
            add("experts.down_proj_scales", {e, d, i / 32});
            break;
    }
    if (c.gpt_oss()) {
        add("experts.gate_up_proj_bias", {e, 2 * i});
        add("experts.down_proj_bias", {e, d});
    }
    // The hybrid families' shared expert (a SwiGLU MLP every token uses) and its sigmoid gate.
    if (const int64_t s = c.shared_expert_intermediate_size; s > 0) {
        add("shared_expert.gate_proj.weight", {s, d});
        add("shared_expert.up_proj.weight", {s, d});
        add("shared_expert.down_proj.weight", {d, s});
        add("shared_expert_gate.weight", {1, d});
    }
}

// A hybrid family's Gated DeltaNet mixer under `prefix` ("model.layers.3."): Qwen3-Next fuses
// the projections (in_proj_qkvz, in_proj_ba), Qwen3.5 splits them.
void append_linear_attention(std::vector<TensorSpec>& out, const std::string& prefix,
                             const TargetConfig& c) {
    const int64_t d = c.hidden_size, conv = c.linear_conv_dim();
    const int64_t hv = c.linear_num_value_heads, vd = hv * c.linear_value_head_dim;
    auto add = [&](const char* name, std::vector<int64_t> shape) {
        out.push_back({prefix + "linear_attn." + name, std::move(shape)});
    };
    if (c.model_type == "qwen3_next") {
        add("in_proj_qkvz.weight", {conv + vd, d});
        add("in_proj_ba.weight", {2 * hv, d});
    } else {
        add("in_proj_qkv.weight", {conv, d});
        add("in_proj_z.weight", {vd, d});
        add("in_proj_b.weight", {hv, d});
        add("in_proj_a.weight", {hv, d});
    }
    add("conv1d.weight", {conv, 1, c.linear_conv_kernel_dim});
    add("dt_bias", {hv});
    add("A_log", {hv});
    add("norm.weight", {c.linear_value_head_dim});
    add("out_proj.weight", {d, vd});
}

// The tensors of one decoder layer under `prefix` ("model.layers.3." or "layers.3."); `moe`: its
// feed-forward is the experts, stored in format f; `linear`: its mixer is a Gated DeltaNet.
void append_layer(std::vector<TensorSpec>& out, const std::string& prefix, const TargetConfig& c,
                  bool moe = false, ExpertFormat f = ExpertFormat::none, bool linear = false) {
    const int64_t d = c.hidden_size, dh = c.head_dim, i = c.intermediate_size;
    const int64_t q = c.num_attention_heads * dh, kv = c.num_key_value_heads * dh;
    auto add = [&](const char* name, std::vector<int64_t> shape) {
        out.push_back({prefix + name, std::move(shape)});
    };
    add("input_layernorm.weight", {d});
    if (linear) {
        append_linear_attention(out, prefix, c);
        add("post_attention_layernorm.weight", {d});
        if (moe) {
            append_experts(out, prefix + "mlp.", c, f);
        } else {
            add("mlp.gate_proj.weight", {i, d});
            add("mlp.up_proj.weight", {i, d});
            add("mlp.down_proj.weight", {d, i});
        }
        return;
    }
    // The output gate doubles q_proj: per head [query (Dh) | gate (Dh)].
    add("self_attn.q_proj.weight", {c.attn_output_gate ? 2 * q : q, d});
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
    if (c.attention_sinks) add("self_attn.sinks", {c.num_attention_heads});
    add("post_attention_layernorm.weight", {d});
    if (moe) {
        append_experts(out, prefix + "mlp.", c, f);
        return;
    }
    add("mlp.gate_proj.weight", {i, d});
    add("mlp.up_proj.weight", {i, d});
    add("mlp.down_proj.weight", {d, i});
}

}  // namespace

std::string_view expert_format_name(ExpertFormat f) {
    switch (f) {
        case ExpertFormat::none:
            return "none";
        case ExpertFormat::per_expert:
            return "per-expert";
        case ExpertFormat::fused:
            return "fused";
        case ExpertFormat::gpt_oss:
            return "gpt-oss bf16";
        case ExpertFormat::mxfp4:
            return "MXFP4";
    }
    return "?";
}

ExpertFormat detect_expert_format(const TargetConfig& c, const std::vector<std::string>& stored) {
    int64_t first = -1;
    for (int64_t l = 0; l < c.num_hidden_layers && first < 0; ++l)
        if (c.is_moe_layer(l)) first = l;
    if (first < 0) return ExpertFormat::none;
    const std::string pre = fmt::format("model.layers.{}.mlp.experts.", first);
    auto has = [&](const std::string& suffix) {
        return std::find(stored.begin(), stored.end(), pre + suffix) != stored.end();
    };
    if (c.gpt_oss()) return has("gate_up_proj") ? ExpertFormat::gpt_oss : ExpertFormat::mxfp4;
    return has("gate_up_proj") ? ExpertFormat::fused : ExpertFormat::per_expert;
}

std::vector<TensorSpec> stored_target_specs(const TargetConfig& c, ExpertFormat f) {
    std::vector<TensorSpec> out;
    out.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        append_layer(out, fmt::format("model.layers.{}.", l), c, c.is_moe_layer(l), f,
                     c.is_linear_layer(l));
    out.push_back({"model.norm.weight", {c.hidden_size}});
    if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
    return out;
}

namespace {
constexpr std::string_view kWrapperPrefix = "model.language_model.";
}  // namespace

std::string CheckpointNames::stored(const std::string& model_name) const {
    if (language_prefix == "model." || !model_name.starts_with("model.")) return model_name;
    return language_prefix + model_name.substr(6);
}

std::string CheckpointNames::model(const std::string& stored_name) const {
    if (vision + mtp > 0 &&
        (stored_name.starts_with("model.visual.") || stored_name.starts_with("mtp.")))
        return "";
    if (language_prefix != "model." && stored_name.starts_with(language_prefix))
        return "model." + stored_name.substr(language_prefix.size());
    return stored_name;
}

CheckpointNames checkpoint_names(const TargetConfig& c, const std::vector<std::string>& stored) {
    CheckpointNames n;
    for (const auto& s : stored)
        if (s.starts_with(kWrapperPrefix)) n.language_prefix = std::string(kWrapperPrefix);
    if (!c.hybrid()) return n;
    for (const auto& s : stored) {
        n.vision += s.starts_with("model.visual.") ? 1 : 0;
        n.mtp += s.starts_with("mtp.") ? 1 : 0;
    }
    return n;
}

std::string_view required_stored_dtype(std::string_view n) {
    const bool expert = n.find(".mlp.experts.") != std::string_view::npos;
    return expert && (n.ends_with("_blocks") || n.ends_with("_scales")) ? "U8" : "";
}

int64_t TensorSpec::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::vector<TensorSpec> target_tensor_specs(const TargetConfig& c) {
    return stored_target_specs(c, ExpertFormat::none);
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
    // After norm.weight: the backward finishes the heads first (Note [Final gradients]).
    if (c.dspark()) append_dspark_specs(out, c.ds, d, c.layer.vocab_size);
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
            if (!required_stored_dtype(name).empty())
                return fmt::format("tensor '{}' is {}; it must be {}", name, dtype,
                                   required_stored_dtype(name));
            return fmt::format("tensor '{}' is {}; weights must be F32, BF16 or F16", name, dtype);
    }
    return name;
}

LayoutComparison compare_layout(const std::vector<TensorSpec>& layout,
                                const std::map<std::string, StoredTensor>& stored,
                                bool tied_embeddings, bool drafter,
                                const std::vector<int64_t>& borrowed) {
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
            const std::string_view must = required_stored_dtype(name);
            const bool ok = must.empty()
                                ? (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16")
                                : t.dtype == must;
            if (!ok) out.differences.push_back({Kind::wrong_dtype, name, t.shape, {}, t.dtype});
        } else if (name.ends_with("rotary_emb.inv_freq")) {
            out.notes.push_back(fmt::format("'{}' is a RoPE buffer; ignored", name));
        } else if (tied_embeddings && name == "lm_head.weight") {
            out.notes.push_back(
                "lm_head.weight is stored although tie_word_embeddings is true; the tied "
                "embedding is used");
        } else if (drafter && param_group(name) == ParamGroup::embeddings && !borrowed.empty() &&
                   t.shape == borrowed) {
            out.notes.push_back(fmt::format(
                "'{}' [{}] is a copy of the target's (DeepSpec checkpoints store the frozen "
                "embedding and lm_head); ignored: the drafter uses the target's own",
                name, fmt::join(t.shape, ", ")));
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

// The loaders' check (tensor_layout.h): memory (of the model's own f32 parameters, `params`, less
// `not_held` elements that the checkpoint's names say stay out of them), then compare_layout of
// the stored tensors against `stored_specs(names stored)`. Differences name the file holding the
// tensor.
void check_model_files(
    const std::filesystem::path& dir, const std::vector<TensorSpec>& params,
    const std::function<std::vector<TensorSpec>(const std::vector<std::string>&)>& stored_specs,
    bool tied_embeddings, bool drafter,
    const std::function<double(const std::vector<std::string>&)>& not_held = {},
    const CheckpointNames& names = {}, const std::vector<int64_t>& borrowed = {}) {
    const CheckpointReader r = CheckpointReader::open(dir);
    double bytes = 0;
    for (const auto& s : params) bytes += static_cast<double>(s.numel()) * 4.0;
    if (not_held) bytes -= not_held(r.names()) * 4.0;
    const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                          static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    DF_CHECK(memory <= 0 || bytes <= memory,
             "'{}': the model needs {:.3g} GB for its weights in f32, more than this machine's "
             "{:.3g} GB of memory",
             dir.string(), bytes / 1e9, memory / 1e9);
    std::map<std::string, StoredTensor> stored;
    std::vector<std::string> model_names;
    for (const auto& n : r.names()) {
        const std::string m = names.model(n);
        if (m.empty()) continue;
        stored[m] = {r.dtype(n), r.shape(n)};
        model_names.push_back(m);
    }
    const LayoutComparison cmp =
        compare_layout(stored_specs(model_names), stored, tied_embeddings, drafter, borrowed);
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
        // A DSpark head's tensor missing: the config.json key that asks for it, named.
        if (drafter && d.kind == Kind::missing && hint.empty()) {
            const std::string key = dspark_tensor_key(d.name);
            if (!key.empty()) hint = fmt::format(" (config.json's {} needs '{}')", key, d.name);
        }
        if (wrong.size() == 3) continue;
        const std::string sn = names.stored(d.name);
        const std::string file = r.has(sn) ? fmt::format(" in '{}'", r.file_path(sn).string()) : "";
        // The loaders' compact wording for the common cases (the first few of many).
        if (d.kind == Kind::missing)
            wrong.push_back(
                fmt::format("'{}' [{}] is missing", d.name, fmt::join(d.expected, ", ")));
        else if (d.kind == Kind::misshapen)
            wrong.push_back(fmt::format("'{}'{} is [{}] but the config implies [{}]", d.name, file,
                                        fmt::join(d.stored, ", "), fmt::join(d.expected, ", ")));
        else
            wrong.push_back(d.sentence() + file);
    }
    if (cmp.differences.size() > 3)
        wrong.push_back(fmt::format("and {} more", cmp.differences.size() - 3));
    DF_CHECK(wrong.empty(),
             "the weights in '{}' do not match its config.json: {}{}; `dflash inspect {}` lists "
             "every difference",
             dir.string(), fmt::join(wrong, "; "), hint, dir.string());
}

bool has_weights(const std::filesystem::path& dir) {
    return std::filesystem::exists(dir / kSingleCheckpointFile) ||
           std::filesystem::exists(dir / kCheckpointIndexFile);
}

}  // namespace

ExpertFormat check_target_files(const std::filesystem::path& dir, const TargetConfig& c,
                                bool mxfp4_packed) {
    if (!has_weights(dir)) return ExpertFormat::none;
    // Packed MXFP4 experts never become f32 parameters (model/expert_weights.h: PackedExperts).
    const auto packed_elements = [&](const std::vector<std::string>& names) {
        if (!mxfp4_packed || detect_expert_format(c, names) != ExpertFormat::mxfp4) return 0.0;
        return 3.0 * static_cast<double>(c.num_moe_layers()) * static_cast<double>(c.num_experts) *
               static_cast<double>(c.hidden_size) * static_cast<double>(c.moe_intermediate_size);
    };
    ExpertFormat format = ExpertFormat::none;
    CheckpointNames names;
    if (c.hybrid()) {
        const CheckpointReader r = CheckpointReader::open(dir);
        names = checkpoint_names(c, r.names());
        DF_CHECK(!c.multimodal_wrapper || names.language_prefix == kWrapperPrefix,
                 "'{}' holds no '{}*' tensors, but its config.json (model_type {} with a "
                 "text_config) is a multimodal checkpoint whose language model lives there: the "
                 "language model's weights are missing",
                 r.files().empty() ? dir.string() : r.files().front().string(), kWrapperPrefix,
                 c.model_type);
    }
    check_model_files(
        dir, target_tensor_specs(c),
        [&](const std::vector<std::string>& stored) {
            format = detect_expert_format(c, stored);
            DF_CHECK(format != ExpertFormat::mxfp4 ||
                         (c.hidden_size % 32 == 0 && c.moe_intermediate_size % 32 == 0),
                     "'{}' stores MXFP4 experts, whose groups of 32 inputs need hidden_size={} "
                     "and intermediate_size={} to be multiples of 32",
                     dir.string(), c.hidden_size, c.moe_intermediate_size);
            return stored_target_specs(c, format);
        },
        c.tie_word_embeddings, /*drafter=*/false, packed_elements, names);
    return format;
}

void check_drafter_files(const std::filesystem::path& dir, const DrafterConfig& c) {
    if (!has_weights(dir)) return;
    const std::vector<TensorSpec> specs = drafter_tensor_specs(c);
    check_model_files(dir, specs, [&](const std::vector<std::string>&) { return specs; },
                      /*tied_embeddings=*/false, /*drafter=*/true, {}, {},
                      {c.layer.vocab_size, c.layer.hidden_size});
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
