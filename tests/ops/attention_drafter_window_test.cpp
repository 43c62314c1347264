// The sliding-window drafter mask (AttnMask dflash_block with a window and causal blocks, ops.h;
// docs/training.md "Sliding-window drafter layers"): the keys cpu::attention_fwd lets each query
// see, read back from the op itself, equal a brute-force list made from the rule, and a causal
// query with enough context sees exactly W keys, as serving with a causal window does.
//
// The probe: q = 0 makes every visible score 0, so each row's softmax is uniform over the keys it
// sees; with v[j] = the unit vector e_j, out[i] = (1 / |visible|) * indicator(visible keys), and a
// key the row does not see contributes an exact 0.

#include <set>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using KeySet = std::set<int64_t>;

// The keys each query row sees, read from the op's output (one head, Dh = Sk).
std::vector<KeySet> visible_keys_from_op(const AttnMask& mask, int64_t sq, int64_t sk) {
    HostTensor q({sq, 1, sk}), k({sk, 1, sk}), v({sk, 1, sk}), out({sq, 1, sk}), lse({1, sq});
    fill_f32(q, 0.0f);
    fill_f32(v, 0.0f);
    Rng rng(5);
    for (int64_t i = 0; i < sk * sk; ++i) k.f32()[i] = rng.normal();  // scores are 0 anyway
    for (int64_t j = 0; j < sk; ++j) v.f32()[j * sk + j] = 1.0f;
    cpu::attention_fwd(cpu::PooledExec{1}, q, k, v, mask, out, lse);
    std::vector<KeySet> vis(static_cast<size_t>(sq));
    for (int64_t i = 0; i < sq; ++i) {
        KeySet& s = vis[static_cast<size_t>(i)];
        for (int64_t j = 0; j < sk; ++j)
            if (out.f32()[i * sk + j] != 0.0f) s.insert(j);
        // Uniform weights over exactly those keys.
        for (int64_t j : s)
            EXPECT_NEAR(out.f32()[i * sk + j], 1.0 / static_cast<double>(s.size()), 1e-6);
    }
    return vis;
}

// The rule, as the recipe states it (query at block n slot k, absolute a_n + k): context key p is
// visible iff p < a_n and p >= a_n + k - (W - 1) (and p >= the block's context start); a key of
// the own block at slot s iff s <= k (causal) and k - s < W, or, not causal, |k - s| < W.
std::vector<KeySet> visible_keys_by_rule(int64_t ctx, int64_t block,
                                         const std::vector<int32_t>& anchors,
                                         const std::vector<int32_t>& starts, int64_t W,
                                         bool causal) {
    const auto n_blocks = static_cast<int64_t>(anchors.size());
    std::vector<KeySet> vis(static_cast<size_t>(n_blocks * block));
    for (int64_t n = 0; n < n_blocks; ++n) {
        const int64_t a = anchors[static_cast<size_t>(n)];
        if (a < 0) continue;  // a padding block sees nothing
        const int64_t start = starts.empty() ? 0 : starts[static_cast<size_t>(n)];
        for (int64_t k = 0; k < block; ++k) {
            KeySet& s = vis[static_cast<size_t>(n * block + k)];
            for (int64_t p = start; p < a; ++p)
                if (W == 0 || p >= a + k - (W - 1)) s.insert(p);
            for (int64_t slot = 0; slot < block; ++slot) {
                if (causal && slot > k) continue;
                if (W > 0 && (slot > k ? slot - k : k - slot) >= W) continue;
                s.insert(ctx + n * block + slot);
            }
        }
    }
    return vis;
}

TEST(DrafterWindowMask, OpSeesExactlyTheKeysOfTheRule) {
    const int64_t ctx = 30, block = 5;
    // Anchors: no context, short context, at the end, padding, mid, and two sharing a context.
    const std::vector<int32_t> anchors = {0, 2, 30, -1, 17, 17, 9};
    const std::vector<int32_t> starts = {0, 1, 4, 0, 17, 3, 0};
    const auto n = static_cast<int64_t>(anchors.size());
    const HostTensor anchors_t = test::ids_tensor(anchors), starts_t = test::ids_tensor(starts);
    for (int64_t W : {0, 1, 2, 4, 5, 8, 64}) {
        for (bool causal : {true, false}) {
            for (bool with_starts : {false, true}) {
                SCOPED_TRACE(fmt::format("W={} causal={} starts={}", W, causal, with_starts));
                const AttnMask m =
                    AttnMask::dflash_block(ctx, block, anchors_t, with_starts ? starts_t : Tensor())
                        .with_window(W)
                        .with_causal_block(causal);
                const std::vector<KeySet> got = visible_keys_from_op(m, n * block, ctx + n * block);
                const std::vector<KeySet> want = visible_keys_by_rule(
                    ctx, block, anchors, with_starts ? starts : std::vector<int32_t>(), W, causal);
                for (int64_t i = 0; i < n * block; ++i)
                    EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])
                        << "query row " << i;
            }
        }
    }
}

// Serving's count: with a causal window of W keys and at least W - 1 context rows before the
// anchor, every query sees exactly W keys, the last of them itself.
TEST(DrafterWindowMask, CausalQueryWithEnoughContextSeesExactlyWKeys) {
    const int64_t ctx = 40, block = 4;
    const std::vector<int32_t> anchors = {12, 25, 40};
    const HostTensor anchors_t = test::ids_tensor(anchors);
    for (int64_t W : {1, 3, 4, 9, 13}) {
        const AttnMask m =
            AttnMask::dflash_block(ctx, block, anchors_t).with_window(W).with_causal_block();
        const std::vector<KeySet> got = visible_keys_from_op(m, 3 * block, ctx + 3 * block);
        for (int64_t i = 0; i < 3 * block; ++i) {
            const KeySet& s = got[static_cast<size_t>(i)];
            EXPECT_EQ(static_cast<int64_t>(s.size()), W) << "W " << W << " row " << i;
            EXPECT_EQ(*s.rbegin(), ctx + i) << "the query's own key is its last";
        }
    }
}

}  // namespace
}  // namespace dflash
