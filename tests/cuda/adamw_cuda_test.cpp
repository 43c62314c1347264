// CUDA optimizer ops against the CPU reference. adamw_step: master, m, v within 2 f32 ulp of the
// CPU's (the kernel rounds each operation in the CPU's order, so 0 is expected and the count of
// differing elements is printed), with and without grad_scale and the bf16 value copy (which must
// equal bf16(master) exactly), on n in {1, 3, 1000, 1000003} and misaligned views; two runs give
// the same bits. sum_squares: within 1e-6 relative of the CPU (both accumulate in double) and the
// same bits on a second run. clip_scale: exactly the CPU's value on each side of the threshold.
#include <cstdio>
#include <string>
#include <utility>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

class CudaAdamW : public test::CudaVsCpu {};

// "" when every element is within max_ulp; else the first offender and how many differ.
std::string ulp_mismatch(const HostTensor& got, const HostTensor& ref, int64_t max_ulp) {
    int64_t worst = 0, worst_i = -1, differ = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const int64_t d = test::ulp_distance(got.f32()[i], ref.f32()[i]);
        if (d > 0) ++differ;
        if (d > worst) {
            worst = d;
            worst_i = i;
        }
    }
    if (differ > 0)
        std::printf("  (%lld of %lld elements differ from the CPU, worst %lld ulp)\n",
                    static_cast<long long>(differ), static_cast<long long>(ref.numel()),
                    static_cast<long long>(worst));
    if (worst <= max_ulp) return "";
    return "worst " + std::to_string(worst) + " ulp at [" + std::to_string(worst_i) + "]: got " +
           std::to_string(got.f32()[worst_i]) + " ref " + std::to_string(ref.f32()[worst_i]) +
           "; " + std::to_string(differ) + " elements differ";
}

struct State {
    HostTensor master, grad, m, v;
};

State random_state(int64_t n, Rng& rng) {
    State s{test::f32_values({n}, rng), test::f32_values({n}, rng, 0.1f),
            test::f32_values({n}, rng, 0.01f), HostTensor({n})};
    for (int64_t i = 0; i < n; ++i) s.v.f32()[i] = 1e-4f * std::fabs(rng.normal());
    return s;
}

TEST_F(CudaAdamW, StepMatchesCpuWithinUlps) {
    Rng rng(1);
    for (int64_t n : {1, 3, 1000, 1000003})
        for (int64_t off : {0, 1})
            for (bool scaled : {false, true})
                for (bool with_value : {false, true}) {
                    const std::string what = "n " + std::to_string(n) + " offset " +
                                             std::to_string(off) + (scaled ? " scaled" : "") +
                                             (with_value ? " value" : "");
                    const State st = random_state(n, rng);
                    AdamWParams p;
                    p.lr = 3e-4f;
                    p.weight_decay = 0.1f;
                    p.step = n == 3 ? 1 : 1000;
                    HostTensor scale = HostTensor::from_f32({1}, {0.37f});
                    HostTensor rm = st.master.clone(), rmm = st.m.clone(), rv = st.v.clone();
                    cpu().adamw_step(rm, st.grad, rmm, rv, p, scaled ? scale.view() : Tensor(),
                                     Tensor());
                    HostTensor outs[2][3];
                    for (int run = 0; run < 2; ++run) {
                        auto put = [&](const HostTensor& h, DType dt) {
                            DeviceTensor d(gpu(), {n + off}, dt);
                            if (dt == DType::bf16)
                                gpu().fill(d, std::nanf(""));
                            else
                                from_host_f32(gpu(), d.view().rows(off, off + n), h);
                            return d;
                        };
                        auto view = [&](const DeviceTensor& d) {
                            return d.view().rows(off, off + n);
                        };
                        DeviceTensor gm = put(st.master, DType::f32), gg = put(st.grad, DType::f32),
                                     gmm = put(st.m, DType::f32), gv = put(st.v, DType::f32),
                                     gval = put(st.master, DType::bf16);
                        DeviceTensor gscale = test::to_gpu(gpu(), scale, DType::f32);
                        gpu().adamw_step(view(gm), view(gg), view(gmm), view(gv), p,
                                         scaled ? gscale.view() : Tensor(),
                                         with_value ? view(gval) : Tensor());
                        outs[run][0] = test::to_cpu(gpu(), view(gm));
                        outs[run][1] = test::to_cpu(gpu(), view(gmm));
                        outs[run][2] = test::to_cpu(gpu(), view(gv));
                        if (run == 0 && with_value) {
                            EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), view(gval)),
                                                         test::clone_rounded_bf16(outs[0][0])),
                                      "")
                                << what << ": value is not bf16(master)";
                        }
                    }
                    EXPECT_EQ(ulp_mismatch(outs[0][0], rm, 2), "") << what << ": master";
                    EXPECT_EQ(ulp_mismatch(outs[0][1], rmm, 2), "") << what << ": m";
                    EXPECT_EQ(ulp_mismatch(outs[0][2], rv, 2), "") << what << ": v";
                    for (int k = 0; k < 3; ++k)
                        EXPECT_EQ(test::bit_mismatch(outs[1][k], outs[0][k]), "")
                            << what << ": second run, output " << k;
                }
}

TEST_F(CudaAdamW, SumSquaresMatchesCpuAndRepeats) {
    Rng rng(2);
    for (int64_t n : {1, 1000, 4097, 1000003, 20000001})
        for (int64_t off : {0, 1}) {
            HostTensor x = test::f32_values({n}, rng, 3.0f);
            HostTensor ref({1});
            cpu().sum_squares(x, ref);
            DeviceTensor gx(gpu(), {n + off}, DType::f32);
            from_host_f32(gpu(), gx.view().rows(off, off + n), x);
            DeviceTensor out(gpu(), {1}, DType::f32);
            float got[2];
            for (int run = 0; run < 2; ++run) {
                test::poison(gpu(), out);
                gpu().sum_squares(gx.view().rows(off, off + n), out);
                got[run] = test::to_cpu(gpu(), out).f32()[0];
            }
            EXPECT_NEAR(got[0], ref.f32()[0], 1e-6 * ref.f32()[0])
                << "n " << n << " offset " << off;
            EXPECT_EQ(test::ulp_distance(got[0], got[1]), 0) << "n " << n << ": second run differs";
        }
    // No elements: 0.
    DeviceTensor empty(gpu(), {0}, DType::f32);
    DeviceTensor out = test::to_gpu(gpu(), HostTensor::from_f32({1}, {5.0f}), DType::f32);
    gpu().sum_squares(empty, out);
    EXPECT_EQ(test::to_cpu(gpu(), out).f32()[0], 0.0f);
}

TEST_F(CudaAdamW, ClipScaleMatchesCpuExactly) {
    for (const auto& [norm_sq, max_norm] : {std::pair{4.0f, 1.0f},
                                            {0.25f, 1.0f},
                                            {1.0f, 1.0f},
                                            {1e6f, 0.0f},
                                            {1e6f, -1.0f},
                                            {2.0000002f, 1.4142135f},
                                            {0.0f, 1.0f},
                                            {3e30f, 1.0f}}) {
        HostTensor ns = HostTensor::from_f32({1}, {norm_sq});
        HostTensor ref({1});
        cpu().clip_scale(ns, max_norm, ref);
        DeviceTensor gns = test::to_gpu(gpu(), ns, DType::f32);
        DeviceTensor gs(gpu(), {1}, DType::f32);
        test::poison(gpu(), gs);
        gpu().clip_scale(gns, max_norm, gs);
        EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gs), ref), "")
            << "norm_sq " << norm_sq << " max_norm " << max_norm;
    }
}

TEST_F(CudaAdamW, RejectsBadArguments) {
    DeviceTensor a(gpu(), {8}, DType::f32);
    DeviceTensor b(gpu(), {7}, DType::f32);
    DeviceTensor two(gpu(), {2}, DType::f32);
    DeviceTensor val_f32(gpu(), {8}, DType::f32);
    AdamWParams p;
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().adamw_step(a, b, a, a, p, Tensor(), Tensor()); }),
                  "same element count"));
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().adamw_step(a, a, a, a, p, two, Tensor()); }),
                          "expected f32 [1]"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().adamw_step(a, a, a, a, p, Tensor(), val_f32); }),
                  "expected bf16"));
    p.step = 0;
    EXPECT_TRUE(test::has(
        test::error_of([&] { gpu().adamw_step(a, a, a, a, p, Tensor(), Tensor()); }), "1-based"));
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().sum_squares(a, two); }), "expected f32 [1]"));
}

}  // namespace
}  // namespace dflash
