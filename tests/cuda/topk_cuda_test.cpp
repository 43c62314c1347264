// CUDA top-K over rows against the CPU reference: the same indices and values, bit for bit, on
// awkward V (1 .. a Qwen3-sized vocabulary) and K (1 .. V), with many exact ties (values on a
// coarse grid) and -inf entries. Both sides read the same f32 values, so nothing may differ.
#include <cmath>
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

class CudaTopK : public test::CudaVsCpu {};

TEST_F(CudaTopK, MatchesCpuBitForBit) {
    Rng rng(3);
    struct Case {
        int64_t R, V, K;
    };
    for (const Case& c : {Case{1, 1, 1}, Case{3, 37, 5}, Case{15, 151936, 16}, Case{4, 1000, 64},
                          Case{2, 17, 17}, Case{5, 257, 1}, Case{1, 5000, 300}}) {
        const std::string what =
            "R " + std::to_string(c.R) + " V " + std::to_string(c.V) + " K " + std::to_string(c.K);
        HostTensor x({c.R, c.V});
        for (int64_t i = 0; i < x.numel(); ++i) {
            const double u = rng.uniform_f64();
            x.f32()[i] = u < 0.02 ? -INFINITY : static_cast<float>(static_cast<int>(u * 50)) - 20;
        }
        HostTensor v_ref({c.R, c.K}), i_ref({c.R, c.K}, DType::i32);
        cpu().topk_rows(x, v_ref, i_ref);
        DeviceTensor gx = test::to_gpu(gpu(), x, DType::f32);
        DeviceTensor gv(gpu(), {c.R, c.K}, DType::f32), gi(gpu(), {c.R, c.K}, DType::i32);
        test::poison(gpu(), gv);
        gpu().topk_rows(gx, gv, gi);
        HostTensor v_got({c.R, c.K}), i_got({c.R, c.K}, DType::i32);
        gpu().download(v_got, gv);
        gpu().download(i_got, gi);
        EXPECT_EQ(test::bit_mismatch(i_got, i_ref), "") << what << ": indices";
        EXPECT_EQ(test::bit_mismatch(v_got, v_ref), "") << what << ": values";
    }
}

TEST_F(CudaTopK, BadShapesAreErrors) {
    DeviceTensor x(gpu(), {2, 5}, DType::f32), v(gpu(), {2, 6}, DType::f32),
        i(gpu(), {2, 6}, DType::i32), xb(gpu(), {2, 5}, DType::bf16);
    DeviceTensor v3(gpu(), {2, 3}, DType::f32), i3(gpu(), {2, 3}, DType::i32);
    EXPECT_THROW(gpu().topk_rows(x, v, i), Error);
    EXPECT_THROW(gpu().topk_rows(xb, v3, i3), Error);
    EXPECT_NO_THROW(gpu().topk_rows(x, v3, i3));
}

}  // namespace
}  // namespace dflash
