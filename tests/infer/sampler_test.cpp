// Sampling distributions: temperature, top-k, top-p, greedy.
#include "infer/sampler.h"
#include "support/test_util.h"

#include <cmath>

namespace dflash {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIndexOnTies) {
    const std::vector<float> l = {1, 3, 3, 2};
    EXPECT_EQ(argmax(l), 1);
    Rng rng(0);
    EXPECT_EQ(sample_token(l, SampleParams{}, rng), 1);
    const auto p = sampling_probs(l, SampleParams{});
    EXPECT_EQ(p[1], 1.0);
}

TEST(Sampler, TemperatureTopKTopP) {
    const std::vector<float> l = {0.0f, 1.0f, 2.0f, 3.0f};
    SampleParams sp;
    sp.temperature = 2.0f;
    auto p = sampling_probs(l, sp);
    double z = 0;
    for (float x : l) z += std::exp(x / 2.0);
    for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(p[i], std::exp(l[i] / 2.0) / z, 1e-12);
    sp.top_k = 2;
    p = sampling_probs(l, sp);
    EXPECT_EQ(p[0], 0.0);
    EXPECT_EQ(p[1], 0.0);
    EXPECT_NEAR(p[2] + p[3], 1.0, 1e-12);
    sp.top_k = 0;
    sp.temperature = 1.0f;
    sp.top_p = 0.6f;  // softmax = .032 .087 .237 .644: the top token alone covers 0.6
    p = sampling_probs(l, sp);
    EXPECT_EQ(p[3], 1.0);
    sp.top_p = 0.7f;
    p = sampling_probs(l, sp);
    EXPECT_GT(p[2], 0.0);
    EXPECT_EQ(p[1], 0.0);
}

TEST(Sampler, EmpiricalFrequenciesMatch) {
    const std::vector<double> p = {0.1, 0.0, 0.6, 0.3};
    Rng rng(3);
    std::vector<int> c(4, 0);
    for (int i = 0; i < 40000; ++i) c[sample_from(p, rng)]++;
    EXPECT_EQ(c[1], 0);
    for (int i : {0, 2, 3}) EXPECT_NEAR(c[i] / 40000.0, p[i], 0.01);
}

}  // namespace
}  // namespace dflash
