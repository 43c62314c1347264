// CUDA Muon ops and add_uniform_noise against the CPU reference: muon_momentum (momentum and
// update) and muon_normalize into f32 within 2 f32 ulp of the CPU's (the kernels round each
// operation in the CPU's order), into bf16 equal to bf16 of the CPU's f32; muon_update with an f32
// and a bf16 x, its bf16 value copy equal to bf16(master); add_uniform_noise the CPU's numbers (f32
// within 1 ulp, bf16 within one bf16 rounding); the Newton-Schulz iteration through the bf16
// gemm within bf16 tolerance of the CPU's f32 one, for a wide and a tall matrix.
#include <cmath>
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"
#include "train/optimizer.h"

namespace dflash {
namespace {

class CudaMuon : public test::CudaVsCpu {};

int64_t worst_ulp(const HostTensor& got, const HostTensor& ref) {
    int64_t worst = 0;
    for (int64_t i = 0; i < ref.numel(); ++i)
        worst = std::max(worst, test::ulp_distance(got.f32()[i], ref.f32()[i]));
    return worst;
}

TEST_F(CudaMuon, ElementwiseOpsMatchCpu) {
    Rng rng(3);
    for (int64_t n : {1, 7, 1000, 100003}) {
        SCOPED_TRACE(n);
        const HostTensor grad = test::f32_values({n}, rng, 0.1f);
        const HostTensor mom = test::f32_values({n}, rng, 0.05f);
        const HostTensor scale = HostTensor::from_f32({1}, {0.37f});
        HostTensor rm = mom.clone(), ru({n});
        cpu().muon_momentum(grad, scale, rm, 0.95f, ru);
        DeviceTensor g = test::to_gpu(gpu(), grad, DType::f32);
        DeviceTensor m = test::to_gpu(gpu(), mom, DType::f32);
        DeviceTensor s = test::to_gpu(gpu(), scale, DType::f32);
        DeviceTensor u(gpu(), {n}, DType::f32);
        test::poison(gpu(), u);
        gpu().muon_momentum(g, s, m, 0.95f, u);
        EXPECT_LE(worst_ulp(test::to_cpu(gpu(), m), rm), 2);
        EXPECT_LE(worst_ulp(test::to_cpu(gpu(), u), ru), 2);

        HostTensor norm_sq({1});
        cpu().sum_squares(ru, norm_sq);
        HostTensor rx({n});
        cpu().muon_normalize(ru, norm_sq, 1e-7f, rx);
        DeviceTensor ns = test::to_gpu(gpu(), norm_sq, DType::f32);
        for (DType dt : {DType::f32, DType::bf16}) {
            DeviceTensor x(gpu(), {n}, dt);
            test::poison(gpu(), x);
            gpu().muon_normalize(u, ns, 1e-7f, x);
            const HostTensor got = test::to_cpu(gpu(), x);
            if (dt == DType::f32) {
                EXPECT_LE(worst_ulp(got, rx), 2);
            } else {
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_NEAR(got.f32()[i], test::round_bf16(rx.f32()[i]),
                                std::fabs(rx.f32()[i]) / 128 + 1e-30)
                        << i;
            }
        }

        const HostTensor master = test::f32_values({n}, rng);
        const HostTensor scalars = HostTensor::from_f32({2}, {1e-2f, 1.0f - 1e-3f});
        for (DType dt : {DType::f32, DType::bf16}) {
            const HostTensor xin = dt == DType::bf16 ? test::clone_rounded_bf16(rx) : rx.clone();
            HostTensor rp = master.clone();
            cpu().muon_update(rp, xin, scalars, 0.6f, Tensor());
            DeviceTensor p = test::to_gpu(gpu(), master, DType::f32);
            DeviceTensor x = test::to_gpu(gpu(), xin, dt);
            DeviceTensor sc = test::to_gpu(gpu(), scalars, DType::f32);
            DeviceTensor value(gpu(), {n}, DType::bf16);
            test::poison(gpu(), value);
            gpu().muon_update(p, x, sc, 0.6f, value);
            const HostTensor gp = test::to_cpu(gpu(), p);
            EXPECT_LE(worst_ulp(gp, rp), 2);
            const HostTensor gv = test::to_cpu(gpu(), value);
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(gv.f32()[i], test::round_bf16(gp.f32()[i])) << i;
        }
    }
}

TEST_F(CudaMuon, UniformNoiseDrawsTheCpuNumbers) {
    Rng rng(4);
    const int64_t n = 100003;
    const HostTensor base = test::f32_values({n}, rng);
    const HostTensor seed = HostTensor::from_i32({2}, {static_cast<int32_t>(0x9abcdef0u), 17});
    HostTensor ref = base.clone();
    cpu().add_uniform_noise(ref, seed, 0.05f);
    DeviceTensor sd = test::to_gpu_i32(gpu(), seed);
    DeviceTensor x = test::to_gpu(gpu(), base, DType::f32);
    gpu().add_uniform_noise(x, sd, 0.05f);
    EXPECT_LE(worst_ulp(test::to_cpu(gpu(), x), ref), 1);
    DeviceTensor xb = test::to_gpu(gpu(), base, DType::bf16);
    gpu().add_uniform_noise(xb, sd, 0.05f);
    const HostTensor gb = test::to_cpu(gpu(), xb);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(gb.f32()[i], ref.f32()[i], std::fabs(ref.f32()[i]) / 128 + 0.05f / 64) << i;
}

TEST_F(CudaMuon, NewtonSchulzThroughBf16GemmMatchesCpu) {
    for (const auto& [A, B] : {std::pair<int64_t, int64_t>{64, 200}, {300, 96}}) {
        SCOPED_TRACE(std::to_string(A) + "x" + std::to_string(B));
        Rng rng(static_cast<uint64_t>(A + B));
        HostTensor x = test::bf16_values({A, B}, rng);
        double norm = 0;
        for (int64_t i = 0; i < A * B; ++i) norm += double(x.f32()[i]) * x.f32()[i];
        for (int64_t i = 0; i < A * B; ++i)
            x.f32()[i] = test::round_bf16(static_cast<float>(x.f32()[i] / std::sqrt(norm)));
        const int64_t m = std::min(A, B);
        HostTensor ref = x.clone();
        train::NsScratch cs(cpu(), A * B, m * m);
        train::newton_schulz(cpu(), ref, 5, cs);
        DeviceTensor gx = test::to_gpu(gpu(), x, DType::bf16);
        train::NsScratch gs(gpu(), A * B, m * m);
        train::newton_schulz(gpu(), gx.view().reshape({A, B}), 5, gs);
        const HostTensor got = test::to_cpu(gpu(), gx);
        // Five bf16 rounds of products of [m, m] Gram matrices: a few bf16 ulps of the entries.
        EXPECT_EQ(test::mismatch(got, ref, {3e-2, 6e-2, 4e-3}), "");
    }
}

}  // namespace
}  // namespace dflash
