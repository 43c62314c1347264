// cuda::gemm (cuBLASLt) against the CPU gemm on the same bf16-rounded inputs: all four transpose
// combinations, f32 and bf16 C, alpha/beta (beta = 0 over a NaN-poisoned C), awkward m/n/k
// (1, 7, 129, 1000), K = 0, m or n = 0, rank-3 operands, row-offset views whose pointers are only
// 2- or 4-byte aligned, shape/dtype errors, determinism, row invariance of small GEMMs and the
// plan cache.
//
// Tolerances: the products of bf16 values are exact in fp32 and both sides accumulate in fp32, so
// an f32 C differs only by summation order and the tensor cores' accumulation rounding (truncating
// alignment of partial sums): rel_norm <= 5e-5, max abs <= 5e-4 * max(1, max|ref|) (a bf16
// rounding anywhere inside would show as ~2e-3). A bf16 C adds its own rounding (2^-9 relative):
// rel_norm <= 4e-3, max abs <= 8e-3 * max(1, max|ref|).
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"
#include "core/error.h"
#include "cuda/gemm_family_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::bf16_random;
using test::compare;
using test::to_device;

struct Case {
    int64_t m, n, k;
    bool ta, tb;
    DType c_dtype;
    float alpha, beta;
    std::string str() const {
        std::ostringstream s;
        s << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb
          << " C=" << dtype_name(c_dtype) << " alpha=" << alpha << " beta=" << beta;
        return s.str();
    }
};

void expect_close(const Tensor& got, const Tensor& ref, DType c_dtype, const std::string& what) {
    double max_ref = 1.0;
    for (int64_t i = 0; i < ref.numel(); ++i)
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref.f32()[i])));
    const bool f32 = c_dtype == DType::f32;
    const double tol_rel = f32 ? 5e-5 : 4e-3, tol_abs = (f32 ? 5e-4 : 8e-3) * max_ref;
    const test::Diff d = compare(got, ref, tol_abs);
    EXPECT_TRUE(d.ok(tol_rel, tol_abs)) << what << ": " << d.str();
}

// Runs one case on both backends from the same bf16 values; C starts as NaN when beta == 0.
void run_case(Backend& cpu, Backend& gpu, const Case& c, Rng& rng) {
    const HostTensor a = bf16_random(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, rng);
    const HostTensor b = bf16_random(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, rng);
    HostTensor c0 = c.beta == 0.0f ? test::nan_tensor({c.m, c.n}) : bf16_random({c.m, c.n}, rng);
    if (c.c_dtype == DType::bf16) test::round_to_bf16(c0);
    const DeviceTensor da = to_device(gpu, a, DType::bf16), db = to_device(gpu, b, DType::bf16);
    const DeviceTensor dc = to_device(gpu, c0, c.c_dtype);
    gpu.gemm(da, c.ta, db, c.tb, dc, c.alpha, c.beta);
    const HostTensor got = to_host_f32(gpu, dc);
    HostTensor ref = c0.clone();
    cpu.gemm(a, c.ta, b, c.tb, ref, c.alpha, c.beta);
    expect_close(got, ref, c.c_dtype, c.str());
}

class CudaGemm : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        cpu_ = make_cpu_backend(1);
        gpu_ = make_backend(DeviceKind::cuda, 0, 1);
    }
    std::unique_ptr<Backend> cpu_, gpu_;
};

TEST_F(CudaGemm, AllTransposesDtypesAndAwkwardShapesMatchCpu) {
    Rng rng(11);
    struct Mnk {
        int64_t m, n, k;
    };
    for (const Mnk s : {Mnk{1, 1, 1}, Mnk{7, 129, 1000}, Mnk{129, 1000, 7}, Mnk{1000, 7, 129},
                        Mnk{1, 1000, 129}, Mnk{129, 1, 7}, Mnk{64, 128, 256}}) {
        for (int combo = 0; combo < 4; ++combo) {
            for (DType cd : {DType::f32, DType::bf16}) {
                for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-0.75f, 1.0f}}) {
                    run_case(*cpu_, *gpu_,
                             Case{s.m, s.n, s.k, bool(combo & 1), bool(combo & 2), cd, alpha, beta},
                             rng);
                }
            }
        }
    }
    // A general beta on both output dtypes.
    run_case(*cpu_, *gpu_, Case{33, 65, 17, false, true, DType::f32, 1.5f, -0.5f}, rng);
    run_case(*cpu_, *gpu_, Case{33, 65, 17, true, false, DType::bf16, 1.5f, -0.5f}, rng);
}

TEST_F(CudaGemm, KZeroScalesCAndEmptyOutputsAreNoOps) {
    Rng rng(12);
    for (DType cd : {DType::f32, DType::bf16}) {
        for (float beta : {0.0f, 1.0f, 0.5f}) {
            HostTensor c0 = beta == 0.0f ? test::nan_tensor({5, 7}) : bf16_random({5, 7}, rng);
            const DeviceTensor a(*gpu_, {5, 0}, DType::bf16), b(*gpu_, {0, 7}, DType::bf16);
            const DeviceTensor dc = to_device(*gpu_, c0, cd);
            gpu_->gemm(a, false, b, false, dc, 2.0f, beta);
            const HostTensor got = to_host_f32(*gpu_, dc);
            for (int64_t i = 0; i < got.numel(); ++i) {
                const float want = beta == 0.0f ? 0.0f : beta * c0.f32()[i];
                ASSERT_EQ(got.f32()[i], want) << dtype_name(cd) << " beta=" << beta << " i=" << i;
            }
        }
    }
    // m = 0 and n = 0: nothing to compute, nothing touched.
    const DeviceTensor a0(*gpu_, {0, 4}, DType::bf16), b(*gpu_, {4, 3}, DType::bf16);
    const DeviceTensor c0(*gpu_, {0, 3}, DType::f32);
    EXPECT_NO_THROW(gpu_->gemm(a0, false, b, false, c0));
    const DeviceTensor a(*gpu_, {2, 4}, DType::bf16), b0(*gpu_, {4, 0}, DType::bf16);
    const DeviceTensor c1(*gpu_, {2, 0}, DType::bf16);
    EXPECT_NO_THROW(gpu_->gemm(a, false, b0, false, c1));
    gpu_->synchronize();
}

TEST_F(CudaGemm, Rank3OperandsAreViewedAsRows) {
    Rng rng(13);
    // y [3, 5, 33] = x [3, 5, 64] · Wᵀ, W [33, 64]; and dW [64, 33]... as xᵀ · dy on [S*H, Dh].
    const HostTensor x = bf16_random({3, 5, 64}, rng), w = bf16_random({33, 64}, rng);
    const DeviceTensor dx = to_device(*gpu_, x, DType::bf16), dw = to_device(*gpu_, w, DType::bf16);
    const DeviceTensor dy = to_device(*gpu_, test::nan_tensor({3, 5, 33}), DType::f32);
    gpu_->gemm(dx, false, dw, true, dy);
    HostTensor ref({3, 5, 33});
    cpu_->gemm(x, false, w, true, ref);
    expect_close(to_host_f32(*gpu_, dy), ref, DType::f32, "rank-3 x · Wᵀ");

    const HostTensor g = bf16_random({3, 5, 33}, rng);
    const DeviceTensor dg = to_device(*gpu_, g, DType::bf16);
    const DeviceTensor dgw = to_device(*gpu_, test::nan_tensor({64, 33}), DType::f32);
    gpu_->gemm(dx, true, dg, false, dgw);  // [64, 15] · [15, 33]
    HostTensor refw({64, 33});
    cpu_->gemm(x, true, g, false, refw);
    expect_close(to_host_f32(*gpu_, dgw), refw, DType::f32, "rank-3 xᵀ · g");
}

// Views starting at row 1 of an odd-width matrix: bf16 pointers aligned to 2 bytes, f32 to 4. The
// row before the view (a sentinel) must stay untouched.
TEST_F(CudaGemm, RowOffsetViewsWithOddAlignment) {
    Rng rng(14);
    for (int combo = 0; combo < 4; ++combo) {
        for (DType cd : {DType::f32, DType::bf16}) {
            const bool ta = combo & 1, tb = combo & 2;
            const int64_t m = 37, n = 129, k = 65;
            const Shape sa = ta ? Shape{k + 1, m} : Shape{m + 1, k};
            const Shape sb = tb ? Shape{n + 1, k} : Shape{k + 1, n};
            const HostTensor a = bf16_random(sa, rng), b = bf16_random(sb, rng);
            HostTensor c = bf16_random({m + 1, n}, rng);
            if (cd == DType::bf16) test::round_to_bf16(c);
            const DeviceTensor da = to_device(*gpu_, a, DType::bf16);
            const DeviceTensor db = to_device(*gpu_, b, DType::bf16);
            const DeviceTensor dc = to_device(*gpu_, c, cd);
            const Tensor va = Tensor(da).rows(1, sa[0]), vb = Tensor(db).rows(1, sb[0]);
            const Tensor vc = Tensor(dc).rows(1, m + 1);
            gpu_->gemm(va, ta, vb, tb, vc, 0.5f, 1.0f);
            const HostTensor got = to_host_f32(*gpu_, dc);
            HostTensor ref = c.clone();
            cpu_->gemm(a.view().rows(1, sa[0]), ta, b.view().rows(1, sb[0]), tb,
                       ref.view().rows(1, m + 1), 0.5f, 1.0f);
            Case cs{m, n, k, ta, tb, cd, 0.5f, 1.0f};
            expect_close(got, ref, cd, "row-offset views " + cs.str());
            for (int64_t j = 0; j < n; ++j)
                ASSERT_EQ(got.f32()[j], c.f32()[j]) << "sentinel row touched at " << j;
        }
    }
}

TEST_F(CudaGemm, ShapeAndDtypeErrorsNameTheTensors) {
    const DeviceTensor a(*gpu_, {3, 4}, DType::bf16), b(*gpu_, {5, 6}, DType::bf16);
    const DeviceTensor c(*gpu_, {3, 6}, DType::f32);
    const std::string msg = test::error_of([&] { gpu_->gemm(a, false, b, false, c); });
    EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[5, 6]"), std::string::npos) << msg;
    const DeviceTensor b2(*gpu_, {4, 6}, DType::bf16), cbad(*gpu_, {3, 5}, DType::f32);
    EXPECT_THROW(gpu_->gemm(a, false, b2, false, cbad), Error);
    const DeviceTensor af(*gpu_, {3, 4}, DType::f32);
    EXPECT_NE(test::error_of([&] { gpu_->gemm(af, false, b2, false, c); }).find("bf16"),
              std::string::npos);
    const HostTensor host({4, 6});
    EXPECT_THROW(gpu_->gemm(a, false, host, false, c), Error);  // a CPU tensor
}

// Parameter gradients accumulate with beta = 1 across micro-batches: same inputs, same bits.
TEST_F(CudaGemm, RepeatedRunsGiveIdenticalBits) {
    Rng rng(15);
    const int64_t m = 777, n = 1536, k = 4096;
    const HostTensor a = bf16_random({k, m}, rng), b = bf16_random({k, n}, rng);
    const HostTensor c = bf16_random({m, n}, rng);
    const DeviceTensor da = to_device(*gpu_, a, DType::bf16), db = to_device(*gpu_, b, DType::bf16);
    std::vector<HostTensor> outs;
    for (int rep = 0; rep < 2; ++rep) {
        const DeviceTensor dc = to_device(*gpu_, c, DType::f32);
        gpu_->gemm(da, true, db, false, dc, 1.0f, 1.0f);
        gpu_->gemm(da, true, db, false, dc, 1.0f, 1.0f);
        outs.push_back(to_host_f32(*gpu_, dc));
    }
    EXPECT_EQ(std::memcmp(outs[0].f32(), outs[1].f32(), outs[0].nbytes()), 0);
}

// Row invariance (gemm.h): a linear layer's rows computed 1, 2, ..., 15 at a time (decode,
// verify), also from an offset view, have the bits of the same rows computed 16 at a time. Shapes
// of the decode path: an LM head with f32 logits, a projection with bf16 output, a K whose row
// stride is only 16-byte aligned.
TEST_F(CudaGemm, SmallGemmRowsDoNotDependOnTheRowCount) {
    Rng rng(17);
    struct Nk {
        int64_t n, k;
        DType c;
    };
    gpu_->synchronize();
    cuda::GemmEngine engine;
    cuda::Exec ex;
    ex.gemm = &engine;
    ex.stream = nullptr;  // the legacy default stream; synchronised below
    const int64_t full = cuda::GemmEngine::kRowInvariantRows;
    for (const Nk& s : {Nk{151936, 256, DType::f32}, Nk{4096, 4096, DType::bf16},
                        Nk{1000, 264, DType::bf16}, Nk{24576, 1024, DType::bf16}}) {
        const DeviceTensor x = to_device(*gpu_, bf16_random({full + 8, s.k}, rng), DType::bf16);
        const DeviceTensor w = to_device(*gpu_, bf16_random({s.n, s.k}, rng, 0.05f), DType::bf16);
        for (const int64_t r0 : {int64_t{0}, int64_t{5}}) {
            const DeviceTensor ref(*gpu_, {full, s.n}, s.c);
            cuda::gemm(ex, Tensor(x).rows(r0, r0 + full), false, w, true, ref, 1.0f, 0.0f);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            const HostTensor want = to_host_f32(*gpu_, ref);
            for (const int64_t m : {1, 2, 3, 8, 9, 15}) {
                const DeviceTensor out(*gpu_, {m, s.n}, s.c);
                cuda::gemm(ex, Tensor(x).rows(r0, r0 + m), false, w, true, out, 1.0f, 0.0f);
                ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
                const HostTensor got = to_host_f32(*gpu_, out);
                ASSERT_EQ(std::memcmp(got.f32(), want.f32(), got.nbytes()), 0)
                    << "n=" << s.n << " k=" << s.k << ": rows " << r0 << ".." << r0 + m - 1
                    << " computed " << m << " at a time differ from the same rows computed " << full
                    << " at a time";
            }
        }
    }
    EXPECT_EQ(engine.row_variant_plans(), 0);
}

// The engine directly: one plan per (shape, transposes, dtype, beta kind, alignment), reused.
TEST_F(CudaGemm, PlanCacheReusesPlans) {
    Rng rng(16);
    const DeviceTensor a = to_device(*gpu_, bf16_random({9, 64}, rng), DType::bf16);
    const DeviceTensor b = to_device(*gpu_, bf16_random({64, 32}, rng), DType::bf16);
    const DeviceTensor c(*gpu_, {8, 32}, DType::f32);
    gpu_->synchronize();
    cuda::GemmEngine engine;
    cuda::Exec ex;
    ex.gemm = &engine;
    ex.stream = nullptr;  // the legacy default stream; synchronised below
    const Tensor a8 = Tensor(a).rows(0, 8), a8_off = Tensor(a).rows(1, 9);
    cuda::gemm(ex, a8, false, b, false, c, 1.0f, 0.0f);
    cuda::gemm(ex, a8, false, b, false, c, 2.0f, 0.0f);  // alpha is not part of the plan
    EXPECT_EQ(engine.plans(), 1);
    cuda::gemm(ex, a8, false, b, false, c, 1.0f, 1.0f);  // beta != 0
    EXPECT_EQ(engine.plans(), 2);
    cuda::gemm(ex, a8_off, false, b, false, c, 1.0f, 1.0f);  // A only 128-byte aligned
    EXPECT_EQ(engine.plans(), 3);
    cuda::gemm(ex, a8_off, false, b, false, c, 1.0f, 1.0f);
    EXPECT_EQ(engine.plans(), 3);
    EXPECT_EQ(engine.calls(), 5);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace dflash
