// Target model: KV-cached decode equals the full forward, a verify block equals its decode steps
// bit for bit (weights in place and in fp32 panels), cropping equals never having fed the
// tokens, save/load gives bit-identical logits, captured features follow HF hidden_states[id+1],
// and the pretraining gradient matches finite differences.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "backend/backend.h"
#include "backend/cpu/f32_panels.h"
#include "backend/workspace.h"
#include "model/prepared_weights.h"
#include "support/finite_diff.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
    return t;
}

// Logits of every position from the full-sequence (cache-free) forward.
HostTensor full_logits(Backend& be, const TargetModel& m, const std::vector<int32_t>& toks) {
    const int64_t S = toks.size();
    Workspace ws = test::test_workspace(be);
    HostTensor h({S, m.dims().D});
    m.forward(be, ws, toks, {}, Tensor(), h);
    HostTensor logits({S, m.config().vocab_size});
    be.gemm(h, false, m.lm_head(), true, logits);
    return logits;
}

class TargetTest : public ::testing::TestWithParam<bool> {};

TEST_P(TargetTest, CachedDecodeMatchesFullForward) {
    auto be = make_cpu_backend(1);
    TargetModel m = TargetModel::random(*be, test::tiny_target_config(GetParam()), 11, 0.2f);
    const auto toks = random_tokens(13, m.config().vocab_size, 3);
    HostTensor ref = full_logits(*be, m, toks);
    const int64_t V = m.config().vocab_size;
    // Prefill 5, then decode one at a time, then a 4-token verify block.
    TargetSession s(m, *be, 32, {}, 8);
    HostTensor got({13, V});
    s.forward(std::span(toks).subspan(0, 5), got.view().rows(0, 5), Tensor());
    for (int64_t t = 5; t < 9; ++t)
        s.forward(std::span(toks).subspan(t, 1), got.view().rows(t, t + 1), Tensor());
    s.forward(std::span(toks).subspan(9, 4), got.view().rows(9, 13), Tensor());
    EXPECT_EQ(s.length(), 13);
    EXPECT_LT(test::max_rel_diff(got, ref), 1e-5);
}

// Lossless decoding needs a verify row to equal the decode step of the same token bit for bit
// (docs/engine.md), with the weights read in place and through the fp32 panels the engine
// multiplies the target with on the CPU (Note [f32 panels]); with panels the logits stay those of
// the full forward to fp32 rounding.
TEST_P(TargetTest, VerifyRowsEqualDecodeStepsBitForBitWithAndWithoutPanels) {
    auto be = make_cpu_backend(2);
    TargetModel m = TargetModel::random(*be, test::tiny_target_config(GetParam()), 16, 0.2f);
    const int64_t V = m.config().vocab_size;
    const auto toks = random_tokens(13, V, 9);
    const HostTensor ref = full_logits(*be, m, toks);
    const PreparedWeights panels(*be, m.linear_weights(), WeightCopy::f32);
    for (const PreparedWeights* prepared :
         {static_cast<const PreparedWeights*>(nullptr), &panels}) {
        TargetSession steps(m, *be, 32, {}, 8, prepared), block(m, *be, 32, {}, 8, prepared);
        HostTensor one({13, V}), eight({13, V});
        steps.forward(std::span(toks).subspan(0, 5), one.view().rows(0, 5), Tensor());
        block.forward(std::span(toks).subspan(0, 5), eight.view().rows(0, 5), Tensor());
        for (int64_t t = 5; t < 13; ++t)
            steps.forward(std::span(toks).subspan(t, 1), one.view().rows(t, t + 1), Tensor());
        block.forward(std::span(toks).subspan(5, 8), eight.view().rows(5, 13), Tensor());
        const size_t bytes = static_cast<size_t>(8 * V) * sizeof(float);
        EXPECT_EQ(std::memcmp(one.view().rows(5, 13).f32(), eight.view().rows(5, 13).f32(), bytes),
                  0)
            << (prepared ? "panels" : "in place");
        EXPECT_LT(test::max_rel_diff(one, ref), 1e-5) << (prepared ? "panels" : "in place");
    }
    if (cpu::f32_panels_supported(cpu::detected_isa())) {
        EXPECT_GT(panels.count(), 0u);
    }
}

TEST_P(TargetTest, CropThenRefeedEqualsNeverFed) {
    auto be = make_cpu_backend(1);
    TargetModel m = TargetModel::random(*be, test::tiny_target_config(GetParam()), 12, 0.2f);
    const int64_t V = m.config().vocab_size;
    const auto a = random_tokens(10, V, 5);
    const auto b = random_tokens(3, V, 6);
    TargetSession s1(m, *be, 32, {}, 8);
    HostTensor l1({10, V});
    s1.forward(std::span(a).subspan(0, 7), Tensor(), Tensor());
    s1.forward(std::span(b), Tensor(), Tensor());  // rejected tokens
    s1.crop(7);
    s1.forward(std::span(a).subspan(7, 3), l1.view().rows(0, 3), Tensor());
    TargetSession s2(m, *be, 32, {}, 8);
    HostTensor l2({10, V});
    s2.forward(std::span(a).subspan(0, 7), Tensor(), Tensor());
    s2.forward(std::span(a).subspan(7, 3), l2.view().rows(0, 3), Tensor());
    EXPECT_EQ(test::max_abs_diff(l1.view().rows(0, 3), l2.view().rows(0, 3)), 0.0);
}

TEST_P(TargetTest, SaveLoadGivesBitIdenticalLogits) {
    auto be = make_cpu_backend(1);
    TargetModel m = TargetModel::random(*be, test::tiny_target_config(GetParam()), 13, 0.2f);
    test::TempDir dir("target");
    m.save(dir.path(), DType::f32);
    TargetModel back = TargetModel::load(*be, dir.path());
    const auto toks = random_tokens(9, m.config().vocab_size, 7);
    HostTensor a = full_logits(*be, m, toks), b = full_logits(*be, back, toks);
    EXPECT_EQ(test::max_abs_diff(a, b), 0.0);
    // bf16 storage: the loaded weights are exactly the bf16-rounded originals.
    test::TempDir dir16("target16");
    m.save(dir16.path(), DType::bf16);
    TargetModel back16 = TargetModel::load(*be, dir16.path());
    for (const auto& p : m.params().params()) {
        const Tensor q = back16.params().value(p.name);
        for (int64_t i = 0; i < q.numel(); ++i)
            ASSERT_EQ(q.f32()[i], bf16_to_f32(f32_to_bf16(p.value.f32()[i]))) << p.name;
    }
}

TEST_P(TargetTest, CapturedFeaturesAreLayerOutputs) {
    auto be = make_cpu_backend(1);
    auto cfg = test::tiny_target_config(GetParam());
    TargetModel m = TargetModel::random(*be, cfg, 14, 0.2f);
    const auto toks = random_tokens(6, cfg.vocab_size, 8);
    const int64_t D = cfg.hidden_size, L = cfg.num_hidden_layers;
    Workspace ws = test::test_workspace(*be);
    HostTensor feats({6, 2 * D}), h({6, D});
    const std::vector<int64_t> ids = {L - 1, 0};
    m.forward(*be, ws, toks, ids, feats, h);
    // The output of the last layer, final-normed, is the final hidden state.
    HostTensor last({6, D}), normed({6, D});
    for (int64_t s = 0; s < 6; ++s)
        for (int64_t d = 0; d < D; ++d) last.f32()[s * D + d] = feats.f32()[s * 2 * D + d];
    be->rmsnorm_fwd(last, m.params().value("model.norm.weight"), 1e-6f, normed, Tensor());
    EXPECT_LT(test::max_abs_diff(normed, h), 1e-6);
    // The session captures the same features.
    TargetSession s(m, *be, 16, ids, 4);
    HostTensor f2({6, 2 * D});
    s.forward(toks, Tensor(), f2);
    EXPECT_LT(test::max_abs_diff(f2, feats), 1e-5);
}

TEST_P(TargetTest, PretrainGradientMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    TargetModel m = TargetModel::random(*be, test::tiny_target_config(GetParam(), 2), 15, 0.3f);
    m.params().enable_training();
    const auto toks = random_tokens(7, m.config().vocab_size, 9);
    const std::vector<uint8_t> mask = {0, 1, 1, 0, 1, 1, 1};
    auto loss = [&]() { return test::target_step(*be, m, toks, mask, 1.0f, 5).loss_sum; };
    m.params().zero_grads();
    test::target_step(*be, m, toks, mask, 1.0f, 5);
    // Every finite-difference evaluation runs the backward too: compare against a snapshot.
    std::map<std::string, HostTensor> snapshot;
    for (const auto& prm : m.params().params())
        snapshot.emplace(prm.name, to_host_f32(*be, prm.grad));
    // Every parameter tensor: its largest gradients (where a wrong one shows most) and a few
    // random elements. Each tensor must receive a gradient at all.
    Rng rng(4);
    for (const auto& prm : m.params().params()) {
        Tensor w = prm.value;
        const Tensor g = snapshot.at(prm.name).view();
        const auto idx = test::fd_check_indices(g.f32(), g.numel(), 3, 3, rng);
        EXPECT_GT(std::fabs(g.f32()[idx[0]]), 1e-4) << prm.name << " gets no gradient";
        for (int64_t i : idx) {
            const double fd = test::fd_derivative_in_place(w.f32()[i], loss, 1e-2f);
            // float32 forward: the FD error is ~1e-4 absolute at this step size.
            EXPECT_NEAR(g.f32()[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << prm.name << "[" << i << "]";
        }
    }
}

// Qwen2: biases on q/k/v (not o_proj), no q/k norm. The biases change the output, and the cached
// decode path applies them as the full forward does.
TEST(TargetQwen2, BiasesApplyInEveryPath) {
    auto be = make_cpu_backend(1);
    TargetConfig cfg = test::tiny_target_config(false);
    cfg.model_type = "qwen2";
    cfg.rope.scaling = RopeScaling{};
    ASSERT_TRUE(cfg.problems().empty());
    EXPECT_TRUE(cfg.qkv_bias());
    EXPECT_FALSE(cfg.o_bias());
    TargetModel m = TargetModel::random(*be, cfg, 16, 0.2f);
    ASSERT_TRUE(m.params().has("model.layers.0.self_attn.q_proj.bias"));
    EXPECT_FALSE(m.params().has("model.layers.0.self_attn.o_proj.bias"));
    Rng rng(3);
    for (const char* b : {"q", "k", "v"}) {
        const std::string name = fmt::format("model.layers.1.self_attn.{}_proj.bias", b);
        const Shape s = m.params().param(name).shape;
        m.params().write_f32(name, test::random_tensor(s, rng, 0.5f).view());
    }
    const auto toks = random_tokens(9, cfg.vocab_size, 4);
    const HostTensor ref = full_logits(*be, m, toks);
    TargetSession s(m, *be, 16, {}, 4);
    HostTensor got({9, cfg.vocab_size});
    s.forward(std::span(toks).subspan(0, 5), got.view().rows(0, 5), Tensor());
    s.forward(std::span(toks).subspan(5, 4), got.view().rows(5, 9), Tensor());
    EXPECT_LT(test::max_rel_diff(got, ref), 1e-5);
    // Without the biases the logits differ: they were not ignored.
    for (const char* b : {"q", "k", "v"})
        be->fill(m.params().value(fmt::format("model.layers.1.self_attn.{}_proj.bias", b)), 0.0f);
    EXPECT_GT(test::max_abs_diff(full_logits(*be, m, toks), ref), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Qwen3AndLlama, TargetTest, ::testing::Values(true, false),
                         [](const auto& test_case) { return test_case.param ? "qwen3" : "llama"; });

}  // namespace
}  // namespace dflash
