// Expert weights between checkpoint spellings and the model's layout. Tested by
// tests/model/moe_loading_test.cpp.
#include "model/expert_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "core/error.h"
#include "model/hybrid_weights.h"

namespace dflash {

namespace {

// What an expert parameter of the model's layout is, from its name's tail.
enum class ExpertPart { none, gate_up, down, gate_up_bias, down_bias };

constexpr std::string_view kExperts = ".mlp.experts.";

// The part and the name's prefix up to and including ".mlp.experts.".
std::pair<ExpertPart, std::string> expert_part(const std::string& name) {
    const size_t at = name.find(kExperts);
    if (at == std::string::npos) return {ExpertPart::none, ""};
    const std::string pre = name.substr(0, at + kExperts.size());
    const std::string tail = name.substr(pre.size());
    if (tail == "gate_up_proj") return {ExpertPart::gate_up, pre};
    if (tail == "down_proj") return {ExpertPart::down, pre};
    if (tail == "gate_up_proj_bias") return {ExpertPart::gate_up_bias, pre};
    if (tail == "down_proj_bias") return {ExpertPart::down_bias, pre};
    return {ExpertPart::none, ""};
}

// gpt-oss interleaves gate and up: row (or column) 2u is gate unit u, 2u+1 up unit u. Our row r
// (gate rows [0, I), up rows [I, 2I)) is its row interleaved_row(r, I).
int64_t interleaved_row(int64_t r, int64_t i) {
    return r < i ? 2 * r : 2 * (r - i) + 1;
}

std::span<const uint8_t> bytes_of(const CheckpointReader& r, const std::string& name) {
    // MXFP4 experts are gpt_oss's, never under a wrapper prefix.
    const auto b = r.raw_bytes(name);
    return {reinterpret_cast<const uint8_t*>(b.data()), b.size()};
}

// One expert's [2I, D] slab (our row order) of a gpt_oss-format or MXFP4 gate_up tensor.
void gate_up_slab(const CheckpointReader& r, const std::string& pre, ExpertFormat f,
                  const HostTensor& stored, int64_t e, int64_t i, int64_t d, float* slab) {
    if (f == ExpertFormat::gpt_oss) {
        // stored [E, D, 2I], used as x·W: column c of row d is output c.
        const float* w = stored.f32() + e * d * 2 * i;
        for (int64_t row = 0; row < 2 * i; ++row) {
            const int64_t c = interleaved_row(row, i);
            for (int64_t k = 0; k < d; ++k) slab[row * d + k] = w[k * 2 * i + c];
        }
        return;
    }
    const int64_t groups = d / 32;
    const auto blocks = bytes_of(r, pre + "gate_up_proj_blocks");
    const auto scales = bytes_of(r, pre + "gate_up_proj_scales");
    std::vector<float> decoded(static_cast<size_t>(2 * i * d));
    decode_mxfp4(blocks.subspan(e * 2 * i * groups * 16, 2 * i * groups * 16),
                 scales.subspan(e * 2 * i * groups, 2 * i * groups), 2 * i, groups, decoded.data());
    for (int64_t row = 0; row < 2 * i; ++row)
        std::memcpy(slab + row * d, decoded.data() + interleaved_row(row, i) * d,
                    sizeof(float) * d);
}

// One expert's [D, I] down slab of a gpt_oss-format ([E, I, D], x·W) or MXFP4 tensor.
void down_slab(const CheckpointReader& r, const std::string& pre, ExpertFormat f,
               const HostTensor& stored, int64_t e, int64_t i, int64_t d, float* slab) {
    if (f == ExpertFormat::gpt_oss) {
        const float* w = stored.f32() + e * i * d;
        for (int64_t k = 0; k < d; ++k)
            for (int64_t u = 0; u < i; ++u) slab[k * i + u] = w[u * d + k];
        return;
    }
    const int64_t groups = i / 32;
    decode_mxfp4(
        bytes_of(r, pre + "down_proj_blocks").subspan(e * d * groups * 16, d * groups * 16),
        bytes_of(r, pre + "down_proj_scales").subspan(e * d * groups, d * groups), d, groups, slab);
}

// An expert parameter read from format f, expert by expert (one slab on the host at a time).
// Per-expert BF16 tensors (the Hub layout) onto a bf16 backend: each expert's rows copied as
// bits into one slab and uploaded, with no f32 round trip. False, having written nothing, when
// any of them is not BF16 or not finite, or the backend keeps f32 values: the f32 path then
// reads them (and names a bad tensor).
bool load_experts_as_bf16_bits(ParamSet& params, const Param& p, const std::string& pre,
                               bool gate_up, int64_t rows, int64_t cols, int64_t e_count,
                               const CheckpointReader& r, const CheckpointNames& names) {
    const auto parts = [&](int64_t e) {
        const std::string ex = fmt::format("{}{}.", pre, e);
        return gate_up ? std::vector<std::string>{names.stored(ex + "gate_proj.weight"),
                                                  names.stored(ex + "up_proj.weight")}
                       : std::vector<std::string>{names.stored(ex + "down_proj.weight")};
    };
    if (p.value.dtype() != DType::bf16) return false;  // f32 values: the f32 path converts
    // One pass over the experts: a tensor that cannot go up as bits sends every expert through
    // the f32 path, which rewrites the ones already uploaded.
    std::vector<unsigned char> slab(static_cast<size_t>(rows * cols) * 2);
    for (int64_t e = 0; e < e_count; ++e) {
        size_t at = 0;
        for (const std::string& n : parts(e)) {
            if (r.dtype(n) != "BF16" || r.nonfinite(n).count != 0) return false;
            const auto bits = r.raw_bytes(n);
            DF_CHECK(at + bits.size() <= slab.size(), "{}: tensor '{}' is larger than expected",
                     r.file_path(n).string(), n);
            std::memcpy(slab.data() + at, bits.data(), bits.size());
            at += bits.size();
        }
        if (!params.write_bf16_bits_rows(p.name, e, 1, slab.data())) return false;
    }
    return true;
}

void load_expert_param(ParamSet& params, const Param& p, ExpertPart part, const std::string& pre,
                       const TargetConfig& c, const CheckpointReader& r, ExpertFormat f,
                       const CheckpointNames& names) {
    const int64_t e_count = c.num_experts, i = c.moe_intermediate_size, d = c.hidden_size;
    if (part == ExpertPart::gate_up_bias) {
        // Stored [E, 2I] interleaved (both gpt_oss formats).
        const HostTensor b = r.read_f32(p.name);
        HostTensor out({e_count, 2 * i});
        for (int64_t e = 0; e < e_count; ++e)
            for (int64_t row = 0; row < 2 * i; ++row)
                out.f32()[e * 2 * i + row] = b.f32()[e * 2 * i + interleaved_row(row, i)];
        params.write_f32(p.name, out.view());
        return;
    }
    if (part == ExpertPart::down_bias) {
        params.write_f32(p.name, r.read_f32(p.name).view());
        return;
    }
    const bool gate_up = part == ExpertPart::gate_up;
    const int64_t rows = gate_up ? 2 * i : d, cols = gate_up ? d : i;
    if (f == ExpertFormat::per_expert &&
        load_experts_as_bf16_bits(params, p, pre, gate_up, rows, cols, e_count, r, names))
        return;
    HostTensor slab({1, rows, cols});
    // The gpt_oss bf16 tensor is read once (its experts' columns are spread over all of it).
    HostTensor stored;
    if (f == ExpertFormat::gpt_oss) stored = r.read_f32(p.name);
    for (int64_t e = 0; e < e_count; ++e) {
        float* s = slab.f32();
        if (f == ExpertFormat::per_expert) {
            const std::string ex = fmt::format("{}{}.", pre, e);
            if (gate_up) {
                const HostTensor g = r.read_f32(names.stored(ex + "gate_proj.weight"));
                const HostTensor u = r.read_f32(names.stored(ex + "up_proj.weight"));
                std::memcpy(s, g.f32(), g.nbytes());
                std::memcpy(s + i * d, u.f32(), u.nbytes());
            } else {
                const HostTensor w = r.read_f32(names.stored(ex + "down_proj.weight"));
                std::memcpy(s, w.f32(), w.nbytes());
            }
        } else if (gate_up) {
            gate_up_slab(r, pre, f, stored, e, i, d, s);
        } else {
            down_slab(r, pre, f, stored, e, i, d, s);
        }
        params.write_f32_rows(p.name, e, slab.view());
    }
}

}  // namespace

void load_target_params(ParamSet& params, const TargetConfig& c, const CheckpointReader& r,
                        ExpertFormat f, const CheckpointNames& names) {
    for (const Param& p : params.params()) {
        const auto [part, pre] = expert_part(p.name);
        if (part == ExpertPart::none || f == ExpertFormat::fused ||
            (f == ExpertFormat::per_expert && part != ExpertPart::gate_up &&
             part != ExpertPart::down)) {
            // The model's own layout: read by name (shapes were checked before allocation).
            const std::string stored = names.stored(p.name);
            const bool regrouped = !hybrid_row_source(c, p.name).empty();
            if (!regrouped && p.value.dtype() == DType::bf16 && r.dtype(stored) == "BF16" &&
                Shape(r.shape(stored)) == p.shape) {
                if (r.nonfinite(stored).count == 0 &&
                    params.write_bf16_bits(p.name, r.raw_bytes(stored).data(), p.shape.numel()))
                    continue;
                // Not finite: read_f32 below names the tensor and its first bad value.
            }
            HostTensor t = r.read_f32(stored);
            DF_CHECK(t.shape() == p.shape, "{}: tensor '{}' has shape {} but the config implies {}",
                     r.file_path(stored).string(), stored, t.shape().to_string(),
                     p.shape.to_string());
            // The hybrid families' fused projections: rows regrouped (model/hybrid_weights.h).
            if (const auto src = hybrid_row_source(c, p.name); !src.empty())
                t = gather_rows(t, src);
            params.write_f32(p.name, t.view());
            continue;
        }
        load_expert_param(params, p, part, pre, c, r, f, names);
    }
}

bool keeps_experts_packed(Mxfp4Storage s, ExpertFormat f, const Backend& be) {
    if (f != ExpertFormat::mxfp4) return false;
    if (s == Mxfp4Storage::backend_default) return be.device().kind == DeviceKind::cuda;
    return s == Mxfp4Storage::packed;
}

std::vector<TensorSpec> target_param_specs(const TargetConfig& c, bool packed_experts) {
    std::vector<TensorSpec> specs = target_tensor_specs(c);
    if (!packed_experts) return specs;
    std::erase_if(specs, [](const TensorSpec& s) {
        const auto [part, pre] = expert_part(s.name);
        return part == ExpertPart::gate_up || part == ExpertPart::down;
    });
    return specs;
}

namespace {

// One packed tensor's place in PackedExperts' buffer.
struct Piece {
    std::string name;  // tail after ".mlp.experts."
    Shape shape;
    int64_t rows;       // rows per expert (2I or D)
    int64_t row_bytes;  // bytes per row
    bool interleaved;   // gate_up: the checkpoint interleaves gate and up rows
};

std::vector<Piece> packed_pieces(const TargetConfig& c) {
    const int64_t e = c.num_experts, i = c.moe_intermediate_size, d = c.hidden_size;
    return {{"gate_up_proj_blocks", {e, 2 * i, d / 32, 16}, 2 * i, d / 32 * 16, true},
            {"gate_up_proj_scales", {e, 2 * i, d / 32}, 2 * i, d / 32, true},
            {"down_proj_blocks", {e, d, i / 32, 16}, d, i / 32 * 16, false},
            {"down_proj_scales", {e, d, i / 32}, d, i / 32, false}};
}

int64_t aligned(int64_t bytes) {
    return (bytes + 255) / 256 * 256;
}

std::string experts_prefix(int64_t l) {
    return fmt::format("model.layers.{}.mlp.experts.", l);
}

}  // namespace

PackedExperts PackedExperts::load(Backend& be, const TargetConfig& c, const CheckpointReader& r) {
    DF_ASSERT(c.gpt_oss() && c.hidden_size % 32 == 0 && c.moe_intermediate_size % 32 == 0);
    const std::vector<Piece> pieces = packed_pieces(c);
    int64_t total = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        if (c.is_moe_layer(l))
            for (const Piece& p : pieces) total += aligned(p.shape.numel());
    PackedExperts out;
    out.storage_ = DeviceTensor(be, {std::max<int64_t>(total, 1)}, DType::u8);
    auto* base = static_cast<uint8_t*>(out.storage_.view().data());
    const DeviceRef dev = be.device();
    const int64_t i = c.moe_intermediate_size;
    int64_t off = 0;
    out.layers_.resize(static_cast<size_t>(c.num_hidden_layers));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (!c.is_moe_layer(l)) continue;
        Layer& layer = out.layers_[static_cast<size_t>(l)];
        Tensor* views[4] = {&layer.gate_up_blocks, &layer.gate_up_scales, &layer.down_blocks,
                            &layer.down_scales};
        for (size_t k = 0; k < pieces.size(); ++k) {
            const Piece& p = pieces[k];
            const std::string name = experts_prefix(l) + p.name;
            const auto stored = r.raw_bytes(name);
            DF_CHECK(static_cast<int64_t>(stored.size()) == p.shape.numel(),
                     "{}: tensor '{}' holds {} bytes but {} needs {}", r.file_path(name).string(),
                     name, stored.size(), p.shape.to_string(), p.shape.numel());
            *views[k] = Tensor(base + off, DType::u8, p.shape, dev);
            off += aligned(p.shape.numel());
            // Expert by expert through one host slab, gate_up's rows reordered on the way.
            const int64_t slab = p.rows * p.row_bytes;
            HostTensor h({slab}, DType::u8);
            for (int64_t e = 0; e < c.num_experts; ++e) {
                const unsigned char* src = stored.data() + e * slab;
                for (int64_t row = 0; row < p.rows; ++row) {
                    const int64_t from = p.interleaved ? interleaved_row(row, i) : row;
                    std::memcpy(h.view().u8() + row * p.row_bytes, src + from * p.row_bytes,
                                static_cast<size_t>(p.row_bytes));
                }
                be.upload(views[k]->rows(e, e + 1).reshape({slab}), h.view());
                be.synchronize();  // h is refilled next
            }
        }
    }
    return out;
}

int64_t PackedExperts::bytes() const {
    int64_t n = 0;
    for (const Layer& l : layers_)
        n += static_cast<int64_t>(l.gate_up_blocks.nbytes() + l.gate_up_scales.nbytes() +
                                  l.down_blocks.nbytes() + l.down_scales.nbytes());
    return n;
}

std::vector<std::pair<std::string, HostTensor>> PackedExperts::stored_tensors(
    Backend& be, const TargetConfig& c) const {
    const std::vector<Piece> pieces = packed_pieces(c);
    const int64_t i = c.moe_intermediate_size;
    std::vector<std::pair<std::string, HostTensor>> out;
    for (int64_t l = 0; l < static_cast<int64_t>(layers_.size()); ++l) {
        const Layer& layer = layers_[static_cast<size_t>(l)];
        if (layer.gate_up_blocks.empty()) continue;
        const Tensor* views[4] = {&layer.gate_up_blocks, &layer.gate_up_scales, &layer.down_blocks,
                                  &layer.down_scales};
        for (size_t k = 0; k < pieces.size(); ++k) {
            const Piece& p = pieces[k];
            HostTensor ours(p.shape, DType::u8);
            be.download(ours.view(), *views[k]);
            if (!p.interleaved) {
                out.emplace_back(experts_prefix(l) + p.name, std::move(ours));
                continue;
            }
            HostTensor hub(p.shape, DType::u8);
            const int64_t slab = p.rows * p.row_bytes;
            for (int64_t e = 0; e < c.num_experts; ++e)
                for (int64_t row = 0; row < p.rows; ++row)
                    std::memcpy(hub.view().u8() + e * slab + interleaved_row(row, i) * p.row_bytes,
                                ours.view().u8() + e * slab + row * p.row_bytes,
                                static_cast<size_t>(p.row_bytes));
            out.emplace_back(experts_prefix(l) + p.name, std::move(hub));
        }
    }
    return out;
}

ExpertFormat hub_expert_format(const TargetConfig& c) {
    if (c.num_moe_layers() == 0) return ExpertFormat::none;
    // Qwen3.5-MoE's published checkpoints hold the experts fused.
    if (c.model_type == "qwen3_5_moe") return ExpertFormat::fused;
    return c.gpt_oss() ? ExpertFormat::gpt_oss : ExpertFormat::per_expert;
}

std::vector<std::pair<std::string, HostTensor>> stored_target_tensors(const ParamSet& params,
                                                                      const TargetConfig& c) {
    const ExpertFormat f = hub_expert_format(c);
    const int64_t e_count = c.num_experts, i = c.moe_intermediate_size, d = c.hidden_size;
    std::vector<std::pair<std::string, HostTensor>> out;
    for (const Param& p : params.params()) {
        const auto [part, pre] = expert_part(p.name);
        HostTensor w = params.read_f32(p.name);
        if (const auto src = hybrid_row_source(c, p.name); !src.empty()) w = scatter_rows(w, src);
        if (part == ExpertPart::none || part == ExpertPart::down_bias || f == ExpertFormat::fused) {
            out.emplace_back(p.name, std::move(w));
            continue;
        }
        if (f == ExpertFormat::per_expert) {
            for (int64_t e = 0; e < e_count; ++e) {
                const std::string ex = fmt::format("{}{}.", pre, e);
                if (part == ExpertPart::gate_up) {
                    HostTensor g({i, d}), u({i, d});
                    std::memcpy(g.f32(), w.f32() + e * 2 * i * d, g.nbytes());
                    std::memcpy(u.f32(), w.f32() + (e * 2 + 1) * i * d, u.nbytes());
                    out.emplace_back(ex + "gate_proj.weight", std::move(g));
                    out.emplace_back(ex + "up_proj.weight", std::move(u));
                } else {
                    HostTensor dn({d, i});
                    std::memcpy(dn.f32(), w.f32() + e * d * i, dn.nbytes());
                    out.emplace_back(ex + "down_proj.weight", std::move(dn));
                }
            }
            continue;
        }
        DF_ASSERT(f == ExpertFormat::gpt_oss, "no stored layout for expert '{}'", p.name);
        // transformers' gpt-oss layout: x·W orientation, gate/up interleaved.
        HostTensor s;
        if (part == ExpertPart::gate_up) {
            s = HostTensor({e_count, d, 2 * i});
            for (int64_t e = 0; e < e_count; ++e)
                for (int64_t row = 0; row < 2 * i; ++row)
                    for (int64_t k = 0; k < d; ++k)
                        s.f32()[(e * d + k) * 2 * i + interleaved_row(row, i)] =
                            w.f32()[(e * 2 * i + row) * d + k];
        } else if (part == ExpertPart::down) {
            s = HostTensor({e_count, i, d});
            for (int64_t e = 0; e < e_count; ++e)
                for (int64_t k = 0; k < d; ++k)
                    for (int64_t u = 0; u < i; ++u)
                        s.f32()[(e * i + u) * d + k] = w.f32()[(e * d + k) * i + u];
        } else {
            s = HostTensor({e_count, 2 * i});
            for (int64_t e = 0; e < e_count; ++e)
                for (int64_t row = 0; row < 2 * i; ++row)
                    s.f32()[e * 2 * i + interleaved_row(row, i)] = w.f32()[e * 2 * i + row];
        }
        out.emplace_back(p.name, std::move(s));
    }
    return out;
}

}  // namespace dflash
