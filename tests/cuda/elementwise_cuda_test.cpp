// CUDA add_inplace (all four f32/bf16 mixes of y and x) and scale_inplace against the CPU
// reference on the same values, n in {1, 7, 4097, 1000003}, aligned and misaligned views, alpha 1
// and -0.37. Tolerance: exact — f32 results have the CPU's bits (separately rounded multiply and
// add), bf16 results are the CPU's f32 result rounded to bf16.
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

class CudaElementwise : public test::CudaVsCpu {};

// The CPU's f32 result as the GPU stores it in `dt`.
HostTensor as_stored(const HostTensor& ref, DType dt) {
    return dt == DType::bf16 ? test::clone_rounded_bf16(ref) : ref.clone();
}

TEST_F(CudaElementwise, AddInplaceMatchesCpuForEveryDtypeMix) {
    Rng rng(1);
    for (DType ty : {DType::f32, DType::bf16})
        for (DType tx : {DType::f32, DType::bf16})
            for (int64_t n : {1, 7, 4097, 1000003})
                for (int64_t off : {0, 1})
                    for (float alpha : {1.0f, -0.37f}) {
                        const std::string what =
                            std::string("y ") + std::string(dtype_name(ty)) + " x " +
                            std::string(dtype_name(tx)) + " n " + std::to_string(n) + " offset " +
                            std::to_string(off) + " alpha " + std::to_string(alpha);
                        // Inputs hold values the GPU dtype stores exactly.
                        HostTensor y = ty == DType::bf16 ? test::bf16_values({n}, rng)
                                                         : test::f32_values({n}, rng);
                        HostTensor x = tx == DType::bf16 ? test::bf16_values({n}, rng)
                                                         : test::f32_values({n}, rng);
                        HostTensor ref = y.clone();
                        cpu().add_inplace(ref, x, alpha);
                        DeviceTensor gy(gpu(), {n + off}, ty), gx(gpu(), {n + off}, tx);
                        const Tensor vy = gy.view().rows(off, off + n);
                        const Tensor vx = gx.view().rows(off, off + n);
                        from_host_f32(gpu(), vy, y);
                        from_host_f32(gpu(), vx, x);
                        gpu().add_inplace(vy, vx, alpha);
                        EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), vy), as_stored(ref, ty)),
                                  "")
                            << what;
                    }
}

TEST_F(CudaElementwise, AddInplaceOfATensorToItself) {
    Rng rng(3);
    HostTensor y = test::f32_values({1001}, rng);
    HostTensor ref = y.clone();
    cpu().add_inplace(ref, ref, 0.5f);
    DeviceTensor g = test::to_gpu(gpu(), y, DType::f32);
    gpu().add_inplace(g, g, 0.5f);
    EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), g), ref), "");
}

TEST_F(CudaElementwise, ScaleInplaceMatchesCpu) {
    Rng rng(2);
    for (DType ty : {DType::f32, DType::bf16})
        for (int64_t n : {1, 7, 4097, 1000003})
            for (int64_t off : {0, 1}) {
                HostTensor y =
                    ty == DType::bf16 ? test::bf16_values({n}, rng) : test::f32_values({n}, rng);
                HostTensor ref = y.clone();
                cpu().scale_inplace(ref, -2.3f);
                DeviceTensor gy(gpu(), {n + off}, ty);
                const Tensor vy = gy.view().rows(off, off + n);
                from_host_f32(gpu(), vy, y);
                gpu().scale_inplace(vy, -2.3f);
                EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), vy), as_stored(ref, ty)), "")
                    << dtype_name(ty) << " n " << n << " offset " << off;
            }
}

TEST_F(CudaElementwise, RejectsBadArguments) {
    DeviceTensor y(gpu(), {4, 8}, DType::f32);
    DeviceTensor x(gpu(), {31}, DType::f32);
    DeviceTensor ids(gpu(), {32}, DType::i32);
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().add_inplace(y, x, 1.0f); }), "same element count"));
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().add_inplace(y, ids, 1.0f); }),
                          "expected f32 or bf16"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().scale_inplace(ids, 1.0f); }), "expected f32 or bf16"));
}

}  // namespace
}  // namespace dflash
