// One decoder layer (src/model/decoder_layer.h): layer_backward's parameter, input and context
// gradients match finite differences of L = sum(dout * layer_forward_train(x, ctx)), for a
// target-style layer (causal, no context) and a drafter-style one (the DFlash block mask over
// [ctx ; x]), with Qwen3 q/k norms and without (Llama), and with YaRN's q scale. Every weight
// tensor is checked at its largest gradients and a few random elements.
#include "model/decoder_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "model/tensor_layout.h"
#include "support/finite_diff.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

struct Case {
    bool qwen3;
    bool drafter;  // context rows and the DFlash block mask
    bool yarn;     // YaRN rope: its attention factor scales q after RoPE (drafters of gpt-oss)
};

class DecoderLayerTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecoderLayerTest, BackwardMatchesFiniteDifferences) {
    const Case c = GetParam();
    auto be = make_cpu_backend(1);
    TargetConfig tc = test::tiny_target_config(c.qwen3, 1);
    if (c.yarn) {
        tc.rope.scaling = RopeScaling();
        tc.rope.scaling.type = RopeScalingType::yarn;
        tc.rope.scaling.factor = 4.0;
        tc.rope.scaling.original_max_position = 4;
    }
    const LayerDims dims = layer_dims(tc);
    ParamSet ps(*be, target_tensor_specs(tc));
    Rng init(11);
    ps.init_random(init.next_u64(), 0.3f);
    // Norm weights start at 1; move them so that their gradients are not a special case.
    for (auto& p : ps.params())
        for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] += 0.1f * init.normal();
    ps.enable_training();
    const std::string prefix = "model.layers.0.";
    const LayerWeights w = layer_weights(ps, prefix, dims);
    const LayerWeights g = layer_grads(ps, prefix, dims);
    const DeviceTensor inv_freq = upload_inv_freq(*be, tc.rope, tc.head_dim);
    Workspace ws = test::test_workspace(*be);
    const LayerContext lc{*be, ws, dims, inv_freq.view()};

    // Target: 7 causal rows. Drafter: 2 blocks of 3 rows anchored at 2 and 4, over 5 context rows.
    const int64_t Sq = c.drafter ? 6 : 7, Sc = c.drafter ? 5 : 0, D = dims.D;
    const std::vector<int32_t> anchors = {2, 4};
    const HostTensor anchors_t = test::ids_tensor(anchors);
    HostTensor q_pos({Sq}, DType::i32), kv_pos({Sc + Sq}, DType::i32);
    for (int64_t i = 0; i < Sc; ++i) kv_pos.i32()[i] = static_cast<int32_t>(i);
    for (int64_t i = 0; i < Sq; ++i) {
        q_pos.i32()[i] = static_cast<int32_t>(c.drafter ? anchors[i / 3] + i % 3 : i);
        kv_pos.i32()[Sc + i] = q_pos.i32()[i];
    }
    const AttnMask mask = c.drafter ? AttnMask::dflash_block(Sc, 3, anchors_t) : AttnMask::causal();
    Rng rng(5);
    HostTensor x = test::random_tensor({Sq, D}, rng);
    HostTensor ctx = c.drafter ? test::random_tensor({Sc, D}, rng) : HostTensor();
    const HostTensor dout = test::random_tensor({Sq, D}, rng);
    const Tensor ctx_view = c.drafter ? ctx.view() : Tensor();

    auto loss = [&]() {
        ws.reset();
        LayerActs acts;
        HostTensor out({Sq, D});
        layer_forward_train(lc, w, x.view(), ctx_view, q_pos.view(), kv_pos.view(), mask, acts,
                            out.view());
        double sum = 0;
        for (int64_t i = 0; i < out.numel(); ++i)
            sum += static_cast<double>(out.f32()[i]) * dout.f32()[i];
        return sum;
    };

    ws.reset();
    LayerActs acts;
    HostTensor out({Sq, D}), dx({Sq, D}), dctx(c.drafter ? Shape{Sc, D} : Shape{1});
    ps.zero_grads();
    layer_forward_train(lc, w, x.view(), ctx_view, q_pos.view(), kv_pos.view(), mask, acts,
                        out.view());
    layer_backward(lc, w, g, acts, q_pos.view(), kv_pos.view(), mask, dout.view(), dx.view(),
                   c.drafter ? dctx.view() : Tensor());

    std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> checked = {
        {"x", {x.view(), dx.view()}}};
    if (c.drafter) checked.push_back({"ctx", {ctx.view(), dctx.view()}});
    for (const auto& p : ps.params())
        if (p.name.starts_with(prefix)) checked.push_back({p.name, {p.value, p.grad}});
    ASSERT_EQ(checked.size(), (c.drafter ? 2u : 1u) + (c.qwen3 ? 11u : 9u));
    Rng pick(7);
    for (const auto& [name, vg] : checked) {
        const Tensor& v = vg.first;
        const Tensor& grad = vg.second;
        const auto idx = test::fd_check_indices(grad.f32(), grad.numel(), 3, 3, pick);
        EXPECT_GT(std::fabs(grad.f32()[idx[0]]), 1e-3) << name << " gets no gradient";
        for (int64_t i : idx) {
            const double fd = test::fd_derivative_in_place(v.f32()[i], loss, 1e-2f);
            EXPECT_NEAR(grad.f32()[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << name << "[" << i << "]";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Layers, DecoderLayerTest,
                         ::testing::Values(Case{true, false, false}, Case{false, false, false},
                                           Case{true, true, false}, Case{false, true, false},
                                           Case{true, true, true}),
                         [](const auto& test_case) {
                             return std::string(test_case.param.qwen3 ? "qwen3" : "llama") +
                                    (test_case.param.drafter ? "_drafter" : "_target") +
                                    (test_case.param.yarn ? "_yarn" : "");
                         });

}  // namespace
}  // namespace dflash
