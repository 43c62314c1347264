// The CUDA graph cache (backend/cuda/graph_cache.h) through Backend::run_step: replayed decode,
// verify, draft and training steps (forward, backward, AdamW, with a learning rate and gradient
// scale that change every step) give the bits of eager ones (and cuda_graphs.enabled=false gives
// those too); 32 fresh std::threads, each with no CUDA call before, capture and replay decoding
// and training steps at the same time with no failure; a sibling thread allocating and copying on
// the same GPU does not break captures; a capture that fails (a synchronisation inside the step)
// runs the step eagerly, is retried up to the re-record limit, is told once, and leaves the device
// usable for the next capture. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/workspace.h"
#include "infer/spec_decode.h"
#include "model/drafter.h"
#include "model/target.h"
#include "support/tiny_models.h"
#include "train/optimizer.h"

namespace dflash {
namespace {

class CudaGraphs : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

GraphOptions graphs(bool enabled, int warmup = 1) {
    GraphOptions g;
    g.enabled = enabled;
    g.warmup_runs = warmup;
    return g;
}

int64_t fallbacks(const GraphStats& s) {
    int64_t n = 0;
    for (const auto& [reason, count] : s.fallback_reasons) n += count;
    return n;
}

using test::random_tokens;

constexpr int64_t kVocab = 300;

// Called around the steps of a case: after its memory is allocated and before it is freed.
// cudaFree synchronises the whole device, which breaks every capture open on it in any mode
// (docs/performance.md), so threads sharing one GPU allocate and free outside each other's steps.
struct Around {
    std::function<void()> before_steps = [] {};
    std::function<void()> after_steps = [] {};
};

// The logits of a prompt, 12 single-token decode steps and a 16-token verify run twice (cropped
// back in between), all rows one after another.
std::vector<float> decode_logits(Backend& be, const TargetModel& m, const Around& around = {}) {
    TargetSession s(m, be, 256, {}, 64);
    const DeviceTensor l1(be, {1, kVocab}, DType::f32), l16(be, {16, kVocab}, DType::f32);
    around.before_steps();
    std::vector<float> out;
    auto keep = [&](const DeviceTensor& t) {
        const HostTensor h = to_host_f32(be, t);
        out.insert(out.end(), h.f32(), h.f32() + h.numel());
    };
    s.forward(random_tokens(40, kVocab, 1), l1, Tensor());
    keep(l1);
    const auto steps = random_tokens(12, kVocab, 2);
    for (const int32_t& t : steps) {
        s.forward(std::span(&t, 1), l1, Tensor());
        keep(l1);
    }
    const auto block = random_tokens(16, kVocab, 3);
    for (int rep = 0; rep < 3; ++rep) {
        s.forward(block, l16, Tensor());
        keep(l16);
        s.crop(s.length() - 16 + rep);  // a different cache length each time
    }
    around.after_steps();
    return out;
}

TargetModel small_target(Backend& be) {
    return TargetModel::random(be, test::gpu_target_config(kVocab, 3), 17, 0.5f);
}

// Four training steps of a tiny drafter, each a recorded micro-batch (target features, drafter
// forward and backward) and a recorded update (norm, clip, AdamW), with a gradient scale and a
// learning rate that change every step: the f32 master weights after them, then every step's
// loss sum.
std::vector<float> train_steps(Backend& be, const Around& around = {}) {
    const TargetModel t = small_target(be);
    DrafterModel d =
        DrafterModel::random(be, test::tiny_drafter_config(t.config(), 1, 4), 19, 0.5f);
    d.params().enable_training();
    train::AdamW opt(d.params(), {});
    const auto toks = random_tokens(120, kVocab, 7);
    const std::vector<uint8_t> mask(toks.size(), 1);
    std::vector<int32_t> anchors;
    for (int32_t a = 2; a < 110; a += 9) anchors.push_back(a);
    const LossStatsLayout lay{d.block_size()};
    const DeviceTensor stats(be, {lay.size()}, DType::f32), norm(be, {1}, DType::f32),
        clip(be, {1}, DType::f32);
    const DeviceTensor features(be, {120, d.feature_dim()}, be.compute_dtype());
    Workspace ws(be, WorkspacePlan{size_t{32} << 20, size_t{1} << 20, size_t{1} << 16});
    const StepOwner owner(be);
    std::vector<float> losses;
    around.before_steps();
    for (int s = 0; s < 4; ++s) {
        d.params().zero_grads();
        be.fill(stats, 0.0f);
        ws.reset();
        ws.settle_inputs();
        const float grad_scale = 1.0f / static_cast<float>(s + 3);
        be.run_step(StepKey{owner.id(), "microbatch", {}}, [&] {
            const Workspace::Mark m = ws.mark();
            t.forward(be, ws, toks, d.config().target_layer_ids, features, Tensor());
            ws.release_scratch(m);
            d.train_step(be, ws, {features, toks, mask, anchors}, {t.embed(), t.lm_head(), 4.0, 50},
                         {grad_scale, stats});
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
    around.after_steps();
    std::vector<float> out(master.f32(), master.f32() + master.numel());
    out.insert(out.end(), losses.begin(), losses.end());
    return out;
}

TEST_F(CudaGraphs, ReplayedTrainingStepsEqualEagerOnesBitForBit) {
    const auto on = make_backend(DeviceKind::cuda, 0, 1, graphs(true));
    const auto off = make_backend(DeviceKind::cuda, 0, 1, graphs(false));
    const std::vector<float> replayed = train_steps(*on), eager = train_steps(*off);
    ASSERT_EQ(replayed.size(), eager.size());
    EXPECT_EQ(std::memcmp(replayed.data(), eager.data(), eager.size() * sizeof(float)), 0);
    const GraphStats s = on->graph_stats();
    EXPECT_EQ(s.captures, 2) << s.summary();  // the micro-batch and the update
    EXPECT_EQ(s.replays, 2 * 3) << s.summary();
    EXPECT_EQ(fallbacks(s), 0) << s.summary();
}

TEST_F(CudaGraphs, ReplayedDecodeAndVerifyStepsEqualEagerOnesBitForBit) {
    const auto on = make_backend(DeviceKind::cuda, 0, 1, graphs(true));
    const auto off = make_backend(DeviceKind::cuda, 0, 1, graphs(false));
    const std::vector<float> replayed = decode_logits(*on, small_target(*on));
    const std::vector<float> eager = decode_logits(*off, small_target(*off));
    ASSERT_EQ(replayed.size(), eager.size());
    EXPECT_EQ(std::memcmp(replayed.data(), eager.data(), eager.size() * sizeof(float)), 0);
    const GraphStats s = on->graph_stats(), e = off->graph_stats();
    EXPECT_TRUE(s.enabled);
    EXPECT_GE(s.captures, 2) << s.summary();  // the decode step and the verify step
    EXPECT_GE(s.replays, 10 + 1) << s.summary();
    EXPECT_EQ(fallbacks(s), 0) << s.summary();
    EXPECT_FALSE(e.enabled);
    EXPECT_EQ(e.captures + e.replays, 0) << e.summary();
    EXPECT_GT(e.eager_runs, 0);
}

TEST_F(CudaGraphs, SpeculativeDecodingReplaysItsStepsAndKeepsItsTokens) {
    std::vector<std::vector<int32_t>> results[2];
    GraphStats stats[2];
    for (int enabled = 0; enabled < 2; ++enabled) {
        const auto be = make_backend(DeviceKind::cuda, 0, 1, graphs(enabled != 0));
        const TargetModel t = small_target(*be);
        const DrafterModel d =
            DrafterModel::random(*be, test::tiny_drafter_config(t.config(), 1, 8), 18, 0.5f);
        SpeculativeEngine spec(t, &d, *be), plain(t, nullptr, *be);
        GenerateOptions o;
        o.max_new_tokens = 48;
        for (uint64_t p = 0; p < 3; ++p) {
            const auto prompt = random_tokens(20 + 7 * static_cast<int64_t>(p), kVocab, 30 + p);
            const GenerateResult a = spec.generate(prompt, o), b = plain.generate(prompt, o);
            EXPECT_EQ(a.tokens, b.tokens) << "prompt " << p << " graphs " << enabled;
            results[enabled].push_back(a.tokens);
        }
        stats[enabled] = be->graph_stats();
    }
    EXPECT_EQ(results[0], results[1]);
    EXPECT_GT(stats[1].replays, 0) << stats[1].summary();
    EXPECT_EQ(fallbacks(stats[1]), 0) << stats[1].summary();
    EXPECT_EQ(stats[0].replays, 0);
}

TEST_F(CudaGraphs, ThirtyTwoFreshThreadsCaptureAndReplayAtOnce) {
    std::vector<float> reference, trained;
    {
        const auto be = make_backend(DeviceKind::cuda, 0, 1, graphs(false));
        reference = decode_logits(*be, small_target(*be));
        trained = train_steps(*be);
    }
    constexpr int kThreads = 32;
    std::atomic<int> failures{0};
    std::atomic<bool> abort{false};
    // Four meeting points: before and after the decode steps, then the training steps.
    std::atomic<int> met[4] = {0, 0, 0, 0};
    auto meet = [&](int k) {
        ++met[k];
        while (met[k].load() < kThreads && !abort.load()) std::this_thread::yield();
    };
    std::atomic<int64_t> captures{0}, replays{0};
    std::mutex m;
    std::string first_failure;
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, i] {
            try {
                // No CUDA call on this thread before the backend is made.
                const auto be = make_backend(DeviceKind::cuda, 0, 1, graphs(true));
                const TargetModel t = small_target(*be);
                // All 32 capture at once; nobody frees memory meanwhile.
                const std::vector<float> got =
                    decode_logits(*be, t, {[&] { meet(0); }, [&] { meet(1); }});
                const std::vector<float> weights =
                    train_steps(*be, {[&] { meet(2); }, [&] { meet(3); }});
                const GraphStats s = be->graph_stats();
                captures += s.captures;
                replays += s.replays;
                const char* what = got != reference     ? ": logits differ; "
                                   : weights != trained ? ": trained weights differ; "
                                                        : ": ";
                if (got != reference || weights != trained || fallbacks(s) > 0 || s.rerecords > 0 ||
                    s.captures < 4)
                    throw std::runtime_error("thread " + std::to_string(i) + what + s.summary());
            } catch (const std::exception& e) {
                abort = true;
                ++failures;
                const std::lock_guard lock(m);
                if (first_failure.empty()) first_failure = e.what();
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0) << first_failure;
    EXPECT_GE(captures.load(), 4 * kThreads);
    EXPECT_GE(replays.load(), 17 * kThreads);
}

// A step of a few ops on tensors made beforehand: out = a · bᵀ + out0, on the device.
struct SmallStep {
    explicit SmallStep(Backend& be)
        : a(be, {24, 64}, DType::bf16),
          b(be, {40, 64}, DType::bf16),
          out(be, {24, 40}, DType::f32) {
        Rng rng(5);
        HostTensor ha({24, 64}), hb({40, 64});
        for (int64_t i = 0; i < ha.numel(); ++i) ha.f32()[i] = rng.uniform() * 2 - 1;
        for (int64_t i = 0; i < hb.numel(); ++i) hb.f32()[i] = rng.uniform() * 2 - 1;
        DeviceTensor fa(be, {24, 64}, DType::f32), fb(be, {40, 64}, DType::f32);
        be.upload(fa, ha);
        be.upload(fb, hb);
        be.copy(a, fa);
        be.copy(b, fb);
    }
    void record(Backend& be) const {
        be.fill(out, 0.5f);
        be.gemm(a, false, b, true, out, 1.0f, 1.0f);
    }
    DeviceTensor a, b, out;
};

TEST_F(CudaGraphs, ASiblingThreadAllocatingAndCopyingDoesNotBreakCaptures) {
    const auto be = make_backend(DeviceKind::cuda, 0, 1, graphs(true, 0));
    const SmallStep step(*be);
    step.record(*be);
    const HostTensor want = to_host_f32(*be, step.out);
    std::atomic<bool> stop{false};
    std::atomic<int64_t> sibling_ops{0};
    std::thread sibling([&] {
        const auto other = make_backend(DeviceKind::cuda, 0, 1, graphs(false));
        std::vector<Buffer> kept;  // freed at the end: cudaFree may synchronise the device
        HostTensor host({1 << 16});
        while (!stop.load() && kept.size() < 2000) {
            kept.push_back(other->allocate(host.nbytes()));
            const Tensor t(kept.back().data(), DType::f32, {1 << 16}, other->device());
            other->upload(t, host);
            other->download(host, t);
            ++sibling_ops;
        }
    });
    const StepOwner owner(*be);
    for (int64_t i = 0; i < 300; ++i) {
        // A new key each time: every call is a capture.
        be->run_step(StepKey{owner.id(), "small", {i}}, [&] { step.record(*be); });
        const HostTensor got = to_host_f32(*be, step.out);
        ASSERT_EQ(std::memcmp(got.f32(), want.f32(), want.nbytes()), 0) << "step " << i;
    }
    stop = true;
    sibling.join();
    const GraphStats s = be->graph_stats();
    EXPECT_GT(sibling_ops.load(), 0);
    EXPECT_EQ(s.captures, 300) << s.summary();
    EXPECT_EQ(s.rerecords + fallbacks(s), 0) << s.summary();
}

TEST_F(CudaGraphs, OneOffKeysDoNotPileUp) {
    const auto be = make_backend(DeviceKind::cuda, 0, 1, graphs(true, 2));
    const SmallStep step(*be);
    const StepOwner owner(*be);
    // A recurring step among 20000 keys seen once each (like a prompt's prefill piece).
    for (int64_t i = 0; i < 20000; ++i) {
        be->run_step(StepKey{owner.id(), "one-off", {i}}, [&] { step.record(*be); });
        if (i % 100 == 0)
            be->run_step(StepKey{owner.id(), "recurring", {}}, [&] { step.record(*be); });
    }
    const GraphStats s = be->graph_stats();
    EXPECT_LE(s.tracked_keys, 4096) << s.summary();
    EXPECT_EQ(s.captures, 1) << s.summary();       // the recurring step: never forgotten
    EXPECT_EQ(s.replays, 200 - 2) << s.summary();  // two warm-up runs, then its graph
}

TEST_F(CudaGraphs, AFailedCaptureRunsEagerlyIsRetriedToTheLimitAndLeavesTheDeviceUsable) {
    GraphOptions g = graphs(true, 0);
    g.max_rerecords = 2;
    std::vector<std::string> warnings;
    g.warn = [&](const std::string& w) { warnings.push_back(w); };
    const auto be = make_backend(DeviceKind::cuda, 0, 1, g);
    const DeviceTensor count(*be, {4}, DType::f32), one(*be, {4}, DType::f32);
    be->fill(one, 1.0f);
    const StepOwner owner(*be);
    // Synchronising inside a step is not allowed while capturing: every capture of it fails.
    auto bad = [&] {
        be->add_inplace(count, one);
        be->synchronize();
    };
    for (int i = 0; i < 6; ++i) be->run_step(StepKey{owner.id(), "sync-inside", {}}, bad);
    // Each call did its work exactly once: the failed captures ran nothing.
    EXPECT_EQ(to_host_f32(*be, count).f32()[3], 6.0f);
    GraphStats s = be->graph_stats();
    EXPECT_EQ(s.captures, 0);
    EXPECT_EQ(s.rerecords, 2) << s.summary();
    EXPECT_EQ(fallbacks(s), 1) << s.summary();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("sync-inside"), std::string::npos) << warnings[0];
    // The device and the cache still work: another step captures and replays.
    const SmallStep step(*be);
    step.record(*be);
    const HostTensor want = to_host_f32(*be, step.out);
    for (int i = 0; i < 3; ++i) {
        be->fill(step.out, 9.0f);
        be->run_step(StepKey{owner.id(), "good", {}}, [&] { step.record(*be); });
        const HostTensor got = to_host_f32(*be, step.out);
        ASSERT_EQ(std::memcmp(got.f32(), want.f32(), want.nbytes()), 0) << i;
    }
    s = be->graph_stats();
    EXPECT_EQ(s.captures, 1) << s.summary();
    EXPECT_EQ(s.replays, 3) << s.summary();
}

}  // namespace
}  // namespace dflash
