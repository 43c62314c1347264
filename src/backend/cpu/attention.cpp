// Attention (causal with an optional sliding window, full, DFlash block-sparse with an optional
// drafter window and causal blocks; optional per-head sink logits in the forward), forward and
// backward, fp32 reference. Tested by tests/ops/attention_test.cpp and
// tests/ops/attention_drafter_window_test.cpp.
//
// Note [Attention chunks]: queries are processed per head in chunks of rows. A chunk sees at most
// two contiguous key ranges (the union of what its rows may see); the score and output products
// over those ranges are single BLAS calls on strided views ([S, H, Dh] rows are H*Dh apart), and
// each row then masks its own span inside them. A dflash_block chunk is a run of whole blocks: its
// ranges are the context prefix before the largest anchor of the chunk and the chunk's own block
// rows, so work is O(N*B*(anchor + chunk)), never O((N*B)^2); training anchors are sorted, so the
// blocks of a chunk have similar anchors and little is computed only to be masked.
//
// Threads: the backend's pool spreads whole (head, chunk) units (kv groups in the backward), each
// running single-threaded products (sgemm.h).
//
// Determinism: every (head, chunk) unit does the same arithmetic whichever thread runs it, and
// dk/dv of a kv group accumulate its heads and chunks in one fixed order, so the bits do not
// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/vexp.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

constexpr int64_t kChunkRows = 128;  // query rows per chunk (whole blocks for dflash_block)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct KeyRange {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t size() const { return end - begin; }
};

// Query rows [i0, i1) and the key ranges (ascending, disjoint) that any of them may see. The
// ranges' columns are laid side by side in the chunk's score matrix [rows, total_keys()].
struct Chunk {
    int64_t i0 = 0;
    int64_t i1 = 0;
    int num_ranges = 0;
    KeyRange ranges[2];
    int64_t rows() const { return i1 - i0; }
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
    int64_t chunk_rows = kChunkRows;
    int64_t num_chunks = 0;

    Chunk chunk(int64_t c) const {
        Chunk ch;
        ch.i0 = c * chunk_rows;
        ch.i1 = std::min(sq, ch.i0 + chunk_rows);
        if (mask.kind == AttnMaskKind::full) {
            if (sk > 0) ch.ranges[ch.num_ranges++] = {0, sk};
        } else if (mask.kind == AttnMaskKind::causal) {
            // With a window the first row's first key bounds the chunk's keys from below.
            ch.ranges[ch.num_ranges++] = {causal_begin(ch.i0), mask.q_offset + ch.i1};
        } else {
            const int64_t b = mask.block_size, n0 = ch.i0 / b, n1 = ch.i1 / b;
            int64_t max_anchor = -1, min_start = mask.ctx_len;
            for (int64_t n = n0; n < n1; ++n) {
                const int64_t a = mask.anchors.i32()[n];
                max_anchor = std::max(max_anchor, a);
                // A block's slot 0 sees its lowest context key (a window starts it at a - (W-1)).
                if (a >= 0) min_start = std::min(min_start, ctx_first(n, n * b));
            }
            if (max_anchor < 0) return ch;  // only padding blocks: nothing is visible
            if (max_anchor > min_start) ch.ranges[ch.num_ranges++] = {min_start, max_anchor};
            ch.ranges[ch.num_ranges++] = {mask.ctx_len + n0 * b, mask.ctx_len + n1 * b};
        }
        return ch;
    }

    // causal: the first key query row i sees (0 without a window).
    int64_t causal_begin(int64_t i) const {
        return mask.window > 0 ? std::max<int64_t>(0, mask.q_offset + i - mask.window + 1) : 0;
    }

    // dflash_block: the first context key block n sees.
    int64_t ctx_start(int64_t n) const {
        return mask.ctx_start.empty() ? 0 : mask.ctx_start.i32()[n];
    }

    // dflash_block: the first context key of query row i of block n; a window starts it at
    // a + k - (W - 1) for the row at slot k (may exceed the anchor: then it sees no context).
    int64_t ctx_first(int64_t n, int64_t i) const {
        const int64_t start = ctx_start(n);
        if (mask.window <= 0) return start;
        const int64_t k = i % mask.block_size;
        return std::max(start, mask.anchors.i32()[n] + k - (mask.window - 1));
    }

    // dflash_block: the own-block keys query row i sees (slots within the window, and <= its
    // own slot when the blocks are causal).
    KeyRange own_block_span(int64_t i) const {
        const int64_t b = mask.block_size, n = i / b, k = i % b, base = mask.ctx_len + n * b;
        int64_t lo = 0, hi = b;
        if (mask.window > 0) {
            lo = std::max<int64_t>(0, k - (mask.window - 1));
            hi = std::min(b, k + mask.window);
        }
        if (mask.causal_block) hi = std::min(hi, k + 1);
        return {base + lo, base + hi};
    }

    // The part of key range `r` that query row i sees (empty: begin == end).
    KeyRange row_span(int64_t i, KeyRange r) const {
        KeyRange s = r;
        if (mask.kind == AttnMaskKind::causal) {
            s.begin = std::max(r.begin, causal_begin(i));
            s.end = std::min(r.end, mask.q_offset + i + 1);
        } else if (mask.kind == AttnMaskKind::dflash_block) {
            const int64_t n = i / mask.block_size, anchor = mask.anchors.i32()[n];
            if (anchor < 0) return {r.begin, r.begin};
            const KeyRange vis =
                r.begin < mask.ctx_len ? KeyRange{ctx_first(n, i), anchor} : own_block_span(i);
            s = {std::max(r.begin, vis.begin), std::min(r.end, vis.end)};
        }
        s.begin = std::min(s.begin, r.end);
        if (s.end < s.begin) s.end = s.begin;
        return s;
    }
};

// What the mask's tensors hold (the shapes are op_shapes' check_attention_*_shapes): on the CPU
// they are host memory, so the values are checked too.
void check_mask_values(const AttnMask& m, int64_t sq, const char* op) {
    for (const auto& [t, name] :
         {std::pair{&m.kv_len, "kv_len"}, std::pair{&m.anchors, "anchors"},
          std::pair{&m.ctx_start, "ctx_start"}, std::pair{&m.sinks, "sinks"}}) {
        DF_CHECK(t->empty() || t->device().kind == DeviceKind::cpu,
                 "{}: mask.{} is {}, expected a CPU tensor", op, name, t->describe());
    }
    if (m.kind != AttnMaskKind::dflash_block) return;
    const int64_t n = sq / m.block_size;
    for (int64_t b = 0; b < n; ++b) {
        DF_CHECK(m.anchors.i32()[b] <= m.ctx_len,
                 "attention: anchors[{}]={} but there are only ctx_len={} context rows (a block "
                 "sees context keys j < anchor; use a negative anchor for a padding block)",
                 b, m.anchors.i32()[b], m.ctx_len);
    }
    if (m.ctx_start.empty()) return;
    for (int64_t b = 0; b < n; ++b) {
        const int32_t a = m.anchors.i32()[b], c = m.ctx_start.i32()[b];
        DF_CHECK(a < 0 || (c >= 0 && c <= a),
                 "attention: ctx_start[{}]={} is outside [0, anchors[{}]={}] (a block sees context "
                 "keys ctx_start <= j < anchor)",
                 b, c, b, a);
    }
}

// The sizes of a call whose shapes check_attention_*_shapes accepted, and the mask's values.
Geometry make_geometry(const AttentionDims& d, const AttnMask& mask, const Tensor& k,
                       const char* op) {
    check_mask_values(mask, d.sq, op);
    Geometry g;
    g.sq = d.sq, g.h = d.h, g.dh = d.dh;
    g.sk = d.sk, g.hkv = d.hkv;
    g.mask = mask;
    if (!mask.kv_len.empty()) {
        // A KV cache: only its first kv_len rows exist, and causal queries are the last Sq of them.
        const int64_t len = mask.kv_len.i32()[0];
        DF_CHECK(len >= 0 && len <= g.sk, "attention: kv_len={} but the cache holds {} rows (k {})",
                 len, g.sk, k.describe());
        g.sk = len;
        if (mask.kind == AttnMaskKind::causal) {
            DF_CHECK(len >= g.sq, "attention: kv_len={} is shorter than the {} causal queries", len,
                     g.sq);
            g.mask.q_offset = len - g.sq;
        }
    }
    g.group = g.h / g.hkv;
    g.scale = 1.0f / std::sqrt(static_cast<float>(g.dh));
    if (mask.kind == AttnMaskKind::dflash_block)
        g.chunk_rows = std::max<int64_t>(1, kChunkRows / mask.block_size) * mask.block_size;
    g.num_chunks = (g.sq + g.chunk_rows - 1) / g.chunk_rows;
    return g;
}

// Row 0 of one head in an [S, heads, Dh] tensor; rows are `ld` floats apart.
struct HeadView {
    float* p;
    int64_t ld;
    float* row(int64_t i) const { return p + i * ld; }
};

HeadView q_head(const Geometry& g, const Tensor& t, int64_t head) {
    return {t.f32() + head * g.dh, g.h * g.dh};
}
HeadView kv_head(const Geometry& g, const Tensor& t, int64_t head) {
    return {t.f32() + (head / g.group) * g.dh, g.hkv * g.dh};
}

// c[rows, nk] = alpha * a[rows, Dh] · x[keys of the ranges, Dh]ᵀ, the ranges side by side.
void times_keys_t(const Geometry& g, const Chunk& ch, float alpha, const float* a, int64_t lda,
                  HeadView x, float* c) {
    const int64_t nk = ch.total_keys();
    int64_t col = 0;
    for (int r = 0; r < ch.num_ranges; ++r) {
        const KeyRange kr = ch.ranges[r];
        if (kr.size() == 0) continue;
        sgemm(ch.rows(), kr.size(), g.dh, alpha, {a, lda, false}, {x.row(kr.begin), x.ld, true},
              0.0f, c + col, nk);
        col += kr.size();
    }
}

// c[rows, Dh] (overwritten) = alpha * a[rows, nk] · x[keys of the ranges, Dh].
void times_keys(const Geometry& g, const Chunk& ch, float alpha, const float* a, HeadView x,
                HeadView c) {
    const int64_t nk = ch.total_keys();
    int64_t col = 0;
    for (int r = 0; r < ch.num_ranges; ++r) {
        const KeyRange kr = ch.ranges[r];
        if (kr.size() == 0) continue;
        sgemm(ch.rows(), g.dh, kr.size(), alpha, {a + col, nk, false},
              {x.row(kr.begin), x.ld, false}, col == 0 ? 0.0f : 1.0f, c.row(ch.i0), c.ld);
        col += kr.size();
    }
    if (nk == 0) {
        for (int64_t i = ch.i0; i < ch.i1; ++i) std::fill(c.row(i), c.row(i) + g.dh, 0.0f);
    }
}

// x[keys of the ranges, Dh] += alpha * a[rows, nk]ᵀ · b[rows, Dh].
void accumulate_keys(const Geometry& g, const Chunk& ch, float alpha, const float* a, HeadView b,
                     HeadView x) {
    const int64_t nk = ch.total_keys();
    int64_t col = 0;
    for (int r = 0; r < ch.num_ranges; ++r) {
        const KeyRange kr = ch.ranges[r];
        if (kr.size() == 0) continue;
        sgemm(kr.size(), g.dh, ch.rows(), alpha, {a + col, nk, true}, {b.row(ch.i0), b.ld, false},
              1.0f, x.row(kr.begin), x.ld);
        col += kr.size();
    }
}

// Calls fn(first column, span) for the visible span of row i in each range of the chunk.
template <typename Fn>
void for_each_span(const Geometry& g, const Chunk& ch, int64_t i, Fn&& fn) {
    int64_t col = 0;
    for (int r = 0; r < ch.num_ranges; ++r) {
        const KeyRange s = g.row_span(i, ch.ranges[r]);
        fn(col + (s.begin - ch.ranges[r].begin), s);
        col += ch.ranges[r].size();
    }
}

// One row of scores -> probabilities (0 outside the row's spans); returns the row's lse. `sink`
// (-inf: none) is one more logit in the denominator with no value row: it lowers every
// probability, and a row that sees no key gets probabilities 0 and lse = sink.
float softmax_row(const Geometry& g, const Chunk& ch, int64_t i, float sink, float* row,
                  int64_t nk) {
    // The row kernels' max and sum take eight independent partials (element c of a span goes to
    // c mod 8) combined in a fixed order: one running max or sum made every element wait for the
    // previous one, which cost a verify (8 query rows per head) more than its score products. The
    // result depends only on the span, so a row's softmax has the same bits whatever chunk it
    // sits in.
    float m = sink;
    for_each_span(g, ch, i, [&](int64_t c0, KeyRange s) {
        if (s.size() > 0) m = std::max(m, row_max(row + c0, s.size()));
    });
    if (m == kNegInf) {  // sees no key and has no sink
        std::fill(row, row + nk, 0.0f);
        return kNegInf;
    }
    // The sink's term first, then the spans': a fixed order, whatever chunk the row sits in.
    double sum = sink == kNegInf ? 0.0 : std::exp(double(sink) - double(m));
    int64_t done = 0;  // columns before `done` are final
    for_each_span(g, ch, i, [&](int64_t c0, KeyRange s) {
        std::fill(row + done, row + c0, 0.0f);
        row_sub(row + c0, s.size(), m);
        exp_inplace(row + c0, s.size());
        sum += row_sum(row + c0, s.size());
        done = c0 + s.size();
    });
    std::fill(row + done, row + nk, 0.0f);
    row_scale(row, nk, static_cast<float>(1.0 / sum));
    return m + static_cast<float>(std::log(sum));
}

// One row of scores -> p = exp(s - lse) inside the row's spans, 0 elsewhere.
void probs_row(const Geometry& g, const Chunk& ch, int64_t i, float lse, float* row, int64_t nk) {
    int64_t done = 0;
    for_each_span(g, ch, i, [&](int64_t c0, KeyRange s) {
        std::fill(row + done, row + c0, 0.0f);
        if (lse == kNegInf) {
            std::fill(row + c0, row + c0 + s.size(), 0.0f);
        } else {
            row_sub(row + c0, s.size(), lse);
            exp_inplace(row + c0, s.size());
        }
        done = c0 + s.size();
    });
    std::fill(row + done, row + nk, 0.0f);
}

// The tensors of one call.
struct Args {
    const Geometry& g;
    const Tensor& q;
    const Tensor& k;
    const Tensor& v;
    const Tensor& out;
    const Tensor& lse;
};

// Forward of one (head, chunk).
void fwd_chunk(const Args& a, int64_t head, int64_t c, std::vector<float>& p) {
    const Geometry& g = a.g;
    const HeadView qh = q_head(g, a.q, head), oh = q_head(g, a.out, head);
    const HeadView kh = kv_head(g, a.k, head), vh = kv_head(g, a.v, head);
    float* lse_h = a.lse.empty() ? nullptr : a.lse.f32() + head * g.sq;
    const float sink = g.mask.sinks.empty() ? kNegInf : g.mask.sinks.f32()[head];
    const Chunk ch = g.chunk(c);
    const int64_t nk = ch.total_keys();
    p.resize(static_cast<size_t>(ch.rows() * nk));  // [chunk rows, chunk keys]
    times_keys_t(g, ch, g.scale, qh.row(ch.i0), qh.ld, kh, p.data());
    for (int64_t i = ch.i0; i < ch.i1; ++i) {
        const float l = softmax_row(g, ch, i, sink, p.data() + (i - ch.i0) * nk, nk);
        if (lse_h != nullptr) lse_h[i] = l;
    }
    times_keys(g, ch, 1.0f, p.data(), vh, oh);
}

// Backward of one (head, chunk): dq rows of the chunk (=), dk/dv rows of its keys (+=).
void bwd_chunk(const Args& a, const Tensor& dout, const Tensor& dq, const Tensor& dk,
               const Tensor& dv, int64_t head, int64_t c, std::vector<float>& p,
               std::vector<float>& ds) {
    const Geometry& g = a.g;
    const HeadView qh = q_head(g, a.q, head), oh = q_head(g, a.out, head);
    const HeadView doh = q_head(g, dout, head), dqh = q_head(g, dq, head);
    const HeadView kh = kv_head(g, a.k, head), vh = kv_head(g, a.v, head);
    const HeadView dkh = kv_head(g, dk, head), dvh = kv_head(g, dv, head);
    const float* lse_h = a.lse.f32() + head * g.sq;
    const Chunk ch = g.chunk(c);
    const int64_t nk = ch.total_keys();
    p.resize(static_cast<size_t>(ch.rows() * nk));  // [chunk rows, chunk keys]: probabilities
    ds.resize(p.size());                            // then dp, then score gradients
    times_keys_t(g, ch, g.scale, qh.row(ch.i0), qh.ld, kh, p.data());
    times_keys_t(g, ch, 1.0f, doh.row(ch.i0), doh.ld, vh, ds.data());  // dp = dout · vᵀ
    for (int64_t i = ch.i0; i < ch.i1; ++i) {
        float* prow = p.data() + (i - ch.i0) * nk;
        float* dsrow = ds.data() + (i - ch.i0) * nk;
        probs_row(g, ch, i, lse_h[i], prow, nk);
        double delta = 0.0;  // dout_i · out_i
        for (int64_t d = 0; d < g.dh; ++d) delta += double(doh.row(i)[d]) * oh.row(i)[d];
        const float dl = static_cast<float>(delta);
        for (int64_t j = 0; j < nk; ++j) dsrow[j] = prow[j] * (dsrow[j] - dl);
    }
    times_keys(g, ch, g.scale, ds.data(), kh, dqh);
    accumulate_keys(g, ch, g.scale, ds.data(), qh, dkh);
    accumulate_keys(g, ch, 1.0f, p.data(), doh, dvh);
}

}  // namespace

void attention_fwd(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                   const AttnMask& mask, const Tensor& out, const Tensor& lse) {
    for (const auto& [t, name] :
         {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}, std::pair{&out, "out"}})
        check_cpu_f32(*t, "attention_fwd", name);
    if (!lse.empty()) check_cpu_f32(lse, "attention_fwd", "lse");
    const Geometry g = make_geometry(check_attention_fwd_shapes(q, k, v, mask, out, lse), mask, k,
                                     "attention_fwd");
    const Args a{g, q, k, v, out, lse};
    const int64_t units = g.h * g.num_chunks;
    parallel_for(ex, units, units > 1, [&](int64_t u0, int64_t u1) {
        std::vector<float> p;
        for (int64_t u = u0; u < u1; ++u) fwd_chunk(a, u / g.num_chunks, u % g.num_chunks, p);
    });
}

void attention_bwd(const Exec& ex, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnMask& mask,
                   const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    for (const auto& [t, name] :
         {std::pair{&dout, "dout"}, std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"},
          std::pair{&out, "out"}, std::pair{&dq, "dq"}, std::pair{&dk, "dk"}, std::pair{&dv, "dv"}})
        check_cpu_f32(*t, "attention_bwd", name);
    if (!lse.empty()) check_cpu_f32(lse, "attention_bwd", "lse");
    const Geometry g =
        make_geometry(check_attention_bwd_shapes(dout, q, k, v, out, lse, mask, dq, dk, dv), mask,
                      k, "attention_bwd");
    fill_f32(dk, 0.0f);
    fill_f32(dv, 0.0f);
    const Args a{g, q, k, v, out, lse};
    // The heads of one kv group accumulate into the same dk/dv rows, so a kv group is the unit
    // of outer parallelism and its heads and chunks always run in the same order.
    parallel_for(ex, g.hkv, g.hkv > 1, [&](int64_t hk0, int64_t hk1) {
        std::vector<float> p, ds;
        for (int64_t hk = hk0; hk < hk1; ++hk) {
            for (int64_t head = hk * g.group; head < (hk + 1) * g.group; ++head) {
                for (int64_t c = 0; c < g.num_chunks; ++c)
                    bwd_chunk(a, dout, dq, dk, dv, head, c, p, ds);
            }
        }
    });
}

}  // namespace dflash::cpu
