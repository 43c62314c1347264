// The drafter's training objectives beyond plain CE (model/drafter.h BlockObjective): the KL
// distillation gradient of the whole model against finite differences, and document isolation
// of packed sequences: with per-document target features and context starts, a block's loss and
// every parameter gradient are bitwise unchanged when another document's tokens change (and,
// so the test can fail, they do change when the documents are packed as one stream), and a
// document's blocks in a pack train as the document alone (positions from 0) does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "data/anchors.h"
#include "support/finite_diff.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

using Pair = test::TinyPair;
using test::random_tokens;

Pair make_pair(Backend& be, uint64_t seed) {
    return test::tiny_pair(be, true, seed);
}

// Features [S, K*D] and the target's final hidden states [S, D], per document when doc_starts
// is given (forward_documents), else over the whole pack.
struct TargetOut {
    HostTensor features, final_hidden;
};
TargetOut target_out(Backend& be, const Pair& p, const std::vector<int32_t>& toks,
                     const std::vector<int32_t>& doc_starts) {
    Workspace ws = test::test_workspace(be);
    const auto S = static_cast<int64_t>(toks.size());
    TargetOut o{HostTensor({S, p.drafter.feature_dim()}), HostTensor({S, p.target.dims().D})};
    const auto& ids = p.drafter.config().target_layer_ids;
    if (doc_starts.empty()) {
        p.target.forward(be, ws, toks, ids, o.features, o.final_hidden);
    } else {
        p.target.forward_documents(be, ws, toks, doc_starts, ids, o.features, o.final_hidden);
    }
    return o;
}

test::StepStats step(Backend& be, Pair& p, const TargetOut& t, const std::vector<int32_t>& toks,
                     const std::vector<uint8_t>& mask, const std::vector<int32_t>& anchors,
                     const BlockObjective& obj) {
    Workspace ws = test::test_workspace(be);
    HostTensor stats({LossStatsLayout{p.drafter.block_size()}.size()});
    p.drafter.train_step(be, ws, {t.features, toks, mask, anchors},
                         {p.target.embed(), p.target.lm_head(), 3.0, 7}, {1.0f, stats}, obj);
    return test::to_step_stats(stats, p.drafter.block_size());
}

// forward_documents gives every document exactly what the target computes for it alone, and
// fits the workspace planned for one forward over the whole sequence however many documents
// there are (their inputs are staged together, not per document).
TEST(DrafterObjective, TargetForwardDocumentsEqualsEachDocumentAlone) {
    auto be = make_cpu_backend(1);
    const Pair p = make_pair(*be, 81);
    const int64_t S = 40, V = p.target.config().vocab_size, D = p.target.dims().D;
    const auto toks = random_tokens(S, V, 6);
    const std::vector<int32_t> starts = {0, 3, 4, 10, 11, 12, 20, 21, 33, 39};
    const auto& ids = p.drafter.config().target_layer_ids;
    HostTensor feats({S, p.drafter.feature_dim()}), hidden({S, D});
    Workspace ws(*be, plan_workspace(*be, [&](Backend& pb, Workspace& pws) {
        p.target.forward(pb, pws, toks, ids, feats, hidden);
    }));
    p.target.forward_documents(*be, ws, toks, starts, ids, feats, hidden);
    for (size_t d = 0; d < starts.size(); ++d) {
        const int64_t b = starts[d], e = d + 1 < starts.size() ? starts[d + 1] : S;
        const std::vector<int32_t> doc(toks.begin() + b, toks.begin() + e);
        HostTensor f({e - b, p.drafter.feature_dim()}), h({e - b, D});
        Workspace alone = test::test_workspace(*be);
        p.target.forward(*be, alone, doc, ids, f, h);
        EXPECT_EQ(std::memcmp(f.f32(), feats.view().rows(b, e).f32(), f.nbytes()), 0) << d;
        EXPECT_EQ(std::memcmp(h.f32(), hidden.view().rows(b, e).f32(), h.nbytes()), 0) << d;
    }
}

TEST(DrafterObjective, KlGradientMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(*be, 61);
    p.drafter.params().enable_training();
    const int64_t S = 14, V = p.target.config().vocab_size;
    const auto toks = random_tokens(S, V, 3);
    std::vector<uint8_t> mask(S, 1);
    mask[0] = mask[1] = mask[7] = 0;
    const TargetOut t = target_out(*be, p, toks, {});
    const std::vector<int32_t> anchors = {2, 6, 11};
    BlockObjective obj;
    obj.loss = LossKind::kl;
    obj.teacher_hidden = t.final_hidden;
    const auto loss = [&]() { return step(*be, p, t, toks, mask, anchors, obj).loss_sum; };
    p.drafter.params().zero_grads();
    const test::StepStats st = step(*be, p, t, toks, mask, anchors, obj);
    EXPECT_GT(st.loss_sum, 0.0);
    test::expect_param_grads_match_fd(*be, p.drafter.params(), loss, 3, 2, 1e-5, 2e-4, 2e-2);
}

// Three documents packed in 24 tokens; blocks in all three, only the middle one's rows weigh.
struct Packed {
    std::vector<int32_t> toks;
    std::vector<uint8_t> mask;
    std::vector<int32_t> starts = {0, 7, 16};
    std::vector<int32_t> anchors = {1, 2, 8, 11, 17};
};

Packed make_packed(int64_t vocab) {
    Packed k;
    k.toks = random_tokens(24, vocab, 11);
    k.mask.assign(24, 0);
    for (int i = 7; i < 16; ++i) k.mask[i] = 1;
    return k;
}

struct Outcome {
    test::StepStats stats;
    std::map<std::string, HostTensor> grads;
};

Outcome run_packed(Backend& be, Pair& p, const Packed& k, bool separate, LossKind loss) {
    const TargetOut t = target_out(be, p, k.toks, separate ? k.starts : std::vector<int32_t>{});
    const std::vector<int32_t> ctx = anchor_document_starts(k.anchors, k.starts);
    BlockObjective obj;
    obj.loss = loss;
    obj.teacher_hidden = t.final_hidden;
    if (separate) obj.context_starts = ctx;
    p.drafter.params().zero_grads();
    Outcome o{step(be, p, t, k.toks, k.mask, k.anchors, obj), {}};
    for (const auto& prm : p.drafter.params().params())
        o.grads.emplace(prm.name, to_host_f32(be, prm.grad));
    return o;
}

bool bitwise_equal(const Outcome& a, const Outcome& b) {
    if (std::memcmp(&a.stats.loss_sum, &b.stats.loss_sum, sizeof(double)) != 0) return false;
    for (const auto& [name, g] : a.grads) {
        const HostTensor& h = b.grads.at(name);
        if (std::memcmp(g.f32(), h.f32(), g.nbytes()) != 0) return false;
    }
    return true;
}

TEST(DrafterObjective, SeparateDocumentsDoNotSeeEachOther) {
    auto be = make_cpu_backend(2);
    Pair p = make_pair(*be, 71);
    p.drafter.params().enable_training();
    const int64_t V = p.target.config().vocab_size;
    for (LossKind loss : {LossKind::ce, LossKind::kl}) {
        SCOPED_TRACE(loss_kind_name(loss));
        const Packed base = make_packed(V);
        Packed other = base;  // the first and last documents' tokens change
        for (int i : {0, 3, 5, 6, 16, 20, 23}) other.toks[i] = (other.toks[i] + 7) % (V - 1);
        const Outcome a = run_packed(*be, p, base, true, loss);
        const Outcome b = run_packed(*be, p, other, true, loss);
        EXPECT_GT(a.stats.loss_sum, 0.0);
        EXPECT_TRUE(bitwise_equal(a, b)) << a.stats.loss_sum << " vs " << b.stats.loss_sum;
        // Packed as one stream, the middle document's blocks see the first document.
        const Outcome c = run_packed(*be, p, base, false, loss);
        const Outcome d = run_packed(*be, p, other, false, loss);
        EXPECT_NE(c.stats.loss_sum, d.stats.loss_sum);
    }
}

// Spec §4's packing, per document: positions restart at 0 and attention stays inside the document.
// The target runs each document alone from position 0 (above); the drafter keeps absolute
// positions within the pack, which RoPE (a function of position differences only, and a block
// sees only its own document) makes equal to per-document positions up to the rounding of the
// angles: the middle document's blocks in the pack give the loss and gradients of that document
// trained alone, whose positions do start at 0.
TEST(DrafterObjective, APackedDocumentTrainsAsItDoesAlone) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(*be, 91);
    p.drafter.params().enable_training();
    const int64_t V = p.target.config().vocab_size;
    for (LossKind loss : {LossKind::ce, LossKind::kl}) {
        SCOPED_TRACE(loss_kind_name(loss));
        Packed pack = make_packed(V);
        pack.anchors = {8, 11};  // blocks of the middle document [7, 16) only
        const Outcome packed = run_packed(*be, p, pack, true, loss);
        Packed alone;
        alone.toks.assign(pack.toks.begin() + 7, pack.toks.begin() + 16);
        alone.mask.assign(pack.mask.begin() + 7, pack.mask.begin() + 16);
        alone.starts = {0};
        alone.anchors = {1, 4};
        const Outcome single = run_packed(*be, p, alone, true, loss);
        EXPECT_GT(single.stats.loss_sum, 0.0);
        EXPECT_NEAR(packed.stats.loss_sum, single.stats.loss_sum, 1e-5 * single.stats.loss_sum);
        EXPECT_EQ(packed.stats.weight_sum, single.stats.weight_sum);
        for (const auto& [name, g] : single.grads) {
            const HostTensor& h = packed.grads.at(name);
            double scale = 0, diff = 0;
            for (int64_t i = 0; i < g.numel(); ++i) {
                scale = std::max(scale, static_cast<double>(std::abs(g.f32()[i])));
                diff = std::max(diff, static_cast<double>(std::abs(g.f32()[i] - h.f32()[i])));
            }
            EXPECT_LE(diff, 1e-4 * scale + 1e-7) << name;
        }
        // One stream: the middle document's blocks see the first document and sit at other
        // positions of the target, so they do not train as alone.
        const Outcome stream = run_packed(*be, p, pack, false, loss);
        EXPECT_GT(std::abs(stream.stats.loss_sum - single.stats.loss_sum),
                  1e-4 * single.stats.loss_sum);
    }
}

}  // namespace
}  // namespace dflash
