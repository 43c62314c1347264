// CUDA RMSNorm against the CPU reference on the same bf16 values, rows R in {1, 3, 257, 4097} x
// C in {64, 128, 1000, 4096}, plus C = 8192, odd C (the scalar path) and the per-head [S, H, Dh]
// view. Tolerances: y and dx (bf16) within one bf16 rounding, 1/256 |ref| + 1e-3 max|ref| per
// element and 1e-2 relative error norm; rstd (f32) 1e-5 relative per element; dw (f32, summed
// over rows in fp32 vs the CPU's double) 1e-4 relative per element + 1e-4 max|ref|. The backward
// repeats bit for bit (dx and dw). The forward with an f32 weight (the hybrid families' (1 + w)).
#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;
using test::Tol;

class CudaRmsNorm : public test::CudaVsCpu {
  protected:
    void check(Shape shape, int64_t c, Rng& rng);
};

void CudaRmsNorm::check(Shape shape, int64_t c, Rng& rng) {
    const std::string what = "x " + shape.to_string();
    const int64_t rows = shape.numel() / c;
    const float eps = 1e-6f;
    HostTensor x = test::bf16_values(shape, rng, 2.0f);
    HostTensor w = test::bf16_values({c}, rng);
    HostTensor dy = test::bf16_values(shape, rng);
    HostTensor dw0 = test::f32_values({c}, rng);

    HostTensor y_ref(shape), rstd_ref({rows}), dx_ref(shape);
    HostTensor dw_ref = dw0.clone();
    cpu().rmsnorm_fwd(x, w, eps, y_ref, rstd_ref);
    cpu().rmsnorm_bwd(dy, x, w, rstd_ref, dx_ref, dw_ref);

    DeviceTensor gx = test::to_gpu(gpu(), x, DType::bf16);
    DeviceTensor gw = test::to_gpu(gpu(), w, DType::bf16);
    DeviceTensor gdy = test::to_gpu(gpu(), dy, DType::bf16);
    DeviceTensor gy(gpu(), shape, DType::bf16), gdx(gpu(), shape, DType::bf16);
    DeviceTensor grstd(gpu(), {rows}, DType::f32);
    test::poison(gpu(), gy);
    test::poison(gpu(), grstd);
    gpu().rmsnorm_fwd(gx, gw, eps, gy, grstd);
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gy), y_ref, test::bf16_tol(1e-3 * test::max_abs(y_ref))),
              "")
        << what << ": y";
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), grstd), rstd_ref, Tol{1e-5, 1e-5, 0}), "")
        << what << ": rstd";

    // The forward without rstd writes the same y.
    DeviceTensor gy2(gpu(), shape, DType::bf16);
    gpu().rmsnorm_fwd(gx, gw, eps, gy2, Tensor());
    EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gy2), test::to_cpu(gpu(), gy)), "")
        << what << ": y without rstd";

    HostTensor dx_got, dw_got;
    for (int run = 0; run < 2; ++run) {
        DeviceTensor gdw = test::to_gpu(gpu(), dw0, DType::f32);
        test::poison(gpu(), gdx);
        gpu().rmsnorm_bwd(gdy, gx, gw, grstd, gdx, gdw);
        HostTensor dx = test::to_cpu(gpu(), gdx);
        HostTensor dw = test::to_cpu(gpu(), gdw);
        if (run == 0) {
            EXPECT_EQ(mismatch(dx, dx_ref, test::bf16_tol(1e-3 * test::max_abs(dx_ref))), "")
                << what << ": dx";
            EXPECT_EQ(mismatch(dw, dw_ref, Tol{1e-4, 1e-4, 1e-4 * test::max_abs(dw_ref)}), "")
                << what << ": dw";
            dx_got = std::move(dx);
            dw_got = std::move(dw);
        } else {
            EXPECT_EQ(test::bit_mismatch(dx, dx_got), "") << what << ": dx second run";
            EXPECT_EQ(test::bit_mismatch(dw, dw_got), "") << what << ": dw second run";
        }
    }
}

TEST_F(CudaRmsNorm, MatchesCpuOnAwkwardShapes) {
    Rng rng(1);
    for (int64_t r : {1, 3, 257, 4097})
        for (int64_t c : {64, 128, 1000, 4096}) check({r, c}, c, rng);
}

TEST_F(CudaRmsNorm, WideOddAndPerHeadRows) {
    Rng rng(2);
    check({5, 8192}, 8192, rng);
    check({7, 1001}, 1001, rng);    // odd C: the scalar path
    check({9, 3}, 3, rng);          // very short rows, 64 per block
    check({257, 8191}, 8191, rng);  // the longest scalar row
    check({33, 8, 128}, 128, rng);  // per-head q/k norm: R = S * H
    check({4097, 4, 64}, 64, rng);  // many short rows: several row chunks per block
}

// The hybrid families' (1 + w) scales stay f32 (TargetModel): the forward with an f32 weight is
// the CPU's f32 w * (x * rstd) rounded once (within one bf16 rounding), nearer to it over the
// whole tensor than the same weight rounded to bf16 gets (so the f32 values are what is read).
TEST_F(CudaRmsNorm, Float32WeightForward) {
    Rng rng(3);
    const float eps = 1e-6f;
    for (const auto& [shape, c] :
         {std::pair{Shape{257, 64}, int64_t{64}}, std::pair{Shape{5, 1000}, int64_t{1000}},
          std::pair{Shape{33, 8, 256}, int64_t{256}}, std::pair{Shape{7, 1001}, int64_t{1001}}}) {
        const std::string what = "x " + shape.to_string();
        const int64_t rows = shape.numel() / c;
        HostTensor x = test::bf16_values(shape, rng, 2.0f);
        HostTensor w = test::f32_values({c}, rng, 0.1f);
        for (int64_t i = 0; i < c; ++i) w.f32()[i] += 1.0f;
        HostTensor y_ref(shape), rstd_ref({rows});
        cpu().rmsnorm_fwd(x, w, eps, y_ref, rstd_ref);
        DeviceTensor gx = test::to_gpu(gpu(), x, DType::bf16);
        DeviceTensor gw = test::to_gpu(gpu(), w, DType::f32);
        DeviceTensor gw16 = test::to_gpu(gpu(), w, DType::bf16);
        DeviceTensor gy(gpu(), shape, DType::bf16), gy16(gpu(), shape, DType::bf16);
        DeviceTensor grstd(gpu(), {rows}, DType::f32);
        test::poison(gpu(), gy);
        gpu().rmsnorm_fwd(gx, gw, eps, gy, grstd);
        gpu().rmsnorm_fwd(gx, gw16, eps, gy16, Tensor());
        const HostTensor y = test::to_cpu(gpu(), gy), y16 = test::to_cpu(gpu(), gy16);
        EXPECT_EQ(mismatch(y, y_ref, test::bf16_tol(1e-3 * test::max_abs(y_ref))), "") << what;
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), grstd), rstd_ref, Tol{1e-5, 1e-5, 0}), "") << what;
        double err = 0, err16 = 0;
        for (int64_t i = 0; i < y_ref.numel(); ++i) {
            err += std::abs(double(y.f32()[i]) - y_ref.f32()[i]);
            err16 += std::abs(double(y16.f32()[i]) - y_ref.f32()[i]);
        }
        EXPECT_LT(err, err16) << what << ": the f32 weight was not read as f32";
    }
}

TEST_F(CudaRmsNorm, RejectsBadArguments) {
    DeviceTensor x(gpu(), {2, 16}, DType::bf16);
    DeviceTensor w(gpu(), {16}, DType::bf16);
    DeviceTensor w_bad(gpu(), {8}, DType::bf16);
    DeviceTensor y(gpu(), {2, 16}, DType::bf16);
    DeviceTensor dw(gpu(), {16}, DType::f32);
    DeviceTensor wide(gpu(), {1, 8200}, DType::bf16);
    DeviceTensor w_wide(gpu(), {8200}, DType::bf16);
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().rmsnorm_fwd(x, w_bad, 1e-6f, y, Tensor()); }),
                          "must equal w.numel()"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().rmsnorm_fwd(wide, w_wide, 1e-6f, wide, Tensor()); }),
                  "at most 8192"));
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().rmsnorm_bwd(y, x, w, Tensor(), y, dw); }),
                          "rstd is empty"));
}

}  // namespace
}  // namespace dflash
