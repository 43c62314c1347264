// cuda::lm_head_ce against the CPU reference (cpu::lm_head_ce through the CPU backend) on the same
// bf16-rounded h and w: vocabularies that are not a multiple of the chunk, chunk > vocab, chunks of
// odd width (the scalar paths) and wider than the kernel's shared-memory row (the global path),
// weight-0 rows with label -1, confident rows (label probability near 1: the flash-style dh's
// cancellation-free form), dh in bf16 and f32, dw accumulated (+=) or not asked, loss-only calls,
// determinism, and argument errors. All outputs are NaN-poisoned before the run.
//
// Tolerances (both sides compute the logits in fp32 from identical bf16 inputs):
//   loss_rows f32: rel_norm <= 1e-4, max abs <= 1e-3 * max(1, max|ref|) (lse in f32 vs double,
//     tensor-core accumulation of the logits).
//   argmax: equal, or a near-tie: the two logits (double, from the inputs) within 1e-4.
//   dh bf16: rel_norm <= 1e-2, max abs <= 3e-2 * max|ref| (the probabilities pass through bf16 for
//     the GEMM, then the output is rounded to bf16); dh f32: rel_norm <= 6e-3.
//   dw f32 (the accumulated delta): rel_norm <= 6e-3, max abs <= 3e-2 * max|ref delta| (g in bf16).
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "cuda/gemm_family_util.h"
#include "cuda/lm_head_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::bf16_random;
using test::compare;
using test::to_device;

struct Problem {
    int64_t r, d, v;
    HostTensor h, w, labels, weights, dw0;
    float grad_scale = 0.37f;
};

// Every third row is ignored (weight 0, label -1); every fourth real row is confident (h leans on
// its label's row of w, so the label's probability is ~0.99).
Problem make_problem(int64_t r, int64_t d, int64_t v, uint64_t seed) {
    Rng rng(seed);
    Problem p{r,
              d,
              v,
              bf16_random({r, d}, rng),
              bf16_random({v, d}, rng, 3.0f / std::sqrt(d)),
              HostTensor({r}, DType::i32),
              HostTensor({r}),
              bf16_random({v, d}, rng, 0.1f)};
    for (int64_t i = 0; i < r; ++i) {
        const bool ignored = i % 3 == 2;
        const int32_t label = ignored ? -1 : static_cast<int32_t>(rng.below(v));
        p.labels.i32()[i] = label;
        p.weights.f32()[i] = ignored ? 0.0f : 0.25f + rng.uniform();
        if (!ignored && i % 4 == 1) {
            double norm2 = 0;
            for (int64_t k = 0; k < d; ++k) norm2 += std::pow(p.w.f32()[label * d + k], 2);
            const double a = 12.0 / norm2;  // label logit ~12 above the rest
            for (int64_t k = 0; k < d; ++k) {
                const float x =
                    static_cast<float>(a * p.w.f32()[label * d + k]) + 0.1f * p.h.f32()[i * d + k];
                p.h.f32()[i * d + k] = bf16_to_f32(f32_to_bf16(x));
            }
        }
    }
    return p;
}

using Outputs = test::LmOutputs;
using Want = test::LmWant;

Outputs run_cpu(Backend& cpu, const Problem& p, int64_t chunk, const Want& want) {
    Outputs o = test::lm_host_outputs(p.r, p.d, p.dw0);
    cpu.lm_head_ce(p.h, p.w, p.labels, p.weights, p.grad_scale, chunk,
                   test::lm_out<LmHeadCeOut>(o, want));
    return o;
}

Outputs run_gpu(Backend& gpu, const Problem& p, int64_t chunk, const Want& want) {
    const DeviceTensor h = to_device(gpu, p.h, DType::bf16), w = to_device(gpu, p.w, DType::bf16);
    const DeviceTensor labels(gpu, {p.r}, DType::i32);
    gpu.upload(labels, p.labels);
    const DeviceTensor weights = to_device(gpu, p.weights, DType::f32);
    const test::LmGpuOut o(gpu, p.r, p.d, p.dw0, want.dh_dtype,
                           gpu.lm_head_ce_workspace(p.r, p.d, p.v, chunk));
    gpu.lm_head_ce(h, w, labels, weights, p.grad_scale, chunk, o.out<LmHeadCeOut>(want));
    return o.download(gpu);
}

void expect_matches(const Problem& p, const Outputs& got, const Outputs& ref, const Want& want,
                    const std::string& what) {
    SCOPED_TRACE(what);
    if (want.loss) {
        double mx = 1;
        for (int64_t i = 0; i < p.r; ++i)
            mx = std::max(mx, std::fabs(double(ref.loss_rows.f32()[i])));
        const test::Diff d = compare(got.loss_rows, ref.loss_rows, 1e-3 * mx);
        EXPECT_TRUE(d.ok(1e-4, 1e-3 * mx)) << "loss_rows: " << d.str();
        for (int64_t i = 0; i < p.r; ++i) {
            if (p.weights.f32()[i] == 0.0f) {
                ASSERT_EQ(got.loss_rows.f32()[i], 0.0f) << "weight-0 row " << i;
            }
        }
    }
    if (want.argmax) test::expect_lm_argmax(p.h, p.w, got.argmax, ref.argmax);
    if (want.dh) {
        const bool f32 = want.dh_dtype == DType::f32;
        const test::Diff d0 = compare(got.dh, ref.dh, 0);
        const double tol_abs = 3e-2 * d0.max_ref, tol_rel = f32 ? 6e-3 : 1e-2;
        const test::Diff d = compare(got.dh, ref.dh, tol_abs);
        EXPECT_TRUE(d.ok(tol_rel, tol_abs))
            << "dh (" << dtype_name(want.dh_dtype) << "): " << d.str();
        for (int64_t i = 0; i < p.r; ++i) {
            if (p.weights.f32()[i] == 0.0f) {
                for (int64_t k = 0; k < p.d; ++k)
                    ASSERT_EQ(got.dh.f32()[i * p.d + k], 0.0f) << "weight-0 row " << i;
            } else if (i % 4 == 1) {
                // A confident row's dh is ~(1 - p_label) smaller than the others': checked on its
                // own so a cancellation error (2^-9 of |w_label|) cannot hide in the global norm.
                const Tensor g(got.dh.f32() + i * p.d, DType::f32, {p.d});
                const Tensor rf(ref.dh.f32() + i * p.d, DType::f32, {p.d});
                const test::Diff dr = compare(g, rf, INFINITY);
                EXPECT_LE(dr.rel_norm, 3e-2) << "confident row " << i << ": " << dr.str();
            }
        }
    }
    test::expect_lm_dw(got.dw, ref.dw, p.dw0, want.dw);
}

class CudaLmHeadCe : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        cpu_ = make_cpu_backend(2);
        gpu_ = make_backend(DeviceKind::cuda, 0, 1);
    }
    void check(int64_t r, int64_t d, int64_t v, int64_t chunk, const Want& want, uint64_t seed) {
        const Problem p = make_problem(r, d, v, seed);
        const Outputs ref = run_cpu(*cpu_, p, chunk, want);
        const Outputs got = run_gpu(*gpu_, p, chunk, want);
        expect_matches(p, got, ref, want, test::lm_case_name(r, d, v, chunk, want));
    }
    std::unique_ptr<Backend> cpu_, gpu_;
};

TEST_F(CudaLmHeadCe, VocabNotAMultipleOfTheChunk) {
    check(37, 64, 1000, 256, Want{}, 1);  // 3 chunks of 256 + 232
}

TEST_F(CudaLmHeadCe, ChunkLargerThanVocab) {
    check(5, 128, 77, 8192, Want{}, 2);
}

TEST_F(CudaLmHeadCe, OddChunkWidthsTakeTheScalarPaths) {
    check(3, 64, 10, 3, Want{}, 3);       // chunks 3, 3, 3, 1
    check(33, 96, 1031, 129, Want{}, 4);  // odd widths everywhere
}

TEST_F(CudaLmHeadCe, DrafterShapeWithoutDw) {
    Want want;
    want.dw = false;
    check(256, 256, 20000, 8192, want, 5);
}

TEST_F(CudaLmHeadCe, ChunkWiderThanTheSharedMemoryRow) {
    check(8, 64, 30000, 16384, Want{}, 6);
}

TEST_F(CudaLmHeadCe, DhInF32) {
    Want want;
    want.dh_dtype = DType::f32;
    check(21, 64, 700, 128, want, 7);
}

TEST_F(CudaLmHeadCe, LossOnlyAndArgmaxOnly) {
    Want loss_only;
    loss_only.dh = loss_only.dw = false;
    check(20, 64, 500, 128, loss_only, 8);
    Want argmax_only = loss_only;
    argmax_only.loss = false;
    check(20, 64, 500, 128, argmax_only, 9);
    Want dw_only;
    dw_only.dh = false;
    check(20, 64, 500, 96, dw_only, 10);
}

TEST_F(CudaLmHeadCe, RepeatedRunsGiveIdenticalBits) {
    const Problem p = make_problem(200, 128, 9000, 11);
    const Outputs a = run_gpu(*gpu_, p, 4096, Want{});
    const Outputs b = run_gpu(*gpu_, p, 4096, Want{});
    EXPECT_EQ(std::memcmp(a.loss_rows.f32(), b.loss_rows.f32(), a.loss_rows.nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.argmax.i32(), b.argmax.i32(), a.argmax.nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.dh.f32(), b.dh.f32(), a.dh.nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.dw.f32(), b.dw.f32(), a.dw.nbytes()), 0);
}

TEST_F(CudaLmHeadCe, ArgumentErrors) {
    const DeviceTensor h(*gpu_, {4, 8}, DType::bf16), w(*gpu_, {10, 8}, DType::bf16);
    const DeviceTensor labels(*gpu_, {4}, DType::i32), weights(*gpu_, {4}, DType::f32);
    const DeviceTensor small(*gpu_, {gpu_->lm_head_ce_workspace(4, 8, 10, 4) - 1}, DType::f32);
    LmHeadCeOut out;
    out.workspace = small;
    EXPECT_NE(test::error_of([&] {
                  gpu_->lm_head_ce(h, w, labels, weights, 1.0f, 4, out);
              }).find("workspace"),
              std::string::npos);
    const DeviceTensor hf(*gpu_, {4, 8}, DType::f32);
    EXPECT_THROW(gpu_->lm_head_ce(hf, w, labels, weights, 1.0f, 4, LmHeadCeOut{}), Error);
    const DeviceTensor w9(*gpu_, {10, 9}, DType::bf16);
    EXPECT_THROW(gpu_->lm_head_ce(h, w9, labels, weights, 1.0f, 4, LmHeadCeOut{}), Error);
    const DeviceTensor dwb(*gpu_, {10, 8}, DType::bf16);
    LmHeadCeOut bad_dw;
    bad_dw.dw = dwb;
    EXPECT_THROW(gpu_->lm_head_ce(h, w, labels, weights, 1.0f, 4, bad_dw), Error);
    EXPECT_THROW(gpu_->lm_head_ce(h, w, labels, weights, 1.0f, 0, LmHeadCeOut{}), Error);
}

}  // namespace
}  // namespace dflash
