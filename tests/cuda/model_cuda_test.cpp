// The models, the trainer and the decoding engine on the CUDA backend (issue: one engine on any
// device): a drafter loss and its gradients against the CPU (also with KL distillation and with
// separate packed documents); a training step is bitwise reproducible; 20 steps of `dflash train`
// (10 with train.loss=kl and train.documents=separate) track the CPU run's losses within bf16
// tolerance; greedy speculative decoding on CUDA equals greedy plain decoding on CUDA token for
// token, and the sampled path follows the target's distribution; a drafter trained on CUDA loads
// on the CPU and decodes losslessly there. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "backend/backend_factory.h"
#include "backend/workspace.h"
#include "data/anchors.h"
#include "infer/spec_decode.h"
#include "model/drafter.h"
#include "model/target.h"
#include "support/spec_decode_checks.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "train/checkpoint.h"
#include "train/drafter_training.h"
#include "train/optimizer.h"
#include "train/train_fixtures.h"

namespace dflash {
namespace {

#define REQUIRE_GPU()                                                   \
    do {                                                                \
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

using test::gpu_target_config;

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

Pair make_pair(Backend& be, uint64_t seed, int64_t block, int64_t vocab) {
    const TargetConfig tc = gpu_target_config(vocab);
    TargetModel t = TargetModel::random(be, tc, seed, 0.5f);
    DrafterModel d =
        DrafterModel::random(be, test::tiny_drafter_config(tc, 1, block), seed + 1, 0.5f);
    return {std::move(t), std::move(d)};
}

using test::random_tokens;

class CudaModels : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        gpu_ = make_backend(DeviceKind::cuda, 0, 1);
        cpu_ = make_cpu_backend(1);
    }
    std::unique_ptr<Backend> gpu_, cpu_;
};

// One drafter step (features from the target) on a backend; returns the loss and the gradients.
struct StepResult {
    double loss = 0;
    HostTensor grads;
};
// With doc_starts, the documents are separate (per-document target forward and context starts,
// train.documents=separate); kl: KL distillation from the target (train.loss=kl).
StepResult drafter_step(Backend& be, Pair& p, const std::vector<int32_t>& toks,
                        const std::vector<uint8_t>& mask, const std::vector<int32_t>& anchors,
                        LossKind loss = LossKind::ce, const std::vector<int32_t>& doc_starts = {}) {
    const int64_t S = static_cast<int64_t>(toks.size());
    DeviceTensor feats(be, {S, p.drafter.feature_dim()}, be.compute_dtype());
    DeviceTensor final_hidden(be, {S, p.target.dims().D}, be.compute_dtype());
    Workspace ws(be, WorkspacePlan{size_t{32} << 20, size_t{1} << 20, size_t{1} << 16});
    const auto& ids = p.drafter.config().target_layer_ids;
    const Tensor fh = loss == LossKind::kl ? final_hidden.view() : Tensor();
    if (doc_starts.empty()) {
        p.target.forward(be, ws, toks, ids, feats, fh);
    } else {
        p.target.forward_documents(be, ws, toks, doc_starts, ids, feats, fh);
    }
    ws.reset();
    p.drafter.params().zero_grads();
    const LossStatsLayout lay{p.drafter.block_size()};
    DeviceTensor stats(be, {lay.size()}, DType::f32);
    const std::vector<int32_t> ctx = anchor_document_starts(anchors, doc_starts);
    BlockObjective obj;
    obj.loss = loss;
    obj.teacher_hidden = fh;
    if (!doc_starts.empty()) obj.context_starts = ctx;
    p.drafter.train_step(be, ws, {feats, toks, mask, anchors},
                         {p.target.embed(), p.target.lm_head(), 4.0, 50}, {1.0f, stats}, obj);
    const HostTensor st = to_host_f32(be, stats);
    return {st.f32()[LossStatsLayout::kLossSum] / st.f32()[LossStatsLayout::kWeightSum],
            to_host_f32(be, p.drafter.params().flat_grads())};
}

// A CUDA step (b) against the CPU's (a): the loss within loss_rel, the gradient direction
// (cosine) within 1%, its magnitude within 5%.
void expect_step_matches(const StepResult& a, const StepResult& b, double loss_rel) {
    EXPECT_NEAR(b.loss, a.loss, loss_rel * a.loss);
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; i < a.grads.numel(); ++i) {
        dot += double(a.grads.f32()[i]) * b.grads.f32()[i];
        na += double(a.grads.f32()[i]) * a.grads.f32()[i];
        nb += double(b.grads.f32()[i]) * b.grads.f32()[i];
    }
    EXPECT_GT(dot / std::sqrt(na * nb), 0.99);
    EXPECT_NEAR(std::sqrt(nb), std::sqrt(na), 0.05 * std::sqrt(na));
}

// bf16 weights and activations against the f32 reference: the loss within 2%, the gradient
// direction (cosine) within 1%, magnitudes within 5%.
TEST_F(CudaModels, DrafterLossAndGradientsMatchTheCpu) {
    Pair c = make_pair(*cpu_, 21, 8, 150);
    Pair g = make_pair(*gpu_, 21, 8, 150);
    // The same bf16-representable weights on both.
    c.target.params().copy_from(g.target.params());
    c.drafter.params().copy_from(g.drafter.params());
    c.drafter.params().enable_training();
    g.drafter.params().enable_training();
    const auto toks = random_tokens(97, 150, 3);
    std::vector<uint8_t> mask(toks.size(), 1);
    mask[0] = mask[1] = 0;
    const std::vector<int32_t> anchors = {2, 9, 30, 31, 60, 88, 95};
    const StepResult a = drafter_step(*cpu_, c, toks, mask, anchors);
    const StepResult b = drafter_step(*gpu_, g, toks, mask, anchors);
    expect_step_matches(a, b, 0.02);
}

// The same with the other objectives: KL distillation, and three packed documents kept apart
// (context starts in the CUDA attention, a target forward per document), alone and together.
TEST_F(CudaModels, DrafterKlAndSeparateDocumentsMatchTheCpu) {
    Pair c = make_pair(*cpu_, 23, 8, 150);
    Pair g = make_pair(*gpu_, 23, 8, 150);
    c.target.params().copy_from(g.target.params());
    c.drafter.params().copy_from(g.drafter.params());
    c.drafter.params().enable_training();
    g.drafter.params().enable_training();
    const auto toks = random_tokens(150, 150, 4);
    std::vector<uint8_t> mask(toks.size(), 1);
    mask[0] = mask[1] = mask[70] = 0;
    const std::vector<int32_t> docs = {0, 40, 111};
    // Blocks of 8 inside their documents; the first two documents' last blocks end at 39, 110.
    const std::vector<int32_t> anchors = {2, 9, 31, 41, 60, 100, 103, 112, 130, 142};
    for (const auto& [loss, starts] :
         {std::pair{LossKind::kl, std::vector<int32_t>{}}, std::pair{LossKind::ce, docs},
          std::pair{LossKind::kl, docs}}) {
        SCOPED_TRACE(std::string(loss_kind_name(loss)) + (starts.empty() ? "" : " separate"));
        const StepResult a = drafter_step(*cpu_, c, toks, mask, anchors, loss, starts);
        const StepResult b = drafter_step(*gpu_, g, toks, mask, anchors, loss, starts);
        EXPECT_GT(a.loss, 0.0);
        // KL is a difference of two cross-entropies: bf16 logits weigh more on it than on CE.
        expect_step_matches(a, b, loss == LossKind::kl ? 0.05 : 0.03);
    }
}

// Qwen2 (q/k/v biases, no q/k norm): the cached forward on CUDA gives the CPU's logits, biases
// included. Small weights keep the un-normed attention soft (at std 0.3 its scores reach ~70 and
// bf16 rounding flips near-ties, which says nothing about the biases); the biases are made large
// so that a CUDA path that dropped one could not pass.
TEST_F(CudaModels, Qwen2TargetMatchesTheCpu) {
    TargetConfig tc = gpu_target_config(150);
    tc.model_type = "qwen2";
    tc.qk_norm = false;
    TargetModel g = TargetModel::random(*gpu_, tc, 41, 0.05f);
    Rng rng(43);
    for (const Param& p : g.params().params()) {
        if (p.name.find("_proj.bias") == std::string::npos) continue;
        HostTensor b(p.shape, DType::f32);
        for (int64_t i = 0; i < b.numel(); ++i) b.f32()[i] = 0.5f * rng.normal();
        g.params().write_f32(p.name, b);
    }
    TargetModel c(*cpu_, tc), unbiased(*cpu_, tc);
    c.params().copy_from(g.params());
    unbiased.params().copy_from(g.params());
    for (const Param& p : unbiased.params().params())
        if (p.name.find("_proj.bias") != std::string::npos)
            cpu_->fill(unbiased.params().value(p.name), 0.0f);
    const auto toks = random_tokens(21, 150, 8);
    auto logits = [&](Backend& be, const TargetModel& m) {
        TargetSession s(m, be, 32, {}, 8);
        DeviceTensor l(be, {21, 150}, DType::f32);
        s.forward(toks, l, Tensor());
        return to_host_f32(be, l);
    };
    const HostTensor a = logits(*cpu_, c), b = logits(*gpu_, g);
    EXPECT_LT(test::max_rel_diff(b, a), 3e-2);
    EXPECT_GT(test::max_rel_diff(logits(*cpu_, unbiased), a), 0.2);
}

// What lossless greedy decoding on the GPU rests on (row invariance: backend/cuda/gemm.h,
// kernels/attention_tiles.h): a position's logits have the same bits whether the target feeds
// it alone (a decode step) or in a 16-token block (a verify step). Without it, a verify could
// pick another token than plain decoding wherever two logits nearly tie (the demo's pair did, on
// 3 of 16 prompts).
TEST_F(CudaModels, VerifyRowsEqualDecodeStepsBitForBit) {
    TargetConfig tc = gpu_target_config(512, 4);
    tc.hidden_size = 256;
    tc.intermediate_size = 768;
    tc.num_attention_heads = 4;
    tc.num_key_value_heads = 2;
    const TargetModel g = TargetModel::random(*gpu_, tc, 51, 0.5f);
    const auto prompt = random_tokens(300, 512, 9), block = random_tokens(16, 512, 10);
    TargetSession one(g, *gpu_, 400, {}, 64), all(g, *gpu_, 400, {}, 64);
    const DeviceTensor l1(*gpu_, {1, 512}, DType::f32), l16(*gpu_, {16, 512}, DType::f32);
    one.forward(prompt, l1, Tensor());
    all.forward(prompt, l1, Tensor());
    all.forward(block, l16, Tensor());
    const HostTensor verify = to_host_f32(*gpu_, l16);
    for (size_t i = 0; i < block.size(); ++i) {
        one.forward(std::span<const int32_t>(&block[i], 1), l1, Tensor());
        const HostTensor decode = to_host_f32(*gpu_, l1);
        ASSERT_EQ(std::memcmp(decode.f32(), verify.f32() + i * 512, decode.nbytes()), 0)
            << "position " << prompt.size() + i;
    }
}

// No floating-point atomics in training kernels: the same step twice gives the same bits.
TEST_F(CudaModels, TrainingStepIsBitwiseReproducible) {
    Pair g = make_pair(*gpu_, 31, 8, 150);
    g.drafter.params().enable_training();
    const auto toks = random_tokens(200, 150, 4);
    const std::vector<uint8_t> mask(toks.size(), 1);
    std::vector<int32_t> anchors;
    for (int32_t a = 3; a < 190; a += 11) anchors.push_back(a);
    const StepResult a = drafter_step(*gpu_, g, toks, mask, anchors);
    const StepResult b = drafter_step(*gpu_, g, toks, mask, anchors);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(std::memcmp(a.grads.f32(), b.grads.f32(), a.grads.nbytes()), 0);
}

// support/spec_decode_checks.h: greedy speculative output = plain greedy output on CUDA.
using test::expect_greedy_lossless;

TEST_F(CudaModels, GreedySpeculativeEqualsPlainDecoding) {
    // A 5-token vocabulary makes partial acceptance common.
    Pair p = make_pair(*gpu_, 9, 6, 5);
    std::vector<int64_t> hist(7, 0);
    expect_greedy_lossless(p.target, p.drafter, *gpu_, 24, hist);
    int64_t partial = 0;
    for (int k = 2; k < 6; ++k) partial += hist[k];
    EXPECT_GT(partial, 0);
    // Zero final norms: every logit 0, so every draft is accepted.
    Pair q = make_pair(*gpu_, 8, 5, 37);
    gpu_->fill(q.target.params().value("model.norm.weight"), 0.0f);
    gpu_->fill(q.drafter.params().value("norm.weight"), 0.0f);
    std::vector<int64_t> all(6, 0);
    expect_greedy_lossless(q.target, q.drafter, *gpu_, 6, all);
    for (int k = 1; k < 5; ++k) EXPECT_EQ(all[k], 0) << k;
    EXPECT_GT(all[5], 0);
}

// Exact distribution of the first 2 generated tokens at temperature 1.3 under the target.
std::vector<double> exact_two(const TargetModel& t, Backend& be, const std::vector<int32_t>& prompt,
                              const SampleParams& sp) {
    const int64_t V = t.config().vocab_size;
    auto probs_after = [&](const std::vector<int32_t>& seq) {
        TargetSession s(t, be, 32, {}, 8);
        DeviceTensor l(be, {1, V}, DType::f32);
        s.forward(seq, l, Tensor());
        const HostTensor h = to_host_f32(be, l);
        return sampling_probs(std::span(h.f32(), static_cast<size_t>(V)), sp);
    };
    std::vector<double> out(V * V);
    const auto p1 = probs_after(prompt);
    for (int64_t a = 0; a < V; ++a) {
        auto s1 = prompt;
        s1.push_back(static_cast<int32_t>(a));
        const auto p2 = probs_after(s1);
        for (int64_t b = 0; b < V; ++b) out[a * V + b] = p1[a] * p2[b];
    }
    return out;
}

TEST_F(CudaModels, SampledTokensFollowTheTargetDistribution) {
    Pair p = make_pair(*gpu_, 12, 4, 5);
    SpeculativeEngine spec(p.target, &p.drafter, *gpu_);
    const std::vector<int32_t> prompt = {1, 3, 2};
    for (bool draft_sampling : {false, true}) {
        GenerateOptions o;
        o.max_new_tokens = 2;
        o.sampling.temperature = 1.3f;
        o.draft_sampling = draft_sampling;
        const auto exact = exact_two(p.target, *gpu_, prompt, o.sampling);
        const int64_t n = 4000;
        std::vector<int64_t> counts(exact.size(), 0);
        for (int64_t i = 0; i < n; ++i) {
            o.seed = 5000 + i;
            const auto r = spec.generate(prompt, o);
            ASSERT_EQ(r.tokens.size(), 2u);
            counts[r.tokens[0] * 5 + r.tokens[1]] += 1;
        }
        const test::ChiSquare c = test::chi_square(exact, counts, n);
        std::printf("dense on CUDA, %s drafts: chi-square %.1f over %d cells (critical %.1f)\n",
                    draft_sampling ? "sampled" : "greedy", c.statistic, c.cells, c.critical);
        EXPECT_LT(c.statistic, c.critical)
            << (draft_sampling ? "sampled" : "greedy") << " drafts, " << c.cells << " cells";
    }
}

// `dflash train` on CUDA and on the CPU from the same start: per-step losses agree within bf16
// tolerance for 20 steps; the CUDA-trained drafter then loads on the CPU and decodes losslessly.
class CudaTraining : public test::SharedInputsTest<CudaTraining> {
  public:
    static constexpr const char* kTag = "cuda-train";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 64, 3);
        const auto tok = make_byte_tokenizer();
        TargetConfig c = gpu_target_config(tok->vocab_size(), 5);
        c.bos_token_id = tok->specials().bos;
        c.eos_token_id = tok->specials().eos;
        c.max_position_embeddings = 512;
        TargetModel::random(test::host_backend(), c, 7, 0.2f).save(dir / "target");
        save_tokenizer_spec(dir / "target", *tok);
    }
};

TEST_F(CudaTraining, TwentyStepsTrackTheCpuAndTheResultDecodesOnTheCpu) {
    REQUIRE_GPU();
    std::map<std::string, std::vector<double>> losses;
    std::map<std::string, std::filesystem::path> model;
    for (const std::string backend : {"cpu", "cuda"}) {
        auto j = test::drafter_job(dir_->path(), "run-" + backend);
        j.hooks.on_record = [&](const train::StepRecord& r) {
            if (!r.eval) losses[backend].push_back(r.loss);
        };
        const auto s = test::drafter_settings({{"runtime.backend", backend},
                                               {"train.max_steps", "20"},
                                               {"train.batch_size", "2"},
                                               {"train.grad_clip", "1.0"}});
        model[backend] = train_drafter_from_settings(j, s, Logger()).model_dir;
    }
    ASSERT_EQ(losses["cpu"].size(), 20u);
    ASSERT_EQ(losses["cuda"].size(), 20u);
    for (size_t i = 0; i < 20; ++i) {
        // bf16 storage: a few ulp of 2^-8 per op, growing slowly over the steps.
        const double tol = 0.03 * losses["cpu"][i] + 0.002 * static_cast<double>(i);
        EXPECT_NEAR(losses["cuda"][i], losses["cpu"][i], tol) << "step " << i + 1;
    }
    // The CUDA-trained drafter on the CPU: loads, and speculative greedy == plain greedy there.
    auto cpu = make_cpu_backend(1);
    const TargetModel target = TargetModel::load(*cpu, dir_->path() / "target");
    const DrafterModel drafter = DrafterModel::load(*cpu, model["cuda"]);
    std::vector<int64_t> hist(drafter.block_size() + 1, 0);
    expect_greedy_lossless(target, drafter, *cpu, 8, hist);
}

// train.loss=kl with train.documents=separate on CUDA and on the CPU from the same start: the
// per-step KL losses agree within bf16 tolerance for 10 steps.
TEST_F(CudaTraining, KlWithSeparateDocumentsTracksTheCpu) {
    REQUIRE_GPU();
    std::map<std::string, std::vector<double>> losses;
    for (const std::string backend : {"cpu", "cuda"}) {
        auto j = test::drafter_job(dir_->path(), "kl-" + backend);
        j.hooks.on_record = [&](const train::StepRecord& r) {
            if (!r.eval) losses[backend].push_back(r.loss);
        };
        const auto s = test::drafter_settings({{"runtime.backend", backend},
                                               {"train.loss", "kl"},
                                               {"train.documents", "separate"},
                                               {"train.max_steps", "10"},
                                               {"train.batch_size", "2"}});
        train_drafter_from_settings(j, s, Logger());
    }
    ASSERT_EQ(losses["cpu"].size(), 10u);
    ASSERT_EQ(losses["cuda"].size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
        EXPECT_GT(losses["cpu"][i], 0.0);
        // As above, with room for KL's larger relative bf16 error (a difference of two CEs).
        const double tol = 0.05 * losses["cpu"][i] + 0.01 + 0.002 * static_cast<double>(i);
        EXPECT_NEAR(losses["cuda"][i], losses["cpu"][i], tol) << "step " << i + 1;
    }
}

}  // namespace
}  // namespace dflash
