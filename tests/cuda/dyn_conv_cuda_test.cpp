// CUDA grouped dynamic causal convolution (forward and backward) against the CPU reference on the
// same bf16 values: awkward R x D, k in {1, 2, 3}, several groupings and block sizes, both halves.
// Tolerances: y, dx and ddelta are bf16 from fp32 sums in the CPU's order (one bf16 rounding:
// bf16_tol with 1e-3 of the largest |ref|); dbase is f32 summed over the rows in the CPU's order
// (1e-5 of the largest |ref|). The other half of ddelta must be left untouched (poisoned here).
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;

struct Case {
    int64_t R, D, k, G, bs;
};

class CudaDynConv : public test::CudaVsCpu {
  protected:
    void check(const Case& cs, int64_t half, Rng& rng);
};

void CudaDynConv::check(const Case& cs, int64_t half, Rng& rng) {
    const std::string what = "R " + std::to_string(cs.R) + " D " + std::to_string(cs.D) + " k " +
                             std::to_string(cs.k) + " G " + std::to_string(cs.G) + " bs " +
                             std::to_string(cs.bs) + " half " + std::to_string(half);
    const int64_t W = 2 * cs.k * cs.G;
    HostTensor x = test::bf16_values({cs.R, cs.D}, rng);
    HostTensor base = test::bf16_values({2, cs.k, cs.D}, rng);
    HostTensor delta = test::bf16_values({cs.R, W}, rng, 0.5f);
    HostTensor dy = test::bf16_values({cs.R, cs.D}, rng);
    HostTensor dbase0 = test::f32_values({2, cs.k, cs.D}, rng);
    HostTensor y_ref({cs.R, cs.D}), dx_ref({cs.R, cs.D}), dbase_ref = dbase0.clone(),
                                                          ddelta_ref({cs.R, W});
    fill_f32(ddelta_ref, 7.0f);
    cpu().dyn_conv_fwd(x, base, delta, half, cs.bs, y_ref);
    cpu().dyn_conv_bwd(dy, x, base, delta, half, cs.bs, dx_ref, dbase_ref, ddelta_ref);

    DeviceTensor gx = test::to_gpu(gpu(), x, DType::bf16),
                 gb = test::to_gpu(gpu(), base, DType::bf16);
    DeviceTensor gd = test::to_gpu(gpu(), delta, DType::bf16),
                 gdy = test::to_gpu(gpu(), dy, DType::bf16);
    DeviceTensor gy(gpu(), {cs.R, cs.D}, DType::bf16), gdx(gpu(), {cs.R, cs.D}, DType::bf16);
    DeviceTensor gdbase = test::to_gpu(gpu(), dbase0, DType::f32);
    DeviceTensor gdd(gpu(), {cs.R, W}, DType::bf16);
    test::poison(gpu(), gy);
    test::poison(gpu(), gdx);
    gpu().fill(gdd, 7.0f);
    gpu().dyn_conv_fwd(gx, gb, gd, half, cs.bs, gy);
    gpu().dyn_conv_bwd(gdy, gx, gb, gd, half, cs.bs, gdx, gdbase, gdd);
    auto tol = [](const HostTensor& ref) { return test::bf16_tol(1e-3 * test::max_abs(ref)); };
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gy), y_ref, tol(y_ref)), "") << what << ": y";
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdx), dx_ref, tol(dx_ref)), "") << what << ": dx";
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdd), ddelta_ref, tol(ddelta_ref)), "")
        << what << ": ddelta";
    const test::Tol f32_tol{1e-5, 1e-5, 1e-5 * test::max_abs(dbase_ref)};
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdbase), dbase_ref, f32_tol), "") << what << ": dbase";
}

TEST_F(CudaDynConv, MatchesCpuOnAwkwardShapes) {
    Rng rng(1);
    for (const Case& cs : {Case{16, 64, 2, 4, 16}, Case{24, 48, 2, 3, 8}, Case{35, 40, 3, 5, 7},
                           Case{7, 13, 1, 13, 7}, Case{96, 320, 2, 20, 16}, Case{5, 16, 2, 1, 1}})
        for (int64_t half : {0, 1}) check(cs, half, rng);
}

TEST_F(CudaDynConv, BadArgumentsAreErrors) {
    DeviceTensor x(gpu(), {8, 6}, DType::bf16), base(gpu(), {2, 2, 6}, DType::bf16);
    DeviceTensor delta(gpu(), {8, 12}, DType::bf16), y(gpu(), {8, 6}, DType::bf16);
    DeviceTensor yf(gpu(), {8, 6}, DType::f32);
    EXPECT_NO_THROW(gpu().dyn_conv_fwd(x, base, delta, 0, 4, y));
    EXPECT_THROW(gpu().dyn_conv_fwd(x, base, delta, 0, 3, y), Error);
    EXPECT_THROW(gpu().dyn_conv_fwd(x, base, delta, 0, 4, yf), Error);
    EXPECT_THROW(gpu().dyn_conv_fwd(x, base, delta, 0, 4, x), Error);
}

}  // namespace
}  // namespace dflash
