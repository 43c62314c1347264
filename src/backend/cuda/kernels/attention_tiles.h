// Tile arithmetic of the CUDA attention kernels: which keys a query row sees, which key tiles a
// query tile visits (and the inverse, which query tiles visit a key tile, for the dK/dV kernel),
// and how the decode kernel splits a KV cache. Plain integer code shared by the kernels
// (__host__ __device__) and the CPU test that checks it exhaustively against a brute-force
// enumeration of visible (query, key) pairs: tests/ops/attention_tiles_test.cpp.
// No CUDA headers and no fmt here (Note [No fmt in .cu files] in cuda_check.h).
//
// Note [Attention key segments]: keys form at most two segments. Causal and full: one segment
// [0, Sk). dflash_block: segment 0 is the context [0, ctx_len) and segment 1 the block rows
// [ctx_len, ctx_len + Sq). Key tiles are kBlockN rows aligned to their segment's start, so a tile
// never mixes context and block rows, and the forward, dQ and dK/dV kernels enumerate the same
// (query tile, key tile) pairs: a query tile's visible keys are [begin0, end0) in segment 0 and
// [begin1, end1) in segment 1 (QTileKeys); segment-0 tiles inside [fullb0, full0) are seen by
// every row of the query tile and skip the element mask, every other visited tile applies each
// row's RowSpan. begin0 and fullb0 are 0 except for dflash blocks with context starts (packed
// documents: a block sees only its own document's context) and causal masks with a sliding
// window (a row at position p sees keys p - window < j <= p), and dflash blocks with a drafter
// window (the row at slot k of the block anchored at a sees context keys j >= a + k - (window-1),
// AttnMask in backend/ops.h): tiles below begin0 are never visited, which is where a short window
// over a long prompt saves its work. A drafter window or causal blocks narrow the segment-1 span
// of each row; segment-1 tiles always take the element mask, so the tile ranges stay the same.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DF_ATTN_HD __host__ __device__ __forceinline__
#else
#define DF_ATTN_HD inline
#endif

namespace dflash::cuda::attn {

constexpr int kBlockM = 64;  // query rows per tile (all kernels; the wide forward takes two)
constexpr int kBlockN = 64;  // key rows per tile (all kernels)

enum MaskKind : int { kCausal = 0, kFull = 1, kDflash = 2 };

DF_ATTN_HD int imin(int a, int b) {
    return a < b ? a : b;
}
DF_ATTN_HD int imax(int a, int b) {
    return a > b ? a : b;
}
DF_ATTN_HD int iclamp(int x, int lo, int hi) {
    return imin(imax(x, lo), hi);
}
DF_ATTN_HD int cdiv(int a, int b) {
    return (a + b - 1) / b;
}

// One call's mask with the device-side kv_len already read: `sk` keys exist, causal query i sits
// at q_offset + i (may be negative when kv_len < Sq: such rows see nothing) and, with a window,
// sees keys j > q_offset + i - window.
struct MaskGeom {
    int kind = kCausal;
    int sq = 0;
    int sk = 0;
    int q_offset = 0;
    int ctx_len = 0;
    int block = 1;
    int window = 0;             // causal and dflash; 0: no window
    bool causal_block = false;  // dflash: slot k sees own-block slots <= k only
};

// kv_len (when present) replaces the key count and, for causal, places the queries at its end.
// Out-of-range values are clamped (the device cannot raise an error): kv_len to [0, capacity].
// The window is kept for causal and dflash masks, causal_block for dflash (the op refuses them
// elsewhere).
DF_ATTN_HD MaskGeom resolve_mask(int kind, int sq, int sk_capacity, int q_offset, int ctx_len,
                                 int block, bool has_kv_len, int kv_len, int window = 0,
                                 bool causal_block = false) {
    MaskGeom g;
    g.kind = kind;
    g.window = kind != kFull && window > 0 ? window : 0;
    g.causal_block = kind == kDflash && causal_block;
    g.sq = sq;
    g.sk = sk_capacity;
    g.q_offset = q_offset;
    g.ctx_len = ctx_len;
    g.block = block > 0 ? block : 1;
    if (has_kv_len && kind != kDflash) {
        g.sk = iclamp(kv_len, 0, sk_capacity);
        if (kind == kCausal) g.q_offset = g.sk - sq;
    }
    return g;
}

// The keys query row i sees: [b0, e0) ∪ [b1, e1). Rows outside [0, Sq) see nothing. A dflash
// anchor above ctx_len is clamped to it, and a context start to [0, e0] (the CPU backend rejects
// both; the device cannot).
struct RowSpan {
    int b0 = 0;
    int e0 = 0;
    int b1 = 0;
    int e1 = 0;
};

DF_ATTN_HD bool span_has(const RowSpan& s, int j) {
    return (j >= s.b0 && j < s.e0) || (j >= s.b1 && j < s.e1);
}

// causal: the first key a query at position pos sees, unclamped (0 without a window).
DF_ATTN_HD int causal_first_key(const MaskGeom& g, int pos) {
    return g.window > 0 ? pos - g.window + 1 : 0;
}

// starts: dflash context starts i32 [N] (AttnMask::ctx_start), or null for all 0.
DF_ATTN_HD RowSpan row_span(const MaskGeom& g, int i, const int32_t* anchors,
                            const int32_t* starts = nullptr) {
    RowSpan s;
    if (i < 0 || i >= g.sq) return s;
    if (g.kind == kCausal) {
        s.e0 = iclamp(g.q_offset + i + 1, 0, g.sk);
        s.b0 = iclamp(causal_first_key(g, g.q_offset + i), 0, s.e0);
    } else if (g.kind == kFull) {
        s.e0 = g.sk;
    } else {
        const int n = i / g.block;
        const int a = anchors[n];
        if (a < 0) return s;  // padding block
        s.e0 = imin(a, g.ctx_len);
        s.b0 = starts ? iclamp(starts[n], 0, s.e0) : 0;
        const int base = g.ctx_len + n * g.block, k = i - n * g.block;
        int lo = 0, hi = g.block;
        if (g.window > 0) {
            s.b0 = iclamp(a + k - (g.window - 1), s.b0, s.e0);
            lo = imax(0, k - (g.window - 1));
            hi = imin(g.block, k + g.window);
        }
        if (g.causal_block) hi = imin(hi, k + 1);
        s.b1 = base + lo;
        s.e1 = base + hi;
    }
    return s;
}

// dflash: the first context key of slot k of a block anchored at ac (clamped to the context)
// whose context starts at bc.
DF_ATTN_HD int dflash_first_key(const MaskGeom& g, int ac, int bc, int k) {
    return g.window > 0 ? iclamp(ac + k - (g.window - 1), bc, ac) : bc;
}

// What the rows of query tile qt (rows [qt*kBlockM, min(+kBlockM, Sq))) may see, in key indices:
// [begin0, end0) ∪ [begin1, end1). Every row of the tile sees every key in [fullb0, full0)
// (full0 <= end0); a tile with rows past Sq gets full0 = 0, so every key tile of it takes the
// element mask.
struct QTileKeys {
    int begin0 = 0;
    int end0 = 0;
    int fullb0 = 0;
    int full0 = 0;
    int begin1 = 0;
    int end1 = 0;
};

DF_ATTN_HD int num_query_tiles(int sq) {
    return cdiv(sq, kBlockM);
}

// dflash: reads the anchors (and context starts, when not null) of the blocks the tile's rows
// belong to (the pre-pass kernel does this once per call into a table; causal and full need
// neither).
DF_ATTN_HD QTileKeys qtile_keys(const MaskGeom& g, int qt, const int32_t* anchors,
                                const int32_t* starts = nullptr) {
    QTileKeys q;
    const int i0 = qt * kBlockM;
    const int i1 = imin(i0 + kBlockM, g.sq);
    if (i1 <= i0) return q;
    if (g.kind == kCausal) {
        q.end0 = iclamp(g.q_offset + i1, 0, g.sk);  // row i1-1 sees keys <= q_offset + i1 - 1
        q.full0 = iclamp(g.q_offset + i0 + 1, 0, g.sk);
        // With a window the first row sees the lowest keys and the last row the highest first.
        q.begin0 = iclamp(causal_first_key(g, g.q_offset + i0), 0, q.end0);
        q.fullb0 = iclamp(causal_first_key(g, g.q_offset + i1 - 1), 0, g.sk);
    } else if (g.kind == kFull) {
        q.end0 = g.sk;
        q.full0 = g.sk;
    } else {
        int max_a = 0, min_a = g.ctx_len, min_b = g.ctx_len, max_b = 0, first = -1, last = -1;
        bool padding = false;
        for (int n = i0 / g.block; n <= (i1 - 1) / g.block; ++n) {
            const int a = anchors[n];
            if (a < 0) {
                padding = true;
                continue;
            }
            const int ac = imin(a, g.ctx_len);
            const int bc = starts ? iclamp(starts[n], 0, ac) : 0;  // as row_span clamps it
            // The tile's rows of block n have slots [k_lo, k_hi]: the lowest slot starts lowest.
            const int k_lo = imax(i0 - n * g.block, 0),
                      k_hi = imin(i1 - 1 - n * g.block, g.block - 1);
            max_a = imax(max_a, ac);
            min_a = imin(min_a, ac);
            min_b = imin(min_b, dflash_first_key(g, ac, bc, k_lo));
            max_b = imax(max_b, dflash_first_key(g, ac, bc, k_hi));
            if (first < 0) first = n;
            last = n;
        }
        if (first >= 0) {
            q.begin0 = min_b;
            q.end0 = max_a;
            q.fullb0 = max_b;
            q.full0 = padding ? 0 : min_a;
            q.begin1 = g.ctx_len + first * g.block;
            q.end1 = g.ctx_len + (last + 1) * g.block;
        }
    }
    if (i0 + kBlockM > g.sq) q.full0 = 0;
    return q;
}

// Note [Wide forward tiles]: the forward can also run 2 * kBlockM query rows a block (two query
// tiles; attention_fwd.cu), so each K/V tile it loads into shared memory serves twice the rows.
// The dflash plan table, the backward and lse keep the kBlockM tiles: a wide tile visits the key
// tiles either half visits (the hull of their ranges: keys between them that neither sees are
// loaded and masked) and skips the element mask only where both halves do.
constexpr int kWideBlockM = 2 * kBlockM;

DF_ATTN_HD int num_wide_query_tiles(int sq) {
    return cdiv(sq, kWideBlockM);
}

// The keys of query tiles 2w and 2w + 1 together (b empty: QTileKeys{} past Sq).
DF_ATTN_HD QTileKeys merge_qtile_keys(const QTileKeys& a, const QTileKeys& b) {
    QTileKeys q;
    const bool a0 = a.end0 > a.begin0, b0 = b.end0 > b.begin0;
    q.begin0 = a0 && b0 ? imin(a.begin0, b.begin0) : (a0 ? a.begin0 : b.begin0);
    q.end0 = a0 && b0 ? imax(a.end0, b.end0) : (a0 ? a.end0 : b.end0);
    // Keys every row sees: those both halves' rows see.
    q.fullb0 = imax(a.fullb0, b.fullb0);
    q.full0 = imin(a.full0, b.full0);
    const bool a1 = a.end1 > a.begin1, b1 = b.end1 > b.begin1;
    q.begin1 = a1 && b1 ? imin(a.begin1, b.begin1) : (a1 ? a.begin1 : b.begin1);
    q.end1 = a1 && b1 ? imax(a.end1, b.end1) : (a1 ? a.end1 : b.end1);
    return q;
}

// Segment 1's first key (dflash: the first block row); 0 when there is no segment 1.
DF_ATTN_HD int seg1_base(const MaskGeom& g) {
    return g.kind == kDflash ? g.ctx_len : 0;
}

// One key tile as a query tile visits it: smem rows hold keys [k0, k0 + kBlockN); keys [lo, hi)
// are loaded, the others are zero-filled; `mask` says whether rows must apply their RowSpan.
struct KeyTile {
    int k0 = 0;
    int lo = 0;
    int hi = 0;
    bool mask = true;
};

DF_ATTN_HD int seg1_first_tile(const QTileKeys& q, int base1) {
    return (q.begin1 - base1) / kBlockN;
}

// Segment 0's visited tiles: from the one holding begin0 to the one holding end0 - 1.
DF_ATTN_HD int seg0_first_tile(const QTileKeys& q) {
    return q.begin0 / kBlockN;
}
DF_ATTN_HD int seg0_num_tiles(const QTileKeys& q) {
    return q.end0 > q.begin0 ? cdiv(q.end0, kBlockN) - seg0_first_tile(q) : 0;
}

DF_ATTN_HD int num_key_tiles(const QTileKeys& q, int base1) {
    const int n0 = seg0_num_tiles(q);
    const int n1 =
        q.end1 > q.begin1 ? cdiv(q.end1 - base1, kBlockN) - seg1_first_tile(q, base1) : 0;
    return n0 + n1;
}

// The t-th key tile (0 <= t < num_key_tiles) of a query tile, segment 0 first, ascending.
DF_ATTN_HD KeyTile key_tile(const QTileKeys& q, int base1, int t) {
    KeyTile k;
    const int n0 = seg0_num_tiles(q);
    if (t < n0) {
        k.k0 = (seg0_first_tile(q) + t) * kBlockN;
        k.lo = imax(k.k0, q.begin0);
        k.hi = imin(k.k0 + kBlockN, q.end0);
        k.mask = !(k.k0 >= q.fullb0 && k.k0 + kBlockN <= q.full0);
    } else {
        k.k0 = base1 + (seg1_first_tile(q, base1) + t - n0) * kBlockN;
        k.lo = imax(k.k0, q.begin1);
        k.hi = imin(k.k0 + kBlockN, q.end1);
        k.mask = true;
    }
    return k;
}

// ---- the inverse, for the dK/dV kernel: one thread block per key tile ------------------------
// Key tiles are numbered over both segments (segment 0 first). The count depends only on host
// sizes (the capacity for a KV cache), so the grid does not depend on kv_len.
DF_ATTN_HD int seg0_len(int kind, int sk_capacity, int ctx_len) {
    return kind == kDflash ? ctx_len : sk_capacity;
}
DF_ATTN_HD int num_kv_tiles(int kind, int sq, int sk_capacity, int ctx_len) {
    return cdiv(seg0_len(kind, sk_capacity, ctx_len), kBlockN) +
           (kind == kDflash ? cdiv(sq, kBlockN) : 0);
}

// Key tile kt: keys [k0, k0 + kBlockN); rows [k0, write_end) of dK/dV belong to it; keys
// [k0, load_end) exist (the rest are zero-filled).
struct KvTile {
    int seg = 0;
    int k0 = 0;
    int write_end = 0;
    int load_end = 0;
};

DF_ATTN_HD KvTile kv_tile(const MaskGeom& g, int sk_capacity, int kt) {
    KvTile k;
    const int len0 = seg0_len(g.kind, sk_capacity, g.ctx_len);
    const int nt0 = cdiv(len0, kBlockN);
    if (kt < nt0) {
        k.seg = 0;
        k.k0 = kt * kBlockN;
        k.write_end = imin(k.k0 + kBlockN, len0);
        k.load_end = imin(k.write_end, g.kind == kDflash ? len0 : g.sk);
    } else {
        k.seg = 1;
        k.k0 = g.ctx_len + (kt - nt0) * kBlockN;
        k.write_end = imin(k.k0 + kBlockN, g.ctx_len + g.sq);
        k.load_end = k.write_end;
    }
    return k;
}

// 0: query tile q does not visit key tile k; 1: visits it without the element mask; 2: with it.
// Agrees with key_tile(): the same pairs, the same mask flags.
DF_ATTN_HD int visit_kind(const QTileKeys& q, const KvTile& k) {
    if (k.seg == 0) {
        if (q.end0 <= q.begin0 || k.k0 >= q.end0 || k.k0 + kBlockN <= q.begin0) return 0;
        return k.k0 >= q.fullb0 && k.k0 + kBlockN <= q.full0 ? 1 : 2;
    }
    return (q.end1 > q.begin1 && k.k0 < q.end1 && k.k0 + kBlockN > q.begin1) ? 2 : 0;
}

// Splitting the dK/dV work of a key tile: a segment-0 key tile (the context, for dflash) can be
// seen by every query tile of every head of its GQA group, far more work than one block should
// do alone. With `splits` > 1, each segment-0 key tile gets `splits` blocks; split sp visits the
// query tiles qt with qt % splits == sp (interleaved, so sorted anchors spread evenly) and writes
// fp32 partial dK/dV, which a second kernel sums in split order (deterministic, no atomics).
// Blocks are numbered segment-0 tiles x splits first, then the segment-1 tiles.
DF_ATTN_HD int num_kv_blocks(int kind, int sq, int sk_capacity, int ctx_len, int splits) {
    const int nt0 = cdiv(seg0_len(kind, sk_capacity, ctx_len), kBlockN);
    return nt0 * splits + (num_kv_tiles(kind, sq, sk_capacity, ctx_len) - nt0);
}

struct KvBlock {
    int kt = 0;
    int split = 0;
};

DF_ATTN_HD KvBlock kv_block(int kind, int sk_capacity, int ctx_len, int splits, int x) {
    const int nt0 = cdiv(seg0_len(kind, sk_capacity, ctx_len), kBlockN);
    KvBlock b;
    if (x < nt0 * splits) {
        b.kt = x / splits;
        b.split = x % splits;
    } else {
        b.kt = x - nt0 * splits + nt0;
    }
    return b;
}

// Whether split `split` of key tile k handles query tile qt.
DF_ATTN_HD bool split_owns(const KvTile& k, int splits, int split, int qt) {
    return k.seg != 0 || splits <= 1 || qt % splits == split;
}

// The splits wanted for a shape (dflash only: there the context tiles are shared by every query
// tile; causal and full spread evenly enough). The caller lowers it when the workspace lacks room
// for the partials.
inline int dkdv_splits_wanted(int kind, int sq, int group) {
    return kind == kDflash ? iclamp(num_query_tiles(sq) * group / 64, 1, 4) : 1;
}

// A range [lo, hi) of query tiles outside which no tile visits key tile k (a cheap bound; the
// kernel still asks visit_kind for each tile inside it).
struct QTileRange {
    int lo = 0;
    int hi = 0;
};

DF_ATTN_HD QTileRange qtile_candidates(const MaskGeom& g, const KvTile& k) {
    QTileRange r;
    r.hi = num_query_tiles(g.sq);
    if (g.kind == kCausal) {
        // Rows i with q_offset + i >= k0 can see the tile.
        const int first_row = k.k0 - g.q_offset;
        if (first_row > 0) r.lo = imin(first_row / kBlockM, r.hi);
        if (g.window > 0) {
            // ... and with a window only rows whose first key is in it: q_offset + i - window + 1
            // <= k0 + kBlockN - 1.
            const long long last_row =
                static_cast<long long>(k.k0) + kBlockN - 2 + g.window - g.q_offset;
            const long long hi = last_row < 0 ? r.lo : last_row / kBlockM + 1;
            r.hi = imax(r.lo, hi < r.hi ? static_cast<int>(hi) : r.hi);
        }
    } else if (g.kind == kDflash && k.seg == 1) {
        // Only the rows of the blocks whose own keys the tile holds.
        const int b0 = (k.k0 - g.ctx_len) / g.block;
        const int b1 = cdiv(k.k0 + kBlockN - g.ctx_len, g.block);
        r.lo = imin(b0 * g.block / kBlockM, r.hi);
        r.hi = imin(cdiv(imin(b1 * g.block, g.sq), kBlockM), r.hi);
    }
    return r;
}

// ---- decoding over a KV cache: split-KV ("flash-decoding") -----------------------------------
// The decode kernel packs the Sq queries and the `group` heads of one kv head into rows
// r = i * group + (h % group). Split s covers keys [s * chunk, (s + 1) * chunk), where chunk
// comes from the cache's capacity alone, never from kv_len or Sq: a query row's keys then fall
// into the same splits, visited tile by tile in the same order, and merged in split order,
// whether the row is decoded alone or verified with 15 others, so its output has the same bits
// (row invariance, as the small-row GEMMs: backend/cuda/gemm.h). Splits past kv_len exit at once
// and a captured graph serves every kv_len.
// A sliding window keeps the splits and their tile grid: splits wholly below the first query's
// first key exit at once too, and a split skips its tiles below that key. A row verified with
// others may so visit tiles and splits that it sees nothing of, which leave its state untouched
// (a tile it sees nothing of adds exact zeros; a split's partial of max -inf and sum 0 adds exact
// zeros in the merge), so its bits are those of the row decoded alone. A sink joins the merge
// once, after the splits' sums (decode_combine_kernel), never a split's partial.
DF_ATTN_HD int decode_kv_end(const MaskGeom& g) {
    // Keys any query may see: causal queries end at q_offset + Sq.
    return g.kind == kCausal ? iclamp(g.q_offset + g.sq, 0, g.sk) : g.sk;
}
// The first key any query may see: the first query's first key (causal with a window), else 0.
DF_ATTN_HD int decode_kv_begin(const MaskGeom& g) {
    return g.kind == kCausal ? iclamp(causal_first_key(g, g.q_offset), 0, decode_kv_end(g)) : 0;
}
// Keys every query sees (causal: up to the first query's position, from the last query's first
// key): [decode_full_begin, decode_full_end).
DF_ATTN_HD int decode_full_end(const MaskGeom& g) {
    return g.kind == kCausal ? iclamp(g.q_offset + 1, 0, g.sk) : g.sk;
}
DF_ATTN_HD int decode_full_begin(const MaskGeom& g) {
    return g.kind == kCausal ? iclamp(causal_first_key(g, g.q_offset + g.sq - 1), 0, g.sk) : 0;
}
// Keys per split for a cache of sk_capacity keys: an even share over at most kMaxDecodeSplits
// splits, at least kMinDecodeChunk, a multiple of kBlockN. One tile per split at short contexts:
// a decode step has one query row per head, so the splits are all the parallelism there is (256
// keys per split left a 1K-token cache of 8 kv heads with 40 blocks for 132 SMs: 28 us a layer on
// the H200, docs/performance.md); a split's partial output (a row of D floats per query row) stays
// small against the 64 keys of K and V it reads.
constexpr int kMaxDecodeSplits = 256;
constexpr int kMinDecodeChunk = kBlockN;
DF_ATTN_HD int decode_chunk(int sk_capacity) {
    const int share = cdiv(imax(sk_capacity, 1), kMaxDecodeSplits);
    return imax(kMinDecodeChunk, cdiv(share, kBlockN) * kBlockN);
}
// Splits [first_split, active_splits) hold keys some query sees (the combine merges those).
DF_ATTN_HD int active_splits(int kv_end, int chunk) {
    return chunk > 0 ? cdiv(kv_end, chunk) : 0;
}
DF_ATTN_HD int first_split(int kv_begin, int chunk) {
    return chunk > 0 ? kv_begin / chunk : 0;
}
// The first of split s's kBlockN-key tiles that holds a key some query sees.
DF_ATTN_HD int decode_first_tile(const MaskGeom& g, int chunk, int s) {
    const int skip = decode_kv_begin(g) - s * chunk;
    return skip > 0 ? skip / kBlockN : 0;
}
// Tile t of split s (counted from its first visited tile) covers keys [k0, k0 + kBlockN), loads
// [k0, hi) (keys below the window's start exist and are loaded: the row masks them, so the loads
// are the same for a row alone and in a block), masks unless every row sees all of it.
DF_ATTN_HD KeyTile decode_tile(const MaskGeom& g, int chunk, int s, int t) {
    KeyTile k;
    const int kv_end = decode_kv_end(g);
    const int split_end = imin((s + 1) * chunk, kv_end);
    k.k0 = s * chunk + (decode_first_tile(g, chunk, s) + t) * kBlockN;
    k.lo = k.k0;
    k.hi = imin(k.k0 + kBlockN, split_end);
    k.mask = k.k0 + kBlockN > imin(decode_full_end(g), split_end) || k.k0 < decode_full_begin(g);
    return k;
}
DF_ATTN_HD int decode_num_tiles(const MaskGeom& g, int chunk, int s) {
    const int begin = s * chunk;
    const int end = imin(begin + chunk, decode_kv_end(g));
    if (end <= imax(begin, decode_kv_begin(g))) return 0;
    return cdiv(end - begin, kBlockN) - decode_first_tile(g, chunk, s);
}

// Host-side choices for the decode path (sizes only, never kv_len).
struct DecodePlan {
    int rows = 0;                 // Sq * group: query rows per kv head
    int warps = 1;                // 16 rows per warp, at most 8 warps per block
    int row_blocks = 1;           // blocks of warps*16 rows
    int chunk = kMinDecodeChunk;  // keys per split: decode_chunk(capacity)
    int splits = 1;               // splits covering the capacity
};

inline DecodePlan plan_decode(int sq, int group, int sk_capacity) {
    DecodePlan p;
    p.rows = sq * group;
    p.warps = iclamp(cdiv(p.rows, 16), 1, 8);
    p.row_blocks = imax(1, cdiv(p.rows, p.warps * 16));
    p.chunk = decode_chunk(sk_capacity);
    p.splits = imax(1, cdiv(sk_capacity, p.chunk));
    return p;
}

}  // namespace dflash::cuda::attn
