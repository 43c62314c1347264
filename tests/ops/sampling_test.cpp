// Backend::sample_rows on the CPU (backend/cpu/sampling.cpp): it picks exactly what the shared
// distribution (backend/sampling.h) and pick_from give for the same uniform, on any number of
// threads; top-k keeps the most likely tokens with index order on ties; top-p the smallest
// nucleus; bad arguments are errors.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/sampling.h"
#include "support/test_util.h"

namespace dflash {
namespace {

TEST(SampleRows, PicksWhatTheDistributionAndTheUniformSay) {
    Rng rng(3);
    const int64_t R = 5, V = 37;
    const HostTensor logits = test::random_tensor({R, V}, rng, 2.0f);
    for (const SampleParams p : {SampleParams{0.7f, 0, 1.0f}, SampleParams{1.3f, 5, 1.0f},
                                 SampleParams{1.0f, 0, 0.8f}, SampleParams{0.9f, 10, 0.5f}}) {
        for (int trial = 0; trial < 20; ++trial) {
            HostTensor u({R}), out({R}, DType::i32);
            for (int64_t r = 0; r < R; ++r) u.f32()[r] = static_cast<float>(rng.uniform_f64());
            cpu::sample_rows(cpu::PooledExec{1}, logits, p, u, out);
            for (int64_t r = 0; r < R; ++r) {
                const std::span<const float> row(logits.f32() + r * V, V);
                const auto probs = sampling_distribution(row, p.temperature, p.top_k, p.top_p);
                EXPECT_EQ(out.i32()[r], pick_from(probs, u.f32()[r]));
                EXPECT_GT(probs[out.i32()[r]], 0.0);
            }
        }
    }
}

TEST(SampleRows, ThePoolsThreadCountDoesNotChangeThePicks) {
    // 11 rows of 4099 tokens: enough work for the rows to be shared between threads.
    Rng rng(4);
    const int64_t R = 11, V = 4099;
    const HostTensor logits = test::random_tensor({R, V}, rng, 3.0f);
    HostTensor u({R}), one({R}, DType::i32), three({R}, DType::i32);
    for (int64_t r = 0; r < R; ++r) u.f32()[r] = static_cast<float>(rng.uniform_f64());
    const SampleParams p{0.8f, 50, 0.9f};
    cpu::sample_rows(cpu::PooledExec{1}, logits, p, u, one);
    cpu::sample_rows(cpu::PooledExec{3}, logits, p, u, three);
    for (int64_t r = 0; r < R; ++r) {
        const std::span<const float> row(logits.f32() + r * V, V);
        const auto probs = sampling_distribution(row, p.temperature, p.top_k, p.top_p);
        EXPECT_EQ(one.i32()[r], pick_from(probs, u.f32()[r])) << r;
        EXPECT_EQ(three.i32()[r], one.i32()[r]) << r;
    }
}

TEST(SampleRows, TopKKeepsIndexOrderOnTiesAndTopPTheSmallestNucleus) {
    // All equal: top_k 3 keeps tokens 0, 1, 2 with a third each.
    const std::vector<float> flat(8, 1.0f);
    const auto k3 = sampling_distribution(flat, 1.0, 3, 1.0);
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(k3[i], i < 3 ? 1.0 / 3 : 0.0, 1e-12) << i;
    // Probabilities 0.5, 0.25, 0.125, ...: top_p 0.7 keeps the first two.
    std::vector<float> halves;
    for (int i = 0; i < 6; ++i) halves.push_back(-0.6931472f * static_cast<float>(i));
    const auto p7 = sampling_distribution(halves, 1.0, 0, 0.7);
    EXPECT_GT(p7[1], 0.0);
    EXPECT_EQ(p7[2], 0.0);
    EXPECT_NEAR(p7[0], 2.0 / 3, 1e-6);
}

TEST(SampleRows, BadArgumentsAreErrors) {
    HostTensor logits({2, 4}), u({2}), out({2}, DType::i32), out3({3}, DType::i32);
    EXPECT_THROW(cpu::sample_rows(cpu::PooledExec{1}, logits, {0.0f, 0, 1.0f}, u, out), Error);
    EXPECT_THROW(cpu::sample_rows(cpu::PooledExec{1}, logits, {1.0f, -1, 1.0f}, u, out), Error);
    EXPECT_THROW(cpu::sample_rows(cpu::PooledExec{1}, logits, {1.0f, 0, 1.5f}, u, out), Error);
    EXPECT_THROW(cpu::sample_rows(cpu::PooledExec{1}, logits, {1.0f, 0, 1.0f}, u, out3), Error);
}

}  // namespace
}  // namespace dflash
