// Parity with HF transformers on the mixture-of-experts and hybrid linear-attention targets:
// tests/fixtures/targets/* are tiny random Qwen3-MoE, gpt-oss, Qwen3-Next, Qwen3.5 (dense, MoE
// and the multimodal wrapper) checkpoints that transformers built, saved in the spellings
// published checkpoints use, and ran (tools/reference/moe_fixture.py and hybrid_fixture.py say
// which features each exercises; the hybrid prompts of 100 tokens cross a 64-token chunk). dflash
// loads each directory on the CPU backend and must give transformers' last-position logits, its
// 24-token greedy continuations (decoded here through the KV-cached session) and its hidden_states
// (the drafter's features follow hidden_states[id + 1], docs/formats.md).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

class HfParityTest : public ::testing::TestWithParam<std::string> {};

// float32 against float32 over a few layers: what differs is only the order of sums.
constexpr double kLogitTol = 2e-5;
constexpr double kHiddenTol = 2e-5;

TEST_P(HfParityTest, LastLogitsAndHiddenStates) {
    const auto dir = kTargets / GetParam();
    ASSERT_TRUE(std::filesystem::exists(dir / "config.json")) << dir;
    const auto ex = read_expected(dir);
    auto be = make_cpu_backend(2);
    TargetModel m = TargetModel::load(*be, dir);
    const int64_t D = m.dims().D, V = m.config().vocab_size, L = m.config().num_hidden_layers;
    ASSERT_EQ(V, static_cast<int64_t>(ex["last_logits"][0].size()));
    for (size_t p = 0; p < ex["prompts"].size(); ++p) {
        const auto toks = ex["prompts"][p].get<std::vector<int32_t>>();
        const int64_t S = toks.size();
        Workspace ws = test::test_workspace(*be);
        std::vector<int64_t> capture(L - 1);
        for (int64_t i = 0; i < L - 1; ++i) capture[i] = i;
        HostTensor feats({S, (L - 1) * D}), fin({S, D}), logits({S, V});
        m.forward(*be, ws, toks, capture, feats, fin);
        be->gemm(fin, false, m.lm_head(), true, logits);
        const double d = row_diff(logits.f32() + (S - 1) * V, ex["last_logits"][p]);
        EXPECT_LT(d, kLogitTol) << GetParam() << " prompt " << p;
        if (p != 0) continue;
        // hidden_states[i + 1] = output of layer i for i < L - 1; hidden_states[L] = final norm.
        const auto& hs = ex["hidden_states"];
        ASSERT_EQ(static_cast<int64_t>(hs.size()), L + 1);
        for (int64_t i = 0; i < L; ++i) {
            for (int64_t t = 0; t < S; ++t) {
                const float* got =
                    i < L - 1 ? feats.f32() + t * (L - 1) * D + i * D : fin.f32() + t * D;
                EXPECT_LT(row_diff(got, hs[i + 1][t]), kHiddenTol)
                    << GetParam() << " hidden_states[" << i + 1 << "] row " << t;
            }
        }
    }
}

TEST_P(HfParityTest, GreedyContinuationThroughTheCache) {
    const auto dir = kTargets / GetParam();
    ASSERT_TRUE(std::filesystem::exists(dir / "config.json")) << dir;
    const auto ex = read_expected(dir);
    auto be = make_cpu_backend(2);
    TargetModel m = TargetModel::load(*be, dir);
    const int64_t V = m.config().vocab_size;
    for (size_t p = 0; p < ex["prompts"].size(); ++p) {
        const auto toks = ex["prompts"][p].get<std::vector<int32_t>>();
        const auto want = ex["greedy"][p].get<std::vector<int32_t>>();
        TargetSession s(m, *be, static_cast<int64_t>(toks.size() + want.size()), {}, 16);
        HostTensor logits({1, V});
        s.forward(toks, logits, Tensor());  // prefill (in pieces of 16 rows)
        std::vector<int32_t> got;
        for (size_t n = 0; n < want.size(); ++n) {
            const float* row = logits.f32();
            const int32_t next = static_cast<int32_t>(std::max_element(row, row + V) - row);
            got.push_back(next);
            if (n + 1 < want.size()) s.forward(std::span(&next, 1), logits, Tensor());
        }
        EXPECT_EQ(got, want) << GetParam() << " prompt " << p;
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParityTest,
                         ::testing::Values("qwen3_moe_fused", "qwen3_moe_experts", "gpt_oss",
                                           "gpt_oss_mxfp4", "qwen3_next", "qwen3_5", "qwen3_5_moe",
                                           "qwen3_5_wrapper"));

}  // namespace
}  // namespace dflash
