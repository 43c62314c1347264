// AdamW (with Muon for the 2-D weights when asked) and the gradient norm. Tested by
// tests/train/optimizer_test.cpp and tests/train/muon_test.cpp.
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "core/error.h"

namespace dflash::train {

FlatShard FlatShard::of(int64_t numel, int world, int rank) {
    DF_ASSERT(world >= 1 && rank >= 0 && rank < world);
    FlatShard s{numel, world, rank, 0};
    if (world > 1) s.chunk = numel / world / kAlign * kAlign;
    return s;
}

Tensor shard_chunk(const Tensor& flat, const FlatShard& shard) {
    return flat.rows(shard.begin(), shard.end());
}

Tensor shard_tail(const Tensor& flat, const FlatShard& shard) {
    return flat.rows(shard.tail(), shard.numel);
}

bool muon_updates(const Param& p) {
    const std::string_view name = p.name;
    return p.shape.rank() == 2 && std::min(p.shape[0], p.shape[1]) > 1 &&
           name.find("embed_tokens") == std::string_view::npos &&
           name.find("lm_head") == std::string_view::npos;
}

double muon_lr_factor(MuonLrAdjust adjust, int64_t A, int64_t B) {
    const auto a = static_cast<double>(A), b = static_cast<double>(B);
    if (adjust == MuonLrAdjust::original) return std::sqrt(std::max(1.0, a / b));
    return 0.2 * std::sqrt(std::max(a, b));
}

NsScratch::NsScratch(Backend& be, int64_t max_numel, int64_t max_gram)
    : update(be, {std::max<int64_t>(max_numel, 1)}, DType::f32),
      x(be, {std::max<int64_t>(max_numel, 1)}, be.compute_dtype()),
      y(be, {std::max<int64_t>(max_numel, 1)}, be.compute_dtype()),
      gram(be, {std::max<int64_t>(max_gram, 1)}, be.compute_dtype()),
      poly(be, {std::max<int64_t>(max_gram, 1)}, be.compute_dtype()),
      norm_sq(be, {1}, DType::f32) {}

// Note [Newton-Schulz on the short side]: for a wide x [A, B] (A <= B) one step is
// x <- a x + (b G + c G²) x with G = x xᵀ [A, A]; for a tall x the same on xᵀ, which transposed
// reads x <- a x + x (b G + c G²) with G = xᵀ x [B, B] (G is symmetric). gemm's transpose flags
// give both without moving x. The steps alternate between x and s.y; the result is copied back
// into x when it ends in s.y.
void newton_schulz(Backend& be, const Tensor& x, int64_t steps, NsScratch& s) {
    const int64_t A = x.dim(0), B = x.dim(1), m = std::min(A, B);
    const bool tall = A > B;
    const Tensor gram = s.gram.view().rows(0, m * m).reshape({m, m});
    const Tensor poly = s.poly.view().rows(0, m * m).reshape({m, m});
    Tensor cur = x, other = s.y.view().rows(0, A * B).reshape({A, B});
    const auto a = static_cast<float>(kMuonNsA), b = static_cast<float>(kMuonNsB),
               c = static_cast<float>(kMuonNsC);
    for (int64_t k = 0; k < steps; ++k) {
        be.gemm(cur, tall, cur, !tall, gram);  // x xᵀ, or xᵀ x when tall
        be.copy(poly, gram);
        be.gemm(gram, false, gram, false, poly, c, b);  // b G + c G²
        be.copy(other, cur);
        if (tall) {
            be.gemm(cur, false, poly, false, other, 1.0f, a);  // a x + x P
        } else {
            be.gemm(poly, false, cur, false, other, 1.0f, a);  // a x + P x
        }
        std::swap(cur, other);
    }
    if (cur.data() != x.data()) be.copy(x, cur);
}

AdamW::AdamW(const ParamSet& params, AdamWConfig cfg)
    : AdamW(params, cfg, FlatShard::whole(params.numel())) {}

AdamW::AdamW(const ParamSet& params, AdamWConfig cfg, FlatShard shard) : cfg_(cfg), shard_(shard) {
    DF_CHECK(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1,
             "AdamW betas ({}, {}) must lie in [0, 1)", cfg.beta1, cfg.beta2);
    DF_CHECK(cfg.eps > 0, "AdamW eps={} must be positive (train.adam_eps)", cfg.eps);
    DF_ASSERT(params.training(), "AdamW needs a training ParamSet");
    DF_ASSERT(shard.numel == params.numel(), "a shard of {} elements for {} parameters",
              shard.numel, params.numel());
    m_ = DeviceTensor(params.backend(), {shard.owned()}, DType::f32);
    v_ = DeviceTensor(params.backend(), {shard.owned()}, DType::f32);
    // AdamW's three scalars, then Muon's two (lr, 1 - lr * weight decay).
    scalars_ = DeviceTensor(params.backend(), {5}, DType::f32);
    scalars_host_ = params.backend().allocate_host(5 * sizeof(float));
    if (!cfg.muon.enabled) return;
    const MuonConfig& mc = cfg.muon;
    DF_CHECK(mc.momentum >= 0 && mc.momentum < 1, "Muon momentum {} must lie in [0, 1)",
             mc.momentum);
    DF_CHECK(mc.ns_steps >= 1, "train.muon_ns_steps={} must be >= 1", mc.ns_steps);
    // Params are laid out in offset order; the AdamW ranges are the runs between Muon weights.
    std::vector<const Param*> order;
    for (const Param& p : params.params()) order.push_back(&p);
    std::sort(order.begin(), order.end(),
              [](const Param* a, const Param* b) { return a->offset < b->offset; });
    int64_t pos = 0, max_numel = 0, max_gram = 0;
    for (const Param* p : order) {
        if (!muon_updates(*p)) continue;
        const int64_t A = p->shape[0], B = p->shape[1], m = std::min(A, B);
        if (p->offset > pos) adamw_ranges_.emplace_back(pos, p->offset);
        pos = p->offset + A * B;
        muon_matrices_.push_back(
            {p->offset, A, B, static_cast<float>(muon_lr_factor(mc.adjust, A, B))});
        max_numel = std::max(max_numel, A * B);
        max_gram = std::max(max_gram, m * m);
    }
    if (pos < params.numel()) adamw_ranges_.emplace_back(pos, params.numel());
    ns_ = NsScratch(params.backend(), max_numel, max_gram);
}

void AdamW::step(Backend& be, ParamSet& params, double lr, const Tensor& grad_scale) {
    begin_step(be, lr);
    apply(be, params, grad_scale);
}

void AdamW::begin_step(Backend& be, double lr) {
    ++steps_;
    AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(cfg_.beta1);
    p.beta2 = static_cast<float>(cfg_.beta2);
    p.weight_decay = static_cast<float>(cfg_.weight_decay);
    p.step = steps_;
    const AdamWStepScalars s = adamw_step_scalars(p);
    // The previous step's scalars must have left the staging memory (free within a training
    // step, which ends with a download of its statistics).
    be.synchronize();
    auto* host = static_cast<float*>(scalars_host_.data());
    host[0] = s.decay;
    host[1] = s.step_size;
    host[2] = s.bc2_sqrt;
    const double muon_lr = lr * cfg_.muon.lr_ratio;
    host[3] = static_cast<float>(muon_lr);
    host[4] = static_cast<float>(1.0 - muon_lr * cfg_.muon.weight_decay);
    be.upload(scalars_, Tensor(host, DType::f32, {5}));
}

void AdamW::apply(Backend& be, ParamSet& params, const Tensor& grad_scale) {
    DF_ASSERT(params.numel() == shard_.numel, "optimizer built for {} elements, got {}",
              shard_.numel, params.numel());
    DF_ASSERT(params.training(), "AdamW needs gradients");
    AdamWParams p;
    p.beta1 = static_cast<float>(cfg_.beta1);
    p.beta2 = static_cast<float>(cfg_.beta2);
    p.eps = static_cast<float>(cfg_.eps);
    p.weight_decay = static_cast<float>(cfg_.weight_decay);
    p.step = std::max<int64_t>(steps_, 1);
    p.scalars = scalars_.view().rows(0, 3);
    const Tensor master = params.flat_master();
    const Tensor values = params.flat_values();
    const Tensor grads = params.flat_grads();
    // On an f32 backend the values are the masters: no second copy to write.
    const bool copies = values.data() != master.data();
    if (cfg_.muon.enabled) {
        // Sharded, the values are refreshed from the gathered masters afterwards.
        const bool write_values = copies && !shard_.sharded();
        for (const auto& [lo, hi] : adamw_ranges_)
            for (const Piece& q : owned_pieces(lo, hi))
                be.adamw_step(master.rows(q.lo, q.hi), grads.rows(q.lo, q.hi),
                              m_.view().rows(q.state, q.state + q.hi - q.lo),
                              v_.view().rows(q.state, q.state + q.hi - q.lo), p, grad_scale,
                              write_values ? values.rows(q.lo, q.hi) : Tensor());
        apply_muon(be, params, grad_scale);
        return;
    }
    if (!shard_.sharded()) {
        be.adamw_step(master, grads, m_, v_, p, grad_scale, copies ? values : Tensor());
        return;
    }
    // The chunk, then the tail; the caller gathers the other chunks and refreshes the values.
    const int64_t c = shard_.chunk, owned = shard_.owned();
    be.adamw_step(shard_chunk(master, shard_), shard_chunk(grads, shard_), m_.view().rows(0, c),
                  v_.view().rows(0, c), p, grad_scale, Tensor());
    if (owned > c)
        be.adamw_step(shard_tail(master, shard_), shard_tail(grads, shard_),
                      m_.view().rows(c, owned), v_.view().rows(c, owned), p, grad_scale, Tensor());
}

// Each Muon weight W [A, B]: momentum M <- mu M + g, U = g + mu M (Nesterov), X = U / (||U||_F +
// eps), X <- NS_k(X), W <- W (1 - lr wd) - lr * lr_factor(A, B) * X; every scalar that changes
// with the step is read from scalars_ on the device.
void AdamW::apply_muon(Backend& be, ParamSet& params, const Tensor& grad_scale) {
    const MuonConfig& mc = cfg_.muon;
    const Tensor master = params.flat_master();
    const Tensor values = params.flat_values();
    const Tensor grads = params.flat_grads();
    const bool copies = values.data() != master.data();
    const Tensor muon_scalars = scalars_.view().rows(3, 5);
    if (shard_.sharded()) {
        // The first half (Note [Sharded Muon]): the momentum of the elements this worker keeps,
        // their update written over their gradients for the gather.
        for (const MuonMatrix& w : muon_matrices_) {
            for (const Piece& q : owned_pieces(w.offset, w.offset + w.rows * w.cols)) {
                const int64_t n = q.hi - q.lo;
                const Tensor u = ns_.update.view().rows(0, n);
                be.muon_momentum(grads.rows(q.lo, q.hi), grad_scale,
                                 m_.view().rows(q.state, q.state + n),
                                 static_cast<float>(mc.momentum), u);
                be.copy(grads.rows(q.lo, q.hi), u);
            }
        }
        return;
    }
    for (const MuonMatrix& w : muon_matrices_) {
        const int64_t n = w.rows * w.cols, lo = w.offset, hi = w.offset + n;
        const Tensor u = ns_.update.view().rows(0, n);
        be.muon_momentum(grads.rows(lo, hi), grad_scale, m_.view().rows(lo, hi),
                         static_cast<float>(mc.momentum), u);
        be.sum_squares(u, ns_.norm_sq.view());
        const Tensor x = ns_.x.view().rows(0, n).reshape({w.rows, w.cols});
        be.muon_normalize(u, ns_.norm_sq.view(), static_cast<float>(mc.eps), x);
        newton_schulz(be, x, mc.ns_steps, ns_);
        be.muon_update(master.rows(lo, hi), x, muon_scalars, w.lr_factor,
                       copies ? values.rows(lo, hi) : Tensor());
    }
}

// Note [Sharded Muon] (train.optimizer=muon with train.shard_optimizer_state). Newton-Schulz needs
// each weight's whole update matrix, while worker r keeps the momentum of FlatShard r only (a
// chunk of the flat parameters, which cuts matrices anywhere, and the common tail). So the update
// is gathered rather than the matrices given owners: the momentum state keeps the flat layout of
// AdamW's moments (checkpoints, resumes and gather_moments are unchanged), and the collective is
// the one the masters already use. In one step: (1) apply: AdamW on the AdamW elements this worker
// keeps, and the momentum and Nesterov update U of the Muon elements it keeps, U written over
// their (summed) gradients; (2) the exchange gathers every worker's chunk of the gradients (on the
// devices an all-gather inside the recorded update, through the host one broadcast per worker
// after it), so each worker holds U whole for every Muon weight; (3) finish_muon: for each Muon
// weight that overlaps this worker's chunk or the tail, normalise and orthogonalise U whole, then
// update only the overlapping elements' masters; (4) the masters' gather as for AdamW. A matrix
// that straddles a chunk boundary is orthogonalised by each worker it overlaps (the same inputs,
// so the same result); the others are split among the workers, so the Newton-Schulz work is
// about 1/W each plus the straddlers. Every element is computed as without sharding: through
// the host the run is bitwise the unsharded one; on the devices the reduce-scatter rounds its
// sums differently (equal to float rounding).
std::vector<AdamW::Piece> AdamW::owned_pieces(int64_t lo, int64_t hi) const {
    if (!shard_.sharded()) return {{lo, hi, lo}};
    std::vector<Piece> out;
    const int64_t clo = std::max(lo, shard_.begin()), chi = std::min(hi, shard_.end());
    if (clo < chi) out.push_back({clo, chi, clo - shard_.begin()});
    const int64_t tlo = std::max(lo, shard_.tail()), thi = std::min(hi, shard_.numel);
    if (tlo < thi) out.push_back({tlo, thi, shard_.chunk + tlo - shard_.tail()});
    return out;
}

void AdamW::finish_muon(Backend& be, ParamSet& params) {
    DF_ASSERT(gathers_updates(), "finish_muon is the second half of a sharded Muon step");
    const MuonConfig& mc = cfg_.muon;
    const Tensor master = params.flat_master();
    const Tensor grads = params.flat_grads();
    const Tensor muon_scalars = scalars_.view().rows(3, 5);
    for (const MuonMatrix& w : muon_matrices_) {
        const int64_t n = w.rows * w.cols, lo = w.offset, hi = w.offset + n;
        const std::vector<Piece> mine = owned_pieces(lo, hi);
        if (mine.empty()) continue;
        const Tensor u = grads.rows(lo, hi);  // U whole, gathered
        be.sum_squares(u, ns_.norm_sq.view());
        const Tensor x = ns_.x.view().rows(0, n).reshape({w.rows, w.cols});
        be.muon_normalize(u, ns_.norm_sq.view(), static_cast<float>(mc.eps), x);
        newton_schulz(be, x, mc.ns_steps, ns_);
        const Tensor xf = ns_.x.view().rows(0, n);
        for (const Piece& q : mine)
            be.muon_update(master.rows(q.lo, q.hi), xf.rows(q.lo - lo, q.hi - lo), muon_scalars,
                           w.lr_factor, Tensor());
    }
}

void grad_norm_sq(Backend& be, const ParamSet& params, const Tensor& norm_sq) {
    be.sum_squares(params.flat_grads(), norm_sq);
}

}  // namespace dflash::train
