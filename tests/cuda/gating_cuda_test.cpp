// CUDA gating ops (sigmoid_mul, add_sigmoid_scaled, sigmoid_mul_bwd) against the CPU reference on
// the same bf16 values: odd sizes, misaligned views (the scalar path), gates of scale 8 (both
// sigmoid branches), y written over x; sigmoid_mul_bwd's column sums over row counts that are and
// are not whole 64-row chunks (their order differs from the CPU's: a tolerance of f32 sums), and
// bit-equal on a second run. Tolerance: within one bf16 rounding (1/256 |ref| + 1e-3 max|ref| per
// element, 1e-2 relative error norm); CUDA's expf and the CPU's differ by a couple of f32 ulp
// before it.
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;

class CudaGating : public test::CudaVsCpu {
  protected:
    void check(int64_t r, int64_t c, int64_t offset, Rng& rng);
};

void CudaGating::check(int64_t r, int64_t c, int64_t offset, Rng& rng) {
    const std::string what =
        "[" + std::to_string(r) + ", " + std::to_string(c) + "] offset " + std::to_string(offset);
    const int64_t n = r * c;
    HostTensor x = test::bf16_values({r, c}, rng);
    HostTensor gate = test::bf16_values({r, c}, rng, 8.0f);
    HostTensor y0 = test::bf16_values({r, c}, rng);
    HostTensor s = test::bf16_values({r}, rng, 8.0f);
    HostTensor mul_ref({r, c});
    cpu().sigmoid_mul(x, gate, mul_ref);
    HostTensor add_ref = y0.clone();
    cpu().add_sigmoid_scaled(add_ref, x, s);

    auto view = [&](const DeviceTensor& t) {
        return t.view().rows(offset, offset + n).reshape({r, c});
    };
    auto put = [&](const HostTensor& h) {
        DeviceTensor d(gpu(), {n + offset}, DType::bf16);
        from_host_f32(gpu(), view(d), h);
        return d;
    };
    DeviceTensor gx = put(x), gg = put(gate), gy = put(y0);
    DeviceTensor out(gpu(), {n + offset}, DType::bf16);
    test::poison(gpu(), out);
    DeviceTensor gs = test::to_gpu(gpu(), s, DType::f32);
    auto tol = [](const HostTensor& ref) { return test::bf16_tol(1e-3 * test::max_abs(ref)); };
    gpu().sigmoid_mul(view(gx), view(gg), view(out));
    HostTensor got = test::to_cpu(gpu(), view(out));
    EXPECT_EQ(mismatch(got, mul_ref, tol(mul_ref)), "") << what << ": sigmoid_mul";
    gpu().add_sigmoid_scaled(view(gy), view(gx), gs);
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), view(gy)), add_ref, tol(add_ref)), "")
        << what << ": add_sigmoid_scaled";
    // In place (y = x): the same bits as into a separate buffer.
    gpu().sigmoid_mul(view(gx), view(gg), view(gx));
    EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), view(gx)), got), "") << what << ": in place";
}

TEST_F(CudaGating, MatchesCpuOnAwkwardShapes) {
    Rng rng(1);
    for (int64_t r : {1, 3, 257})
        for (int64_t c : {64, 1000, 13}) check(r, c, 0, rng);
    check(3, 1000, 1, rng);
    check(257, 13, 1, rng);
}

TEST_F(CudaGating, SigmoidMulBwdMatchesCpu) {
    Rng rng(2);
    for (int64_t r : {1, 3, 64, 257, 2049})
        for (int64_t c : {5, 64, 1000}) {
            const std::string what = "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
            const HostTensor dy = test::bf16_values({r, c}, rng),
                             x = test::bf16_values({r, c}, rng);
            const HostTensor g = test::bf16_values({r, c}, rng, 8.0f);
            const HostTensor dx0 = test::bf16_values({r, c}, rng),
                             sum0 = test::f32_values({c}, rng);
            HostTensor dx = dx0.clone(), dg({r, c}), sum = sum0.clone();
            cpu().sigmoid_mul_bwd(dy, x, g, dx, dg, sum);
            const DeviceTensor gdy = test::to_gpu(gpu(), dy, DType::bf16);
            const DeviceTensor gx = test::to_gpu(gpu(), x, DType::bf16);
            const DeviceTensor gg = test::to_gpu(gpu(), g, DType::bf16);
            DeviceTensor gdx = test::to_gpu(gpu(), dx0, DType::bf16),
                         gdg(gpu(), {r, c}, DType::bf16);
            DeviceTensor gsum = test::to_gpu(gpu(), sum0, DType::f32);
            test::poison(gpu(), gdg);
            gpu().sigmoid_mul_bwd(gdy, gx, gg, gdx, gdg, gsum);
            const auto tol = [](const HostTensor& ref) {
                return test::bf16_tol(1e-3 * test::max_abs(ref));
            };
            EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdx), dx, tol(dx)), "") << what << ": dx";
            const HostTensor got_dg = test::to_cpu(gpu(), gdg);
            EXPECT_EQ(mismatch(got_dg, dg, tol(dg)), "") << what << ": dgate";
            const double sum_tol = 1e-6 * static_cast<double>(r) * test::max_abs(dg) + 1e-6;
            const HostTensor got_sum = test::to_cpu(gpu(), gsum);
            EXPECT_EQ(mismatch(got_sum, sum, {1e-4, 1e-5, sum_tol}), "") << what << ": dgate_sum";
            // Deterministic: a second run from the same inputs gives the same bits.
            DeviceTensor gdx2 = test::to_gpu(gpu(), dx0, DType::bf16),
                         gdg2(gpu(), {r, c}, DType::bf16);
            DeviceTensor gsum2 = test::to_gpu(gpu(), sum0, DType::f32);
            gpu().sigmoid_mul_bwd(gdy, gx, gg, gdx2, gdg2, gsum2);
            EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gsum2), got_sum), "") << what;
            EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gdg2), got_dg), "") << what;
        }
}

TEST_F(CudaGating, RejectsBadArguments) {
    DeviceTensor a(gpu(), {4, 8}, DType::bf16), b(gpu(), {4, 7}, DType::bf16);
    DeviceTensor s3(gpu(), {3}, DType::f32), s4bf(gpu(), {4}, DType::bf16);
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().sigmoid_mul(a, b, a); }), "must match"));
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().add_sigmoid_scaled(a, a, s3); }),
                          "one gate logit a row"));
    EXPECT_FALSE(test::error_of([&] { gpu().add_sigmoid_scaled(a, a, s4bf); }).empty());
    DeviceTensor c8(gpu(), {8}, DType::f32), c7(gpu(), {7}, DType::f32),
        d(gpu(), {4, 8}, DType::bf16);
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().sigmoid_mul_bwd(a, a, a, d, d, c7); }), "dgate_sum"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().sigmoid_mul_bwd(a, a, b, d, d, c8); }), "must match"));
}

}  // namespace
}  // namespace dflash
