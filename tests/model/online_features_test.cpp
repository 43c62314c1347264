// The features the online training step takes from MoE and hybrid targets (issues 24 and 25), on
// the transformers fixtures of tests/fixtures/targets (tools/reference/moe_fixture.py and
// hybrid_fixture.py; each holds transformers' hidden_states of its first prompt). For every layer
// i, linear or full attention, MoE or dense, the feature-only forward that captures i alone (and
// so stops after layer i: docs/training.md "Target layers per loss") gives exactly the full
// forward's output of layer i, which is transformers' hidden_states[i + 1] (the last layer's,
// normed, is hidden_states[L]); the layers after i are not read (NaN weights there change
// nothing); per-document forwards give each document the features of a forward over it alone.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/target.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

const std::filesystem::path kTargets = DFLASH_SOURCE_DIR "/tests/fixtures/targets";

nlohmann::json read_expected(const std::filesystem::path& dir) {
    std::ifstream f(dir / "expected.json");
    if (!f) throw std::runtime_error("missing " + (dir / "expected.json").string());
    return nlohmann::json::parse(f);
}

// Largest |got - ref| over a row, relative to the row's largest |ref| (at least 1).
double row_diff(const float* got, const nlohmann::json& ref) {
    double worst = 0, scale = 1;
    for (const auto& r : ref) scale = std::max(scale, std::abs(r.get<double>()));
    for (size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::abs(got[i] - ref[i].get<double>()));
    return worst / scale;
}

bool all_finite(const HostTensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i)
        if (!std::isfinite(t.f32()[i])) return false;
    return true;
}

// The fixture with NaN in every weight of layers `from`.. and the final norm's stored weight.
TargetModel poisoned_copy(Backend& be, const std::filesystem::path& fixture, int64_t from) {
    TargetModel m = TargetModel::load(be, fixture);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t l = from; l < m.config().num_hidden_layers; ++l) {
        const std::string prefix = "model.layers." + std::to_string(l) + ".";
        for (const Param& q : m.params().params())
            if (q.name.starts_with(prefix)) fill_f32(q.value, nan);
    }
    fill_f32(m.params().value("model.norm.weight"), nan);
    return m;
}

class OnlineFeatures : public ::testing::TestWithParam<std::string> {};

// float32 against float32 over a few layers (as tests/model/hf_parity_test.cpp).
constexpr double kHiddenTol = 2e-5;

TEST_P(OnlineFeatures, EveryLayerAloneEqualsTheFullForwardAndTransformers) {
    const auto dir = kTargets / GetParam();
    const auto ex = read_expected(dir);
    auto be = make_cpu_backend(1);
    const TargetModel m = TargetModel::load(*be, dir);
    const TargetConfig& c = m.config();
    const int64_t D = m.dims().D, L = c.num_hidden_layers;
    const auto toks = ex["prompts"][0].get<std::vector<int32_t>>();
    const int64_t S = static_cast<int64_t>(toks.size());
    const auto& hs = ex["hidden_states"];
    ASSERT_EQ(static_cast<int64_t>(hs.size()), L + 1);
    // The fixtures cover both kinds of mixer, or MoE and dense MLP layers.
    bool linear = false, full = false, moe = false, dense = false;
    for (int64_t l = 0; l < L; ++l) {
        (c.is_linear_layer(l) ? linear : full) = true;
        (c.is_moe_layer(l) ? moe : dense) = true;
    }
    EXPECT_TRUE(full);
    EXPECT_TRUE(c.hybrid() ? linear : moe) << GetParam();

    Workspace ws = test::test_workspace(*be);
    std::vector<int64_t> every(L);
    for (int64_t i = 0; i < L; ++i) every[i] = i;
    HostTensor all({S, L * D}), fin({S, D});
    m.forward(*be, ws, toks, every, all, fin);

    for (int64_t i = 0; i < L; ++i) {
        const std::string what = GetParam() + " layer " + std::to_string(i) +
                                 (c.is_linear_layer(i) ? " (linear)" : " (full)") +
                                 (c.is_moe_layer(i) ? " moe" : " dense");
        // Layer i alone, no final hidden: the forward stops after layer i.
        const std::vector<int64_t> one = {i};
        HostTensor alone({S, D});
        m.forward(*be, ws, toks, one, alone, Tensor());
        for (int64_t t = 0; t < S; ++t)
            ASSERT_EQ(
                std::memcmp(alone.f32() + t * D, all.f32() + t * L * D + i * D, D * sizeof(float)),
                0)
                << what << " row " << t;
        // One document: the same bits.
        HostTensor doc({S, D});
        m.forward_documents(*be, ws, toks, {}, one, doc, Tensor());
        EXPECT_EQ(test::max_abs_diff(doc, alone), 0.0) << what;
        // transformers: hidden_states[i + 1] is layer i's output, except the last entry, which is
        // the final norm of it.
        for (int64_t t = 0; t < S; ++t) {
            const float* got = i < L - 1 ? alone.f32() + t * D : fin.f32() + t * D;
            EXPECT_LT(row_diff(got, hs[i + 1][t]), kHiddenTol) << what << " row " << t;
        }
        // Nothing after layer i is read: NaN weights there leave its features unchanged.
        if (i + 1 < L) {
            const TargetModel poisoned = poisoned_copy(*be, dir, i + 1);
            HostTensor p({S, D});
            poisoned.forward(*be, ws, toks, one, p, Tensor());
            EXPECT_TRUE(all_finite(p)) << what;
            EXPECT_EQ(test::max_abs_diff(p, alone), 0.0) << what;
            // The poison is real: the full forward reads it.
            HostTensor pf({S, D});
            poisoned.forward(*be, ws, toks, one, p, pf);
            EXPECT_FALSE(all_finite(pf)) << what;
        }
    }
    // Separate documents (train.documents=separate): the second document's features are those of
    // a forward over it alone, its Gated DeltaNet and convolution states starting from zero.
    {
        const int64_t b = S / 3;
        const std::vector<int32_t> starts = {0, static_cast<int32_t>(b)};
        HostTensor docs({S, L * D});
        m.forward_documents(*be, ws, toks, starts, every, docs, Tensor());
        const std::vector<int32_t> tail(toks.begin() + b, toks.end());
        HostTensor alone({S - b, L * D});
        m.forward(*be, ws, tail, every, alone, Tensor());
        EXPECT_EQ(std::memcmp(docs.f32() + b * L * D, alone.f32(), (S - b) * L * D * sizeof(float)),
                  0)
            << GetParam();
        EXPECT_EQ(std::memcmp(docs.f32(), all.f32(), b * L * D * sizeof(float)), 0) << GetParam();
    }
    // Ids out of order and repeated, as drafter configs may list them: each column block is
    // that layer's output.
    if (L >= 3) {
        const std::vector<int64_t> ids = {L - 2, 0, L - 2, 1};
        HostTensor f({S, 4 * D});
        m.forward(*be, ws, toks, ids, f, Tensor());
        for (int64_t t = 0; t < S; ++t)
            for (size_t k = 0; k < ids.size(); ++k)
                EXPECT_EQ(std::memcmp(f.f32() + t * 4 * D + k * D,
                                      all.f32() + t * L * D + ids[k] * D, D * sizeof(float)),
                          0)
                    << GetParam() << " id " << ids[k] << " row " << t;
    }
}

// Default target_layer_ids (docs/formats.md, the released drafters' rule: 5 ids evenly spread over
// [1, L - 3], ties to even) for the published targets' layer counts, their configs made from the
// fixtures' with the real layer count and layout (linear/full period, sliding/full alternation, or
// MoE throughout): the rule depends only on L, whatever the layers are. The z-lab drafters whose
// configs the specs quote (shared/targets-2026-spec.md: gpt-oss-20b, Qwen3.5-4B/9B, -27B and
// -35B-A3B) read exactly these ids; the others are what the rule gives, their released ids being
// unverified.
TEST(OnlineTargetLayers, DefaultIdsFollowTheReleasedDraftersRule) {
    struct Case {
        const char* model;
        const char* fixture;
        int64_t layers;
        std::vector<int64_t> ids;
    };
    const std::vector<Case> cases = {
        {"Qwen3-30B-A3B / Qwen3-Coder-30B-A3B", "qwen3_moe_fused", 48, {1, 12, 23, 34, 45}},
        {"Qwen3-235B-A22B", "qwen3_moe_fused", 94, {1, 24, 46, 68, 91}},  // 23.5, 68.5: to even
        {"gpt-oss-20b (z-lab drafter)", "gpt_oss", 24, {1, 6, 11, 16, 21}},
        {"gpt-oss-120b", "gpt_oss", 36, {1, 9, 17, 25, 33}},
        {"Qwen3-Next-80B-A3B", "qwen3_next", 48, {1, 12, 23, 34, 45}},
        {"Qwen3.5-4B / 9B (z-lab drafters)", "qwen3_5", 32, {1, 8, 15, 22, 29}},
        {"Qwen3.5-27B (z-lab drafter)", "qwen3_5", 64, {1, 16, 31, 46, 61}},
        {"Qwen3.5-35B-A3B (z-lab drafter)", "qwen3_5_moe", 40, {1, 10, 19, 28, 37}},
        {"Qwen3.5-122B-A10B", "qwen3_5_moe", 48, {1, 12, 23, 34, 45}},
    };
    for (const Case& k : cases) {
        std::ifstream f(kTargets / k.fixture / "config.json");
        nlohmann::json j = nlohmann::json::parse(f);
        const std::string type = j["model_type"].get<std::string>();
        j["num_hidden_layers"] = k.layers;
        j["mlp_only_layers"] = nlohmann::json::array();
        if (type == "qwen3_next") {
            j["full_attention_interval"] = 4;
        } else if (j.contains("layer_types")) {
            nlohmann::json lt = nlohmann::json::array();
            for (int64_t l = 0; l < k.layers; ++l)
                lt.push_back(type == "gpt_oss"
                                 ? (l % 2 == 0 ? "sliding_attention" : "full_attention")
                                 : (l % 4 == 3 ? "full_attention" : "linear_attention"));
            j["layer_types"] = lt;
        }
        const TargetConfig t = TargetConfig::from_json(j);
        ASSERT_EQ(t.num_hidden_layers, k.layers) << k.model;
        const DrafterConfig d = make_drafter_config(t, 5, 16, t.vocab_size - 1, {});
        EXPECT_EQ(d.target_layer_ids, k.ids) << k.model;
        EXPECT_EQ(default_target_layer_ids(k.layers, 5), k.ids) << k.model;
        EXPECT_EQ(d.num_target_layers, k.layers) << k.model;
        // The hybrids' ids fall on linear and full layers alike (features from any layer).
        if (t.hybrid()) {
            bool linear = false;
            for (int64_t id : d.target_layer_ids) linear = linear || t.is_linear_layer(id);
            EXPECT_TRUE(linear) << k.model;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnlineFeatures,
                         ::testing::Values("qwen3_moe_fused", "qwen3_moe_experts", "gpt_oss",
                                           "gpt_oss_mxfp4", "qwen3_next", "qwen3_5", "qwen3_5_moe",
                                           "qwen3_5_wrapper"));

}  // namespace
}  // namespace dflash
