// Target model forward, training step and KV-cached session. Tested by tests/model/target_test.cpp.
#include "model/target.h"

#include <algorithm>
#include <functional>

#include "core/checkpoint_io.h"
#include "model/expert_weights.h"
#include "model/tensor_layout.h"

namespace dflash {

namespace {

std::string layer_prefix(int64_t i) {
    return "model.layers." + std::to_string(i) + ".";
}

void check_capture(const TargetConfig& cfg, std::span<const int64_t> capture) {
    for (size_t i = 0; i < capture.size(); ++i)
        DF_CHECK(capture[i] >= 0 && capture[i] < cfg.num_hidden_layers,
                 "target_layer_ids[{}]={} but the target has {} layers (ids 0..{})", i, capture[i],
                 cfg.num_hidden_layers, cfg.num_hidden_layers - 1);
}

void check_tokens(std::span<const int32_t> tokens, int64_t vocab) {
    for (int32_t t : tokens)
        DF_CHECK(t >= 0 && t < vocab, "token id {} is outside the vocabulary [0, {})", t, vocab);
}

// Staged ids and positions start..start+n-1 of a piece of tokens.
struct TokenInputs {
    Tensor ids, pos;  // device i32 [n]
};
TokenInputs stage_tokens(Workspace& ws, std::span<const int32_t> tokens, int64_t start) {
    const auto n = static_cast<int64_t>(tokens.size());
    Workspace::Staged ids = ws.input({n}, DType::i32);
    Workspace::Staged pos = ws.input({n}, DType::i32);
    for (int64_t i = 0; i < n; ++i) {
        ids.host.i32()[i] = tokens[i];
        pos.host.i32()[i] = static_cast<int32_t>(start + i);
    }
    return {ids.device, pos.device};
}

}  // namespace

TargetModel::TargetModel(Backend& be, TargetConfig cfg) : TargetModel(be, std::move(cfg), false) {}

TargetModel::TargetModel(Backend& be, TargetConfig cfg, bool packed_experts)
    : cfg_(std::move(cfg)),
      dims_(layer_dims(cfg_)),
      params_(be, target_param_specs(cfg_, packed_experts)),
      inv_freq_(upload_inv_freq(be, cfg_.rope, cfg_.head_dim)),
      inv_freq_view_(inv_freq_.view()) {
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
        layers_.push_back(layer_weights(params_, layer_prefix(l), dims_));
    if (cfg_.attention_sinks) {
        sinks_ = DeviceTensor(be, {cfg_.num_hidden_layers, dims_.H}, DType::f32);
        for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
            layers_[l].sinks = sinks_.view().rows(l, l + 1).reshape({dims_.H});
        sync_sinks();
    }
}

void TargetModel::sync_sinks() {
    for (int64_t l = 0; l < cfg_.num_hidden_layers && !sinks_.empty(); ++l) {
        const HostTensor h = params_.read_f32(layer_prefix(l) + "self_attn.sinks");
        from_host_f32(backend(), layers_[l].sinks, h.view());
    }
}

TargetModel TargetModel::load(Backend& be, const std::filesystem::path& dir, Mxfp4Storage mxfp4) {
    TargetConfig cfg = TargetConfig::load(dir);
    // Before anything is allocated for the model: names, shapes and dtypes in the stored format.
    const ExpertFormat format =
        check_target_files(dir, cfg, keeps_experts_packed(mxfp4, ExpertFormat::mxfp4, be));
    const CheckpointReader reader = CheckpointReader::open(dir);
    const bool packed = keeps_experts_packed(mxfp4, format, be);
    TargetModel m(be, std::move(cfg), packed);
    load_target_params(m.params_, m.cfg_, reader, format);
    if (packed) {
        m.packed_ = PackedExperts::load(be, m.cfg_, reader);
        for (int64_t l = 0; l < m.cfg_.num_hidden_layers; ++l) {
            const PackedExperts::Layer& p = m.packed_.layer(l);
            LayerWeights& w = m.layers_[l];
            w.experts_gate_up_blocks = p.gate_up_blocks;
            w.experts_gate_up_scales = p.gate_up_scales;
            w.experts_down_blocks = p.down_blocks;
            w.experts_down_scales = p.down_scales;
        }
    }
    m.sync_sinks();
    return m;
}

TargetModel TargetModel::random(Backend& be, TargetConfig cfg, uint64_t seed, float std) {
    TargetModel m(be, std::move(cfg));
    Rng rng(seed);
    m.params_.init_random(rng, std);
    m.sync_sinks();
    return m;
}

void TargetModel::save(const std::filesystem::path& dir, DType store_as) const {
    std::filesystem::create_directories(dir);
    // The family's Hub layout (expert_weights.h), which transformers loads as well.
    auto stored = stored_target_tensors(params_, cfg_);
    // Packed MXFP4 experts go back as the checkpoint held them: the Hub's MXFP4 layout.
    for (auto& t : packed_.stored_tensors(backend(), cfg_)) stored.push_back(std::move(t));
    std::vector<std::pair<std::string, Tensor>> views;
    views.reserve(stored.size());
    for (const auto& [name, t] : stored) views.emplace_back(name, t.view());
    write_checkpoint(dir, views, store_as, size_t{4} << 30);
    cfg_.save(dir);
}

Tensor TargetModel::embed() const {
    return params_.value("model.embed_tokens.weight");
}

Tensor TargetModel::lm_head() const {
    return cfg_.tie_word_embeddings ? embed() : params_.value("lm_head.weight");
}

void TargetModel::forward(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                          std::span<const int64_t> capture, const Tensor& features,
                          const Tensor& final_hidden) const {
    check_capture(cfg_, capture);
    check_tokens(tokens, cfg_.vocab_size);
    const TokenInputs in = stage_tokens(ws, tokens, 0);
    ws.send_inputs();
    forward_staged(be, ws, in.ids, in.pos, capture, features, final_hidden);
}

void TargetModel::forward_documents(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                                    std::span<const int32_t> doc_starts,
                                    std::span<const int64_t> capture, const Tensor& features,
                                    const Tensor& final_hidden) const {
    check_capture(cfg_, capture);
    check_tokens(tokens, cfg_.vocab_size);
    const auto S = static_cast<int64_t>(tokens.size());
    const std::vector<int32_t> one = {0};
    const std::span<const int32_t> starts = doc_starts.empty() ? one : doc_starts;
    // Every document's ids and positions (from 0 in each) are staged at once, in what one forward
    // over the whole sequence stages: no document waits for the previous one's upload.
    Workspace::Staged ids = ws.input({S}, DType::i32);
    Workspace::Staged pos = ws.input({S}, DType::i32);
    for (size_t d = 0; d < starts.size(); ++d) {
        const int64_t b = starts[d], e = d + 1 < starts.size() ? starts[d + 1] : S;
        DF_CHECK(b >= 0 && b <= e && e <= S && (d > 0 || b == 0),
                 "document {} spans [{}, {}) of a {}-token sequence; documents must start at 0 "
                 "and ascend",
                 d, b, e, S);
        for (int64_t i = b; i < e; ++i) {
            ids.host.i32()[i] = tokens[i];
            pos.host.i32()[i] = static_cast<int32_t>(i - b);
        }
    }
    ws.send_inputs();
    for (size_t d = 0; d < starts.size(); ++d) {
        const int64_t b = starts[d], e = d + 1 < starts.size() ? starts[d + 1] : S;
        if (b == e) continue;
        // Each document's activations are given back before the next one's.
        const Workspace::Mark m = ws.mark();
        forward_staged(be, ws, ids.device.rows(b, e), pos.device.rows(b, e), capture,
                       features.empty() ? Tensor() : features.rows(b, e),
                       final_hidden.empty() ? Tensor() : final_hidden.rows(b, e));
        ws.release(m);
    }
}

void TargetModel::forward_staged(Backend& be, Workspace& ws, const Tensor& ids, const Tensor& pos,
                                 std::span<const int64_t> capture, const Tensor& features,
                                 const Tensor& final_hidden) const {
    const int64_t S = ids.numel(), D = dims_.D;
    const DType act = be.compute_dtype();
    Tensor x = ws.take({S, D}, act);
    Tensor y = ws.take({S, D}, act);
    be.embedding_fwd(embed(), ids, x);
    const LayerContext lc{be, ws, dims_, inv_freq_view_};
    // Without final_hidden nothing reads the layers after the deepest captured one: skip them
    // (docs/training.md "Target layers per loss").
    const int64_t layers = !final_hidden.empty() ? cfg_.num_hidden_layers
                           : capture.empty()
                               ? 0
                               : *std::max_element(capture.begin(), capture.end()) + 1;
    for (int64_t l = 0; l < layers; ++l) {
        // Each layer's activations are dropped once its output exists (no backward here).
        const Workspace::Mark m = ws.mark();
        LayerActs acts;
        AttnMask mask = AttnMask::causal(0);
        mask.window = cfg_.layer_window(l);
        layer_forward_train(lc, layer(l), x, Tensor(), pos, pos, mask, acts, y);
        ws.release(m);
        std::swap(x, y);
        for (size_t c = 0; c < capture.size(); ++c)
            if (capture[c] == l && !features.empty())
                be.copy_columns(features, static_cast<int64_t>(c) * D, x);
    }
    if (!final_hidden.empty())
        be.rmsnorm_fwd(x, params_.value("model.norm.weight"), dims_.eps, final_hidden, Tensor());
}

void TargetModel::train_step(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                             std::span<const uint8_t> loss_mask, float grad_scale, int64_t chunk,
                             const Tensor& stats) {
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D, L = cfg_.num_hidden_layers;
    bool sliding = false;
    for (int64_t l = 0; l < L; ++l) sliding = sliding || cfg_.layer_window(l) > 0;
    DF_CHECK(!cfg_.moe() && !cfg_.attention_sinks && !sliding,
             "pretraining a {} target (experts, attention sinks or sliding-window layers) is not "
             "supported: such targets are used frozen, to train drafters for",
             cfg_.model_type);
    DF_CHECK(S >= 2, "a training sequence needs at least 2 tokens, got {}", S);
    DF_ASSERT(loss_mask.size() == tokens.size());
    check_tokens(tokens, cfg_.vocab_size);
    const bool grads = params_.has_grads();
    const TokenInputs in = stage_tokens(ws, tokens, 0);
    // Row t predicts token t+1; the last row has no label.
    Workspace::Staged labels = ws.input({S}, DType::i32);
    Workspace::Staged weights = ws.input({S}, DType::f32);
    // The gradient's weights carry grad_scale: the device work is the same every step.
    Workspace::Staged grad_weights = ws.input({S}, DType::f32);
    for (int64_t t = 0; t < S; ++t) {
        const bool valid = t + 1 < S && loss_mask[t + 1];
        labels.host.i32()[t] = valid ? tokens[t + 1] : -1;
        weights.host.f32()[t] = valid ? 1.0f : 0.0f;
        grad_weights.host.f32()[t] = valid ? grad_scale : 0.0f;
    }
    ws.send_inputs();
    const DType act = be.compute_dtype();
    // xs[l] is the input of layer l; xs[L] the last layer's output.
    std::vector<Tensor> xs;
    for (int64_t l = 0; l <= L; ++l) xs.push_back(ws.take({S, D}, act));
    be.embedding_fwd(embed(), in.ids, xs[0]);
    const LayerContext lc{be, ws, dims_, inv_freq_view_};
    std::vector<LayerActs> acts(L);
    for (int64_t l = 0; l < L; ++l)
        layer_forward_train(lc, layer(l), xs[l], Tensor(), in.pos, in.pos, AttnMask::causal(0),
                            acts[l], xs[l + 1]);
    Tensor rstd = ws.take({S}, DType::f32);
    Tensor hf = ws.take({S, D}, act);
    const Tensor norm_w = params_.value("model.norm.weight");
    be.rmsnorm_fwd(xs[L], norm_w, dims_.eps, hf, rstd);

    LmHeadCeOut out;
    out.loss_rows = ws.take({S}, DType::f32);
    out.argmax = ws.take({S}, DType::i32);
    out.workspace = ws.take({be.lm_head_ce_workspace(S, D, cfg_.vocab_size, chunk)}, DType::f32);
    Tensor dhf;
    if (grads) {
        dhf = ws.take({S, D}, act);
        out.dh = dhf;
        out.dw = cfg_.tie_word_embeddings ? params_.grad("model.embed_tokens.weight")
                                          : params_.grad("lm_head.weight");
    }
    // Without gradients (evaluation) the rows' weights only select rows: the raw ones do.
    be.lm_head_ce(hf, lm_head(), labels.device, grads ? grad_weights.device : weights.device, 1.0f,
                  chunk, out);
    be.loss_stats(out.loss_rows, out.argmax, labels.device, weights.device, 1, stats);
    if (!grads) return;

    Tensor dx = ws.take({S, D}, act);
    Tensor dprev = ws.take({S, D}, act);
    be.rmsnorm_bwd(dhf, xs[L], norm_w, rstd, dx, params_.grad("model.norm.weight"));
    for (int64_t l = L - 1; l >= 0; --l) {
        layer_backward(lc, layer(l), layer_grads(params_, layer_prefix(l), dims_), acts[l], in.pos,
                       in.pos, AttnMask::causal(0), dx, dprev, Tensor());
        std::swap(dx, dprev);
        // Layers l.., the final norm and lm_head are done (Note [Final gradients]).
        params_.grads_final_from(std::string_view(layer_prefix(l)));
    }
    be.embedding_bwd(in.ids, dx, params_.grad("model.embed_tokens.weight"));
    params_.grads_final_from(0);
}

TargetSession::TargetSession(const TargetModel& model, Backend& be, int64_t capacity,
                             std::vector<int64_t> capture, int64_t max_rows)
    : model_(model),
      be_(be),
      owner_(be),
      capacity_(capacity),
      capture_(std::move(capture)),
      max_rows_(std::max<int64_t>(1, std::min(max_rows, capacity))) {
    check_capture(model.config(), capture_);
    const LayerDims& d = model.dims();
    cache_.resize(model.config().num_hidden_layers);
    for (auto& c : cache_) {
        c.k = DeviceTensor(be, {capacity, d.Hkv, d.Dh}, be.compute_dtype());
        c.v = DeviceTensor(be, {capacity, d.Hkv, d.Dh}, be.compute_dtype());
    }
    // The largest piece, with logits for every row: the most any forward() takes.
    const std::vector<int32_t> tokens(static_cast<size_t>(max_rows_), 0);
    Workspace fake = Workspace::planning(be.device());
    const Tensor logits = fake.take({max_rows_, model.config().vocab_size}, DType::f32);
    const Tensor features = fake.take({max_rows_, feature_dim()}, be.compute_dtype());
    ws_ = Workspace(be, plan_workspace(be, [&](Backend& pb, Workspace& pws) {
                        run_piece(pb, pws, tokens, 0, logits, features);
                    }));
}

int64_t TargetSession::feature_dim() const {
    return static_cast<int64_t>(capture_.size()) * model_.dims().D;
}

void TargetSession::forward(std::span<const int32_t> tokens, const Tensor& logits,
                            const Tensor& features) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    DF_CHECK(n > 0, "no tokens to feed to the target");
    DF_CHECK(len_ + n <= capacity_,
             "the sequence would reach {} tokens but the target session holds {} (context size)",
             len_ + n, capacity_);
    check_tokens(tokens, model_.config().vocab_size);
    const int64_t nl = logits.empty() ? 0 : logits.dim(0);
    DF_CHECK(nl <= n, "{} logits rows asked for {} tokens", nl, n);
    for (int64_t i = 0; i < n; i += max_rows_) {
        const int64_t e = std::min(n, i + max_rows_);
        // This piece's share of the last nl rows.
        const int64_t l0 = std::max(i, n - nl), l1 = e;
        const Tensor lg = l1 > l0 ? logits.rows(l0 - (n - nl), l1 - (n - nl)) : Tensor();
        const Tensor ft = features.empty() ? Tensor() : features.rows(i, e);
        ws_.reset();
        run_piece(be_, ws_, tokens.subspan(i, e - i), len_, lg, ft);
        len_ += e - i;
    }
}

void TargetSession::run_piece(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                              int64_t start, const Tensor& logits, const Tensor& features) {
    const int64_t n = static_cast<int64_t>(tokens.size()), D = model_.dims().D;
    const TokenInputs in = stage_tokens(ws, tokens, start);
    // [first cache row written, cache length after the piece]: read on the device.
    Workspace::Staged rows = ws.input({2}, DType::i32);
    rows.host.i32()[0] = static_cast<int32_t>(start);
    rows.host.i32()[1] = static_cast<int32_t>(start + n);
    ws.send_inputs();
    const Tensor row0 = rows.device.rows(0, 1), kv_len = rows.device.rows(1, 2);
    // Everything below reads its positions from device memory: one step per piece shape.
    const StepKey key{
        owner_.id(),
        "target.forward",
        {n, logits.empty() ? 0 : logits.dim(0), address_of(logits), address_of(features)}};
    be.run_step(key, [&] {
        Tensor x = ws.take({n, D}, be.compute_dtype());
        be.embedding_fwd(model_.embed(), in.ids, x);
        const LayerContext lc{be, ws, model_.dims(), model_.inv_freq()};
        for (int64_t l = 0; l < model_.config().num_hidden_layers; ++l) {
            layer_forward_cached(lc, model_.layer(l), x, in.pos, cache_[l], row0, kv_len,
                                 AttnMaskKind::causal, x, model_.config().layer_window(l));
            for (size_t c = 0; c < capture_.size(); ++c)
                if (capture_[c] == l && !features.empty())
                    be.copy_columns(features, static_cast<int64_t>(c) * D, x);
        }
        if (!logits.empty()) {
            const int64_t nl = logits.dim(0);
            Tensor h = ws.take({nl, D}, be.compute_dtype());
            be.rmsnorm_fwd(x.rows(n - nl, n), model_.params().value("model.norm.weight"),
                           model_.dims().eps, h, Tensor());
            be.gemm(h, false, model_.lm_head(), true, logits);
        }
    });
}

void TargetSession::crop(int64_t len) {
    DF_ASSERT(len >= 0 && len <= len_, "crop to {} with {} cached", len, len_);
    len_ = len;
}

}  // namespace dflash
