// CUDA selector pair scores (forward and backward) against the CPU reference on the same bf16
// values: awkward P x Kp x K x r, repeated ids (small V) so the codebook gradients accumulate at
// shared rows. Tolerances: scores f32 with a warp-tree sum instead of the CPU's in-order sum
// (1e-5 of the largest |ref| + 1e-5 relative); dz bf16 (bf16_tol); dA / dB f32 in the CPU's order
// (1e-5 of the largest |ref|).
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;

struct Dims {
    int64_t P, Kp, K, r, V;
};

HostTensor random_ids(Shape s, int64_t v, Rng& rng) {
    HostTensor t(s, DType::i32);
    for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = static_cast<int32_t>(rng.below(v));
    return t;
}

class CudaSelectorScores : public test::CudaVsCpu {
  protected:
    void check(const Dims& d, Rng& rng);
};

void CudaSelectorScores::check(const Dims& d, Rng& rng) {
    const std::string what = "P " + std::to_string(d.P) + " Kp " + std::to_string(d.Kp) + " K " +
                             std::to_string(d.K) + " r " + std::to_string(d.r) + " V " +
                             std::to_string(d.V);
    HostTensor z = test::bf16_values({d.P, d.r}, rng), a = test::bf16_values({d.V, d.r}, rng);
    HostTensor bc = test::bf16_values({d.V, d.r}, rng), g = test::f32_values({d.P, d.Kp, d.K}, rng);
    HostTensor pred = random_ids({d.P, d.Kp}, d.V, rng), cand = random_ids({d.P, d.K}, d.V, rng);
    HostTensor s_ref({d.P, d.Kp, d.K}), dz_ref({d.P, d.r});
    HostTensor da0 = test::f32_values({d.V, d.r}, rng), db0 = test::f32_values({d.V, d.r}, rng);
    HostTensor da_ref = da0.clone(), db_ref = db0.clone();
    cpu().selector_scores_fwd(z, pred, cand, a, bc, s_ref);
    cpu().selector_scores_bwd(g, z, pred, cand, a, bc, dz_ref, da_ref, db_ref);

    DeviceTensor gz = test::to_gpu(gpu(), z, DType::bf16), ga = test::to_gpu(gpu(), a, DType::bf16);
    DeviceTensor gbc = test::to_gpu(gpu(), bc, DType::bf16),
                 gg = test::to_gpu(gpu(), g, DType::f32);
    DeviceTensor gp = test::to_gpu_i32(gpu(), pred), gc = test::to_gpu_i32(gpu(), cand);
    DeviceTensor gs(gpu(), {d.P, d.Kp, d.K}, DType::f32), gdz(gpu(), {d.P, d.r}, DType::bf16);
    DeviceTensor gda = test::to_gpu(gpu(), da0, DType::f32),
                 gdb = test::to_gpu(gpu(), db0, DType::f32);
    test::poison(gpu(), gs);
    test::poison(gpu(), gdz);
    gpu().selector_scores_fwd(gz, gp, gc, ga, gbc, gs);
    gpu().selector_scores_bwd(gg, gz, gp, gc, ga, gbc, gdz, gda, gdb);
    const test::Tol score_tol{1e-5, 1e-5, 1e-5 * test::max_abs(s_ref)};
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gs), s_ref, score_tol), "") << what << ": scores";
    EXPECT_EQ(
        mismatch(test::to_cpu(gpu(), gdz), dz_ref, test::bf16_tol(1e-3 * test::max_abs(dz_ref))),
        "")
        << what << ": dz";
    auto f32_tol = [](const HostTensor& ref) {
        return test::Tol{1e-5, 1e-5, 1e-5 * test::max_abs(ref)};
    };
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gda), da_ref, f32_tol(da_ref)), "") << what << ": dA";
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdb), db_ref, f32_tol(db_ref)), "") << what << ": dB";
}

TEST_F(CudaSelectorScores, MatchesCpuOnAwkwardShapes) {
    Rng rng(2);
    for (const Dims& d : {Dims{15, 16, 16, 256, 1000}, Dims{7, 1, 16, 33, 5}, Dims{1, 3, 5, 1, 2},
                          Dims{40, 1, 16, 100, 300}, Dims{3, 7, 9, 65, 11}})
        check(d, rng);
}

TEST_F(CudaSelectorScores, BadShapesAreErrors) {
    DeviceTensor z(gpu(), {2, 4}, DType::bf16), a(gpu(), {9, 4}, DType::bf16),
        bc(gpu(), {9, 4}, DType::bf16);
    DeviceTensor pred(gpu(), {2, 1}, DType::i32), cand(gpu(), {2, 3}, DType::i32);
    DeviceTensor out(gpu(), {2, 1, 3}, DType::f32), bad(gpu(), {2, 3, 3}, DType::f32);
    gpu().fill(pred, 1.0f);
    gpu().fill(cand, 2.0f);
    EXPECT_NO_THROW(gpu().selector_scores_fwd(z, pred, cand, a, bc, out));
    EXPECT_THROW(gpu().selector_scores_fwd(z, pred, cand, a, bc, bad), Error);
    EXPECT_THROW(gpu().selector_scores_fwd(z, cand, pred, a, bc, out), Error);
}

}  // namespace
}  // namespace dflash
