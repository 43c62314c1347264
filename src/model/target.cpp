// Target model forward, training step and KV-cached session. Tested by tests/model/target_test.cpp.
#include "model/target.h"

#include <algorithm>
#include <functional>
#include <map>

#include "core/checkpoint_io.h"
#include "model/expert_weights.h"
#include "model/gdn_layer.h"
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
      // The hybrid families turn only the first rotary_dim dims of each head.
      inv_freq_(upload_inv_freq(be, cfg_.rope, cfg_.hybrid() ? cfg_.rotary_dim() : cfg_.head_dim)),
      inv_freq_view_(inv_freq_.view()) {
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
        layers_.push_back(layer_weights(params_, layer_prefix(l), dims_));
    if (cfg_.attention_sinks) {
        sinks_ = DeviceTensor(be, {cfg_.num_hidden_layers, dims_.H}, DType::f32);
        for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
            layers_[l].sinks = sinks_.view().rows(l, l + 1).reshape({dims_.H});
    }
    if (cfg_.hybrid()) point_at_centred_norms(be);
    sync_sinks();
}

namespace {

// The hybrid families' zero-centred norms: every model RMSNorm but the Gated DeltaNet's output
// norm (linear_attn.norm.weight, a plain scale).
bool is_centred_norm(const std::string& name) {
    return name.ends_with("layernorm.weight") || name.ends_with("self_attn.q_norm.weight") ||
           name.ends_with("self_attn.k_norm.weight") || name == "model.norm.weight";
}

}  // namespace

void TargetModel::point_at_centred_norms(Backend& be) {
    int64_t total = 0;
    for (const Param& p : params_.params())
        if (is_centred_norm(p.name)) total += p.shape.numel();
    // f32 on every backend: bf16 cannot hold 1 + w (docs/engine.md "Zero-centred norms").
    centred_norms_ = DeviceTensor(be, {total}, DType::f32);
    std::map<std::string, Tensor> by_name;
    int64_t off = 0;
    for (const Param& p : params_.params()) {
        if (!is_centred_norm(p.name)) continue;
        const int64_t n = p.shape.numel();
        const Tensor v = centred_norms_.view().rows(off, off + n).reshape(p.shape);
        centred_views_.emplace_back(p.name, v);
        by_name[p.name] = v;
        off += n;
    }
    auto get = [&](const std::string& name) {
        const auto it = by_name.find(name);
        return it == by_name.end() ? Tensor() : it->second;
    };
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        const std::string pre = layer_prefix(l);
        LayerWeights& w = layers_[l];
        w.input_ln = get(pre + "input_layernorm.weight");
        w.post_ln = get(pre + "post_attention_layernorm.weight");
        if (!w.linear()) {
            w.q_norm = get(pre + "self_attn.q_norm.weight");
            w.k_norm = get(pre + "self_attn.k_norm.weight");
        }
    }
    final_norm_ = get("model.norm.weight");
}

void TargetModel::sync_sinks() {
    for (int64_t l = 0; l < cfg_.num_hidden_layers && !sinks_.empty(); ++l) {
        const HostTensor h = params_.read_f32(layer_prefix(l) + "self_attn.sinks");
        from_host_f32(backend(), layers_[l].sinks, h.view());
    }
    // (1 + w) in f32, as transformers computes it for the hybrid families' norms.
    for (const auto& [name, view] : centred_views_) {
        HostTensor h = params_.read_f32(name);
        for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] = 1.0f + h.f32()[i];
        from_host_f32(backend(), view, h.view());
    }
}

Tensor TargetModel::final_norm() const {
    return final_norm_.empty() ? params_.value("model.norm.weight") : final_norm_;
}

TargetModel TargetModel::load(Backend& be, const std::filesystem::path& dir, Mxfp4Storage mxfp4) {
    TargetConfig cfg = TargetConfig::load(dir);
    // Before anything is allocated for the model: names, shapes and dtypes in the stored format.
    const ExpertFormat format =
        check_target_files(dir, cfg, keeps_experts_packed(mxfp4, ExpertFormat::mxfp4, be));
    const CheckpointReader reader = CheckpointReader::open(dir);
    const bool packed = keeps_experts_packed(mxfp4, format, be);
    const CheckpointNames names = checkpoint_names(cfg, reader.names());
    TargetModel m(be, std::move(cfg), packed);
    load_target_params(m.params_, m.cfg_, reader, format, names);
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
    m.params_.init_random(seed, std);
    // The hybrid families' zero-centred norms start at w = 0 (scale 1), as transformers
    // initialises them.
    for (const auto& [name, view] : m.centred_views_)
        m.params_.write_f32(name, HostTensor(view.shape()).view());
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

std::vector<Tensor> TargetModel::linear_weights() const {
    std::vector<Tensor> w;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        if (cfg_.is_linear_layer(l)) continue;
        const LayerWeights& lw = layers_[l];
        for (const Tensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
            if (!t->empty()) w.push_back(*t);
    }
    w.push_back(lm_head());
    return w;
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
        if (cfg_.is_linear_layer(l)) {
            // A Gated DeltaNet layer from a zero state (a sequence start), chunked.
            const LinearState st{ws.take({dims_.lin_kernel - 1, dims_.lin_conv_dim()}, DType::f32),
                                 ws.take({dims_.lin_hv, dims_.lin_dk, dims_.lin_dv}, DType::f32)};
            be.fill(st.conv, 0.0f);
            be.fill(st.ssm, 0.0f);
            linear_layer_forward(lc, layer(l), x, st, LinearMode::chunked, Tensor(), nullptr, y);
            ws.release(m);
            std::swap(x, y);
            for (size_t c = 0; c < capture.size(); ++c)
                if (capture[c] == l && !features.empty())
                    be.copy_columns(features, static_cast<int64_t>(c) * D, x);
            continue;
        }
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
    if (!final_hidden.empty()) be.rmsnorm_fwd(x, final_norm(), dims_.eps, final_hidden, Tensor());
}

void TargetModel::train_step(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                             std::span<const uint8_t> loss_mask, float grad_scale, int64_t chunk,
                             const Tensor& stats) {
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D, L = cfg_.num_hidden_layers;
    bool sliding = false;
    for (int64_t l = 0; l < L; ++l) sliding = sliding || cfg_.layer_window(l) > 0;
    DF_CHECK(!cfg_.moe() && !cfg_.attention_sinks && !sliding && !cfg_.hybrid(),
             "pretraining a {} target (experts, attention sinks, sliding-window or linear "
             "attention layers) is not supported: such targets are used frozen, to train "
             "drafters for",
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
                             std::vector<int64_t> capture, int64_t max_rows,
                             const PreparedWeights* prepared, bool rows_ops, RowsLimits rows_limits)
    : model_(model),
      be_(be),
      prepared_(prepared),
      rows_ops_(rows_ops),
      rows_limits_(rows_limits),
      owner_(be),
      capacity_(capacity),
      capture_(std::move(capture)),
      max_rows_(std::max<int64_t>(1, std::min(max_rows, capacity))) {
    check_capture(model.config(), capture_);
    const TargetConfig& cfg = model.config();
    const LayerDims& d = model.dims();
    const DType act = be.compute_dtype();
    cache_.resize(cfg.num_hidden_layers);
    hybrid_ = cfg.hybrid();
    save_rows_ = std::min(max_rows_, kRollbackRows);
    if (hybrid_) linear_.resize(cfg.num_hidden_layers);
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
        if (!cfg.is_linear_layer(l)) {
            cache_[l].k = DeviceTensor(be, {capacity, d.Hkv, d.Dh}, act);
            cache_[l].v = DeviceTensor(be, {capacity, d.Hkv, d.Dh}, act);
            continue;
        }
        LinearCache& c = linear_[l];
        const Shape conv{d.lin_kernel - 1, d.lin_conv_dim()}, ssm{d.lin_hv, d.lin_dk, d.lin_dv};
        c.conv = DeviceTensor(be, conv, DType::f32);
        c.ssm = DeviceTensor(be, ssm, DType::f32);
        c.conv_ckpt = DeviceTensor(be, conv, DType::f32);
        c.ssm_ckpt = DeviceTensor(be, ssm, DType::f32);
        c.qkv = DeviceTensor(be, {save_rows_, d.lin_conv_dim()}, act);
        c.q = DeviceTensor(be, {save_rows_, d.lin_hk, d.lin_dk}, DType::f32);
        c.k = DeviceTensor(be, {save_rows_, d.lin_hk, d.lin_dk}, DType::f32);
        c.v = DeviceTensor(be, {save_rows_, d.lin_hv, d.lin_dv}, DType::f32);
        c.g = DeviceTensor(be, {save_rows_, d.lin_hv}, DType::f32);
        c.beta = DeviceTensor(be, {save_rows_, d.lin_hv}, DType::f32);
    }
    reset_linear_states();
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
        // Hybrid targets: a piece short enough to be rolled back checkpoints its start (the
        // piece saves its rows); after a longer one nothing before its end can be returned to.
        if (hybrid_) checkpoint_len_ = e - i <= save_rows_ ? len_ : len_ + (e - i);
        run_piece(be_, ws_, tokens.subspan(i, e - i), len_, lg, ft);
        len_ += e - i;
    }
}

void TargetSession::run_piece(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                              int64_t start, const Tensor& logits, const Tensor& features) {
    const int64_t n = static_cast<int64_t>(tokens.size()), D = model_.dims().D;
    const TokenInputs in = stage_tokens(ws, tokens, start);
    // [first cache row written, cache length after the piece, rows in the piece]: read on the
    // device.
    Workspace::Staged rows = ws.input({3}, DType::i32);
    rows.host.i32()[0] = static_cast<int32_t>(start);
    rows.host.i32()[1] = static_cast<int32_t>(start + n);
    rows.host.i32()[2] = static_cast<int32_t>(n);
    ws.send_inputs();
    const Tensor row0 = rows.device.rows(0, 1), kv_len = rows.device.rows(1, 2);
    const Tensor count = rows.device.rows(2, 3);
    // Hybrid targets: pieces that can be rolled back checkpoint their states and save their rows,
    // and run the recurrence token by token as the replay does (so a replayed state is the one
    // this forward reached); longer pieces (prefills) run it chunked.
    const bool save = hybrid_ && n <= save_rows_;
    // Everything below reads its positions from device memory: one step per piece shape.
    const StepKey key{
        owner_.id(),
        "target.forward",
        {n, logits.empty() ? 0 : logits.dim(0), address_of(logits), address_of(features)}};
    be.run_step(key, [&] {
        Tensor x = ws.take({n, D}, be.compute_dtype());
        be.embedding_fwd(model_.embed(), in.ids, x);
        const LayerContext lc{be,        ws,        model_.dims(), model_.inv_freq(),
                              prepared_, rows_ops_, rows_limits_};
        for (int64_t l = 0; l < model_.config().num_hidden_layers; ++l) {
            if (model_.config().is_linear_layer(l)) {
                const LinearCache& c = linear_[l];
                if (save) {
                    be.copy(c.conv_ckpt.view(), c.conv.view());
                    be.copy(c.ssm_ckpt.view(), c.ssm.view());
                }
                const LinearSaved saved = c.saved();
                linear_layer_forward(lc, model_.layer(l), x, c.state(),
                                     save ? LinearMode::recurrent : LinearMode::chunked, count,
                                     save ? &saved : nullptr, x);
            } else {
                layer_forward_cached(lc, model_.layer(l), x, in.pos, cache_[l], row0, kv_len,
                                     AttnMaskKind::causal, x, model_.config().layer_window(l));
            }
            for (size_t c = 0; c < capture_.size(); ++c)
                if (capture_[c] == l && !features.empty())
                    be.copy_columns(features, static_cast<int64_t>(c) * D, x);
        }
        if (!logits.empty()) {
            const int64_t nl = logits.dim(0);
            Tensor h = ws.take({nl, D}, be.compute_dtype());
            be.rmsnorm_fwd(x.rows(n - nl, n), model_.final_norm(), model_.dims().eps, h, Tensor());
            if (rows_ops_ && nl <= kRowsLinearMaxRows &&
                rows_linear_pays(rows_limits_, {model_.lm_head()})) {
                RowsLinear head;
                head.w[0] = model_.lm_head();
                be.rows_linear(h, head, Tensor(), logits);
            } else {
                linear(be, prepared_, h, model_.lm_head(), logits);
            }
        }
    });
}

void TargetSession::crop(int64_t len) {
    DF_ASSERT(len >= 0 && len <= len_, "crop to {} with {} cached", len, len_);
    if (hybrid_ && len != len_) {
        if (len == 0) {
            reset_linear_states();
        } else {
            DF_CHECK(len >= checkpoint_len_,
                     "cannot roll a {} target back to {} tokens: its linear-attention states "
                     "can return only to the start of the last forward piece ({} tokens; "
                     "pieces of at most {} rows), or to 0",
                     model_.config().model_type, len, checkpoint_len_, save_rows_);
            replay(len - checkpoint_len_);
        }
    }
    len_ = len;
}

LinearSaved TargetSession::LinearCache::saved() const {
    return {qkv.view(), q.view(), k.view(), v.view(), g.view(), beta.view()};
}

void TargetSession::reset_linear_states() {
    for (const LinearCache& c : linear_) {
        if (c.conv.empty()) continue;
        be_.fill(c.conv.view(), 0.0f);
        be_.fill(c.ssm.view(), 0.0f);
    }
    checkpoint_len_ = 0;
}

// Cost (docs/engine.md "Verify rollback of hybrid targets"): per linear layer one state copy
// back from the checkpoint and one pass over the n kept rows reading the state once, next to
// the verify's own state copy at its start and its saved rows (T rows of q, k, v, g, beta: KBs).
void TargetSession::replay(int64_t n) {
    ws_.reset();
    Workspace::Staged count = ws_.input({1}, DType::i32);
    count.host.i32()[0] = static_cast<int32_t>(n);
    ws_.send_inputs();
    // The number of rows is read on the device: one step serves every accepted length.
    const StepKey key{owner_.id(), "target.replay", {}};
    be_.run_step(key, [&] {
        for (const LinearCache& c : linear_) {
            if (c.conv.empty()) continue;
            be_.copy(c.conv.view(), c.conv_ckpt.view());
            be_.copy(c.ssm.view(), c.ssm_ckpt.view());
            gdn_replay(be_, c.saved(), c.state(), count.device);
        }
    });
}

}  // namespace dflash
