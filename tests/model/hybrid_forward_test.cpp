// The hybrid linear-attention targets' cached session against their full forward, on the CPU:
// prefill then 1-token steps and prefill then 16-token blocks give the full forward's logits and
// features (Gated DeltaNet states carried across pieces, KV caches only on the full-attention
// layers); a verify block of 16 rolled back to a in {0, 1, 2, 8, 15, 16} accepted tokens
// (checkpoint + replay, docs/engine.md) and continued equals a fresh prefill of the kept tokens;
// a crop before the checkpoint is refused; crop(0) starts over.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/target.h"
#include "model/tiny_hybrid_models.h"
#include "support/test_util.h"

namespace dflash {
namespace {

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, Rng& rng) {
    std::vector<int32_t> t(n);
    for (auto& v : t) v = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
    return t;
}

std::vector<TargetConfig> configs() {
    return {test::tiny_qwen3_5_config(), test::tiny_qwen3_next_config(),
            test::tiny_qwen3_5_moe_config()};
}

// Logits of every position of one full forward, and the captured features.
struct Full {
    HostTensor logits, features;
};
Full full_forward(Backend& be, const TargetModel& m, const std::vector<int32_t>& toks,
                  const std::vector<int64_t>& capture) {
    const int64_t S = static_cast<int64_t>(toks.size()), D = m.dims().D;
    const int64_t V = m.config().vocab_size, K = static_cast<int64_t>(capture.size());
    Workspace ws = test::test_workspace(be);
    Full f{HostTensor({S, V}), HostTensor({S, K * D})};
    HostTensor fin({S, D});
    m.forward(be, ws, toks, capture, f.features, fin);
    be.gemm(fin, false, m.lm_head(), true, f.logits);
    return f;
}

// The largest |a - b| over rows [r0, r1) of b, relative to the largest |b| there.
double rows_diff(const float* a, const HostTensor& b, int64_t r0, int64_t r1) {
    const int64_t w = b.numel() / b.dim(0);
    double worst = 0, scale = 1e-6;
    for (int64_t i = r0 * w; i < r1 * w; ++i) scale = std::max(scale, std::abs(double(b.f32()[i])));
    for (int64_t i = r0 * w; i < r1 * w; ++i)
        worst = std::max(worst, std::abs(double(a[i - r0 * w]) - b.f32()[i]));
    return worst / scale;
}

// f32 throughout; the session runs the recurrence token by token, the full forward chunked (the
// two round differently: up to 2.6e-5 on these seeds' random weights).
constexpr double kTol = 4e-5;

TEST(HybridSession, StepsAndBlocksGiveTheFullForward) {
    auto be = make_cpu_backend(2);
    Rng rng(3);
    for (const TargetConfig& c : configs()) {
        const TargetModel m = TargetModel::random(*be, c, 11, 0.2f);
        const int64_t V = c.vocab_size, D = c.hidden_size, S = 90, P = 21;
        const std::vector<int64_t> capture = {0, 1, 2};
        const auto toks = random_tokens(S, V, rng);
        const Full full = full_forward(*be, m, toks, capture);
        for (const int64_t step : {int64_t{1}, int64_t{16}}) {
            TargetSession s(m, *be, S, capture, 32);
            HostTensor lg({P, V}), ft({P, 3 * D});
            s.forward(std::span(toks).subspan(0, P), lg, ft);
            EXPECT_LT(rows_diff(lg.f32(), full.logits, 0, P), kTol) << c.model_type;
            EXPECT_LT(rows_diff(ft.f32(), full.features, 0, P), kTol) << c.model_type;
            for (int64_t t = P; t < S; t += step) {
                const int64_t n = std::min(step, S - t);
                HostTensor l({n, V}), f({n, 3 * D});
                s.forward(std::span(toks).subspan(t, n), l, f);
                ASSERT_LT(rows_diff(l.f32(), full.logits, t, t + n), kTol)
                    << c.model_type << " step " << step << " at " << t;
                ASSERT_LT(rows_diff(f.f32(), full.features, t, t + n), kTol)
                    << c.model_type << " step " << step << " at " << t;
            }
            EXPECT_EQ(s.length(), S);
        }
    }
}

TEST(HybridSession, VerifyBlockRolledBackEqualsAFreshPrefill) {
    auto be = make_cpu_backend(2);
    Rng rng(5);
    for (const TargetConfig& c : configs()) {
        const TargetModel m = TargetModel::random(*be, c, 13, 0.2f);
        const int64_t V = c.vocab_size, P = 37, T = 16, C = 6;
        const auto prompt = random_tokens(P, V, rng);
        const auto block = random_tokens(T, V, rng);
        const auto cont = random_tokens(C, V, rng);
        TargetSession s(m, *be, P + T + C, {}, 64);
        for (const int64_t a : {0, 1, 2, 8, 15, 16}) {
            s.crop(0);
            HostTensor l1({1, V});
            s.forward(prompt, l1, Tensor());
            HostTensor lb({T, V});
            s.forward(block, lb, Tensor());
            EXPECT_EQ(s.checkpoint_length(), P);
            s.crop(P + a);
            HostTensor got({C, V});
            s.forward(cont, got, Tensor());
            // The same tokens fed fresh: prompt, the a accepted ones, then the continuation.
            std::vector<int32_t> kept(prompt);
            kept.insert(kept.end(), block.begin(), block.begin() + a);
            TargetSession fresh(m, *be, P + T + C, {}, 64);
            HostTensor last({1, V});
            fresh.forward(kept, last, Tensor());
            HostTensor want({C, V});
            fresh.forward(cont, want, Tensor());
            EXPECT_LT(rows_diff(got.f32(), want, 0, C), kTol) << c.model_type << " a=" << a;
            EXPECT_EQ(s.length(), P + a + C);
        }
        // Back past the checkpoint (the start of the last forward) is refused.
        const std::string msg = test::error_of([&] { s.crop(P); });
        EXPECT_TRUE(test::has(msg, "cannot roll a")) << msg;
    }
}

}  // namespace
}  // namespace dflash
