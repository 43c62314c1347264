// `dflash inspect` on mixture-of-experts targets (model/inspect.h): the family, the experts and
// router, the dense/MoE layer split, active parameters per token, sliding windows and sinks, and
// MXFP4 experts; a checkpoint whose experts disagree with the config is reported, not loaded.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/inspect.h"
#include "model/target.h"
#include "model/tensor_layout.h"
#include "model/tiny_moe_models.h"
#include "support/test_util.h"

namespace dflash {
namespace {

// 12345 -> "12,345", as the report writes counts.
std::string grouped(int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

int64_t numel_of(const TargetConfig& c) {
    int64_t n = 0;
    for (const auto& s : target_tensor_specs(c)) n += s.numel();
    return n;
}

TEST(MoeInspect, Qwen3MoeReportsExpertsSplitAndActiveParameters) {
    auto be = make_cpu_backend(1);
    const TargetConfig c = test::tiny_qwen3_moe_config(false);
    test::TempDir dir("inspect_moe");
    TargetModel::random(*be, c, 31, 0.1f).save(dir.path(), DType::bf16);
    const InspectReport r = inspect_directory(dir.path());
    EXPECT_TRUE(r.ok()) << r.text;
    EXPECT_TRUE(test::has(r.text, "family:        qwen3_moe")) << r.text;
    EXPECT_TRUE(
        test::has(r.text, "5 experts of width 12, top-2 per token (router: softmax, top-k)"))
        << r.text;
    EXPECT_TRUE(test::has(r.text, "2 MoE layer(s), 1 dense")) << r.text;
    EXPECT_TRUE(test::has(r.text, "stored per-expert")) << r.text;
    // Two MoE layers, 3 of 5 experts idle per token, 3 * 24 * 12 weights each.
    const int64_t total = numel_of(c), active = total - 2 * 3 * 3 * 24 * 12;
    EXPECT_TRUE(test::has(r.text, fmt::format("active:        {} (", grouped(active))))
        << active << "\n"
        << r.text;
    EXPECT_FALSE(test::has(r.text, "attention:")) << r.text;
}

TEST(MoeInspect, GptOssReportsWindowsSinksAndMismatches) {
    auto be = make_cpu_backend(1);
    const TargetConfig c = test::tiny_gpt_oss_config();
    test::TempDir dir("inspect_oss");
    TargetModel::random(*be, c, 32, 0.1f).save(dir.path(), DType::bf16);
    InspectReport r = inspect_directory(dir.path());
    EXPECT_TRUE(r.ok()) << r.text;
    EXPECT_TRUE(test::has(r.text, "family:        gpt_oss")) << r.text;
    EXPECT_TRUE(test::has(r.text, "router: top-k logits, softmax over the k")) << r.text;
    EXPECT_TRUE(test::has(r.text, "clamped SwiGLU (limit 7)")) << r.text;
    EXPECT_TRUE(test::has(r.text,
                          "sliding window 3 on layers [0, 2], full on the other 2; a sink "
                          "logit per head"))
        << r.text;
    EXPECT_TRUE(test::has(r.text, "stored gpt-oss bf16")) << r.text;
    // The same directory under a config that claims more experts: every difference listed.
    TargetConfig more = c;
    more.num_experts = 5;
    more.save(dir.path());
    r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(test::has(r.text,
                          "'model.layers.0.mlp.experts.gate_up_proj' has shape [4, 64, 64] "
                          "but the config implies [5, 64, 64]"))
        << r.text;
}

// The MXFP4 fixture: the experts' bytes as stored (and kept on CUDA), in bf16 and in f32.
TEST(MoeInspect, GptOssMxfp4StatesTheExpertBytesEachBackendHolds) {
    const InspectReport r =
        inspect_directory(DFLASH_SOURCE_DIR "/tests/fixtures/targets/gpt_oss_mxfp4");
    EXPECT_TRUE(r.ok()) << r.text;
    // 4 layers x 4 experts x 3 matrices of 96 x 32: 147,456 weights, 17 bytes per 32.
    EXPECT_TRUE(test::has(r.text,
                          "stored MXFP4 (4-bit blocks, a scale byte per 32 weights): 78,336 bytes "
                          "(78.3 kB) of expert matrices, kept so in GPU memory on CUDA (decoded "
                          "inside the expert GEMMs; bf16 would take 294.9 kB), decoded to f32 at "
                          "load on the CPU (589.8 kB)"))
        << r.text;
}

}  // namespace
}  // namespace dflash
