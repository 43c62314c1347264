// DFlash drafter: training step (block-sparse, decay-weighted) and inference session.
// Tested by tests/model/drafter_test.cpp.
#include "model/drafter.h"

#include <cmath>
#include <cstring>

#include "model/tensor_layout.h"

namespace dflash {

namespace {

std::string layer_prefix(int64_t i) {
    return "layers." + std::to_string(i) + ".";
}

TargetConfig layer_config(const DrafterConfig& cfg) {
    return cfg.layer;
}

// Loss weight of block row k of the block anchored at `a` (dflash-spec §3.4): 0 for the anchor
// itself, for positions past the sequence and for non-response tokens; the decay weight otherwise.
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

DrafterModel::DrafterModel(DrafterConfig cfg)
    : cfg_(std::move(cfg)),
      dims_(layer_dims(layer_config(cfg_))),
      inv_freq_(rope_inv_freq(cfg_.layer.rope, cfg_.layer.head_dim)),
      params_(drafter_tensor_specs(cfg_)) {
    for (int64_t l = 0; l < cfg_.layer.num_hidden_layers; ++l)
        layers_.push_back(layer_weights(params_, layer_prefix(l), dims_));
}

DrafterModel DrafterModel::load(const std::filesystem::path& dir) {
    DrafterModel m(DrafterConfig::load(dir));
    m.params_.load(dir);
    return m;
}

DrafterModel DrafterModel::random(DrafterConfig cfg, uint64_t seed, float std) {
    DrafterModel m(std::move(cfg));
    Rng rng(seed);
    m.params_.init_random(rng, std);
    return m;
}

void DrafterModel::save(const std::filesystem::path& dir, DType store_as) const {
    std::filesystem::create_directories(dir);
    params_.save(dir, store_as);
    cfg_.save(dir);
}

int64_t DrafterModel::feature_dim() const {
    return static_cast<int64_t>(cfg_.target_layer_ids.size()) * dims_.D;
}

void DrafterModel::project_context(Backend& be, const Tensor& features, const Tensor& ctx,
                                   const Tensor& pre, const Tensor& rstd) const {
    DF_CHECK(features.dim(1) == feature_dim(),
             "drafter features have {} columns but K*D = {}*{} = {} were expected", features.dim(1),
             cfg_.target_layer_ids.size(), dims_.D, feature_dim());
    const Tensor p = pre.empty() ? ctx : pre;
    be.gemm(features, false, params_.value("fc.weight"), true, p);
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
    Tensor ids, q_pos, kv_pos;  // i32 [R], [R], [S+R]
    std::vector<Tensor> xs;     // L+1 x [R, D]
    std::vector<LayerActs> acts;
    Tensor hf, rstd_f;  // [R, D], [R]
    AttnMask mask;
};

void DrafterModel::forward_blocks(Backend& be, const Tensor& embed, const Tensor& features,
                                  std::span<const int32_t> tokens, std::span<const int32_t> anchors,
                                  Scratch& sc, BlockForward& f) const {
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
    f.S = S;
    f.N = N;
    f.R = R;
    f.pre = sc.get("ctx.pre", {S, D});
    f.ctx = sc.get("ctx", {S, D});
    f.rstd_c = sc.get("ctx.rstd", {S});
    project_context(be, features, f.ctx, f.pre, f.rstd_c);

    f.ids = sc.get("ids", {R}, DType::i32);
    f.q_pos = sc.get("q_pos", {R}, DType::i32);
    f.kv_pos = sc.get("kv_pos", {S + R}, DType::i32);
    for (int64_t s = 0; s < S; ++s) f.kv_pos.i32()[s] = static_cast<int32_t>(s);
    for (int64_t j = 0; j < N; ++j) {
        for (int64_t k = 0; k < B; ++k) {
            const int64_t r = j * B + k;
            f.ids.i32()[r] = k == 0 ? tokens[anchors[j]] : static_cast<int32_t>(cfg_.mask_token_id);
            f.q_pos.i32()[r] = static_cast<int32_t>(anchors[j] + k);
            f.kv_pos.i32()[S + r] = static_cast<int32_t>(anchors[j] + k);
        }
    }
    f.xs.clear();
    for (int64_t l = 0; l <= L; ++l) f.xs.push_back(sc.get("x" + std::to_string(l), {R, D}));
    be.embedding_fwd(embed, f.ids, f.xs[0]);
    f.mask = AttnMask::dflash_block(S, B, anchors.data());
    const LayerContext lc{be, dims_, inv_freq_};
    f.acts.assign(L, LayerActs{});
    for (int64_t l = 0; l < L; ++l)
        layer_forward_train(lc, layer(l), f.xs[l], f.ctx, f.q_pos, f.kv_pos, f.mask, sc,
                            "L" + std::to_string(l), f.acts[l], f.xs[l + 1]);
    f.hf = sc.get("final.h", {R, D});
    f.rstd_f = sc.get("final.rstd", {R});
    be.rmsnorm_fwd(f.xs[L], params_.value("norm.weight"), dims_.eps, f.hf, f.rstd_f);
}

void DrafterModel::block_hidden(Backend& be, const Tensor& embed, const Tensor& features,
                                std::span<const int32_t> tokens, std::span<const int32_t> anchors,
                                Scratch& sc, const Tensor& hf) const {
    BlockForward f;
    forward_blocks(be, embed, features, tokens, anchors, sc, f);
    copy_tensor(hf, f.hf);
}

DrafterModel::LossStats DrafterModel::train_step(Backend& be, const Tensor& embed,
                                                 const Tensor& lm_head, const Tensor& features,
                                                 std::span<const int32_t> tokens,
                                                 std::span<const uint8_t> loss_mask,
                                                 std::span<const int32_t> anchors, double gamma,
                                                 float grad_scale, int64_t chunk, Scratch& sc) {
    DF_ASSERT(loss_mask.size() == tokens.size());
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D, B = cfg_.block_size;
    BlockForward f;
    forward_blocks(be, embed, features, tokens, anchors, sc, f);
    const int64_t N = f.N, R = f.R, L = cfg_.layer.num_hidden_layers;

    Tensor labels = sc.get("labels", {R}, DType::i32);
    Tensor weights = sc.get("weights", {R});
    for (int64_t j = 0; j < N; ++j) {
        for (int64_t k = 0; k < B; ++k) {
            const int64_t r = j * B + k, p = anchors[j] + k;
            const float w = block_row_weight(anchors[j], k, loss_mask, gamma);
            labels.i32()[r] = w > 0.0f ? tokens[p] : -1;
            weights.f32()[r] = w;
        }
    }
    const bool grads = params_.has_grads();
    LmHeadCeOut out;
    out.loss_rows = sc.get("loss_rows", {R});
    out.argmax = sc.get("argmax", {R}, DType::i32);
    if (grads) out.dh = sc.get("final.dh", {R, D});
    be.lm_head_ce(f.hf, lm_head, labels, weights, grad_scale, chunk, out);
    LossStats st;
    st.correct.assign(B, 0);
    st.count.assign(B, 0);
    for (int64_t r = 0; r < R; ++r) {
        const float w = weights.f32()[r];
        if (w == 0.0f) continue;
        const int64_t k = r % B;
        st.loss_sum += static_cast<double>(w) * out.loss_rows.f32()[r];
        st.weight_sum += w;
        st.count[k] += 1;
        st.correct[k] += out.argmax.i32()[r] == labels.i32()[r];
    }
    if (!grads) return st;

    Tensor dx = sc.get("dx.a", {R, D});
    Tensor dprev = sc.get("dx.b", {R, D});
    Tensor dctx = sc.get("d_ctx", {S, D});
    fill_f32(dctx, 0.0f);
    be.rmsnorm_bwd(out.dh, f.xs[L], params_.value("norm.weight"), f.rstd_f, dx,
                   params_.grad("norm.weight"));
    const LayerContext lc{be, dims_, inv_freq_};
    for (int64_t l = L - 1; l >= 0; --l) {
        layer_backward(lc, layer(l), layer_grads(params_, layer_prefix(l), dims_), f.acts[l],
                       f.q_pos, f.kv_pos, f.mask, dx, sc, "L" + std::to_string(l), dprev, dctx);
        std::swap(dx, dprev);
    }
    Tensor dpre = sc.get("ctx.d_pre", {S, D});
    be.rmsnorm_bwd(dctx, f.pre, params_.value("hidden_norm.weight"), f.rstd_c, dpre,
                   params_.grad("hidden_norm.weight"));
    be.gemm(dpre, true, features, false, params_.grad("fc.weight"), 1.0f, 1.0f);
    return st;
}

DrafterSession::DrafterSession(const DrafterModel& model, Backend& be, const Tensor& embed,
                               const Tensor& lm_head, int64_t capacity, int64_t max_block)
    : model_(model),
      be_(be),
      embed_(embed),
      lm_head_(lm_head),
      capacity_(capacity),
      max_block_(max_block > 0 ? max_block : model.block_size()) {
    const LayerDims& d = model.dims();
    cache_.resize(model.config().layer.num_hidden_layers);
    for (auto& c : cache_) {
        c.k = HostTensor({capacity + max_block_, d.Hkv, d.Dh});
        c.v = HostTensor({capacity + max_block_, d.Hkv, d.Dh});
    }
}

void DrafterSession::draft(const Tensor& new_features, int32_t anchor, const Tensor& logits,
                           int64_t block_size) {
    const int64_t T = new_features.empty() ? 0 : new_features.dim(0);
    const int64_t B = block_size > 0 ? block_size : model_.block_size(), D = model_.dims().D;
    DF_CHECK(B >= 2 && B <= max_block_, "block size {} is outside [2, {}]", B, max_block_);
    DF_CHECK(ctx_len_ + T <= capacity_,
             "the drafter context would reach {} rows but the session holds {}", ctx_len_ + T,
             capacity_);
    DF_ASSERT(logits.dim(0) == B - 1, "logits rows {} for block {}", logits.dim(0), B);
    Tensor ctx;
    if (T > 0) {
        ctx = scratch_.get("ctx", {T, D});
        model_.project_context(be_, new_features, ctx, Tensor(), Tensor());
    }
    const int64_t start = ctx_len_ + T;
    Tensor ids = scratch_.get("ids", {B}, DType::i32);
    Tensor q_pos = scratch_.get("q_pos", {B}, DType::i32);
    Tensor kv_pos = scratch_.get("kv_pos", {T + B}, DType::i32);
    for (int64_t k = 0; k < B; ++k) {
        ids.i32()[k] = k == 0 ? anchor : static_cast<int32_t>(model_.config().mask_token_id);
        q_pos.i32()[k] = static_cast<int32_t>(start + k);
    }
    for (int64_t i = 0; i < T + B; ++i) kv_pos.i32()[i] = static_cast<int32_t>(ctx_len_ + i);
    Tensor x = scratch_.get("x", {B, D});
    be_.embedding_fwd(embed_, ids, x);
    const LayerContext lc{be_, model_.dims(), model_.inv_freq()};
    for (size_t l = 0; l < cache_.size(); ++l)
        layer_forward_cached(lc, model_.layer(static_cast<int64_t>(l)), x, ctx, q_pos, kv_pos,
                             cache_[l], ctx_len_, AttnMaskKind::full, scratch_, x);
    ctx_len_ = start;  // the block's K/V rows past the context are simply overwritten next time
    Tensor h = scratch_.get("final", {B - 1, D});
    be_.rmsnorm_fwd(x.rows(1, B), model_.params().value("norm.weight"), model_.dims().eps, h,
                    Tensor());
    be_.gemm(h, false, lm_head_, true, logits);
}

void DrafterSession::crop(int64_t len) {
    DF_ASSERT(len >= 0 && len <= ctx_len_, "crop to {} with {} context rows", len, ctx_len_);
    ctx_len_ = len;
}

}  // namespace dflash
