// ParamSet::init_random (model/params.h): norm weights 1, biases 0, every other tensor N(0, std^2)
// (mean and standard deviation of a large one within a few standard errors), element i of tensor n
// exactly std * normal_hash(init_seed(seed, n), i): the same bits on any number of CPU threads,
// whether or not the set trains (f32 masters), and whatever other tensors the layout holds; another
// seed or another name draws other numbers. A random drafter is the same on 1 and 3 threads.
#include <cmath>
#include <cstring>

#include "backend/noise_hash.h"
#include "model/drafter.h"
#include "model/params.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

const std::vector<TensorSpec> kSpecs = {{"model.embed_tokens.weight", {300, 200}},
                                        {"model.layers.0.input_layernorm.weight", {200}},
                                        {"model.layers.0.self_attn.q_proj.bias", {64}},
                                        {"model.layers.0.mlp.up_proj.weight", {64, 200}}};

bool same_bits(const HostTensor& a, const HostTensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), a.nbytes()) == 0;
}

TEST(ParamInit, DistributionsOfTheDocs) {
    const auto be = make_cpu_backend(2);
    ParamSet ps(*be, kSpecs);
    const uint64_t seed = 42;
    ps.init_random(seed, 0.02f);
    const HostTensor norm = ps.read_f32("model.layers.0.input_layernorm.weight");
    for (int64_t i = 0; i < norm.numel(); ++i) ASSERT_EQ(norm.f32()[i], 1.0f);
    const HostTensor bias = ps.read_f32("model.layers.0.self_attn.q_proj.bias");
    for (int64_t i = 0; i < bias.numel(); ++i) ASSERT_EQ(bias.f32()[i], 0.0f);
    const std::string name = "model.embed_tokens.weight";
    const HostTensor w = ps.read_f32(name);
    const int64_t n = w.numel();
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) {
        sum += w.f32()[i];
        sq += double(w.f32()[i]) * w.f32()[i];
        // Element i of tensor `name`: a pure function of (seed, name, i).
        ASSERT_EQ(w.f32()[i],
                  0.02f * normal_hash(ParamSet::init_seed(seed, name), static_cast<uint64_t>(i)))
            << i;
    }
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_LT(std::fabs(mean), 5 * 0.02 / std::sqrt(double(n)));
    EXPECT_NEAR(sd, 0.02, 5 * 0.02 / std::sqrt(2.0 * n));
}

TEST(ParamInit, SameBitsOnAnyThreadCountAndLayout) {
    const auto one = make_cpu_backend(1), three = make_cpu_backend(3);
    ParamSet a(*one, kSpecs), b(*three, kSpecs);
    a.init_random(7, 0.02f);
    b.enable_training();  // drawn into the masters: the same numbers
    b.init_random(7, 0.02f);
    for (const Param& p : a.params())
        EXPECT_TRUE(same_bits(a.read_f32(p.name), b.read_f32(p.name))) << p.name;
    // A layout with only the last tensor draws it the same.
    ParamSet c(*one, {kSpecs.back()});
    c.init_random(7, 0.02f);
    EXPECT_TRUE(same_bits(c.read_f32(kSpecs.back().name), a.read_f32(kSpecs.back().name)));
    // Another seed, or the same shape under another name, other numbers.
    ParamSet d(*one, kSpecs);
    d.init_random(8, 0.02f);
    ParamSet e(*one, {{"model.layers.0.mlp.down_proj.weight", kSpecs.back().shape}});
    e.init_random(7, 0.02f);
    const HostTensor x = a.read_f32(kSpecs.back().name), y = d.read_f32(kSpecs.back().name),
                     z = e.read_f32("model.layers.0.mlp.down_proj.weight");
    int64_t same_seed = 0, same_name = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
        same_seed += x.f32()[i] == y.f32()[i];
        same_name += x.f32()[i] == z.f32()[i];
    }
    EXPECT_LT(same_seed, 10);
    EXPECT_LT(same_name, 10);
}

TEST(ParamInit, RandomDrafterIsTheSameOnAnyThreadCount) {
    const TargetConfig tc = test::tiny_target_config();
    const auto one = make_cpu_backend(1), three = make_cpu_backend(3);
    for (const DrafterConfig& dc :
         {test::tiny_drafter_config(tc, 2, 4), test::tiny_dflash2_config(tc, 2, 4)}) {
        const DrafterModel a = DrafterModel::random(*one, dc, 5);
        const DrafterModel b = DrafterModel::random(*three, dc, 5);
        for (const Param& p : a.params().params())
            EXPECT_TRUE(same_bits(a.params().read_f32(p.name), b.params().read_f32(p.name)))
                << p.name;
    }
}

}  // namespace
}  // namespace dflash
