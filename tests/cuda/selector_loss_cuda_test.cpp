// CUDA selector loss family (selector_inject, selector_ce, selector_stats, selector_unary_bwd)
// against the CPU reference on the same values, awkward R, K, V and block sizes. inject: bit for
// bit (it only moves values). ce: f32 scores with tanh / exp of the device (loss and gradients to
// 1e-5 relative of the largest |ref|; picks equal on scores drawn far apart from each other).
// stats: counts exact, the loss sum to 1e-5. unary_bwd: the LM head in bf16 on both sides, sums
// in the same order (1e-5 of the largest |ref|).
#include <string>
#include <vector>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;

class CudaSelectorLoss : public test::CudaVsCpu {};

HostTensor random_ids(Shape s, int64_t lo, int64_t hi, Rng& rng) {
    HostTensor t(s, DType::i32);
    for (int64_t i = 0; i < t.numel(); ++i)
        t.i32()[i] = static_cast<int32_t>(lo + static_cast<int64_t>(rng.below(hi - lo)));
    return t;
}

HostTensor download_i32(Backend& gpu, const Tensor& t) {
    HostTensor h(t.shape(), DType::i32);
    gpu.download(h, t);
    return h;
}

TEST_F(CudaSelectorLoss, InjectMatchesCpuBitForBit) {
    Rng rng(1);
    struct Case {
        int64_t R, V, K;
    };
    for (const Case& c : {Case{1, 1, 1}, Case{37, 50, 5}, Case{9, 1000, 16}, Case{300, 257, 33}}) {
        const std::string what = "R " + std::to_string(c.R) + " V " + std::to_string(c.V);
        const HostTensor x = test::f32_values({c.R, c.V}, rng);
        HostTensor v({c.R, c.K}), ids({c.R, c.K}, DType::i32);
        cpu().topk_rows(x, v, ids);
        HostTensor labels = random_ids({c.R}, -1, c.V, rng);  // -1: not trained
        DeviceTensor gx = test::to_gpu(gpu(), x, DType::f32),
                     gv = test::to_gpu(gpu(), v, DType::f32);
        DeviceTensor gids = test::to_gpu_i32(gpu(), ids), glab = test::to_gpu_i32(gpu(), labels);
        DeviceTensor gpos(gpu(), {c.R}, DType::i32), ghit(gpu(), {c.R}, DType::i32);
        HostTensor pos({c.R}, DType::i32), hit({c.R}, DType::i32);
        cpu().selector_inject(x, labels, v, ids, pos, hit);
        gpu().selector_inject(gx, glab, gv, gids, gpos, ghit);
        EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gv), v), "") << what << ": values";
        EXPECT_EQ(test::bit_mismatch(download_i32(gpu(), gids), ids), "") << what << ": ids";
        EXPECT_EQ(test::bit_mismatch(download_i32(gpu(), gpos), pos), "") << what << ": label_pos";
        EXPECT_EQ(test::bit_mismatch(download_i32(gpu(), ghit), hit), "") << what << ": hit";
    }
}

TEST_F(CudaSelectorLoss, CeMatchesCpu) {
    Rng rng(2);
    struct Case {
        int64_t R, K;
        float m, cap;
    };
    for (const Case& c :
         {Case{1, 1, 1, 0}, Case{77, 16, 0.2f, 20}, Case{5, 7, 1, 0}, Case{1000, 33, 0.5f, 3}}) {
        const std::string what = "R " + std::to_string(c.R) + " K " + std::to_string(c.K);
        // Values spread far apart (scale 10) so that no two scores of a row tie within the
        // device's tanh / rounding differences: the picks must agree exactly.
        const HostTensor v = test::f32_values({c.R, c.K}, rng, 10.0f);
        const HostTensor pair = test::f32_values({c.R, 1, c.K}, rng);
        const HostTensor pos = random_ids({c.R}, -1, c.K, rng);
        HostTensor w({c.R}), gw({c.R});
        for (int64_t r = 0; r < c.R; ++r) {
            w.f32()[r] = r % 5 == 4 ? 0.0f : 0.25f + static_cast<float>(r % 3);
            gw.f32()[r] = 0.5f * w.f32()[r];
        }
        HostTensor loss({c.R}), pick({c.R}, DType::i32), dv({c.R, c.K}), dp({c.R, 1, c.K});
        SelectorCeArgs a{v, pair, pos, w, gw, c.m, c.cap, loss, pick, dv, dp};
        cpu().selector_ce(a);
        DeviceTensor gv = test::to_gpu(gpu(), v, DType::f32),
                     gp = test::to_gpu(gpu(), pair, DType::f32);
        DeviceTensor gpos = test::to_gpu_i32(gpu(), pos), gwt = test::to_gpu(gpu(), w, DType::f32),
                     ggw = test::to_gpu(gpu(), gw, DType::f32);
        DeviceTensor gl(gpu(), {c.R}, DType::f32), gpick(gpu(), {c.R}, DType::i32),
            gdv(gpu(), {c.R, c.K}, DType::f32), gdp(gpu(), {c.R, 1, c.K}, DType::f32);
        for (const Tensor& t : {gl.view(), gdv.view(), gdp.view()}) test::poison(gpu(), t);
        gpu().selector_ce({gv, gp, gpos, gwt, ggw, c.m, c.cap, gl, gpick, gdv, gdp});
        auto tol = [](const HostTensor& ref) {
            return test::Tol{1e-5, 1e-5, 1e-5 * std::max(1.0, test::max_abs(ref))};
        };
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), gl), loss, tol(loss)), "") << what << ": loss";
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdv), dv, tol(dv)), "") << what << ": dvalues";
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdp), dp, tol(dp)), "") << what << ": dpair";
        EXPECT_EQ(test::bit_mismatch(download_i32(gpu(), gpick), pick), "") << what << ": pick";
        // Without gradient weights: the loss alone.
        test::poison(gpu(), gl);
        gpu().selector_ce({gv, gp, gpos, gwt, Tensor(), c.m, c.cap, gl, gpick, Tensor(), Tensor()});
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), gl), loss, tol(loss)), "") << what << ": loss only";
    }
}

TEST_F(CudaSelectorLoss, StatsMatchCpu) {
    Rng rng(3);
    for (const int64_t block : {2, 3, 16, 17}) {
        for (const int64_t blocks : {1, 5, 600}) {
            const int64_t R = block * blocks, K = 4;
            const std::string what =
                "block " + std::to_string(block) + " x " + std::to_string(blocks);
            HostTensor loss = test::f32_values({R}, rng), w({R});
            HostTensor pos = random_ids({R}, 0, K, rng), hit = random_ids({R}, 0, 2, rng);
            HostTensor pick({R}, DType::i32);
            for (int64_t i = 0; i < R; ++i) {
                // Mostly right, so that paths run for a while; anchors and a few rows untrained.
                pick.i32()[i] =
                    rng.below(4) == 0 ? static_cast<int32_t>(rng.below(K)) : pos.i32()[i];
                hit.i32()[i] = rng.below(5) == 0 ? 0 : 1;
                w.f32()[i] = i % block == 0 || rng.below(9) == 0 ? 0.0f : 0.5f;
            }
            const SelectorStatsLayout lay{block};
            // Whole numbers before: counts added one by one (CPU) or at once (CUDA) stay exact.
            HostTensor ref({lay.size()});
            for (int64_t i = 0; i < ref.numel(); ++i) ref.f32()[i] = static_cast<float>(i % 7);
            DeviceTensor got = test::to_gpu(gpu(), ref, DType::f32);
            cpu().selector_stats(loss, pick, pos, hit, w, block, ref);
            // Named: the device buffers must outlive the (asynchronous) op.
            const DeviceTensor gl = test::to_gpu(gpu(), loss, DType::f32),
                               gpick = test::to_gpu_i32(gpu(), pick),
                               gpos = test::to_gpu_i32(gpu(), pos),
                               ghit = test::to_gpu_i32(gpu(), hit),
                               gw = test::to_gpu(gpu(), w, DType::f32);
            gpu().selector_stats(gl, gpick, gpos, ghit, gw, block, got);
            EXPECT_EQ(mismatch(test::to_cpu(gpu(), got), ref, {1e-6, 1e-5, 1e-5}), "") << what;
        }
    }
}

TEST_F(CudaSelectorLoss, UnaryBwdMatchesCpu) {
    Rng rng(4);
    struct Case {
        int64_t R, K, V, D;
    };
    for (const Case& c :
         {Case{1, 1, 1, 1}, Case{33, 16, 50, 96}, Case{7, 5, 3, 300}, Case{200, 16, 1000, 257}}) {
        const std::string what = "R " + std::to_string(c.R) + " D " + std::to_string(c.D);
        const HostTensor dv = test::f32_values({c.R, c.K}, rng);
        const HostTensor w = test::bf16_values({c.V, c.D}, rng);
        const HostTensor ids = random_ids({c.R, c.K}, 0, c.V, rng);
        HostTensor ref({c.R, c.D});
        cpu().selector_unary_bwd(dv, ids, w, ref);
        DeviceTensor got(gpu(), {c.R, c.D}, DType::f32);
        test::poison(gpu(), got);
        const DeviceTensor gdv = test::to_gpu(gpu(), dv, DType::f32),
                           gids = test::to_gpu_i32(gpu(), ids),
                           gw = test::to_gpu(gpu(), w, DType::bf16);
        gpu().selector_unary_bwd(gdv, gids, gw, got);
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), got), ref,
                           {1e-5, 1e-5, 1e-5 * std::max(1.0, test::max_abs(ref))}),
                  "")
            << what;
    }
}

TEST_F(CudaSelectorLoss, BadShapesAreErrors) {
    DeviceTensor dv(gpu(), {2, 3}, DType::f32), ids(gpu(), {2, 3}, DType::i32);
    DeviceTensor wb(gpu(), {5, 4}, DType::bf16), wf(gpu(), {5, 4}, DType::f32);
    DeviceTensor out(gpu(), {2, 4}, DType::f32), bad(gpu(), {2, 5}, DType::f32);
    gpu().fill(ids, 1.0f);
    EXPECT_NO_THROW(gpu().selector_unary_bwd(dv, ids, wb, out));
    EXPECT_THROW(gpu().selector_unary_bwd(dv, ids, wf, out), Error);
    EXPECT_THROW(gpu().selector_unary_bwd(dv, ids, wb, bad), Error);
    DeviceTensor stats(gpu(), {SelectorStatsLayout{2}.size()}, DType::f32);
    DeviceTensor rows(gpu(), {4}, DType::f32), irows(gpu(), {4}, DType::i32);
    EXPECT_NO_THROW(gpu().selector_stats(rows, irows, irows, irows, rows, 2, stats));
    EXPECT_THROW(gpu().selector_stats(rows, irows, irows, irows, rows, 4, stats), Error);
}

}  // namespace
}  // namespace dflash
