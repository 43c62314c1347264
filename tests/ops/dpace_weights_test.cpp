// The CPU dpace_weights (backend/cpu/dpace_weights.cpp), the oracle of the CUDA op: two blocks
// with masked slots against a hand computation, alpha = 1 giving the count of trained slots from
// k on, the weights scaling the result, blocks not seeing each other, and bad arguments refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace dflash {
namespace {

std::vector<float> dpace(const std::vector<float>& ce, const std::vector<float>& weights,
                         int64_t block, float alpha) {
    auto be = make_cpu_backend(1);
    const auto R = static_cast<int64_t>(ce.size());
    HostTensor c({R}), w({R}), out({R});
    for (int64_t i = 0; i < R; ++i) {
        c.f32()[i] = ce[static_cast<size_t>(i)];
        w.f32()[i] = weights[static_cast<size_t>(i)];
        out.f32()[i] = -7.0f;  // overwritten everywhere
    }
    be->dpace_weights(c, w, block, alpha, out);
    return std::vector<float>(out.f32(), out.f32() + R);
}

// Block 1: slot 0 (the anchor) and slot 3 untrained; q = 1/2, 1/4 at slots 1, 2, so with
// alpha = 1/2 the survival factors are 3/4 and 5/8: C = (1, 3/4, 15/32, 15/32), and
// w_1 = C_1 + C_2 = 39/32, w_2 = C_2 = 15/32.
// Block 2: a hole at slot 2; q = 1 at slot 1 (factor 1) and 1/5 at slot 3 (factor 3/5):
// C = (1, 1, 1, 3/5), w_1 = C_1 + C_3 = 8/5, w_3 = 3/5; slot 2's factor is 1 whatever its CE.
TEST(DpaceWeights, MatchesAHandComputationWithMaskedSlots) {
    const std::vector<float> ce = {9.0f, std::log(2.0f), std::log(4.0f), 5.0f,
                                   3.0f, 0.0f,           8.0f,           std::log(5.0f)};
    const std::vector<float> mask = {0, 1, 1, 0, 0, 1, 0, 1};
    const std::vector<float> want = {0, 39.0f / 32, 15.0f / 32, 0, 0, 8.0f / 5, 0, 3.0f / 5};
    const auto got = dpace(ce, mask, 4, 0.5f);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "row " << i;
    // The weights multiply the result (the gradient's weights carry the step's scale).
    std::vector<float> scaled = mask;
    for (float& x : scaled) x *= 0.25f;
    const auto got_scaled = dpace(ce, scaled, 4, 0.5f);
    for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got_scaled[i], 0.25f * want[i], 1e-6) << "row " << i;
}

// alpha = 1 ignores the draft: every factor is 1, so w_k counts the trained slots at or after k.
TEST(DpaceWeights, AlphaOneCountsTheTrainedSlotsFromKOn) {
    const std::vector<float> ce = {1, 2, 3, 4, 5, 6};
    const std::vector<float> mask = {0, 1, 1, 0, 1, 1};
    const auto got = dpace(ce, mask, 6, 1.0f);
    const std::vector<float> want = {0, 4, 3, 0, 2, 1};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "row " << i;
}

// Each block's weights depend on its own rows only.
TEST(DpaceWeights, BlocksAreIndependent) {
    const std::vector<float> mask = {0, 1, 1, 1, 0, 1, 1, 1};
    std::vector<float> ce = {0.0f, 0.3f, 1.2f, 0.7f, 0.0f, 0.1f, 0.2f, 0.3f};
    const auto a = dpace(ce, mask, 4, 0.3f);
    ce[5] = 4.0f;
    ce[7] = 0.0f;
    const auto b = dpace(ce, mask, 4, 0.3f);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(a[i], b[i]) << "row " << i;
    // In the changed block a bad first slot lowers every survival product (the better last slot
    // does not make up for it), so every trained slot's credit falls.
    for (size_t i = 5; i < 8; ++i) EXPECT_LT(b[i], a[i]) << "row " << i;
}

TEST(DpaceWeights, RefusesBadArguments) {
    auto be = make_cpu_backend(1);
    HostTensor c({6}), w({6}), out({6}), short_out({5});
    fill_f32(c, 1.0f);
    fill_f32(w, 1.0f);
    EXPECT_THROW(be->dpace_weights(c, w, 4, 0.5f, out), Error);  // 6 rows, blocks of 4
    EXPECT_THROW(be->dpace_weights(c, w, 3, 0.0f, out), Error);  // alpha outside (0, 1]
    EXPECT_THROW(be->dpace_weights(c, w, 3, 1.5f, out), Error);
    EXPECT_THROW(be->dpace_weights(c, w, 3, 0.5f, short_out), Error);
    EXPECT_NO_THROW(be->dpace_weights(c, w, 3, 0.5f, out));
}

}  // namespace
}  // namespace dflash
