// The DSpark training step on CUDA (docs/training.md "DSpark drafters"): the whole loss runs on
// the device (confidence_bce, sigmoid_mul_bwd), so the step is recorded as a CUDA graph like the
// DFlash one. Four steps, each a recorded micro-batch (target features and final hidden states,
// drafter forward, the DSpark loss, backward) and a recorded update (norm, clip, AdamW), with a
// gradient scale and a learning rate that change every step: the replayed steps give the bits of
// eager ones (the f32 masters after them and every step's loss), with two captures and no
// fallback. One step's loss and gradients equal the CPU's within bf16 tolerance, for the vanilla,
// gated and rnn Markov heads, with the confidence head reading [h; e], h alone, or absent; the
// heads' weight gradients are checked one tensor at a time. `dflash train` of a DSpark drafter
// (gated head) on CUDA records its micro-batches (captures, replays, no fallback in the step
// records' graph counters) and tracks the CPU run's losses for 10 steps. Skips visibly without a
// GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/workspace.h"
#include "model/drafter.h"
#include "model/target.h"
#include "support/tiny_models.h"
#include "tokenizer/tokenizer.h"
#include "train/drafter_training.h"
#include "train/optimizer.h"
#include "train/train_fixtures.h"

namespace dflash {
namespace {

constexpr int64_t kVocab = 150;
const DsparkLossWeights kAlpha{0.3, 0.9, 0.7};

struct Heads {
    MarkovHeadType markov;
    bool confidence;
    bool with_markov;
    int64_t rank;
};

std::string name_of(const Heads& h) {
    return std::string(markov_head_type_name(h.markov)) +
           (!h.confidence   ? "_no_confidence"
            : h.with_markov ? "_confidence_he"
                            : "_confidence_h") +
           "_r" + std::to_string(h.rank);
}

DrafterConfig dspark_config(const TargetConfig& tc, const Heads& h) {
    DrafterConfig d = test::tiny_drafter_config(tc, 1, 4);
    d.arch = DrafterArch::dspark;
    d.ds.markov_rank = h.rank;
    d.ds.markov_head = h.markov;
    d.ds.confidence_head = h.confidence;
    d.ds.confidence_with_markov = h.with_markov;
    return d;
}

GraphOptions graphs(bool enabled) {
    GraphOptions g;
    g.enabled = enabled;
    g.warmup_runs = 1;
    return g;
}

int64_t fallbacks(const GraphStats& s) {
    int64_t n = 0;
    for (const auto& [reason, count] : s.fallback_reasons) n += count;
    return n;
}

// Four DSpark training steps as the trainer runs them: the f32 masters after them, then every
// step's loss sum.
std::vector<float> dspark_train_steps(Backend& be, const Heads& h) {
    const TargetModel t = TargetModel::random(be, test::gpu_target_config(kVocab, 3), 17, 0.5f);
    DrafterModel d = DrafterModel::random(be, dspark_config(t.config(), h), 19, 0.5f);
    d.params().enable_training();
    train::AdamW opt(d.params(), {});
    const auto toks = test::random_tokens(120, kVocab, 7);
    std::vector<uint8_t> mask(toks.size(), 1);
    mask[40] = 0;  // cuts the slot prefixes of the blocks around it
    std::vector<int32_t> anchors;
    for (int32_t a = 2; a < 118; a += 9) anchors.push_back(a);  // the last block runs past S
    const LossStatsLayout lay{d.block_size()};
    const DeviceTensor stats(be, {lay.size()}, DType::f32), norm(be, {1}, DType::f32),
        clip(be, {1}, DType::f32);
    const DeviceTensor features(be, {120, d.feature_dim()}, be.compute_dtype());
    const DeviceTensor final_hidden(be, {120, t.dims().D}, be.compute_dtype());
    Workspace ws(be, WorkspacePlan{size_t{32} << 20, size_t{1} << 20, size_t{1} << 16});
    const StepOwner owner(be);
    BlockObjective obj;
    obj.teacher_hidden = final_hidden;
    obj.dspark = kAlpha;
    std::vector<float> losses;
    for (int s = 0; s < 4; ++s) {
        d.params().zero_grads();
        be.fill(stats, 0.0f);
        ws.reset();
        ws.settle_inputs();
        const float grad_scale = 1.0f / static_cast<float>(s + 3);
        be.run_step(StepKey{owner.id(), "microbatch", {}}, [&] {
            const Workspace::Mark m = ws.mark();
            t.forward(be, ws, toks, d.config().target_layer_ids, features, final_hidden);
            ws.release_scratch(m);
            d.train_step(be, ws, {features, toks, mask, anchors}, {t.embed(), t.lm_head(), 4.0, 50},
                         {grad_scale, stats}, obj);
        });
        opt.begin_step(be, 1e-3 * (s + 1));
        be.run_step(StepKey{owner.id(), "update", {}}, [&] {
            train::grad_norm_sq(be, d.params(), norm);
            be.clip_scale(norm, 0.5f, clip);
            opt.apply(be, d.params(), clip);
        });
        losses.push_back(to_host_f32(be, stats).f32()[LossStatsLayout::kLossSum]);
    }
    const HostTensor master = to_host_f32(be, d.params().flat_master());
    std::vector<float> out(master.f32(), master.f32() + master.numel());
    out.insert(out.end(), losses.begin(), losses.end());
    return out;
}

class CudaDspark : public ::testing::TestWithParam<Heads> {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

TEST_P(CudaDspark, ReplayedStepsEqualEagerOnesBitForBit) {
    const auto on = make_backend(DeviceKind::cuda, 0, 1, graphs(true));
    const auto off = make_backend(DeviceKind::cuda, 0, 1, graphs(false));
    const std::vector<float> replayed = dspark_train_steps(*on, GetParam());
    const std::vector<float> eager = dspark_train_steps(*off, GetParam());
    ASSERT_EQ(replayed.size(), eager.size());
    EXPECT_EQ(std::memcmp(replayed.data(), eager.data(), eager.size() * sizeof(float)), 0);
    for (size_t i = eager.size() - 4; i < eager.size(); ++i) {
        EXPECT_TRUE(std::isfinite(eager[i]) && eager[i] > 0) << "step loss " << eager[i];
    }
    const GraphStats s = on->graph_stats();
    EXPECT_EQ(s.captures, 2) << s.summary();  // the micro-batch and the update
    EXPECT_EQ(s.replays, 2 * 3) << s.summary();
    EXPECT_EQ(fallbacks(s), 0) << s.summary();
}

struct StepResult {
    double loss = 0;
    HostTensor grads;
};

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

StepResult one_step(Backend& be, Pair& p, const std::vector<int32_t>& toks,
                    const std::vector<uint8_t>& mask, const std::vector<int32_t>& anchors) {
    const int64_t S = static_cast<int64_t>(toks.size());
    DeviceTensor feats(be, {S, p.drafter.feature_dim()}, be.compute_dtype());
    DeviceTensor final_hidden(be, {S, p.target.dims().D}, be.compute_dtype());
    Workspace ws(be, WorkspacePlan{size_t{32} << 20, size_t{1} << 20, size_t{1} << 16});
    p.target.forward(be, ws, toks, p.drafter.config().target_layer_ids, feats, final_hidden);
    ws.reset();
    p.drafter.params().zero_grads();
    DeviceTensor stats(be, {LossStatsLayout{p.drafter.block_size()}.size()}, DType::f32);
    BlockObjective obj;
    obj.teacher_hidden = final_hidden;
    obj.dspark = kAlpha;
    p.drafter.train_step(be, ws, {feats, toks, mask, anchors},
                         {p.target.embed(), p.target.lm_head(), 4.0, 50}, {1.0f, stats}, obj);
    const HostTensor st = to_host_f32(be, stats);
    return {st.f32()[LossStatsLayout::kLossSum] / st.f32()[LossStatsLayout::kWeightSum],
            to_host_f32(be, p.drafter.params().flat_grads())};
}

// cos(a, b) and |b| / |a| over elements [off, off + n).
std::pair<double, double> cosine_and_ratio(const HostTensor& a, const HostTensor& b, int64_t off,
                                           int64_t n) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = off; i < off + n; ++i) {
        dot += double(a.f32()[i]) * b.f32()[i];
        na += double(a.f32()[i]) * a.f32()[i];
        nb += double(b.f32()[i]) * b.f32()[i];
    }
    return {dot / std::sqrt(na * nb), std::sqrt(nb / na)};
}

// bf16 weights and activations against the f32 reference on the same bf16-representable weights:
// the loss within 2%, the whole gradient's direction within 1% (cosine) and magnitude within 5%,
// and every head weight's gradient within 2% (cosine) and 10% (magnitude).
TEST_P(CudaDspark, StepMatchesTheCpu) {
    const auto gpu = make_backend(DeviceKind::cuda, 0, 1);
    const auto cpu = make_cpu_backend(1);
    const TargetConfig tc = test::gpu_target_config(kVocab, 3);
    Pair c{TargetModel::random(*cpu, tc, 21, 0.5f),
           DrafterModel::random(*cpu, dspark_config(tc, GetParam()), 22, 0.5f)};
    Pair g{TargetModel::random(*gpu, tc, 21, 0.5f),
           DrafterModel::random(*gpu, dspark_config(tc, GetParam()), 22, 0.5f)};
    c.target.params().copy_from(g.target.params());
    c.drafter.params().copy_from(g.drafter.params());
    c.drafter.params().enable_training();
    g.drafter.params().enable_training();
    const auto toks = test::random_tokens(97, kVocab, 3);
    std::vector<uint8_t> mask(toks.size(), 1);
    mask[0] = mask[1] = mask[50] = 0;
    const std::vector<int32_t> anchors = {2, 9, 30, 31, 47, 60, 88, 95};
    const StepResult a = one_step(*cpu, c, toks, mask, anchors);
    const StepResult b = one_step(*gpu, g, toks, mask, anchors);
    EXPECT_NEAR(b.loss, a.loss, 0.02 * a.loss);
    const auto [cos_all, ratio_all] = cosine_and_ratio(a.grads, b.grads, 0, a.grads.numel());
    EXPECT_GT(cos_all, 0.99);
    EXPECT_NEAR(ratio_all, 1.0, 0.05);
    int64_t heads = 0;
    for (const auto& p : c.drafter.params().params()) {
        if (!p.name.starts_with("markov_head.") && !p.name.starts_with("confidence_head."))
            continue;
        ++heads;
        const int64_t off = p.offset, n = p.shape.numel();
        // The biases (a handful of sums each, which may nearly cancel) are left to the ops'
        // own CUDA-vs-CPU tests (confidence_bce, sigmoid_mul_bwd) and the whole-gradient check.
        if (n < 64) continue;
        const auto [cs, ratio] = cosine_and_ratio(a.grads, b.grads, off, n);
        EXPECT_GT(cs, 0.98) << p.name;
        EXPECT_NEAR(ratio, 1.0, 0.1) << p.name;
    }
    const Heads h = GetParam();
    EXPECT_EQ(heads, 2 + (h.markov == MarkovHeadType::vanilla ? 0 : 2) + (h.confidence ? 2 : 0));
}

INSTANTIATE_TEST_SUITE_P(Heads, CudaDspark,
                         ::testing::Values(Heads{MarkovHeadType::vanilla, true, true, 8},
                                           Heads{MarkovHeadType::gated, true, true, 12},
                                           Heads{MarkovHeadType::gated, true, false, 8},
                                           Heads{MarkovHeadType::vanilla, false, false, 16},
                                           Heads{MarkovHeadType::rnn, true, true, 8}),
                         [](const ::testing::TestParamInfo<Heads>& i) { return name_of(i.param); });

// `dflash train` with drafter.architecture=dspark on CUDA and on the CPU from the same start.
class CudaDsparkTraining : public test::SharedInputsTest<CudaDsparkTraining> {
  public:
    static constexpr const char* kTag = "cuda-dspark-train";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 64, 3);
        const auto tok = make_byte_tokenizer();
        TargetConfig c = test::gpu_target_config(tok->vocab_size(), 5);
        c.bos_token_id = tok->specials().bos;
        c.eos_token_id = tok->specials().eos;
        c.max_position_embeddings = 512;
        TargetModel::random(test::host_backend(), c, 7, 0.2f).save(dir / "target");
        save_tokenizer_spec(dir / "target", *tok);
    }
};

TEST_F(CudaDsparkTraining, MicroBatchesAreRecordedAndTrackTheCpu) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::map<std::string, std::vector<double>> losses;
    std::optional<GraphStats> last;
    for (const std::string backend : {"cpu", "cuda"}) {
        auto j = test::drafter_job(dir_->path(), "dspark-" + backend);
        j.hooks.on_record = [&](const train::StepRecord& r) {
            if (r.eval) return;
            losses[backend].push_back(r.loss);
            if (backend == "cuda") last = r.graphs;
        };
        const auto s = test::drafter_settings({{"runtime.backend", backend},
                                               {"drafter.architecture", "dspark"},
                                               {"drafter.markov_rank", "8"},
                                               {"drafter.markov_head_type", "gated"},
                                               {"train.max_steps", "10"},
                                               {"train.batch_size", "2"}});
        train_drafter_from_settings(j, s, Logger());
    }
    ASSERT_EQ(losses["cpu"].size(), 10u);
    ASSERT_EQ(losses["cuda"].size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
        EXPECT_GT(losses["cpu"][i], 0.0);
        // As the KL run of model_cuda_test: the L1 term is a difference of distributions.
        const double tol = 0.05 * losses["cpu"][i] + 0.01 + 0.002 * static_cast<double>(i);
        EXPECT_NEAR(losses["cuda"][i], losses["cpu"][i], tol) << "step " << i + 1;
    }
    ASSERT_TRUE(last.has_value());
    EXPECT_GT(last->captures, 0) << last->summary();
    EXPECT_GT(last->replays, 0) << last->summary();
    EXPECT_EQ(fallbacks(*last), 0) << last->summary();
}

}  // namespace
}  // namespace dflash
