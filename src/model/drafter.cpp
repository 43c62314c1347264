// DFlash drafter: training step (block-sparse, decay-weighted) and inference session.
// Tested by tests/model/drafter_test.cpp.
#include "model/drafter.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "model/selector_loss.h"
#include "model/tensor_layout.h"

namespace dflash {

namespace {

std::string layer_prefix(int64_t i) {
    return "layers." + std::to_string(i) + ".";
}

TargetConfig layer_config(const DrafterConfig& cfg) {
    return cfg.layer;
}

// Loss weight of block row k of the block anchored at `a` (docs/training.md "The drafter's training
// forward"): 0 for the anchor itself, for positions past the sequence and for non-response tokens;
// the decay weight otherwise.
float block_row_weight(int64_t a, int64_t k, std::span<const uint8_t> loss_mask, double gamma) {
    const int64_t p = a + k;
    const bool valid = k > 0 && p < static_cast<int64_t>(loss_mask.size()) && loss_mask[p];
    return valid ? dflash_position_weight(k, gamma) : 0.0f;
}

}  // namespace

float dflash_position_weight(int64_t k, double gamma) {
    if (k <= 0) return 0.0f;
    if (gamma <= 0) return 1.0f;
    return static_cast<float>(std::exp(-static_cast<double>(k - 1) / gamma));
}

DrafterModel::DrafterModel(Backend& be, DrafterConfig cfg)
    : cfg_(std::move(cfg)),
      dims_(layer_dims(layer_config(cfg_))),
      params_(be, drafter_tensor_specs(cfg_)),
      inv_freq_(upload_inv_freq(be, cfg_.layer.rope, cfg_.layer.head_dim)),
      inv_freq_view_(inv_freq_.view()) {
    for (int64_t l = 0; l < cfg_.layer.num_hidden_layers; ++l) {
        layers_.push_back(layer_weights(params_, layer_prefix(l), dims_));
        if (cfg_.dflash2()) convs_.push_back(dflash2_layer_weights(params_, layer_prefix(l)));
    }
}

DrafterModel DrafterModel::load(Backend& be, const std::filesystem::path& dir) {
    DrafterConfig cfg = DrafterConfig::load(dir);
    // Before anything is allocated; refuses tensors the config does not describe (as inspect does).
    check_drafter_files(dir, cfg);
    DrafterModel m(be, std::move(cfg));
    m.params_.load(dir);
    return m;
}

DrafterModel DrafterModel::random(Backend& be, DrafterConfig cfg, uint64_t seed, float std) {
    DrafterModel m(be, std::move(cfg));
    Rng rng(seed);
    m.params_.init_random(rng, std);
    if (m.cfg_.dflash2()) m.init_dflash2_modules(seed, std);
    return m;
}

DrafterModel DrafterModel::from_dflash(Backend& be, const DrafterModel& v1, DrafterConfig cfg,
                                       uint64_t seed, float std) {
    DF_CHECK(!v1.config().dflash2(), "the drafter to convert is already a DFlash2 drafter");
    DF_CHECK(cfg.dflash2(), "from_dflash makes a DFlash2 drafter (cfg has arch dflash)");
    DrafterModel m(be, std::move(cfg));
    for (const Param& p : v1.params().params()) {
        DF_CHECK(m.params_.has(p.name) && m.params_.param(p.name).shape == p.shape,
                 "the DFlash2 config does not keep the DFlash drafter's tensor '{}' {}", p.name,
                 p.shape.to_string());
        m.params_.write_f32(p.name, v1.params().read_f32(p.name).view());
    }
    m.init_dflash2_modules(seed, std);
    return m;
}

void DrafterModel::init_dflash2_modules(uint64_t seed, float std) {
    DF_ASSERT(cfg_.dflash2(), "init_dflash2_modules on a DFlash drafter");
    const int64_t k = cfg_.d2.conv_kernel_size, D = dims_.D;
    for (int64_t l = 0; l < cfg_.layer.num_hidden_layers; ++l)
        for (const char* conv : {"attention_conv", "mlp_conv"}) {
            const std::string pre = layer_prefix(l) + conv;
            HostTensor base({2, k, D});
            for (int64_t h = 0; h < 2; ++h)
                for (int64_t c = 0; c < D; ++c) base.f32()[h * k * D + c] = 1.0f;  // tap 0
            params_.write_f32(pre + ".base_kernel", base.view());
            HostTensor proj(params_.param(pre + ".kernel_projection.weight").shape);
            params_.write_f32(pre + ".kernel_projection.weight", proj.view());
        }
    Rng rng(seed ^ 0xd2f1a5c0ffeeULL);
    for (const char* name : {"candidate_selector.hidden_projection.weight",
                             "candidate_selector.predecessor_codebook"}) {
        HostTensor t(params_.param(name).shape);
        fill_normal(rng, t.f32(), t.numel(), std);
        params_.write_f32(name, t.view());
    }
    const std::string succ = "candidate_selector.successor_codebook";
    params_.write_f32(succ, HostTensor(params_.param(succ).shape).view());
}

void DrafterModel::save(const std::filesystem::path& dir, DType store_as) const {
    std::filesystem::create_directories(dir);
    params_.save(dir, store_as);
    cfg_.save(dir);
}

int64_t DrafterModel::feature_dim() const {
    return static_cast<int64_t>(cfg_.target_layer_ids.size()) * dims_.D;
}

std::vector<Tensor> DrafterModel::linear_weights() const {
    std::vector<Tensor> w{params_.value("fc.weight")};
    for (const LayerWeights& l : layers_)
        for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            w.push_back(*t);
    for (const Dflash2LayerWeights& c : convs_) {
        w.push_back(c.attn.proj);
        w.push_back(c.mlp.proj);
    }
    if (cfg_.dflash2()) w.push_back(params_.value("candidate_selector.hidden_projection.weight"));
    return w;
}

void DrafterModel::project_context(Backend& be, const Tensor& features, const Tensor& ctx,
                                   const Tensor& pre, const Tensor& rstd,
                                   const PreparedWeights* prepared) const {
    DF_CHECK(features.dim(1) == feature_dim(),
             "drafter features have {} columns but K*D = {}*{} = {} were expected", features.dim(1),
             cfg_.target_layer_ids.size(), dims_.D, feature_dim());
    const Tensor p = pre.empty() ? ctx : pre;
    linear(be, prepared, features, params_.value("fc.weight"), p);
    be.rmsnorm_fwd(p, params_.value("hidden_norm.weight"), dims_.eps, ctx, rstd);
}

double DrafterModel::weight_sum(std::span<const uint8_t> loss_mask,
                                std::span<const int32_t> anchors, double gamma) const {
    const int64_t B = cfg_.block_size;
    double w = 0;
    for (int32_t a : anchors)
        for (int64_t k = 1; k < B; ++k) w += block_row_weight(a, k, loss_mask, gamma);
    return w;
}

struct DrafterModel::BlockForward {
    int64_t S = 0, N = 0, R = 0;
    Tensor pre, ctx, rstd_c;    // [S, D], [S, D], [S]
    Tensor ids, q_pos, kv_pos;  // device i32 [R], [R], [S+R]
    Tensor anchors;             // device i32 [N]
    std::vector<Tensor> xs;     // L+1 x [R, D]
    std::vector<LayerActs> acts;
    std::vector<Dflash2Acts> acts2;  // DFlash2 drafters
    Tensor hf, rstd_f;               // [R, D], [R]
    AttnMask mask;
};

void DrafterModel::forward_blocks(Backend& be, Workspace& ws, const Tensor& embed,
                                  const Tensor& features, std::span<const int32_t> tokens,
                                  std::span<const int32_t> anchors,
                                  std::span<const int32_t> context_starts, BlockForward& f) const {
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D, B = cfg_.block_size;
    const int64_t N = static_cast<int64_t>(anchors.size()), R = N * B;
    const int64_t L = cfg_.layer.num_hidden_layers;
    // The training mask is DFlash's bidirectional block mask: a DFlash2 drafter whose layers are
    // causal, or whose window would hide keys of this sequence, would be trained for other
    // attention than it decodes with.
    for (int64_t l = 0; l < L; ++l) {
        const int64_t W = cfg_.layer_window(l);
        DF_CHECK(!cfg_.layer_causal(l) && (W == 0 || S + B <= W),
                 "draft layer {} is {}: training supports bidirectional drafter layers whose "
                 "window (if any) covers the whole sequence ({} + {} rows here)",
                 l, cfg_.layer_causal(l) ? "causal" : fmt::format("windowed ({} keys)", W), S, B);
    }
    DF_ASSERT(features.dim(0) == S, "features rows {} for {} tokens", features.dim(0), S);
    DF_CHECK(N > 0,
             "no anchors: the sequence has no position whose token and next token are both "
             "response tokens");
    for (int64_t j = 0; j < N; ++j)
        DF_ASSERT(anchors[j] >= 0 && anchors[j] < S && (j == 0 || anchors[j] > anchors[j - 1]),
                  "anchor {} = {}", j, anchors[j]);
    const DType act = be.compute_dtype();
    f.S = S;
    f.N = N;
    f.R = R;
    Workspace::Staged ids = ws.input({R}, DType::i32);
    Workspace::Staged q_pos = ws.input({R}, DType::i32);
    Workspace::Staged kv_pos = ws.input({S + R}, DType::i32);
    Workspace::Staged anc = ws.input({N}, DType::i32);
    DF_ASSERT(context_starts.empty() || static_cast<int64_t>(context_starts.size()) == N,
              "{} context starts for {} anchors", context_starts.size(), N);
    Workspace::Staged starts;
    if (!context_starts.empty()) {
        starts = ws.input({N}, DType::i32);
        for (int64_t j = 0; j < N; ++j) starts.host.i32()[j] = context_starts[j];
    }
    for (int64_t s = 0; s < S; ++s) kv_pos.host.i32()[s] = static_cast<int32_t>(s);
    for (int64_t j = 0; j < N; ++j) {
        anc.host.i32()[j] = anchors[j];
        for (int64_t k = 0; k < B; ++k) {
            const int64_t r = j * B + k;
            ids.host.i32()[r] =
                k == 0 ? tokens[anchors[j]] : static_cast<int32_t>(cfg_.mask_token_id);
            q_pos.host.i32()[r] = static_cast<int32_t>(anchors[j] + k);
            kv_pos.host.i32()[S + r] = static_cast<int32_t>(anchors[j] + k);
        }
    }
    f.ids = ids.device;
    f.q_pos = q_pos.device;
    f.kv_pos = kv_pos.device;
    f.anchors = anc.device;
    ws.send_inputs();

    f.pre = ws.take({S, D}, act);
    f.ctx = ws.take({S, D}, act);
    f.rstd_c = ws.take({S}, DType::f32);
    project_context(be, features, f.ctx, f.pre, f.rstd_c);
    f.xs.clear();
    for (int64_t l = 0; l <= L; ++l) f.xs.push_back(ws.take({R, D}, act));
    be.embedding_fwd(embed, f.ids, f.xs[0]);
    f.mask =
        AttnMask::dflash_block(S, B, f.anchors, context_starts.empty() ? Tensor() : starts.device);
    const LayerContext lc{be, ws, dims_, inv_freq_view_};
    if (cfg_.dflash2()) {
        if (cfg_.d2.input_embedding_scale != 1.0)
            be.scale_inplace(f.xs[0], static_cast<float>(cfg_.d2.input_embedding_scale));
        f.acts2.assign(L, Dflash2Acts{});
        for (int64_t l = 0; l < L; ++l)
            dflash2_layer_forward_train(lc, layer(l), conv(l), f.xs[l], f.ctx, f.q_pos, f.kv_pos,
                                        f.mask, B, f.acts2[l], f.xs[l + 1]);
    } else {
        f.acts.assign(L, LayerActs{});
        for (int64_t l = 0; l < L; ++l)
            layer_forward_train(lc, layer(l), f.xs[l], f.ctx, f.q_pos, f.kv_pos, f.mask, f.acts[l],
                                f.xs[l + 1]);
    }
    f.hf = ws.take({R, D}, act);
    f.rstd_f = ws.take({R}, DType::f32);
    be.rmsnorm_fwd(f.xs[L], params_.value("norm.weight"), dims_.eps, f.hf, f.rstd_f);
}

void DrafterModel::block_hidden(Backend& be, Workspace& ws, const Tensor& embed,
                                const Tensor& features, std::span<const int32_t> tokens,
                                std::span<const int32_t> anchors, const Tensor& hf,
                                std::span<const int32_t> context_starts) const {
    BlockForward f;
    forward_blocks(be, ws, embed, features, tokens, anchors, context_starts, f);
    be.copy(hf, f.hf);
}

void DrafterModel::train_step(Backend& be, Workspace& ws, const DrafterBatch& batch,
                              const DrafterLossSpec& loss, const DrafterStepSums& step,
                              const BlockObjective& objective) {
    const Tensor &embed = loss.embed, &lm_head = loss.lm_head, &features = batch.features;
    const std::span<const int32_t> tokens = batch.tokens, anchors = batch.anchors;
    const std::span<const uint8_t> loss_mask = batch.loss_mask;
    // D-PACE: the weights staged here are the loss mask (gamma 0), what dpace_weights scales.
    const bool dpace = loss.dpace_alpha > 0;
    const double gamma = dpace ? 0.0 : loss.gamma;
    const int64_t chunk = loss.ce_chunk;
    const float grad_scale = step.grad_scale;
    const Tensor& stats = step.stats;
    DF_ASSERT(loss_mask.size() == tokens.size());
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D, B = cfg_.block_size;
    const int64_t N = static_cast<int64_t>(anchors.size()), R = N * B;
    // Labels and weights are staged with the forward's inputs: one upload per micro-batch. The
    // gradient's weights carry grad_scale, so the step's device work is the same every step
    // (a recorded step replays it; Backend::run_step).
    Workspace::Staged labels = ws.input({R}, DType::i32);
    Workspace::Staged weights = ws.input({R}, DType::f32);
    Workspace::Staged grad_weights = ws.input({R}, DType::f32);
    for (int64_t j = 0; j < N; ++j) {
        for (int64_t k = 0; k < B; ++k) {
            const int64_t r = j * B + k, p = anchors[j] + k;
            const float w = block_row_weight(anchors[j], k, loss_mask, gamma);
            labels.host.i32()[r] = w > 0.0f ? tokens[p] : -1;
            weights.host.f32()[r] = w;
            grad_weights.host.f32()[r] = w * grad_scale;
        }
    }
    const bool teacher = objective.loss.needs_teacher();
    Workspace::Staged teacher_rows;
    if (teacher) {
        teacher_rows = ws.input({R}, DType::i32);
        for (int64_t j = 0; j < N; ++j)
            for (int64_t k = 0; k < B; ++k)
                teacher_rows.host.i32()[j * B + k] = teacher_position(anchors[j], k, S);
    }
    // DFlash2's selector loss: teacher-forced predecessors (the data token before each row; the
    // anchor for row 1) and its own gradient weights (alpha x the unary ones).
    const bool selector = cfg_.dflash2() && !objective.selector_stats.empty();
    const bool grads = params_.has_grads();
    const bool selector_grads = selector && grads && objective.selector_alpha > 0;
    Workspace::Staged pred, sel_weights;
    if (selector) {
        pred = ws.input({R}, DType::i32);
        for (int64_t j = 0; j < N; ++j)
            for (int64_t k = 0; k < B; ++k)
                pred.host.i32()[j * B + k] = tokens[teacher_position(anchors[j], k, S)];
    }
    if (selector_grads) {
        sel_weights = ws.input({R}, DType::f32);
        const auto alpha = static_cast<float>(objective.selector_alpha);
        for (int64_t i = 0; i < R; ++i)
            sel_weights.host.f32()[i] = alpha * grad_weights.host.f32()[i];
    }
    BlockForward f;
    forward_blocks(be, ws, embed, features, tokens, anchors, objective.context_starts, f);
    const int64_t L = cfg_.layer.num_hidden_layers;
    const DType act = be.compute_dtype();

    BlockLossArgs la;
    la.loss = objective.loss;
    la.hf = f.hf;
    la.lm_head = lm_head;
    la.labels = labels.device;
    la.weights = weights.device;
    if (teacher) {
        la.teacher_hidden = objective.teacher_hidden;
        la.teacher_rows = teacher_rows.device;
    }
    // The gradient scale travels in the staged gradient weights (a recorded step replays them).
    if (grads) la.grad_weights = grad_weights.device;
    la.chunk = chunk;
    la.period = B;
    la.dpace_alpha = static_cast<float>(loss.dpace_alpha);
    const Tensor dh = grads ? ws.take({R, D}, act) : Tensor();
    block_loss(be, ws, la, dh, stats);
    if (selector) {
        SelectorLossArgs sa;
        sa.hf = f.hf;
        sa.lm_head = lm_head;
        sa.labels = labels.device;
        sa.weights = weights.device;
        if (selector_grads) sa.grad_weights = sel_weights.device;
        sa.pred = pred.device;
        sa.block = B;
        sa.chunk = chunk;
        selector_loss(be, ws, params_, cfg_.d2, sa, dh, objective.selector_stats);
    }
    if (!grads) return;

    Tensor dx = ws.take({R, D}, act);
    Tensor dprev = ws.take({R, D}, act);
    // The context gradient sums over every layer: kept in f32.
    Tensor dctx = ws.take({S, D}, DType::f32);
    be.fill(dctx, 0.0f);
    be.rmsnorm_bwd(dh, f.xs[L], params_.value("norm.weight"), f.rstd_f, dx,
                   params_.grad("norm.weight"));
    const LayerContext lc{be, ws, dims_, inv_freq_view_};
    for (int64_t l = L - 1; l >= 0; --l) {
        const LayerWeights g = layer_grads(params_, layer_prefix(l), dims_);
        if (cfg_.dflash2()) {
            dflash2_layer_backward(lc, layer(l), g, conv(l),
                                   dflash2_layer_grads(params_, layer_prefix(l)), f.acts2[l],
                                   f.q_pos, f.kv_pos, f.mask, B, dx, dprev, dctx);
        } else {
            layer_backward(lc, layer(l), g, f.acts[l], f.q_pos, f.kv_pos, f.mask, dx, dprev, dctx);
        }
        std::swap(dx, dprev);
        // Layers l.., the final norm and the selector are done (Note [Final gradients]).
        params_.grads_final_from(std::string_view(layer_prefix(l)));
    }
    Tensor dctx_act = dctx;
    if (act != DType::f32) {
        dctx_act = ws.take({S, D}, act);
        be.copy(dctx_act, dctx);
    }
    Tensor dpre = ws.take({S, D}, act);
    be.rmsnorm_bwd(dctx_act, f.pre, params_.value("hidden_norm.weight"), f.rstd_c, dpre,
                   params_.grad("hidden_norm.weight"));
    be.gemm(dpre, true, features, false, params_.grad("fc.weight"), 1.0f, 1.0f);
    params_.grads_final_from(0);
}

DrafterSession::DrafterSession(const DrafterModel& model, Backend& be, const Tensor& embed,
                               const Tensor& lm_head, int64_t capacity, int64_t max_block,
                               int64_t max_new_rows, const PreparedWeights* prepared)
    : model_(model),
      be_(be),
      owner_(be),
      embed_(embed),
      lm_head_(lm_head),
      capacity_(capacity),
      max_block_(max_block > 0 ? max_block : model.block_size()),
      max_new_rows_(
          std::max<int64_t>(1, std::min(max_new_rows > 0 ? max_new_rows : max_block_, capacity))),
      prepared_(prepared) {
    const LayerDims& d = model.dims();
    cache_.resize(model.config().layer.num_hidden_layers);
    for (auto& c : cache_) {
        c.k = DeviceTensor(be, {capacity + max_block_, d.Hkv, d.Dh}, be.compute_dtype());
        c.v = DeviceTensor(be, {capacity + max_block_, d.Hkv, d.Dh}, be.compute_dtype());
    }
    if (model.config().dflash2())
        z_ =
            DeviceTensor(be, {max_block_ - 1, model.config().d2.selector_rank}, be.compute_dtype());
    Workspace fake = Workspace::planning(be.device());
    const Tensor feats = fake.take({max_new_rows_, model.feature_dim()}, be.compute_dtype());
    const Tensor logits = fake.take({max_block_ - 1, lm_head.dim(0)}, DType::f32);
    ws_ = Workspace(be, plan_workspace(be, [&](Backend& pb, Workspace& pws) {
                        run(pb, pws, feats, 0, 0, max_block_, logits);
                    }));
}

void DrafterSession::draft(const Tensor& new_features, int32_t anchor, const Tensor& logits,
                           int64_t block_size) {
    const int64_t T = new_features.empty() ? 0 : new_features.dim(0);
    const int64_t B = block_size > 0 ? block_size : model_.block_size();
    DF_CHECK(B >= 2 && B <= max_block_, "block size {} is outside [2, {}]", B, max_block_);
    DF_CHECK(ctx_len_ + T <= capacity_,
             "the drafter context would reach {} rows but the session holds {}", ctx_len_ + T,
             capacity_);
    DF_ASSERT(logits.dim(0) == B - 1, "logits rows {} for block {}", logits.dim(0), B);
    // Context rows go in pieces of max_new_rows; the block is drafted with the last piece.
    int64_t done = 0;
    do {
        const int64_t n = std::min(max_new_rows_, T - done);
        const bool last = done + n == T;
        ws_.reset();
        const Tensor piece = n > 0 ? new_features.rows(done, done + n) : Tensor();
        run(be_, ws_, piece, ctx_len_, anchor, last ? B : 0, logits);
        ctx_len_ += n;
        done += n;
    } while (done < T);
}

void DrafterSession::run(Backend& be, Workspace& ws, const Tensor& new_features, int64_t start,
                         int32_t anchor, int64_t B, const Tensor& logits) {
    const int64_t T = new_features.empty() ? 0 : new_features.dim(0), D = model_.dims().D;
    Workspace::Staged ctx_pos = ws.input({std::max<int64_t>(T, 1)}, DType::i32);
    Workspace::Staged ids = ws.input({std::max<int64_t>(B, 1)}, DType::i32);
    Workspace::Staged q_pos = ws.input({std::max<int64_t>(B, 1)}, DType::i32);
    // [first context row, first block row, cache length with the block]: read on the device.
    Workspace::Staged rows = ws.input({3}, DType::i32);
    for (int64_t i = 0; i < T; ++i) ctx_pos.host.i32()[i] = static_cast<int32_t>(start + i);
    for (int64_t k = 0; k < B; ++k) {
        ids.host.i32()[k] = k == 0 ? anchor : static_cast<int32_t>(model_.config().mask_token_id);
        q_pos.host.i32()[k] = static_cast<int32_t>(start + T + k);
    }
    rows.host.i32()[0] = static_cast<int32_t>(start);
    rows.host.i32()[1] = static_cast<int32_t>(start + T);
    rows.host.i32()[2] = static_cast<int32_t>(start + T + B);
    ws.send_inputs();
    const Tensor ctx_row0 = rows.device.rows(0, 1), block_row0 = rows.device.rows(1, 2),
                 kv_len = rows.device.rows(2, 3);
    const StepKey key{
        owner_.id(), "drafter.draft", {T, B, address_of(new_features), address_of(logits)}};
    const std::function<void()> record = [&] {
        const LayerContext lc{be, ws, model_.dims(), model_.inv_freq(), prepared_};
        const DType act = be.compute_dtype();
        if (T > 0) {
            Tensor ctx = ws.take({T, D}, act);
            model_.project_context(be, new_features, ctx, Tensor(), Tensor(), prepared_);
            const Tensor pos = ctx_pos.device.rows(0, T);
            for (size_t l = 0; l < cache_.size(); ++l)
                layer_append_context(lc, model_.layer(static_cast<int64_t>(l)), ctx, pos, cache_[l],
                                     ctx_row0);
        }
        if (B == 0) return;
        Tensor x = ws.take({B, D}, act);
        be.embedding_fwd(embed_, ids.device.rows(0, B), x);
        // The block's K/V go after the context and are simply overwritten by the next draft.
        if (model_.config().dflash2()) {
            draft_dflash2_layers(lc, x, q_pos.device.rows(0, B), start + T, block_row0, kv_len);
        } else {
            for (size_t l = 0; l < cache_.size(); ++l)
                layer_forward_cached(lc, model_.layer(static_cast<int64_t>(l)), x,
                                     q_pos.device.rows(0, B), cache_[l], block_row0, kv_len,
                                     AttnMaskKind::full, x);
        }
        Tensor h = ws.take({B - 1, D}, act);
        be.rmsnorm_fwd(x.rows(1, B), model_.params().value("norm.weight"), model_.dims().eps, h,
                       Tensor());
        linear(be, prepared_, h, lm_head_, logits);
        if (model_.config().dflash2())
            linear(be, prepared_, h,
                   model_.params().value("candidate_selector.hidden_projection.weight"),
                   z_.view().rows(0, B - 1));
    };
    // A sliding window that hides keys splits the attention by the cache length, known on the
    // host: such a step runs eagerly (draft_attention); every other one is recorded.
    if (window_hides_keys(start + T + B))
        record();
    else
        be.run_step(key, record);
}

bool DrafterSession::window_hides_keys(int64_t n) const {
    const DrafterConfig& cfg = model_.config();
    if (!cfg.dflash2()) return false;
    for (int64_t l = 0; l < cfg.layer.num_hidden_layers; ++l)
        if (cfg.layer_window(l) > 0 && n > cfg.layer_window(l)) return true;
    return false;
}

// The DFlash2 layers over the block x [B, D] (in place), after the input embedding scale.
void DrafterSession::draft_dflash2_layers(const LayerContext& lc, const Tensor& x,
                                          const Tensor& pos, int64_t cache_len, const Tensor& row0,
                                          const Tensor& kv_len) {
    const DrafterConfig& cfg = model_.config();
    if (cfg.d2.input_embedding_scale != 1.0)
        lc.be.scale_inplace(x, static_cast<float>(cfg.d2.input_embedding_scale));
    for (size_t i = 0; i < cache_.size(); ++i) {
        const auto l = static_cast<int64_t>(i);
        const DraftAttention att{cfg.layer_causal(l), cfg.layer_window(l)};
        dflash2_layer_forward_cached(lc, model_.layer(l), model_.conv(l), x, pos, cache_[i],
                                     cache_len, row0, kv_len, att, x);
    }
}

Tensor DrafterSession::selector_z(int64_t block_size) const {
    if (z_.empty()) return Tensor();
    const int64_t B = block_size > 0 ? block_size : model_.block_size();
    return z_.view().rows(0, B - 1);
}

void DrafterSession::crop(int64_t len) {
    DF_ASSERT(len >= 0 && len <= ctx_len_, "crop to {} with {} context rows", len, ctx_len_);
    ctx_len_ = len;
}

}  // namespace dflash
