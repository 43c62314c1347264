// The CUDA attention kernels' tile arithmetic (src/backend/cuda/kernels/attention_tiles.h),
// checked on the CPU against a brute-force enumeration of the visible (query, key) pairs of each
// mask kind, exhaustively over small awkward sizes:
//   - row spans equal the mask's definition;
//   - forward / dQ enumeration: every visible pair lies in exactly one visited tile's loaded keys
//     (a pair seen twice would be counted twice by the online softmax), loads stay inside the keys
//     that exist (never past kv_len), and tiles that skip the element mask are wholly visible;
//     the same for the wide forward's merged pairs of query tiles;
//   - dK/dV enumeration: key tiles partition the key rows, visit_kind() gives exactly the forward's
//     (query tile, key tile) pairs and mask flags, and qtile_candidates() contains them;
//   - decode splits: every visible pair lies in exactly one split's tile, whatever kv_len, and
//     the splits outside [first_split, active_splits) visit nothing;
//   - all of it again for causal masks with a sliding window (tiles below it are skipped) and
//     for dflash blocks with a drafter window and causal blocks.
// Label cpu: runs in CI without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/kernels/attention_tiles.h"
#include "core/rng.h"

namespace dflash::cuda::attn {
namespace {

struct Problem {
    MaskGeom g;
    int sk_capacity = 0;
    std::vector<int32_t> anchors;
    std::vector<int32_t> starts;  // dflash context starts (empty: all 0)
    std::string name;
};

// The mask by its definition (ops.h AttnMask), after kv_len resolution.
bool visible(const Problem& p, int i, int j) {
    const MaskGeom& g = p.g;
    if (i < 0 || i >= g.sq || j < 0 || j >= g.sk) return false;
    if (g.kind == kCausal)
        return j <= g.q_offset + i && (g.window == 0 || j > g.q_offset + i - g.window);
    if (g.kind == kFull) return true;
    const int n = i / g.block;
    const int a = p.anchors[n];
    if (a < 0) return false;
    // Drafter windows in absolute positions: the query at a + slot, a block key at a + slot.
    const int qpos = a + i % g.block;
    if (j < g.ctx_len) {
        const int b = p.starts.empty() ? 0 : p.starts[n];
        return j >= b && j < std::min(a, g.ctx_len) && (g.window == 0 || qpos - j < g.window);
    }
    if ((j - g.ctx_len) / g.block != n) return false;
    const int kpos = a + (j - g.ctx_len) % g.block;
    if (g.causal_block && kpos > qpos) return false;
    return g.window == 0 || std::abs(qpos - kpos) < g.window;
}

const int32_t* anchors_of(const Problem& p) {
    return p.anchors.empty() ? nullptr : p.anchors.data();
}
const int32_t* starts_of(const Problem& p) {
    return p.starts.empty() ? nullptr : p.starts.data();
}

void check_row_spans(const Problem& p) {
    for (int i = -1; i <= p.g.sq; ++i) {
        const RowSpan s = row_span(p.g, i, anchors_of(p), starts_of(p));
        for (int j = 0; j < p.sk_capacity; ++j) {
            ASSERT_EQ(span_has(s, j), visible(p, i, j))
                << p.name << " row " << i << " key " << j << " span [" << s.b0 << "," << s.e0
                << ")+[" << s.b1 << "," << s.e1 << ")";
        }
    }
}

// (query tile, kv tile index) -> mask flag, as the forward enumerates them.
using VisitMap = std::map<std::pair<int, int>, bool>;

int kv_index_of(const Problem& p, const KeyTile& k, bool seg1) {
    const int nt0 = cdiv(seg0_len(p.g.kind, p.sk_capacity, p.g.ctx_len), kBlockN);
    return seg1 ? nt0 + (k.k0 - p.g.ctx_len) / kBlockN : k.k0 / kBlockN;
}

// The query tiles of the forward: kBlockM rows, or with `wide` the 2 * kBlockM rows of the wide
// kernel (two tiles' keys merged; Note [Wide forward tiles]), which record no visits (the backward
// keeps the kBlockM tiles).
void check_forward_tiles(const Problem& p, VisitMap& visits, bool wide = false) {
    const MaskGeom& g = p.g;
    std::vector<int> seen(static_cast<size_t>(g.sq) * std::max(g.sk, 1), 0);
    const int base1 = seg1_base(g);
    const int rows = wide ? kWideBlockM : kBlockM;
    VisitMap wide_visits;
    VisitMap& into = wide ? wide_visits : visits;
    auto keys_of = [&](int qt) {
        return qt < num_query_tiles(g.sq) ? qtile_keys(g, qt, anchors_of(p), starts_of(p))
                                          : QTileKeys{};
    };
    for (int qt = 0; qt < cdiv(g.sq, rows); ++qt) {
        const QTileKeys q =
            wide ? merge_qtile_keys(keys_of(2 * qt), keys_of(2 * qt + 1)) : keys_of(qt);
        EXPECT_LE(q.full0, q.end0) << p.name << " qt " << qt;
        const int i0 = qt * rows, i1 = std::min(i0 + rows, g.sq);
        const int n0 = seg0_num_tiles(q);
        for (int t = 0; t < num_key_tiles(q, base1); ++t) {
            const KeyTile k = key_tile(q, base1, t);
            const std::string where = p.name + " qt " + std::to_string(qt) + " tile " +
                                      std::to_string(t) + " k0 " + std::to_string(k.k0);
            EXPECT_GE(k.lo, k.k0) << where;
            EXPECT_LE(k.hi, k.k0 + kBlockN) << where;
            EXPECT_GE(k.lo, 0) << where;
            EXPECT_LE(k.hi, g.sk) << where << ": loads keys past the ones that exist";
            EXPECT_LT(k.lo, k.hi) << where << ": visits a tile with nothing to load";
            if (!k.mask) {
                EXPECT_EQ(k.lo, k.k0) << where;
                EXPECT_EQ(k.hi, k.k0 + kBlockN) << where;
            }
            // Tiles are aligned to their segment (Note [Attention key segments]).
            EXPECT_EQ((k.k0 - (t < n0 ? 0 : base1)) % kBlockN, 0) << where;
            const bool inserted =
                into.emplace(std::make_pair(qt, kv_index_of(p, k, t >= n0)), k.mask).second;
            EXPECT_TRUE(inserted) << where << ": key tile visited twice";
            for (int i = i0; i < i1; ++i) {
                for (int j = k.k0; j < k.k0 + kBlockN; ++j) {
                    const bool vis = visible(p, i, j);
                    if (!k.mask) {
                        ASSERT_TRUE(vis)
                            << where << ": unmasked but row " << i << " key " << j << " is hidden";
                    }
                    if (vis && j >= k.lo && j < k.hi) ++seen[static_cast<size_t>(i) * g.sk + j];
                }
            }
        }
    }
    for (int i = 0; i < g.sq; ++i) {
        for (int j = 0; j < g.sk; ++j) {
            const int want = visible(p, i, j) ? 1 : 0;
            ASSERT_EQ(seen[static_cast<size_t>(i) * g.sk + j], want)
                << p.name << ": pair (" << i << ", " << j << ") covered "
                << seen[static_cast<size_t>(i) * g.sk + j] << " times";
        }
    }
}

void check_kv_tiles(const Problem& p, const VisitMap& forward) {
    const MaskGeom& g = p.g;
    const int nkt = num_kv_tiles(g.kind, g.sq, p.sk_capacity, g.ctx_len);
    std::vector<int> written(p.sk_capacity, 0);
    VisitMap inverse;
    for (int kt = 0; kt < nkt; ++kt) {
        const KvTile k = kv_tile(g, p.sk_capacity, kt);
        const std::string where = p.name + " kv tile " + std::to_string(kt);
        EXPECT_LE(k.load_end, k.write_end) << where;
        EXPECT_LE(k.load_end, g.sk) << where << ": loads keys past the ones that exist";
        EXPECT_LE(k.write_end, k.k0 + kBlockN) << where;
        for (int j = k.k0; j < k.write_end; ++j) ++written[j];
        const QTileRange cand = qtile_candidates(g, k);
        for (int qt = 0; qt < num_query_tiles(g.sq); ++qt) {
            const int v = visit_kind(qtile_keys(g, qt, anchors_of(p), starts_of(p)), k);
            if (v == 0) continue;
            EXPECT_TRUE(qt >= cand.lo && qt < cand.hi)
                << where << ": query tile " << qt << " visits but candidates are [" << cand.lo
                << ", " << cand.hi << ")";
            inverse.emplace(std::make_pair(qt, kt), v == 2);
            // Every visible pair of the visit whose key belongs to this tile lies in the loaded
            // keys (keys past write_end belong to the next segment's tile and are discarded).
            const int i0 = qt * kBlockM, i1 = std::min(i0 + kBlockM, g.sq);
            for (int i = i0; i < i1; ++i) {
                for (int j = k.k0; j < k.k0 + kBlockN; ++j) {
                    if (j < k.write_end && visible(p, i, j)) {
                        ASSERT_LT(j, k.load_end) << where << " pair (" << i << ", " << j << ")";
                    }
                    if (v == 1) {
                        ASSERT_TRUE(visible(p, i, j) && j < k.load_end)
                            << where << " unmasked, row " << i << " key " << j;
                    }
                }
            }
        }
    }
    for (int j = 0; j < p.sk_capacity; ++j) {
        ASSERT_EQ(written[j], 1) << p.name << ": dK/dV row " << j << " written " << written[j]
                                 << " times";
    }
    EXPECT_EQ(inverse, forward) << p.name << ": dK/dV visits differ from the forward's";
}

// Split dK/dV blocks: every (key tile, split) block once, and the splits of a key tile share its
// visits out exactly (each visit to exactly one split).
void check_kv_splits(const Problem& p, const VisitMap& forward) {
    const MaskGeom& g = p.g;
    for (int splits : {1, 2, 3, 4}) {
        const int nb = num_kv_blocks(g.kind, g.sq, p.sk_capacity, g.ctx_len, splits);
        std::map<std::pair<int, int>, int> blocks;
        VisitMap seen;
        for (int x = 0; x < nb; ++x) {
            const KvBlock b = kv_block(g.kind, p.sk_capacity, g.ctx_len, splits, x);
            const KvTile k = kv_tile(g, p.sk_capacity, b.kt);
            ASSERT_TRUE(b.split == 0 || (k.seg == 0 && b.split < splits)) << p.name;
            ++blocks[{b.kt, b.split}];
            for (int qt = 0; qt < num_query_tiles(g.sq); ++qt) {
                if (!split_owns(k, splits, b.split, qt)) continue;
                const int v = visit_kind(qtile_keys(g, qt, anchors_of(p), starts_of(p)), k);
                if (v == 0) continue;
                ASSERT_TRUE(seen.emplace(std::make_pair(qt, b.kt), v == 2).second)
                    << p.name << " splits " << splits << ": visit (" << qt << ", " << b.kt
                    << ") made twice";
            }
        }
        for (const auto& [key, count] : blocks) ASSERT_EQ(count, 1) << p.name;
        const int nkt = num_kv_tiles(g.kind, g.sq, p.sk_capacity, g.ctx_len);
        const int nt0 = cdiv(seg0_len(g.kind, p.sk_capacity, g.ctx_len), kBlockN);
        EXPECT_EQ(static_cast<int>(blocks.size()), nt0 * splits + (nkt - nt0)) << p.name;
        EXPECT_EQ(seen, forward) << p.name << " splits " << splits;
    }
}

void check_decode(const Problem& p) {
    const MaskGeom& g = p.g;
    if (g.kind == kDflash) return;
    const int kv_end = decode_kv_end(g);
    for (int cap : {std::max(g.sk, 1), g.sk + 300, 70000}) {
        const int chunk = decode_chunk(cap);
        const int splits = cdiv(cap, chunk);
        const std::string where = p.name + " capacity " + std::to_string(cap);
        ASSERT_EQ(chunk % kBlockN, 0) << where;
        ASSERT_GT(chunk, 0) << where;
        const int active = active_splits(kv_end, chunk);
        const int first = first_split(decode_kv_begin(g), chunk);
        ASSERT_LE(active, splits) << where;
        std::vector<int> seen(static_cast<size_t>(g.sq) * std::max(g.sk, 1), 0);
        for (int s = 0; s < splits; ++s) {
            const int nt = decode_num_tiles(g, chunk, s);
            if (s >= active || (s < first && active > 0)) {
                ASSERT_EQ(nt, 0) << where << " split " << s;
                continue;
            }
            ASSERT_GT(nt, 0) << where << " split " << s;
            for (int t = 0; t < nt; ++t) {
                const KeyTile k = decode_tile(g, chunk, s, t);
                ASSERT_GE(k.lo, 0);
                ASSERT_LT(k.lo, k.hi) << where;
                ASSERT_LE(k.hi, kv_end) << where;
                for (int i = 0; i < g.sq; ++i) {
                    for (int j = k.k0; j < k.k0 + kBlockN; ++j) {
                        const bool vis = visible(p, i, j);
                        if (!k.mask) {
                            ASSERT_TRUE(vis && j < k.hi)
                                << where << " unmasked (" << i << ", " << j << ")";
                        }
                        if (vis && j >= k.lo && j < k.hi) ++seen[static_cast<size_t>(i) * g.sk + j];
                    }
                }
            }
        }
        for (int i = 0; i < g.sq; ++i) {
            for (int j = 0; j < g.sk; ++j) {
                ASSERT_EQ(seen[static_cast<size_t>(i) * g.sk + j], visible(p, i, j) ? 1 : 0)
                    << where << " pair (" << i << ", " << j << ")";
            }
        }
    }
}

void check_all(const Problem& p) {
    SCOPED_TRACE(p.name);
    check_row_spans(p);
    if (testing::Test::HasFatalFailure()) return;
    VisitMap fwd;
    {
        SCOPED_TRACE("wide forward tiles");
        check_forward_tiles(p, fwd, true);
    }
    if (testing::Test::HasFatalFailure()) return;
    check_forward_tiles(p, fwd);
    if (testing::Test::HasFatalFailure()) return;
    check_kv_tiles(p, fwd);
    if (testing::Test::HasFatalFailure()) return;
    check_kv_splits(p, fwd);
    if (testing::Test::HasFatalFailure()) return;
    check_decode(p);
}

Problem causal_problem(int sq, int cap, int q_offset, int kv_len /* <0: none */, int window = 0) {
    Problem p;
    p.sk_capacity = cap;
    p.g = resolve_mask(kCausal, sq, cap, q_offset, 0, 1, kv_len >= 0, kv_len, window);
    std::ostringstream os;
    os << "causal sq=" << sq << " cap=" << cap << " q_offset=" << q_offset << " kv_len=" << kv_len
       << " window=" << window;
    p.name = os.str();
    return p;
}

TEST(AttentionTiles, Causal) {
    for (int sq : {1, 2, 7, 63, 64, 65, 130}) {
        for (int q_offset : {0, 1, 62, 63, 64, 100, 126}) {
            for (int extra : {0, 1, 70}) {
                check_all(causal_problem(sq, q_offset + sq + extra, q_offset, -1));
                if (HasFatalFailure()) return;
            }
        }
    }
}

TEST(AttentionTiles, CausalOverKvCache) {
    for (int sq : {1, 5, 16, 64, 65}) {
        for (int cap : {16, 64, 200, 333}) {
            if (cap < sq) continue;
            // kv_len below Sq is invalid input: rows before position 0 must simply see nothing.
            for (int kv : {0, sq - 1, sq, sq + 1, 64, 65, 129, cap - 1, cap, cap + 5}) {
                if (kv < 0) continue;
                check_all(causal_problem(sq, cap, 0, kv));
                if (HasFatalFailure()) return;
            }
        }
    }
}

// Sliding windows of 1 key, under a tile, a tile and a bit, and longer than everything.
TEST(AttentionTiles, CausalWithWindow) {
    for (int window : {1, 3, 64, 65, 128, 1000}) {
        for (int sq : {1, 7, 64, 65, 200}) {
            for (int q_offset : {0, 1, 63, 100}) {
                for (int extra : {0, 70}) {
                    check_all(causal_problem(sq, q_offset + sq + extra, q_offset, -1, window));
                    if (HasFatalFailure()) return;
                }
            }
        }
    }
}

TEST(AttentionTiles, CausalWithWindowOverKvCache) {
    for (int window : {1, 3, 64, 128}) {
        for (int sq : {1, 5, 16, 65}) {
            for (int cap : {64, 333, 700}) {
                for (int kv : {0, sq - 1, sq, 64, 129, 300, cap - 1, cap}) {
                    if (kv < 0 || kv > cap || cap < sq) continue;
                    check_all(causal_problem(sq, cap, 0, kv, window));
                    if (HasFatalFailure()) return;
                }
            }
        }
    }
}

TEST(AttentionTiles, Full) {
    for (int sq : {1, 7, 16, 64, 130}) {
        for (int cap : {0, 1, 63, 64, 65, 200}) {
            for (int kv : {-1, 0, 1, 63, 64, 65, 150, 200}) {
                if (kv > cap) continue;
                Problem p;
                p.sk_capacity = cap;
                p.g = resolve_mask(kFull, sq, cap, 0, 0, 1, kv >= 0, kv);
                p.name = "full sq=" + std::to_string(sq) + " cap=" + std::to_string(cap) +
                         " kv_len=" + std::to_string(kv);
                check_all(p);
                if (HasFatalFailure()) return;
            }
        }
    }
}

Problem dflash_problem(int n, int block, int ctx, std::vector<int32_t> anchors, const char* tag,
                       int window = 0, bool causal_block = false) {
    Problem p;
    const int sq = n * block;
    p.sk_capacity = ctx + sq;
    p.anchors = std::move(anchors);
    p.g = resolve_mask(kDflash, sq, p.sk_capacity, 0, ctx, block, false, 0, window, causal_block);
    std::ostringstream os;
    os << "dflash " << tag << " n=" << n << " block=" << block << " ctx=" << ctx
       << " window=" << window << " causal_block=" << causal_block << " anchors=[";
    for (size_t b = 0; b < p.anchors.size() && b < 12; ++b) os << (b ? "," : "") << p.anchors[b];
    os << (p.anchors.size() > 12 ? ",...]" : "]");
    p.name = os.str();
    return p;
}

TEST(AttentionTiles, DflashBlock) {
    Rng rng(7);
    struct Shape {
        int n, block, ctx;
    };
    const Shape shapes[] = {{1, 1, 0},   {5, 1, 3},   {70, 1, 61},  {3, 3, 10},
                            {9, 16, 61}, {4, 16, 64}, {9, 16, 130}, {13, 10, 33},
                            {2, 64, 65}, {2, 100, 7}, {33, 4, 7},   {5, 16, 0}};
    for (const Shape& s : shapes) {
        for (int pattern = 0; pattern < 7; ++pattern) {
            std::vector<int32_t> a(s.n);
            for (int b = 0; b < s.n; ++b) {
                switch (pattern) {
                    case 0:  // random, unsorted, with padding
                        a[b] = static_cast<int32_t>(rng.below(s.ctx + 2)) - 1;
                        break;
                    case 1:  // sorted (training), trailing padding blocks
                        a[b] = b >= s.n - 1 && s.n > 1 ? -1 : (s.ctx * (b + 1)) / (s.n + 1);
                        break;
                    case 2:  // every block sees no context but its own block
                        a[b] = 0;
                        break;
                    case 3:  // all see the whole context
                        a[b] = s.ctx;
                        break;
                    case 4:  // all padding
                        a[b] = -1;
                        break;
                    case 5:  // the whole context, but one padding block in the middle
                        a[b] = b == s.n / 2 ? -1 : s.ctx;
                        break;
                    default:  // duplicate-ish runs
                        a[b] = std::min<int32_t>(s.ctx, static_cast<int32_t>((b / 3) * 5));
                        break;
                }
            }
            if (pattern == 0 && s.n >= 3) {  // the edge cases in one problem
                a[0] = 0;
                a[1] = -1;
                a[2] = s.ctx;
            }
            check_all(dflash_problem(s.n, s.block, s.ctx, a, pattern == 0 ? "random" : "pattern"));
            if (HasFatalFailure()) return;
        }
    }
}

// Packed documents: block n sees context keys [starts[n], anchors[n]) only. Starts at 0, at the
// anchor (no context), on and off tile boundaries, and random, with sorted training-like anchors
// and with random ones (padding included).
TEST(AttentionTiles, DflashBlockWithContextStarts) {
    Rng rng(11);
    struct Shape {
        int n, block, ctx;
    };
    const Shape shapes[] = {{5, 1, 3},    {70, 1, 61},  {3, 3, 10},  {9, 16, 61},  {4, 16, 64},
                            {9, 16, 130}, {13, 10, 33}, {2, 64, 65}, {33, 4, 200}, {40, 4, 300}};
    for (const Shape& s : shapes) {
        for (int pattern = 0; pattern < 6; ++pattern) {
            std::vector<int32_t> a(s.n), b(s.n);
            for (int k = 0; k < s.n; ++k) {
                a[k] = pattern % 2 == 0 ? static_cast<int32_t>(rng.below(s.ctx + 2)) - 1
                                        : (s.ctx * (k + 1)) / (s.n + 1);
                const int32_t top = std::max(a[k], 0);
                switch (pattern / 2) {
                    case 0:  // random in [0, anchor]
                        b[k] = static_cast<int32_t>(rng.below(top + 1));
                        break;
                    case 1:  // documents of 64-aligned and unaligned lengths: start <= anchor
                        b[k] = std::min<int32_t>(top, (top / 50) * 50);
                        break;
                    default:  // the edges: 0, the anchor itself, a tile boundary
                        b[k] = k % 3 == 0 ? 0 : k % 3 == 1 ? top : std::min<int32_t>(top, 64);
                        break;
                }
            }
            Problem p = dflash_problem(s.n, s.block, s.ctx, a, "starts");
            p.starts = b;
            check_all(p);
            if (HasFatalFailure()) return;
        }
    }
}

// Sliding-window drafter layers: windows of 1 key, under a block, under a tile, over a tile and
// longer than everything, causal blocks or not, sorted training anchors, random ones with padding,
// and context starts.
TEST(AttentionTiles, DflashBlockWithDrafterWindow) {
    Rng rng(13);
    struct Shape {
        int n, block, ctx;
    };
    const Shape shapes[] = {{5, 1, 3},    {3, 3, 10},  {9, 16, 61}, {9, 16, 130},
                            {13, 10, 33}, {2, 64, 65}, {40, 4, 300}};
    for (const Shape& s : shapes) {
        for (int window : {1, 3, 16, 50, 64, 100, 1000}) {
            for (int pattern = 0; pattern < 3; ++pattern) {
                std::vector<int32_t> a(s.n), b;
                for (int k = 0; k < s.n; ++k)
                    a[k] = pattern == 1 ? (s.ctx * (k + 1)) / (s.n + 1)
                                        : static_cast<int32_t>(rng.below(s.ctx + 2)) - 1;
                if (pattern == 2) {
                    for (int k = 0; k < s.n; ++k)
                        b.push_back(static_cast<int32_t>(rng.below(std::max(a[k], 0) + 1)));
                }
                for (bool causal : {true, false}) {
                    Problem p = dflash_problem(s.n, s.block, s.ctx, a, "window", window, causal);
                    p.starts = b;
                    check_all(p);
                    if (HasFatalFailure()) return;
                }
            }
        }
    }
}

TEST(AttentionTiles, DecodePlanCoversRows) {
    for (int sq : {1, 2, 16, 17}) {
        for (int group : {1, 4, 8, 16}) {
            for (int cap : {1, 64, 4096, 32768, 1 << 20}) {
                const DecodePlan p = plan_decode(sq, group, cap);
                EXPECT_GE(p.warps * 16 * p.row_blocks, p.rows);
                EXPECT_LE(p.warps, 8);
                EXPECT_GE(p.splits, 1);
                EXPECT_LE(p.splits, kMaxDecodeSplits);
                EXPECT_GE(p.splits * p.chunk, cap);
                EXPECT_EQ(p.chunk % kBlockN, 0);
                // Row invariance: the splits depend on the capacity alone.
                EXPECT_EQ(p.chunk, plan_decode(1, 1, cap).chunk);
                EXPECT_EQ(p.splits, plan_decode(1, 1, cap).splits);
            }
        }
    }
}

}  // namespace
}  // namespace dflash::cuda::attn
