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
    m.randomize(seed, std);
    return m;
}

void DrafterModel::randomize(uint64_t seed, float std) {
    params_.init_random(seed, std);
    if (cfg_.dflash2()) init_dflash2_modules(seed, std);
}

DrafterModel DrafterModel::from_dflash(Backend& be, const DrafterModel& v1, DrafterConfig cfg,
                                       uint64_t seed, float std) {
    DF_CHECK(v1.config().arch == DrafterArch::dflash,
             "the drafter to convert is not a DFlash drafter (it is already a DFlash2 or DSpark "
             "one)");
    DF_CHECK(cfg.dflash2() || cfg.dspark(),
             "from_dflash makes a DFlash2 or DSpark drafter (cfg has arch dflash)");
    DrafterModel m(be, std::move(cfg));
    const char* kind = m.cfg_.dspark() ? "DSpark" : "DFlash2";
    for (const Param& p : v1.params().params()) {
        DF_CHECK(m.params_.has(p.name) && m.params_.param(p.name).shape == p.shape,
                 "the {} config does not keep the DFlash drafter's tensor '{}' {}", kind, p.name,
                 p.shape.to_string());
        m.params_.write_f32(p.name, v1.params().read_f32(p.name).view());
    }
    if (m.cfg_.dspark()) {
        m.init_dspark_heads(seed, std);
    } else {
        m.init_dflash2_modules(seed, std);
    }
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
    for (const char* name :
         {"candidate_selector.hidden_projection.weight", "candidate_selector.predecessor_codebook"})
        params_.init_normal(name, seed ^ 0xd2f1a5c0ffeeULL, std);
    const std::string succ = "candidate_selector.successor_codebook";
    params_.write_f32(succ, HostTensor(params_.param(succ).shape).view());
}

void DrafterModel::init_dspark_heads(uint64_t seed, float std) {
    DF_ASSERT(cfg_.dspark(), "init_dspark_heads on a non-DSpark drafter");
    Rng rng(seed ^ 0x5d5a7c0ffee1ULL);
    for (const Param& p : params_.params()) {
        if (!p.name.starts_with("markov_head.") && !p.name.starts_with("confidence_head."))
            continue;
        HostTensor t(p.shape);
        if (!p.name.ends_with(".bias")) fill_normal(rng, t.f32(), t.numel(), std);
        params_.write_f32(p.name, t.view());
    }
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
    for (int32_t a : anchors) {
        if (cfg_.dspark()) {
            for (int64_t k = 0; k < B; ++k) w += dspark_slot_weight(a, k, loss_mask, gamma);
            continue;
        }
        for (int64_t k = 1; k < B; ++k) w += block_row_weight(a, k, loss_mask, gamma);
    }
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
    std::vector<AttnMask> masks;     // per layer: the block mask with the layer's window
    // train.recompute_layers, or no gradients: each layer's activations are given back after its
    // forward (and, with gradients, made again before its backward: Note [Recomputed layers]).
    bool release_layers = false;
};

// Note [Recomputed layers]: with recomputation the forward keeps only the layer inputs xs (taken
// before the layers run) and gives each layer's activations back to the workspace as soon as the
// next layer has its input; the backward runs layer l's forward again from xs[l] (the same ops on
// the same inputs, so the same bits, written again into xs[l+1], which nothing reads any more)
// right before its backward, and gives them back after it. The workspace then holds one layer's
// activations at a time instead of L.
void DrafterModel::forward_layer(const LayerContext& lc, BlockForward& f, int64_t l) const {
    if (cfg_.dflash2()) {
        dflash2_layer_forward_train(lc, layer(l), conv(l), f.xs[l], f.ctx, f.q_pos, f.kv_pos,
                                    f.masks[l], cfg_.block_size, f.acts2[l], f.xs[l + 1]);
    } else {
        layer_forward_train(lc, layer(l), f.xs[l], f.ctx, f.q_pos, f.kv_pos, f.masks[l], f.acts[l],
                            f.xs[l + 1]);
    }
}

void DrafterModel::forward_blocks(Backend& be, Workspace& ws, const Tensor& embed,
                                  const Tensor& features, std::span<const int32_t> tokens,
                                  std::span<const int32_t> anchors,
                                  std::span<const int32_t> context_starts, BlockForward& f) const {
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D, B = cfg_.block_size;
    const int64_t N = static_cast<int64_t>(anchors.size()), R = N * B;
    const int64_t L = cfg_.layer.num_hidden_layers;
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
    // Each layer's mask gives its queries the keys decoding gives them (its window, causality).
    const AttnMask blocks =
        AttnMask::dflash_block(S, B, f.anchors, context_starts.empty() ? Tensor() : starts.device);
    f.masks.clear();
    for (int64_t l = 0; l < L; ++l)
        f.masks.push_back(drafter_layer_mask(blocks, cfg_.layer_window(l), cfg_.layer_causal(l)));
    const LayerContext lc{be, ws, dims_, inv_freq_view_};
    if (cfg_.dflash2() && cfg_.d2.input_embedding_scale != 1.0)
        be.scale_inplace(f.xs[0], static_cast<float>(cfg_.d2.input_embedding_scale));
    f.acts.assign(L, LayerActs{});
    f.acts2.assign(cfg_.dflash2() ? L : 0, Dflash2Acts{});
    for (int64_t l = 0; l < L; ++l) {
        const Workspace::Mark m = ws.mark();
        forward_layer(lc, f, l);
        if (f.release_layers) ws.release(m);
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
    // DSpark (docs/training.md "DSpark drafters"): slot k predicts token a + k + 1 after the
    // teacher-forced token a + k, taught by the target's position a + k.
    const bool dspark = cfg_.dspark();
    DF_CHECK(!dspark || !dpace,
             "D-PACE weighting (train.loss_weighting=dpace) is not available for DSpark drafters");
    const int64_t shift = dspark ? 1 : 0;
    for (int64_t j = 0; j < N; ++j) {
        for (int64_t k = 0; k < B; ++k) {
            const int64_t r = j * B + k, p = anchors[j] + k + shift;
            const float w = dspark ? dspark_slot_weight(anchors[j], k, loss_mask, gamma)
                                   : block_row_weight(anchors[j], k, loss_mask, gamma);
            labels.host.i32()[r] = w > 0.0f ? tokens[p] : -1;
            weights.host.f32()[r] = w;
            grad_weights.host.f32()[r] = w * grad_scale;
        }
    }
    const bool teacher = dspark || objective.loss.needs_teacher() || !objective.eval_tv.empty();
    Workspace::Staged teacher_rows, prev;
    if (teacher) {
        teacher_rows = ws.input({R}, DType::i32);
        for (int64_t j = 0; j < N; ++j)
            for (int64_t k = 0; k < B; ++k)
                teacher_rows.host.i32()[j * B + k] =
                    dspark ? static_cast<int32_t>(std::min(anchors[j] + k, S - 1))
                           : teacher_position(anchors[j], k, S);
    }
    if (dspark) {
        prev = ws.input({R}, DType::i32);
        for (int64_t j = 0; j < N; ++j)
            for (int64_t k = 0; k < B; ++k)
                prev.host.i32()[j * B + k] = tokens[std::min(anchors[j] + k, S - 1)];
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
    // Hidden-state noise (docs/training.md "Hidden-state noise"): on the features the drafter
    // reads, in training only; the teacher's hidden states are a separate tensor, untouched.
    if (loss.hidden_noise > 0 && params_.has_grads()) {
        Workspace::Staged seed = ws.input({2}, DType::i32);
        seed.host.i32()[0] = static_cast<int32_t>(static_cast<uint32_t>(batch.noise_seed));
        seed.host.i32()[1] = static_cast<int32_t>(static_cast<uint32_t>(batch.noise_seed >> 32));
        ws.send_inputs();
        be.add_uniform_noise(features, seed.device, static_cast<float>(loss.hidden_noise));
    }
    BlockForward f;
    // Without gradients no backward reads a layer's activations: each is given back once the
    // next layer has its input, as recomputation's forward does (Note [Recomputed layers]). An
    // evaluation then holds one layer's activations, and the trainer's workspace, planned for
    // evaluations too, keeps what train.recompute_layers saves.
    f.release_layers = loss.recompute_layers || !params_.has_grads();
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
    la.argmax_out = objective.eval_argmax;
    la.tv_out = objective.eval_tv;
    const Tensor dh = grads ? ws.take({R, D}, act) : Tensor();
    if (dspark) {
        DsparkLossArgs da;
        da.alpha = objective.dspark;
        da.hf = f.hf;
        da.lm_head = lm_head;
        da.labels = labels.device;
        da.weights = weights.device;
        if (grads) da.grad_weights = grad_weights.device;
        da.prev = prev.device;
        da.teacher_hidden = objective.teacher_hidden;
        da.teacher_rows = teacher_rows.device;
        da.chunk = chunk;
        da.period = B;
        da.argmax_out = objective.eval_argmax;
        da.tv_out = objective.eval_tv;
        da.conf_out = objective.eval_conf;
        dspark_block_loss(be, ws, params_, cfg_.ds, da, dh, stats);
    } else {
        block_loss(be, ws, la, dh, stats);
    }
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
        const Workspace::Mark m = ws.mark();
        if (f.release_layers) forward_layer(lc, f, l);  // made again: Note [Recomputed layers]
        if (cfg_.dflash2()) {
            dflash2_layer_backward(lc, layer(l), g, conv(l),
                                   dflash2_layer_grads(params_, layer_prefix(l)), f.acts2[l],
                                   f.q_pos, f.kv_pos, f.masks[l], B, dx, dprev, dctx);
        } else {
            layer_backward(lc, layer(l), g, f.acts[l], f.q_pos, f.kv_pos, f.masks[l], dx, dprev,
                           dctx);
        }
        if (f.release_layers) ws.release(m);
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
    const DrafterConfig& cfg = model.config();
    const int64_t L = cfg.layer.num_hidden_layers;
    for (int64_t l = 0; l < L; ++l)
        if (cfg.sliding(l)) window_ = cfg.sliding_window;
    // Note [Bounded draft KV]: a sliding layer's queries see the W - 1 context rows before the
    // block and the block's own rows, so its cache holds at most 2(W-1) + P + max_block rows,
    // with context appended in pieces of P = min(max_new_rows, max(W, max_block)) rows: when
    // the next piece and block would not fit, the last W - 1 context rows move to its start (a
    // copy between disjoint ranges, since more than 2(W-1) rows are in use then) and
    // window_offset_ advances. K carries its RoPE angle, so where a row sits in the cache does
    // not matter, only which rows the mask lets a query see: relative rows are positions minus
    // window_offset_, and the causal window over them is the same window. Full layers keep
    // capacity + max_block rows.
    if (window_ > 0) {
        const int64_t piece = std::min(max_new_rows_, std::max(window_, max_block_));
        const int64_t rows = 2 * (window_ - 1) + piece + max_block_;
        if (rows < capacity + max_block_) {
            window_rows_ = rows;
            window_piece_ = piece;
        }
    }
    cache_.resize(L);
    for (int64_t l = 0; l < L; ++l) {
        const int64_t rows =
            cfg.sliding(l) && window_rows_ > 0 ? window_rows_ : capacity + max_block_;
        cache_[l].k = DeviceTensor(be, {rows, d.Hkv, d.Dh}, be.compute_dtype());
        cache_[l].v = DeviceTensor(be, {rows, d.Hkv, d.Dh}, be.compute_dtype());
    }
    if (model.config().dflash2())
        z_ =
            DeviceTensor(be, {max_block_ - 1, model.config().d2.selector_rank}, be.compute_dtype());
    if (model.config().dspark()) h_ = DeviceTensor(be, {max_block_, d.D}, be.compute_dtype());
    const int64_t lead = model.config().dspark() ? 0 : 1;  // rows before the first draft
    Workspace fake = Workspace::planning(be.device());
    // The largest run: the most rows one run appends (a piece, with bounded caches) and a block.
    const int64_t piece = window_rows_ > 0 ? window_piece_ : max_new_rows_;
    const Tensor feats = fake.take({piece, model.feature_dim()}, be.compute_dtype());
    const Tensor logits = fake.take({max_block_ - lead, lm_head.dim(0)}, DType::f32);
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
    const int64_t drafts = model_.config().dspark() ? B : B - 1;
    DF_ASSERT(logits.dim(0) == drafts, "logits rows {} for block {}", logits.dim(0), B);
    // Context rows go in pieces of max_new_rows; the block is drafted with the last piece.
    int64_t done = 0;
    const int64_t piece_rows = window_rows_ > 0 ? window_piece_ : max_new_rows_;
    do {
        const int64_t n = std::min(piece_rows, T - done);
        const bool last = done + n == T;
        ws_.reset();
        const Tensor piece = n > 0 ? new_features.rows(done, done + n) : Tensor();
        slide_window_caches(n, last ? B : 0);
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
    // [first context row, first block row, cache length with the block]: read on the device;
    // then the same in the sliding layers' bounded caches (Note [Bounded draft KV]).
    Workspace::Staged rows = ws.input({6}, DType::i32);
    for (int64_t i = 0; i < T; ++i) ctx_pos.host.i32()[i] = static_cast<int32_t>(start + i);
    for (int64_t k = 0; k < B; ++k) {
        ids.host.i32()[k] = k == 0 ? anchor : static_cast<int32_t>(model_.config().mask_token_id);
        q_pos.host.i32()[k] = static_cast<int32_t>(start + T + k);
    }
    rows.host.i32()[0] = static_cast<int32_t>(start);
    rows.host.i32()[1] = static_cast<int32_t>(start + T);
    rows.host.i32()[2] = static_cast<int32_t>(start + T + B);
    const int64_t off = window_rows_ > 0 ? window_offset_ : 0;
    for (int i = 0; i < 3; ++i)
        rows.host.i32()[3 + i] = static_cast<int32_t>(rows.host.i32()[i] - off);
    ws.send_inputs();
    // A layer's [first context row, first block row, cache length] in its own cache.
    struct LayerRows {
        Tensor ctx_row0, block_row0, kv_len;
        int64_t cache_len;  // rows before the block, on the host
    };
    const LayerRows all_rows{rows.device.rows(0, 1), rows.device.rows(1, 2), rows.device.rows(2, 3),
                             start + T};
    const LayerRows window_rows{rows.device.rows(3, 4), rows.device.rows(4, 5),
                                rows.device.rows(5, 6), start + T - off};
    const DrafterConfig& cfg = model_.config();
    auto rows_of = [&](size_t l) -> const LayerRows& {
        return window_rows_ > 0 && cfg.sliding(static_cast<int64_t>(l)) ? window_rows : all_rows;
    };
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
                                     rows_of(l).ctx_row0);
        }
        if (B == 0) return;
        Tensor x = ws.take({B, D}, act);
        be.embedding_fwd(embed_, ids.device.rows(0, B), x);
        // The block's K/V go after the context and are simply overwritten by the next draft.
        for (size_t i = 0; i < cache_.size(); ++i) {
            const auto l = static_cast<int64_t>(i);
            const LayerRows& r = rows_of(i);
            const Tensor pos = q_pos.device.rows(0, B);
            if (cfg.dflash2()) {
                // The input embedding scale applies once, before the first layer.
                if (i == 0 && cfg.d2.input_embedding_scale != 1.0)
                    lc.be.scale_inplace(x, static_cast<float>(cfg.d2.input_embedding_scale));
                const DraftAttention att{cfg.layer_causal(l), cfg.layer_window(l)};
                dflash2_layer_forward_cached(lc, model_.layer(l), model_.conv(l), x, pos, cache_[i],
                                             r.cache_len, r.block_row0, r.kv_len, att, x);
            } else {
                // A DFlash layer's block sees the whole cache, or (sliding) the causal window of
                // its position: the keys its training mask gives it.
                const AttnMaskKind kind =
                    cfg.layer_causal(l) ? AttnMaskKind::causal : AttnMaskKind::full;
                layer_forward_cached(lc, model_.layer(l), x, pos, cache_[i], r.block_row0, r.kv_len,
                                     kind, x, cfg.layer_window(l));
            }
        }
        // DSpark: every row drafts, and its heads read the rows' hidden states afterwards.
        const int64_t lead = cfg.dspark() ? 0 : 1;
        Tensor h = cfg.dspark() ? h_.view().rows(0, B) : ws.take({B - 1, D}, act);
        be.rmsnorm_fwd(x.rows(lead, B), model_.params().value("norm.weight"), model_.dims().eps, h,
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
    // DFlash layers apply their window on the device (a causal mask over kv_len).
    if (!cfg.dflash2()) return false;
    const int64_t n_window = window_rows_ > 0 ? n - window_offset_ : n;
    for (int64_t l = 0; l < cfg.layer.num_hidden_layers; ++l)
        if (cfg.layer_window(l) > 0 && n_window > cfg.layer_window(l)) return true;
    return false;
}

void DrafterSession::slide_window_caches(int64_t T, int64_t B) {
    if (window_rows_ == 0) return;
    const int64_t used = ctx_len_ - window_offset_;
    if (used + T + B <= window_rows_) return;
    const int64_t keep = std::min(window_ - 1, used);
    DF_ASSERT(used - keep >= keep, "window cache move overlaps: {} rows used, {} kept", used, keep);
    const DrafterConfig& cfg = model_.config();
    for (size_t i = 0; i < cache_.size(); ++i) {
        if (!cfg.sliding(static_cast<int64_t>(i))) continue;
        for (DeviceTensor* t : {&cache_[i].k, &cache_[i].v})
            be_.copy(t->view().rows(0, keep), t->view().rows(used - keep, used));
    }
    window_offset_ += used - keep;
}

Tensor DrafterSession::dspark_hidden(int64_t block_size) const {
    if (h_.empty()) return Tensor();
    return h_.view().rows(0, block_size > 0 ? block_size : model_.block_size());
}

Tensor DrafterSession::selector_z(int64_t block_size) const {
    if (z_.empty()) return Tensor();
    const int64_t B = block_size > 0 ? block_size : model_.block_size();
    return z_.view().rows(0, B - 1);
}

void DrafterSession::crop(int64_t len) {
    DF_ASSERT(len >= 0 && len <= ctx_len_, "crop to {} with {} context rows", len, ctx_len_);
    // The sliding layers' bounded caches still hold the rows the next block sees only when they
    // start at or before len - (W - 1) (Note [Bounded draft KV]); an empty context (a new
    // request) needs none and starts them over.
    if (len == 0) window_offset_ = 0;
    DF_CHECK(window_rows_ == 0 || window_offset_ == 0 || len - (window_ - 1) >= window_offset_,
             "cannot crop the drafter context to {} rows: its sliding-window layers keep rows "
             "from {} on only",
             len, window_offset_);
    ctx_len_ = len;
}

}  // namespace dflash
