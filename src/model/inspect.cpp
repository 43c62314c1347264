// `dflash inspect` report. Tested by tests/cli/inspect_cli_test.cpp.
#include "model/inspect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <map>
#include <memory>
#include <optional>

#include "core/checkpoint_io.h"
#include "core/error.h"
#include "model/hf_config.h"
#include "model/tensor_layout.h"

namespace dflash {

namespace {

using nlohmann::json;

struct Found {
    std::string dtype;
    std::vector<int64_t> shape;
};

// What the directory holds, gathered before any judgement.
struct DirState {
    std::optional<json> config_json;
    std::optional<TargetConfig> target;
    std::optional<DrafterConfig> drafter;
    std::unique_ptr<CheckpointReader> ckpt;
    std::map<std::string, Found> tensors;       // from the checkpoint, under the model's names
    std::map<std::string, std::string> stored;  // model name -> checkpoint name, where they differ
    std::vector<std::string> notes;             // worth saying, not wrong
    ExpertFormat experts = ExpertFormat::none;  // how the checkpoint stores MoE experts
};

std::string shape_str(const std::vector<int64_t>& s) {
    return fmt::format("[{}]", fmt::join(s, ", "));
}

// 1234567 -> "1,234,567"
std::string grouped(int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

std::string human(int64_t n) {
    if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
    if (n >= 1000000) return fmt::format("{:.2f}M", n / 1e6);
    if (n >= 1000) return fmt::format("{:.1f}K", n / 1e3);
    return std::to_string(n);
}

const char* rope_name(const RopeScaling& s) {
    switch (s.type) {
        case RopeScalingType::none:
            return "none";
        case RopeScalingType::linear:
            return "linear";
        case RopeScalingType::llama3:
            return "llama3";
        case RopeScalingType::yarn:
            return "yarn";
    }
    return "?";
}

void load_config(const std::filesystem::path& dir, DirState& st,
                 std::vector<std::string>& problems) {
    const auto path = dir / "config.json";
    if (!std::filesystem::exists(path)) {
        problems.push_back(fmt::format(
            "no config.json in '{}': the architecture is unknown, so the tensors cannot be checked",
            dir.string()));
        return;
    }
    std::vector<std::string> found;
    try {
        st.config_json = read_json_file(path);
        if (is_drafter_config_json(*st.config_json)) {
            st.drafter = DrafterConfig::from_json_unchecked(*st.config_json);
            found = st.drafter->problems();
        } else {
            st.target = TargetConfig::from_json_unchecked(*st.config_json);
            found = st.target->problems();
        }
    } catch (const Error& e) {
        found.push_back(e.what());
    }
    for (const auto& p : found) problems.push_back(fmt::format("config.json: {}", p));
}

// Whether the layout implied by a config that has problems is still worth comparing against
// (dimensions that cannot describe any tensor would only bury the real problems).
bool layout_is_meaningful(const TargetConfig& c) {
    auto in = [](int64_t v, int64_t cap) { return v > 0 && v <= cap; };
    return in(c.hidden_size, kMaxHiddenSize) && in(c.intermediate_size, kMaxIntermediateSize) &&
           in(c.num_attention_heads, kMaxHeads) && in(c.num_key_value_heads, kMaxHeads) &&
           in(c.head_dim, kMaxHeadDim) && in(c.vocab_size, kMaxVocabSize) &&
           in(c.num_hidden_layers, kMaxLayers) &&
           (!c.moe() ||
            (in(c.num_experts, kMaxExperts) && in(c.moe_intermediate_size, kMaxIntermediateSize)));
}

void load_weights(const std::filesystem::path& dir, DirState& st,
                  std::vector<std::string>& problems) {
    if (!std::filesystem::exists(dir / kSingleCheckpointFile) &&
        !std::filesystem::exists(dir / kCheckpointIndexFile)) {
        problems.push_back(fmt::format("no weights: '{}' has neither {} nor {}", dir.string(),
                                       kSingleCheckpointFile, kCheckpointIndexFile));
        return;
    }
    try {
        st.ckpt = std::make_unique<CheckpointReader>(CheckpointReader::open(dir));
        for (const auto& n : st.ckpt->names())
            st.tensors[n] = {st.ckpt->dtype(n), st.ckpt->shape(n)};
    } catch (const Error& e) {
        problems.push_back(fmt::format("weights: {}", e.what()));
    }
}

// Missing, unexpected and misshapen tensors against the layout the config implies: the check the
// model loaders make (compare_layout), every difference reported.
void check_layout(const std::vector<TensorSpec>& specs, DirState& st, bool tied, bool drafter,
                  std::vector<std::string>& problems) {
    std::map<std::string, StoredTensor> stored;
    for (const auto& [name, f] : st.tensors) stored[name] = {f.dtype, f.shape};
    const std::vector<int64_t> borrowed =
        st.drafter
            ? std::vector<int64_t>{st.drafter->layer.vocab_size, st.drafter->layer.hidden_size}
            : std::vector<int64_t>{};
    const LayoutComparison cmp = compare_layout(specs, stored, tied, drafter, borrowed);
    for (const auto& d : cmp.differences) problems.push_back(d.sentence());
    for (const auto& n : cmp.notes) st.notes.push_back(n);
}

// Every float tensor with NaN or infinite values.
void check_values(const DirState& st, std::vector<std::string>& problems) {
    for (const auto& [name, f] : st.tensors) {
        if (f.dtype != "F32" && f.dtype != "BF16" && f.dtype != "F16") continue;
        try {
            const auto it = st.stored.find(name);
            const auto nf = st.ckpt->nonfinite(it == st.stored.end() ? name : it->second);
            if (nf.count > 0)
                problems.push_back(
                    fmt::format("tensor '{}' is not finite: {}", name,
                                describe_nonfinite(nf, TensorSpec{name, f.shape}.numel())));
        } catch (const Error& e) {
            problems.push_back(fmt::format("tensor '{}': {}", name, e.what()));
        }
    }
}

// The hybrid families' checkpoints (docs/formats.md "Hybrid linear-attention targets"): a
// wrapper's model.language_model.* tensors under the text model's names, its vision tower and
// the multi-token-prediction head left out of the layout check, and said so.
void map_hybrid_names(DirState& st) {
    std::vector<std::string> names;
    for (const auto& [n, f] : st.tensors) names.push_back(n);
    const CheckpointNames cn = checkpoint_names(*st.target, names);
    std::map<std::string, Found> mapped;
    for (auto& [n, f] : st.tensors) {
        const std::string m = cn.model(n);
        if (m.empty()) continue;
        if (m != n) st.stored[m] = n;
        mapped[m] = std::move(f);
    }
    st.tensors = std::move(mapped);
    if (cn.language_prefix != "model.")
        st.notes.push_back(
            fmt::format("the language model's tensors are stored under '{}'", cn.language_prefix));
    if (cn.vision + cn.mtp > 0)
        st.notes.push_back(fmt::format(
            "skipped: {} vision tensors, {} MTP tensors (a text target does not use them)",
            cn.vision, cn.mtp));
}

std::string guess_kind(const DirState& st) {
    if (st.drafter || (st.config_json && is_drafter_config_json(*st.config_json))) return "drafter";
    if (st.target || st.config_json) return "target";
    if (st.tensors.count("fc.weight")) return "drafter";
    if (st.tensors.count("model.embed_tokens.weight")) return "target";
    return "unknown";
}

// The DFlash2 modules and the drafter's attention (docs/formats.md "DFlash2 drafter directory").
void describe_dflash2(const DrafterConfig& d, std::string& out) {
    const Dflash2Config& c = d.d2;
    const int64_t groups = c.conv_group_size > 0 ? d.layer.hidden_size / c.conv_group_size : 0;
    out += fmt::format(
        "dflash2:       conv {} taps, groups of {} channels ({} groups); selector rank {}, "
        "top-{} candidates\n",
        c.conv_kernel_size, c.conv_group_size, groups, c.selector_rank, c.selector_top_k);
    const std::string cap = c.final_logit_softcapping > 0
                                ? fmt::format("soft cap {}", c.final_logit_softcapping)
                                : std::string("no soft cap");
    out += fmt::format("               logits x {}, {}; input embeddings x {}\n",
                       c.output_multiplier, cap, c.input_embedding_scale);
    std::string layers;
    for (size_t l = 0; l < d.sliding_layers.size(); ++l) {
        const auto i = static_cast<int64_t>(l);
        const int64_t w = d.layer_window(i);
        layers +=
            fmt::format("{}{}{}", l ? ", " : "", d.layer_causal(i) ? "causal" : "bidirectional",
                        w > 0 ? fmt::format(" window {}", w) : std::string());
    }
    out += fmt::format("               attention per layer: {}\n", layers);
}

// DSpark's heads (docs/formats.md "DSpark drafter directory").
void describe_dspark(const DrafterConfig& d, std::string& out) {
    const DsparkConfig& c = d.ds;
    out += fmt::format(
        "dspark:        {} drafts per block (the anchor slot predicts); markov head {}, rank {}; "
        "confidence head {}\n",
        d.num_drafts(), markov_head_type_name(c.markov_head), c.markov_rank,
        !c.confidence_head         ? std::string("none")
        : c.confidence_with_markov ? std::string("on [h; e]")
                                   : std::string("on h"));
}

std::string family_name(const std::string& model_type) {
    if (model_type == "qwen3") return "qwen3 (Qwen3, dense)";
    if (model_type == "qwen2") return "qwen2 (Qwen2, dense)";
    if (model_type == "llama") return "llama (Llama, dense)";
    if (model_type == "qwen3_moe") return "qwen3_moe (Qwen3-MoE, mixture of experts)";
    if (model_type == "gpt_oss") return "gpt_oss (gpt-oss, mixture of experts)";
    if (model_type == "qwen3_next")
        return "qwen3_next (Qwen3-Next: Gated DeltaNet and gated attention, mixture of experts)";
    if (model_type == "qwen3_5")
        return "qwen3_5 (Qwen3.5: Gated DeltaNet and gated attention, dense)";
    if (model_type == "qwen3_5_moe")
        return "qwen3_5_moe (Qwen3.5-MoE: Gated DeltaNet and gated attention, mixture of experts)";
    return model_type;
}

// Parameters a token uses: all but the experts the router does not pick (k of E per MoE layer).
int64_t active_parameters(const TargetConfig& c, int64_t total) {
    const int64_t d = c.hidden_size, i = c.moe_intermediate_size;
    const int64_t per_expert = 3 * d * i + (c.gpt_oss() ? 2 * i + d : 0);
    return total - c.num_moe_layers() * (c.num_experts - c.num_experts_per_tok) * per_expert;
}

// The mixture-of-experts and attention variants of a target (qwen3_moe, gpt_oss).
void describe_target_variants(const TargetConfig& c, ExpertFormat stored, std::string& out) {
    if (c.moe()) {
        const int64_t moe = c.num_moe_layers();
        out += fmt::format(
            "experts:       {} experts of width {}, top-{} per token ({}); {} MoE layer(s), {} "
            "dense{}\n",
            c.num_experts, c.moe_intermediate_size, c.num_experts_per_tok,
            c.gpt_oss() ? "router: top-k logits, softmax over the k"
                        : (c.norm_topk_prob ? "router: softmax, top-k, renormalised"
                                            : "router: softmax, top-k"),
            moe, c.num_hidden_layers - moe,
            c.swiglu_limit > 0 ? fmt::format("; clamped SwiGLU (limit {})", c.swiglu_limit)
                               : std::string());
        // The expert matrices' memory as each backend holds them (model/expert_weights.h).
        const double weights = 3.0 * static_cast<double>(moe) * static_cast<double>(c.num_experts) *
                               static_cast<double>(c.hidden_size) *
                               static_cast<double>(c.moe_intermediate_size);
        const auto gb = [](double bytes) {
            if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
            if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
            return fmt::format("{:.1f} kB", bytes / 1e3);
        };
        if (stored == ExpertFormat::mxfp4)
            out += fmt::format(
                "               stored MXFP4 (4-bit blocks, a scale byte per 32 weights): {} "
                "bytes ({}) of expert matrices, kept so in GPU memory on CUDA (decoded inside the "
                "expert GEMMs; bf16 would take {}), decoded to f32 at load on the CPU ({})\n",
                grouped(static_cast<int64_t>(weights / 32.0 * 17.0)), gb(weights / 32.0 * 17.0),
                gb(weights * 2.0), gb(weights * 4.0));
        else if (stored != ExpertFormat::none)
            out += fmt::format(
                "               stored {}: expert matrices held in bf16 on CUDA ({}), f32 on the "
                "CPU ({})\n",
                expert_format_name(stored), gb(weights * 2.0), gb(weights * 4.0));
    }
    if (c.hybrid()) {
        out += fmt::format(
            "linear attn:   {} Gated DeltaNet layers, {} full-attention; key heads {} x {}, value "
            "heads {} x {}, conv {} taps\n",
            c.num_linear_layers(), c.num_hidden_layers - c.num_linear_layers(),
            c.linear_num_key_heads, c.linear_key_head_dim, c.linear_num_value_heads,
            c.linear_value_head_dim, c.linear_conv_kernel_dim);
        out += fmt::format(
            "               rotary on {} of {} head dims; {}; zero-centred (1 + w) norms{}\n",
            c.rotary_dim(), c.head_dim,
            c.attn_output_gate ? "sigmoid output gate" : "no output gate",
            c.multimodal_wrapper ? "; text model of a multimodal checkpoint" : "");
        if (c.shared_expert_intermediate_size > 0)
            out += fmt::format("shared expert: width {}, sigmoid-gated\n",
                               c.shared_expert_intermediate_size);
    }
    std::vector<int64_t> sliding;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        if (c.layer_window(l) > 0) sliding.push_back(l);
    if (!sliding.empty() || c.attention_sinks)
        out += fmt::format("attention:     {}{}\n",
                           sliding.empty() ? std::string("full on every layer")
                                           : fmt::format("sliding window {} on layers {}, full on "
                                                         "the other {}",
                                                         c.sliding_window, shape_str(sliding),
                                                         c.num_hidden_layers -
                                                             static_cast<int64_t>(sliding.size())),
                           c.attention_sinks ? "; a sink logit per head" : "");
}

void describe_config(const DirState& st, std::string& out) {
    const TargetConfig* l = st.drafter ? &st.drafter->layer : (st.target ? &*st.target : nullptr);
    if (l == nullptr) return;
    out += fmt::format(
        "architecture:  {} layers, hidden {}, intermediate {}, heads {} (kv {}, head_dim {}), "
        "vocab {}\n",
        l->num_hidden_layers, l->hidden_size, l->intermediate_size, l->num_attention_heads,
        l->num_key_value_heads, l->head_dim, l->vocab_size);
    if (st.target) out += fmt::format("family:        {}\n", family_name(l->model_type));
    out += fmt::format(
        "               rope theta {}, scaling {}; rms_norm_eps {}; max positions {}; qk_norm "
        "{}; tied embeddings {}\n",
        l->rope.theta, rope_name(l->rope.scaling), l->rms_norm_eps, l->max_position_embeddings,
        l->qk_norm, l->tie_word_embeddings);
    if (st.target) describe_target_variants(*st.target, st.experts, out);
    if (st.drafter) {
        out += fmt::format(
            "dflash:        block_size {}, mask_token_id {}, target_layer_ids {} of {} target "
            "layers\n",
            st.drafter->block_size, st.drafter->mask_token_id,
            shape_str(st.drafter->target_layer_ids), st.drafter->num_target_layers);
        if (st.drafter->dflash2()) describe_dflash2(*st.drafter, out);
        if (st.drafter->dspark()) describe_dspark(*st.drafter, out);
        // Which layout config.json is in (docs/formats.md "DSpark drafter directory").
        if (st.config_json)
            out += fmt::format("config:        dialect {}\n",
                               drafter_dialect_name(drafter_config_dialect(*st.config_json)));
    }
}

void describe_weights(const DirState& st, const std::vector<TensorSpec>& specs, bool list_tensors,
                      std::string& out) {
    std::map<std::string, Found> shown = st.tensors;
    const char* source = "checkpoint";
    if (!st.ckpt) {
        for (const auto& s : specs) shown[s.name] = {"-", s.shape};
        source = "the config's layout (no weights read)";
    } else {
        const auto files = st.ckpt->files();
        out += fmt::format("weights:       {}\n",
                           st.ckpt->sharded()
                               ? fmt::format("{} shards via {}", files.size(), kCheckpointIndexFile)
                               : std::string(kSingleCheckpointFile));
        std::map<std::string, int> dtypes;
        for (const auto& [n, f] : st.tensors) ++dtypes[f.dtype];
        std::vector<std::string> parts;
        for (const auto& [d, c] : dtypes) parts.push_back(fmt::format("{} x{}", d, c));
        out += fmt::format("dtype:         {}\n",
                           parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, ", ")));
    }
    std::array<int64_t, kNumParamGroups> groups{};
    int64_t total = 0;
    for (const auto& [n, f] : shown) {
        const int64_t numel = TensorSpec{n, f.shape}.numel();
        groups[static_cast<int>(param_group(n))] += numel;
        total += numel;
    }
    out += fmt::format("parameters:    {} ({}) from {}\n", grouped(total), human(total), source);
    if (st.target && st.target->moe()) {
        // Counted on the model's own layout: MXFP4 blocks hold two values a byte.
        int64_t own = 0;
        for (const auto& t : target_tensor_specs(*st.target)) own += t.numel();
        const int64_t active = active_parameters(*st.target, own);
        out += fmt::format("active:        {} ({}) per token of {} ({})\n", grouped(active),
                           human(active), grouped(own), human(own));
    }
    for (int g = 0; g < kNumParamGroups; ++g) {
        if (groups[g] == 0 && static_cast<ParamGroup>(g) == ParamGroup::other) continue;
        out += fmt::format("  {:<12} {:>16} ({})\n", param_group_name(static_cast<ParamGroup>(g)),
                           grouped(groups[g]), human(groups[g]));
    }
    if (!list_tensors) return;
    out += fmt::format("tensors ({}):\n", shown.size());
    for (const auto& [n, f] : shown)
        out += fmt::format("  {:<56} {:<5} {}\n", n, f.dtype, shape_str(f.shape));
}

}  // namespace

InspectReport inspect_directory(const std::filesystem::path& dir, const InspectOptions& opts) {
    InspectReport r;
    std::string& out = r.text;
    out += fmt::format("directory:     {}\n", dir.string());
    if (!std::filesystem::is_directory(dir)) {
        r.kind = "unknown";
        r.problems.push_back(fmt::format("'{}' is not a directory", dir.string()));
    } else {
        DirState st;
        load_config(dir, st, r.problems);
        load_weights(dir, st, r.problems);
        r.kind = guess_kind(st);
        std::string arch;
        if (st.config_json && st.config_json->contains("architectures"))
            for (const auto& a : (*st.config_json)["architectures"])
                arch +=
                    (arch.empty() ? "" : ", ") + (a.is_string() ? a.get<std::string>() : a.dump());
        if (arch.empty()) arch = "-";
        out += fmt::format("kind:          {} ({})\n", r.kind, arch);
        std::vector<TensorSpec> specs;
        if (st.drafter && layout_is_meaningful(st.drafter->layer))
            specs = drafter_tensor_specs(*st.drafter);
        if (st.target && st.target->hybrid() && st.ckpt) map_hybrid_names(st);
        if (st.target && layout_is_meaningful(*st.target)) {
            std::vector<std::string> names;
            for (const auto& [n, f] : st.tensors) names.push_back(n);
            st.experts = detect_expert_format(*st.target, names);
            specs = stored_target_specs(*st.target, st.experts);
        }
        if (!specs.empty() && st.ckpt)
            check_layout(specs, st, st.target && st.target->tie_word_embeddings,
                         st.drafter.has_value(), r.problems);
        if (st.ckpt && opts.check_values) check_values(st, r.problems);
        describe_config(st, out);
        if (st.ckpt || !specs.empty()) describe_weights(st, specs, opts.list_tensors, out);
        for (const auto& n : st.notes) out += fmt::format("note: {}\n", n);
        if (opts.more) opts.more(dir, out, r.problems);
    }
    if (r.problems.empty()) {
        out += "status:        OK\n";
    } else {
        out += fmt::format("problems ({}):\n", r.problems.size());
        for (const auto& p : r.problems) out += fmt::format("  - {}\n", p);
        out += "status:        BROKEN\n";
    }
    return r;
}

}  // namespace dflash
