// Tiny random targets and drafters for tests (awkward sizes on purpose).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/drafter.h"
#include "model/hf_config.h"
#include "model/target.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash::test {

// A tiny Qwen3-style (qk_norm) or Llama-style target.
inline TargetConfig tiny_target_config(bool qwen3 = true, int64_t layers = 3) {
    TargetConfig c;
    c.model_type = qwen3 ? "qwen3" : "llama";
    c.hidden_size = 24;
    c.intermediate_size = 40;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.vocab_size = 37;
    c.max_position_embeddings = 512;
    c.rms_norm_eps = 1e-6;
    c.rope.theta = 10000.0;
    if (!qwen3) {
        c.rope.scaling.type = RopeScalingType::llama3;
        c.rope.scaling.factor = 8.0;
        c.rope.scaling.low_freq_factor = 1.0;
        c.rope.scaling.high_freq_factor = 4.0;
        c.rope.scaling.original_max_position = 64;
    }
    c.tie_word_embeddings = !qwen3;
    c.attention_bias = false;
    c.qk_norm = qwen3;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

// The CUDA attention kernels take head dims 64 and 128: the smallest such Qwen3 target.
inline TargetConfig gpu_target_config(int64_t vocab, int64_t layers = 3) {
    TargetConfig c = tiny_target_config(true, layers);
    c.hidden_size = 96;
    c.intermediate_size = 160;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 64;
    c.vocab_size = vocab;
    return c;
}

inline DrafterConfig tiny_drafter_config(const TargetConfig& t, int64_t layers = 2,
                                         int64_t block = 4) {
    return make_drafter_config(t, layers, block, /*mask_token_id=*/t.vocab_size - 1,
                               default_target_layer_ids(t.num_hidden_layers, 2));
}

// A DFlash2 drafter config for the tiny targets: k = 2 taps, groups of 8 channels (G = 3 for
// D = 24), rank 5, top_k candidates per slot.
inline DrafterConfig tiny_dflash2_config(const TargetConfig& t, int64_t layers = 2,
                                         int64_t block = 4, int64_t top_k = 5) {
    DrafterConfig d = tiny_drafter_config(t, layers, block);
    d.arch = DrafterArch::dflash2;
    d.d2.conv_kernel_size = 2;
    d.d2.conv_group_size = 8;
    d.d2.selector_rank = 5;
    d.d2.selector_top_k = top_k;
    d.sliding_layers.assign(layers, false);
    return d;
}

// Random values (N(0, std^2), base kernels around the identity) in a DFlash2 drafter's
// convolutions and selector, so that neither is neutral.
inline void randomize_dflash2_modules(DrafterModel& d, uint64_t seed, float std) {
    Rng rng(seed);
    for (const auto& p : d.params().params()) {
        const bool conv = p.name.find("_conv.") != std::string::npos;
        if (!conv && p.name.find("candidate_selector.") == std::string::npos) continue;
        const bool base = p.name.ends_with("base_kernel");
        HostTensor t(p.shape);
        for (int64_t i = 0; i < t.numel(); ++i)
            t.f32()[i] = (base ? 0.7f : 0.0f) + rng.normal() * std;
        d.params().write_f32(p.name, t.view());
    }
}

// A CPU backend for tests that only make, load or save models (the CPU backend holds nothing but
// its thread count).
inline Backend& host_backend() {
    static const std::unique_ptr<Backend> be = make_cpu_backend(1);
    return *be;
}

// A workspace with room to spare for the tiny test models (tests skip the planning run).
inline Workspace test_workspace(Backend& be) {
    return Workspace(be, WorkspacePlan{size_t{4} << 20, size_t{256} << 10, size_t{64} << 10});
}

// One pretraining forward (+ backward when the params train) on the CPU; the stats it adds.
struct StepStats {
    double loss_sum = 0, weight_sum = 0;
    std::vector<double> correct, count;  // per loss_stats position
};
inline StepStats to_step_stats(const HostTensor& stats, int64_t period) {
    const LossStatsLayout lay{period};
    StepStats st;
    st.loss_sum = stats.f32()[LossStatsLayout::kLossSum];
    st.weight_sum = stats.f32()[LossStatsLayout::kWeightSum];
    for (int64_t k = 0; k < period; ++k) {
        st.correct.push_back(stats.f32()[lay.correct(k)]);
        st.count.push_back(stats.f32()[lay.count(k)]);
    }
    return st;
}
inline StepStats target_step(Backend& be, TargetModel& m, std::span<const int32_t> toks,
                             std::span<const uint8_t> mask, float grad_scale, int64_t chunk) {
    Workspace ws = test_workspace(be);
    HostTensor stats({LossStatsLayout{1}.size()});
    m.train_step(be, ws, toks, mask, grad_scale, chunk, stats);
    return to_step_stats(stats, 1);
}

// One drafter training forward (+ backward when it trains) on the CPU; the stats it adds
// (positions = block positions k).
inline StepStats drafter_step(Backend& be, DrafterModel& d, const TargetModel& t,
                              const Tensor& features, std::span<const int32_t> toks,
                              std::span<const uint8_t> mask, std::span<const int32_t> anchors,
                              double gamma, float grad_scale, int64_t chunk) {
    Workspace ws = test_workspace(be);
    const LossStatsLayout lay{d.block_size()};
    HostTensor stats({lay.size()});
    d.train_step(be, ws, {features, toks, mask, anchors}, {t.embed(), t.lm_head(), gamma, chunk},
                 {grad_scale, stats});
    return to_step_stats(stats, d.block_size());
}

// A tiny random target and a drafter for it (2 layers, block 4), weights N(0, 0.3^2).
struct TinyPair {
    TargetModel target;
    DrafterModel drafter;
};
inline TinyPair tiny_pair(Backend& be, bool qwen3, uint64_t seed) {
    const TargetConfig tc = tiny_target_config(qwen3, 4);
    TargetModel t = TargetModel::random(be, tc, seed, 0.3f);
    DrafterModel d = DrafterModel::random(be, tiny_drafter_config(tc, 2, 4), seed + 1, 0.3f);
    return {std::move(t), std::move(d)};
}

// n random token ids below vocab - 1 (never the tiny drafter's MASK id).
inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab - 1));
    return t;
}

// Whole-model gradient check: with the gradients of one step already in `params`, compares, in
// every parameter tensor, its `top` largest gradients (where a wrong one shows most) and `random`
// more elements with 4-point finite differences of loss() (which may run the backward again: a
// snapshot is compared). Each tensor must receive a gradient above `min_grad` at all.
inline void expect_param_grads_match_fd(Backend& be, ParamSet& params,
                                        const std::function<double()>& loss, int top, int random,
                                        double min_grad, double tol_abs, double tol_rel,
                                        uint64_t seed = 5) {
    std::map<std::string, HostTensor> snapshot;
    for (const auto& prm : params.params()) snapshot.emplace(prm.name, to_host_f32(be, prm.grad));
    Rng rng(seed);
    for (const auto& prm : params.params()) {
        Tensor w = prm.value;
        const Tensor g = snapshot.at(prm.name).view();
        const auto idx = fd_check_indices(g.f32(), g.numel(), top, random, rng);
        EXPECT_GT(std::fabs(g.f32()[idx[0]]), min_grad) << prm.name << " gets no gradient";
        for (int64_t i : idx) {
            const double fd = fd_derivative_in_place(w.f32()[i], loss, 1e-2f);
            EXPECT_NEAR(g.f32()[i], fd, tol_abs + tol_rel * std::fabs(fd))
                << prm.name << "[" << i << "]";
        }
    }
}

}  // namespace dflash::test
