// Attention (causal, full, DFlash block-sparse), forward and backward, fp32 reference.
// Tested by tests/ops/attention_test.cpp.
//
// Note [Attention tiles]: queries are processed in tiles of rows that share one or two contiguous
// key ranges (the union of what the tile's rows may see). A causal tile additionally masks, per
// row, keys at or past the row's own limit. A dflash_block tile is exactly one block: its keys are
// the context prefix before the anchor and the block's own rows, so work is
// O(N*B*(anchor + B)), never O((N*B)^2). Inner products are BLAS calls on strided views
// ([S, H, Dh] rows are H*Dh apart); softmax and masking are plain loops.
//
// Determinism: in forward and for dq each (head, query tile) is owned by one thread. dk/dv are
// computed in a second pass where each (kv head, key tile) is owned by one thread and visits
// query heads and query tiles in a fixed order, so the bits do not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {
namespace {

constexpr int64_t kQueryTileRows = 32;  // causal / full query tile
constexpr int64_t kKeyTileRows = 64;    // key tile of the dk/dv pass
constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct KeyRange {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t size() const { return end - begin; }
};

// The rows [i0, i1) of one query tile and the key ranges (ascending, disjoint) they may see.
struct QueryTile {
    int64_t i0 = 0;
    int64_t i1 = 0;
    int num_ranges = 0;
    KeyRange ranges[2];
    int64_t total_keys() const {
        int64_t n = 0;
        for (int r = 0; r < num_ranges; ++r) n += ranges[r].size();
        return n;
    }
};

// Sizes and mask of one attention call, validated once.
struct Geometry {
    int64_t sq = 0, sk = 0, h = 0, hkv = 0, dh = 0;
    int64_t group = 1;  // H / Hkv
    float scale = 1.0f;
    AttnMask mask;
    int64_t tile_rows = kQueryTileRows;
    int64_t num_tiles = 0;

    QueryTile tile(int64_t t) const {
        QueryTile qt;
        qt.i0 = t * tile_rows;
        qt.i1 = std::min(sq, qt.i0 + tile_rows);
        if (mask.kind == AttnMaskKind::full) {
            if (sk > 0) qt.ranges[qt.num_ranges++] = {0, sk};
        } else if (mask.kind == AttnMaskKind::causal) {
            qt.ranges[qt.num_ranges++] = {0, mask.q_offset + qt.i1};
        } else {
            const int64_t anchor = mask.anchors[t];
            if (anchor < 0) return qt;  // padding block: sees nothing
            if (anchor > 0) qt.ranges[qt.num_ranges++] = {0, anchor};
            const int64_t b0 = mask.ctx_len + t * mask.block_size;
            qt.ranges[qt.num_ranges++] = {b0, b0 + mask.block_size};
        }
        return qt;
    }
    // Keys j >= limit are invisible to query row i (only causal limits rows within a tile).
    int64_t row_limit(int64_t i) const {
        return mask.kind == AttnMaskKind::causal ? mask.q_offset + i + 1 : kNoLimit;
    }
};

void check_f32_3d(const Tensor& t, const char* name) {
    DF_CHECK(t.device().kind == DeviceKind::cpu, "attention: {} is {}, expected a CPU tensor", name,
             t.describe());
    DF_CHECK(t.dtype() == DType::f32 && t.rank() == 3,
             "attention: {} is {}, expected f32 of rank 3 ([S, heads, Dh])", name, t.describe());
}

void check_dflash_mask(const AttnMask& m, int64_t sq, int64_t sk) {
    DF_CHECK(m.block_size > 0, "attention: dflash_block mask has block_size={}, expected > 0",
             m.block_size);
    DF_CHECK(sq % m.block_size == 0,
             "attention: dflash_block has Sq={} queries, expected a multiple of block_size={} "
             "(Sq = N * block_size)",
             sq, m.block_size);
    DF_CHECK(m.ctx_len >= 0 && sk == m.ctx_len + sq,
             "attention: dflash_block has Sk={} keys but ctx_len={} and Sq={}; expected "
             "Sk = ctx_len + Sq (keys are [context rows ; block rows])",
             sk, m.ctx_len, sq);
    const int64_t n = sq / m.block_size;
    DF_CHECK(n == 0 || m.anchors != nullptr,
             "attention: dflash_block mask with {} blocks has no anchors (anchors == nullptr)", n);
    for (int64_t b = 0; b < n; ++b) {
        DF_CHECK(m.anchors[b] <= m.ctx_len,
                 "attention: anchors[{}]={} but there are only ctx_len={} context rows (a block "
                 "sees context keys j < anchor; use a negative anchor for a padding block)",
                 b, m.anchors[b], m.ctx_len);
    }
}

Geometry make_geometry(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask) {
    check_f32_3d(q, "q");
    check_f32_3d(k, "k");
    check_f32_3d(v, "v");
    Geometry g;
    g.sq = q.dim(0), g.h = q.dim(1), g.dh = q.dim(2);
    g.sk = k.dim(0), g.hkv = k.dim(1);
    DF_CHECK(v.shape() == k.shape(), "attention: v is {} but k is {}; expected equal shapes",
             v.describe(), k.describe());
    DF_CHECK(k.dim(2) == g.dh, "attention: k head dim {} != q head dim {} (q {}, k {})", k.dim(2),
             g.dh, q.describe(), k.describe());
    DF_CHECK(g.dh > 0, "attention: head dim is 0 (q {})", q.describe());
    DF_CHECK(g.hkv > 0 && g.h % g.hkv == 0,
             "attention: q has H={} heads and k has Hkv={}; expected H to be a positive multiple "
             "of Hkv (GQA)",
             g.h, g.hkv);
    g.group = g.h / g.hkv;
    g.scale = 1.0f / std::sqrt(static_cast<float>(g.dh));
    g.mask = mask;
    switch (mask.kind) {
        case AttnMaskKind::causal:
            DF_CHECK(mask.q_offset >= 0 && mask.q_offset + g.sq <= g.sk,
                     "attention: causal mask with q_offset={} and Sq={} needs q_offset + Sq <= "
                     "Sk={} (the keys must include every query's own position)",
                     mask.q_offset, g.sq, g.sk);
            break;
        case AttnMaskKind::full:
            break;
        case AttnMaskKind::dflash_block:
            check_dflash_mask(mask, g.sq, g.sk);
            g.tile_rows = mask.block_size;
            break;
    }
    g.num_tiles = (g.sq + g.tile_rows - 1) / g.tile_rows;
    return g;
}

void check_same(const Tensor& t, const Tensor& like, const char* name, const char* like_name) {
    DF_CHECK(t.dtype() == DType::f32 && t.shape() == like.shape(),
             "attention: {} is {}, expected f32 with the shape of {} {}", name, t.describe(),
             like_name, like.shape().to_string());
}

void check_lse(const Tensor& lse, const Geometry& g) {
    DF_CHECK(lse.dtype() == DType::f32 && lse.shape() == Shape({g.h, g.sq}),
             "attention: lse is {}, expected f32[{}, {}] ([H, Sq])", lse.describe(), g.h, g.sq);
}

// Pointers to row 0 of one head in the [S, heads, Dh] tensors; rows are `ld` floats apart.
struct HeadViews {
    const float* q;
    const float* k;
    const float* v;
    int64_t ldq;  // H * Dh
    int64_t ldk;  // Hkv * Dh
};

HeadViews head_views(const Geometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                     int64_t head) {
    const int64_t hk = head / g.group;
    return {q.f32() + head * g.dh, k.f32() + hk * g.dh, v.f32() + hk * g.dh, g.h * g.dh,
            g.hkv * g.dh};
}

// s[t, c] = scale * q_{i0+t} · k_{key(c)} over the columns of `ranges` laid side by side (ld = nk).
void tile_scores(const Geometry& g, const HeadViews& hv, int64_t i0, int64_t rows,
                 const KeyRange* ranges, int num_ranges, int64_t nk, float* s) {
    int64_t col = 0;
    for (int r = 0; r < num_ranges; ++r) {
        const KeyRange kr = ranges[r];
        if (kr.size() > 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                        static_cast<int>(kr.size()), static_cast<int>(g.dh), g.scale,
                        hv.q + i0 * hv.ldq, static_cast<int>(hv.ldq), hv.k + kr.begin * hv.ldk,
                        static_cast<int>(hv.ldk), 0.0f, s + col, static_cast<int>(nk));
        }
        col += kr.size();
    }
}

// c[rows, Dh] (ld ldc) = a[rows, nk] · X[keys of ranges, Dh], X = k or v rows of one kv head.
void tile_times_keys(const Geometry& g, const float* a, int64_t rows, int64_t nk,
                     const KeyRange* ranges, int num_ranges, const float* x, int64_t ldx,
                     float alpha, float* c, int64_t ldc) {
    int64_t col = 0;
    bool first = true;
    for (int r = 0; r < num_ranges; ++r) {
        const KeyRange kr = ranges[r];
        if (kr.size() == 0) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                    static_cast<int>(g.dh), static_cast<int>(kr.size()), alpha, a + col,
                    static_cast<int>(nk), x + kr.begin * ldx, static_cast<int>(ldx),
                    first ? 0.0f : 1.0f, c, static_cast<int>(ldc));
        col += kr.size();
        first = false;
    }
    if (first) {
        for (int64_t t = 0; t < rows; ++t) std::fill(c + t * ldc, c + t * ldc + g.dh, 0.0f);
    }
}

// Calls fn(column, key) for every column of the side-by-side ranges.
template <typename Fn>
void for_each_key(const KeyRange* ranges, int num_ranges, Fn&& fn) {
    int64_t col = 0;
    for (int r = 0; r < num_ranges; ++r) {
        for (int64_t j = ranges[r].begin; j < ranges[r].end; ++j) fn(col++, j);
    }
}

// In place: scores -> probabilities of each row (0 where masked); writes lse per row.
void softmax_rows(const Geometry& g, const QueryTile& qt, int64_t nk, float* s, float* lse_row) {
    for (int64_t t = 0; t < qt.i1 - qt.i0; ++t) {
        float* row = s + t * nk;
        const int64_t limit = g.row_limit(qt.i0 + t);
        float m = kNegInf;
        for_each_key(qt.ranges, qt.num_ranges, [&](int64_t c, int64_t j) {
            if (j >= limit) row[c] = kNegInf;
            m = std::max(m, row[c]);
        });
        if (m == kNegInf) {  // sees no key
            std::fill(row, row + nk, 0.0f);
            lse_row[t] = kNegInf;
            continue;
        }
        double sum = 0.0;
        for (int64_t c = 0; c < nk; ++c) {
            row[c] = std::exp(row[c] - m);  // exp(-inf) = 0 for masked keys
            sum += row[c];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t c = 0; c < nk; ++c) row[c] *= inv;
        lse_row[t] = m + static_cast<float>(std::log(sum));
    }
}

// Recomputes p = exp(s - lse) (0 where masked or where the row saw nothing) in place on scores.
void recompute_probs(const Geometry& g, int64_t i0, int64_t rows, const KeyRange* ranges,
                     int num_ranges, int64_t nk, const float* lse_head, float* s) {
    for (int64_t t = 0; t < rows; ++t) {
        float* row = s + t * nk;
        const float l = lse_head[i0 + t];
        const int64_t limit = g.row_limit(i0 + t);
        for_each_key(ranges, num_ranges, [&](int64_t c, int64_t j) {
            row[c] = (l == kNegInf || j >= limit) ? 0.0f : std::exp(row[c] - l);
        });
    }
}

}  // namespace

void attention_fwd(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                   const AttnMask& mask, const Tensor& out, const Tensor& lse) {
    const Geometry g = make_geometry(q, k, v, mask);
    check_same(out, q, "out", "q");
    const bool want_lse = !lse.empty();
    if (want_lse) check_lse(lse, g);
    const int64_t work = g.h * g.num_tiles;
#pragma omp parallel num_threads(ex.threads)
    {
        std::vector<float> scores;     // [tile rows, keys of the tile]
        std::vector<float> lse_local;  // [tile rows]
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < work; ++w) {
            const int64_t head = w / g.num_tiles;
            const QueryTile qt = g.tile(w % g.num_tiles);
            const int64_t rows = qt.i1 - qt.i0, nk = qt.total_keys();
            const HeadViews hv = head_views(g, q, k, v, head);
            scores.resize(static_cast<size_t>(rows * nk));
            lse_local.resize(static_cast<size_t>(rows));
            tile_scores(g, hv, qt.i0, rows, qt.ranges, qt.num_ranges, nk, scores.data());
            softmax_rows(g, qt, nk, scores.data(), lse_local.data());
            float* o = out.f32() + qt.i0 * hv.ldq + head * g.dh;
            tile_times_keys(g, scores.data(), rows, nk, qt.ranges, qt.num_ranges, hv.v, hv.ldk,
                            1.0f, o, hv.ldq);
            if (want_lse) {
                std::copy(lse_local.begin(), lse_local.end(), lse.f32() + head * g.sq + qt.i0);
            }
        }
    }
}

namespace {

// The inputs of one backward call.
struct BwdArgs {
    const Geometry& g;
    const Tensor& dout;
    const Tensor& q;
    const Tensor& k;
    const Tensor& v;
    const Tensor& out;
    const Tensor& lse;
};

// ds = p * (dp - delta) in place on dp, for the rows [i0, i0+rows) of one head.
void softmax_grad(int64_t rows, int64_t nk, const float* p, const float* delta, float* dp) {
    for (int64_t t = 0; t < rows; ++t) {
        for (int64_t c = 0; c < nk; ++c)
            dp[t * nk + c] = p[t * nk + c] * (dp[t * nk + c] - delta[t]);
    }
}

// dq for one (head, query tile); also stores delta_i = dout_i · out_i for the dk/dv pass.
void dq_tile(const BwdArgs& a, int64_t head, const QueryTile& qt, std::vector<float>& p,
             std::vector<float>& dp, float* delta_head, const Tensor& dq) {
    const Geometry& g = a.g;
    const int64_t rows = qt.i1 - qt.i0, nk = qt.total_keys();
    const HeadViews hv = head_views(g, a.q, a.k, a.v, head);
    const float* dout = a.dout.f32() + qt.i0 * hv.ldq + head * g.dh;
    const float* out = a.out.f32() + qt.i0 * hv.ldq + head * g.dh;
    for (int64_t t = 0; t < rows; ++t) {
        double d = 0.0;
        for (int64_t c = 0; c < g.dh; ++c) d += double(dout[t * hv.ldq + c]) * out[t * hv.ldq + c];
        delta_head[qt.i0 + t] = static_cast<float>(d);
    }
    p.resize(static_cast<size_t>(rows * nk));
    dp.resize(static_cast<size_t>(rows * nk));
    tile_scores(g, hv, qt.i0, rows, qt.ranges, qt.num_ranges, nk, p.data());
    recompute_probs(g, qt.i0, rows, qt.ranges, qt.num_ranges, nk, a.lse.f32() + head * g.sq,
                    p.data());
    // dp[t, c] = dout_t · v_key(c): the score product with (dout, v) in place of (q·scale, k).
    int64_t col = 0;
    for (int r = 0; r < qt.num_ranges; ++r) {
        const KeyRange kr = qt.ranges[r];
        if (kr.size() > 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                        static_cast<int>(kr.size()), static_cast<int>(g.dh), 1.0f, dout,
                        static_cast<int>(hv.ldq), hv.v + kr.begin * hv.ldk,
                        static_cast<int>(hv.ldk), 0.0f, dp.data() + col, static_cast<int>(nk));
        }
        col += kr.size();
    }
    softmax_grad(rows, nk, p.data(), delta_head + qt.i0, dp.data());
    tile_times_keys(g, dp.data(), rows, nk, qt.ranges, qt.num_ranges, hv.k, hv.ldk, g.scale,
                    dq.f32() + qt.i0 * hv.ldq + head * g.dh, hv.ldq);
}

// Accumulates into dk/dv rows [kr) of one kv head the contributions of one query tile of one head.
void dkv_tile(const BwdArgs& a, int64_t head, const QueryTile& qt, KeyRange kr,
              const float* delta_head, std::vector<float>& p, std::vector<float>& dp, float* dk,
              float* dv) {
    const Geometry& g = a.g;
    const int64_t rows = qt.i1 - qt.i0, nk = kr.size();
    const HeadViews hv = head_views(g, a.q, a.k, a.v, head);
    const float* dout = a.dout.f32() + qt.i0 * hv.ldq + head * g.dh;
    const float* qrow = hv.q + qt.i0 * hv.ldq;
    p.resize(static_cast<size_t>(rows * nk));
    dp.resize(static_cast<size_t>(rows * nk));
    tile_scores(g, hv, qt.i0, rows, &kr, 1, nk, p.data());
    recompute_probs(g, qt.i0, rows, &kr, 1, nk, a.lse.f32() + head * g.sq, p.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                static_cast<int>(nk), static_cast<int>(g.dh), 1.0f, dout, static_cast<int>(hv.ldq),
                hv.v + kr.begin * hv.ldk, static_cast<int>(hv.ldk), 0.0f, dp.data(),
                static_cast<int>(nk));
    // dv[kr] += pᵀ · dout
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(nk),
                static_cast<int>(g.dh), static_cast<int>(rows), 1.0f, p.data(),
                static_cast<int>(nk), dout, static_cast<int>(hv.ldq), 1.0f, dv,
                static_cast<int>(hv.ldk));
    softmax_grad(rows, nk, p.data(), delta_head + qt.i0, dp.data());
    // dk[kr] += scale * dsᵀ · q
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(nk),
                static_cast<int>(g.dh), static_cast<int>(rows), g.scale, dp.data(),
                static_cast<int>(nk), qrow, static_cast<int>(hv.ldq), 1.0f, dk,
                static_cast<int>(hv.ldk));
}

}  // namespace

void attention_bwd(const Exec& ex, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnMask& mask,
                   const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    const Geometry g = make_geometry(q, k, v, mask);
    check_same(dout, q, "dout", "q");
    check_same(out, q, "out", "q");
    check_same(dq, q, "dq", "q");
    check_same(dk, k, "dk", "k");
    check_same(dv, k, "dv", "k");
    DF_CHECK(!lse.empty() || g.h * g.sq == 0,
             "attention_bwd: lse is empty; the backward needs the lse [H, Sq] of the forward");
    if (!lse.empty()) check_lse(lse, g);
    const BwdArgs args{g, dout, q, k, v, out, lse};
    std::vector<float> delta(static_cast<size_t>(g.h * g.sq));  // [H, Sq]: dout_i · out_i

    // Pass 1: dq, owned per (head, query tile).
    const int64_t q_work = g.h * g.num_tiles;
#pragma omp parallel num_threads(ex.threads)
    {
        std::vector<float> p, dp;
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < q_work; ++w) {
            const int64_t head = w / g.num_tiles;
            dq_tile(args, head, g.tile(w % g.num_tiles), p, dp, delta.data() + head * g.sq, dq);
        }
    }

    // Pass 2: dk/dv, owned per (kv head, key tile); query heads and tiles in a fixed order.
    const int64_t key_tiles = (g.sk + kKeyTileRows - 1) / kKeyTileRows;
    const int64_t kv_work = g.hkv * key_tiles;
#pragma omp parallel num_threads(ex.threads)
    {
        std::vector<float> p, dp;
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < kv_work; ++w) {
            const int64_t hk = w / key_tiles;
            const int64_t j0 = (w % key_tiles) * kKeyTileRows;
            const int64_t j1 = std::min(g.sk, j0 + kKeyTileRows);
            const int64_t ld = g.hkv * g.dh;
            float* dk_t = dk.f32() + j0 * ld + hk * g.dh;
            float* dv_t = dv.f32() + j0 * ld + hk * g.dh;
            for (int64_t j = 0; j < j1 - j0; ++j) {
                std::fill(dk_t + j * ld, dk_t + j * ld + g.dh, 0.0f);
                std::fill(dv_t + j * ld, dv_t + j * ld + g.dh, 0.0f);
            }
            for (int64_t head = hk * g.group; head < (hk + 1) * g.group; ++head) {
                for (int64_t t = 0; t < g.num_tiles; ++t) {
                    const QueryTile qt = g.tile(t);
                    for (int r = 0; r < qt.num_ranges; ++r) {
                        const KeyRange kr{std::max(j0, qt.ranges[r].begin),
                                          std::min(j1, qt.ranges[r].end)};
                        if (kr.size() <= 0) continue;
                        const int64_t off = (kr.begin - j0) * ld;
                        dkv_tile(args, head, qt, kr, delta.data() + head * g.sq, p, dp, dk_t + off,
                                 dv_t + off);
                    }
                }
            }
        }
    }
}

}  // namespace dflash::cpu
