// cuda::sample_rows against the shared distribution (backend/sampling.h): for uniforms in the
// middle of a token's CDF interval (away from rounding at the boundaries) the GPU picks exactly
// that token; every pick has positive probability; top-k ties keep index order; a 152K vocabulary
// with top-k and top-p; bitwise repeatable. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/sampling.h"
#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

class CudaSampling : public test::CudaVsCpu {
  protected:
    // Uniforms at the middle of the CDF interval (index order) of up to `n` tokens of each row
    // whose probability is at least 1e-3; the GPU must pick exactly those tokens.
    void check(const HostTensor& logits, const SampleParams& p, int n) {
        const int64_t R = logits.dim(0), V = logits.dim(1);
        std::vector<std::vector<float>> us(static_cast<size_t>(R));
        std::vector<std::vector<int32_t>> want(static_cast<size_t>(R));
        for (int64_t r = 0; r < R; ++r) {
            const auto probs = sampling_distribution(
                std::span<const float>(logits.f32() + r * V, static_cast<size_t>(V)), p.temperature,
                p.top_k, p.top_p);
            double cum = 0;
            for (int64_t v = 0; v < V; ++v) {
                if (probs[v] >= 1e-3 && static_cast<int>(us[r].size()) < n) {
                    us[r].push_back(static_cast<float>(cum + probs[v] / 2));
                    want[r].push_back(static_cast<int32_t>(v));
                }
                cum += probs[v];
            }
        }
        const DeviceTensor dl = test::to_gpu(gpu(), logits, DType::f32);
        DeviceTensor du(gpu(), {R}, DType::f32), dout(gpu(), {R}, DType::i32);
        HostTensor u({R}), got({R}, DType::i32);
        for (int k = 0; k < n; ++k) {
            bool any = false;
            for (int64_t r = 0; r < R; ++r) {
                const bool has = k < static_cast<int>(us[r].size());
                u.f32()[r] = has ? us[r][k] : 0.5f;
                any = any || has;
            }
            if (!any) break;
            gpu().upload(du, u.view());
            gpu().sample_rows(dl, p, du, dout);
            gpu().download(got.view(), dout);
            for (int64_t r = 0; r < R; ++r) {
                if (k < static_cast<int>(us[r].size())) {
                    ASSERT_EQ(got.i32()[r], want[r][k])
                        << "row " << r << " u " << us[r][k] << " T " << p.temperature << " top_k "
                        << p.top_k << " top_p " << p.top_p;
                }
            }
        }
    }
};

TEST_F(CudaSampling, PicksTheTokenWhoseIntervalHoldsTheUniform) {
    Rng rng(7);
    for (const int64_t V : {int64_t{37}, int64_t{1000}, int64_t{4099}}) {
        const HostTensor logits = test::random_tensor({3, V}, rng, 3.0f);
        for (const SampleParams p : {SampleParams{0.7f, 0, 1.0f}, SampleParams{1.3f, 5, 1.0f},
                                     SampleParams{1.0f, 0, 0.8f}, SampleParams{0.9f, 50, 0.5f}})
            check(logits, p, 12);
    }
}

TEST_F(CudaSampling, LargeVocabularyAndTies) {
    Rng rng(8);
    const HostTensor big = test::random_tensor({2, 151936}, rng, 4.0f);
    check(big, {1.0f, 0, 1.0f}, 8);
    check(big, {0.8f, 20, 0.9f}, 8);
    // Equal logits: top_k 3 keeps tokens 0, 1, 2 (index order on ties), a third each.
    HostTensor flat({1, 64});
    for (int64_t i = 0; i < 64; ++i) flat.f32()[i] = 0.25f;
    check(flat, {1.0f, 3, 1.0f}, 3);
}

TEST_F(CudaSampling, Repeatable) {
    Rng rng(9);
    const HostTensor logits = test::random_tensor({4, 5000}, rng, 2.0f);
    const DeviceTensor dl = test::to_gpu(gpu(), logits, DType::f32);
    HostTensor u({4});
    for (int64_t r = 0; r < 4; ++r) u.f32()[r] = static_cast<float>(rng.uniform_f64());
    DeviceTensor du(gpu(), {4}, DType::f32), a(gpu(), {4}, DType::i32), b(gpu(), {4}, DType::i32);
    gpu().upload(du, u.view());
    gpu().sample_rows(dl, {0.9f, 30, 0.95f}, du, a);
    gpu().sample_rows(dl, {0.9f, 30, 0.95f}, du, b);
    HostTensor ha({4}, DType::i32), hb({4}, DType::i32);
    gpu().download(ha.view(), a);
    gpu().download(hb.view(), b);
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(ha.i32()[r], hb.i32()[r]);
}

}  // namespace
}  // namespace dflash
