// cuda::confidence_bce (DSpark's confidence loss) against the CPU reference on the same bf16
// logits: row counts 1, 7, 1000 and 8193 (past one block's 1024 threads several times), untrained
// rows, TV values outside [0, 1], logits far out on both sides, the accumulation into loss_rows and
// dbias, and the form without a gradient. Both compute in double from equal inputs, so the loss
// agrees to f32 rounding, dz to one bf16 rounding and dbias to the summation order.
#include <cmath>
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;

class CudaConfidenceBce : public test::CudaVsCpu {};

TEST_F(CudaConfidenceBce, MatchesCpu) {
    Rng rng(7);
    for (int64_t r : {1, 7, 1000, 8193}) {
        const std::string what = std::to_string(r) + " rows";
        HostTensor z = test::bf16_values({r, 1}, rng, 4.0f), tv({r}), w({r}), gw({r});
        for (int64_t i = 0; i < r; ++i) {
            tv.f32()[i] = 1.4f * rng.uniform() - 0.2f;
            w.f32()[i] = rng.uniform() < 0.2f ? 0.0f : 0.3f + rng.uniform();
            gw.f32()[i] = 0.01f * w.f32()[i];
        }
        if (r > 2) z.f32()[0] = 80.0f, z.f32()[1] = -80.0f;
        HostTensor loss0 = test::f32_values({r}, rng), bias0({1});
        bias0.f32()[0] = 0.5f;
        HostTensor loss = loss0.clone(), dz({r, 1}), bias = bias0.clone();
        cpu().confidence_bce(z, tv, w, gw, 0.9f, loss, dz, bias);

        DeviceTensor gz = test::to_gpu(gpu(), z, DType::bf16);
        DeviceTensor gtv = test::to_gpu(gpu(), tv, DType::f32),
                     gwd = test::to_gpu(gpu(), w, DType::f32);
        DeviceTensor ggw = test::to_gpu(gpu(), gw, DType::f32);
        DeviceTensor gloss = test::to_gpu(gpu(), loss0, DType::f32);
        DeviceTensor gbias = test::to_gpu(gpu(), bias0, DType::f32);
        DeviceTensor gdz(gpu(), {r, 1}, DType::bf16);
        test::poison(gpu(), gdz);
        gpu().confidence_bce(gz, gtv, gwd, ggw, 0.9f, gloss, gdz, gbias);
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), gloss), loss, {1e-6, 1e-6, 1e-6}), "")
            << what << ": loss_rows";
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdz), dz, test::bf16_tol(1e-9)), "")
            << what << ": dz";
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), gbias), bias, {1e-5, 1e-5, 1e-6}), "")
            << what << ": dbias";

        // Without a gradient: the same loss rows.
        DeviceTensor gloss2 = test::to_gpu(gpu(), loss0, DType::f32);
        gpu().confidence_bce(gz, gtv, gwd, Tensor(), 0.9f, gloss2, Tensor(), Tensor());
        EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gloss2), test::to_cpu(gpu(), gloss)), "")
            << what << ": no gradient";
    }
}

TEST_F(CudaConfidenceBce, RejectsBadArguments) {
    DeviceTensor z(gpu(), {4, 1}, DType::bf16), zf(gpu(), {4, 1}, DType::f32);
    DeviceTensor v4(gpu(), {4}, DType::f32), v3(gpu(), {3}, DType::f32),
        one(gpu(), {1}, DType::f32);
    EXPECT_TRUE(test::has(
        test::error_of([&] { gpu().confidence_bce(z, v3, v4, v4, 1.0f, v4, z, one); }), "tv"));
    EXPECT_FALSE(
        test::error_of([&] { gpu().confidence_bce(zf, v4, v4, v4, 1.0f, v4, zf, one); }).empty());
    EXPECT_FALSE(test::error_of([&] {
                     gpu().confidence_bce(z, v4, v4, v4, 1.0f, v4, Tensor(), one);
                 }).empty());
}

}  // namespace
}  // namespace dflash
