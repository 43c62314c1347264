// CUDA copy family against the host conversions, bit for bit: f32 -> bf16 over special values and
// random bit patterns (NaN payloads, infinities, ties, subnormals) on aligned and misaligned views,
// every bf16 -> f32, same-dtype copies, copy_columns into the middle and edges of wider rows, fill
// of each dtype, and the errors for bad arguments. Tolerance: exact (0 ulp).
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::bit_mismatch;

HostTensor raw_f32(const std::vector<uint32_t>& bits) {
    HostTensor t({static_cast<int64_t>(bits.size())}, DType::f32);
    std::memcpy(t.f32(), bits.data(), bits.size() * 4);
    return t;
}

std::vector<uint32_t> conversion_inputs(size_t random_count) {
    std::vector<uint32_t> v = {
        0x00000000u, 0x80000000u,  // +-0
        0x7f800000u, 0xff800000u,  // +-inf
        0x7fc00000u, 0xffc00000u,  // quiet NaNs
        0x7f800001u, 0xff800001u,  // signalling NaNs (low payload only)
        0x7fbfffffu, 0x7fffffffu,  // NaN with payload above and below bit 16
        0x3f808000u, 0x3f818000u,  // exact ties: round to even down / up
        0x3f807fffu, 0x3f808001u,  // just below / above a tie
        0x7f7fffffu, 0xff7fffffu,  // largest finite: rounds to inf
        0x00000001u, 0x007fffffu,  // subnormals
        0x00808000u, 0x7f7f8000u,
    };
    Rng rng(11);
    for (size_t i = 0; i < random_count; ++i) v.push_back(static_cast<uint32_t>(rng.next_u64()));
    return v;
}

class CudaCopy : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        be_ = std::make_unique<test::Backends>();
    }
    Backend& gpu() { return *be_->gpu; }
    std::unique_ptr<test::Backends> be_;
};

TEST_F(CudaCopy, F32ToBf16MatchesTheHostConversionBitForBit) {
    const auto bits = conversion_inputs(1000003);
    const int64_t n = static_cast<int64_t>(bits.size());
    HostTensor src = raw_f32(bits);
    HostTensor want({n}, DType::bf16);
    for (int64_t i = 0; i < n; ++i) want.view().bf16()[i] = f32_to_bf16(src.f32()[i]);
    DeviceTensor d_src(gpu(), {n + 1}, DType::f32);
    DeviceTensor d_dst(gpu(), {n + 1}, DType::bf16);
    // offset 0: the 16-byte path; offset 1: the scalar path (views that start mid-vector).
    for (int64_t off : {0, 1}) {
        const Tensor s = d_src.view().rows(off, off + n);
        const Tensor d = d_dst.view().rows(off, off + n);
        gpu().upload(s, src);
        gpu().fill(d, 1.0f);
        gpu().copy(d, s);
        HostTensor got({n}, DType::bf16);
        gpu().download(got, d);
        EXPECT_EQ(bit_mismatch(got, want), "") << "offset " << off;
    }
}

TEST_F(CudaCopy, Bf16ToF32IsExactForEveryPattern) {
    const int64_t n = 65536 + 3;
    HostTensor src({n}, DType::bf16);
    HostTensor want({n}, DType::f32);
    for (int64_t i = 0; i < n; ++i) {
        src.view().bf16()[i] = static_cast<uint16_t>(i);
        want.f32()[i] = bf16_to_f32(static_cast<uint16_t>(i));
    }
    DeviceTensor d_src(gpu(), {n + 1}, DType::bf16);
    DeviceTensor d_dst(gpu(), {n + 1}, DType::f32);
    for (int64_t off : {0, 1}) {
        const Tensor s = d_src.view().rows(off, off + n);
        const Tensor d = d_dst.view().rows(off, off + n);
        gpu().upload(s, src);
        test::poison(gpu(), d);
        gpu().copy(d, s);
        HostTensor got({n}, DType::f32);
        gpu().download(got, d);
        EXPECT_EQ(bit_mismatch(got, want), "") << "offset " << off;
    }
}

TEST_F(CudaCopy, SameDtypeCopiesBytes) {
    Rng rng(3);
    for (int64_t n : {1, 7, 4097}) {
        HostTensor ids({n}, DType::i32);
        for (int64_t i = 0; i < n; ++i) ids.i32()[i] = static_cast<int32_t>(rng.next_u64());
        DeviceTensor a = test::to_gpu_i32(gpu(), ids);
        DeviceTensor b(gpu(), {n}, DType::i32);
        gpu().copy(b, a);
        HostTensor got({n}, DType::i32);
        gpu().download(got, b);
        EXPECT_EQ(bit_mismatch(got, ids), "") << "i32 n=" << n;

        HostTensor x = test::f32_values({n}, rng);
        DeviceTensor c = test::to_gpu(gpu(), x, DType::f32);
        DeviceTensor d(gpu(), {1, n}, DType::f32);  // another shape, same element count
        gpu().copy(d, c);
        HostTensor got_f({n}, DType::f32);
        gpu().download(got_f, d.view().reshape({n}));
        EXPECT_EQ(bit_mismatch(got_f, x), "") << "f32 n=" << n;
    }
}

TEST_F(CudaCopy, CopyColumnsPlacesABlockAndLeavesTheRest) {
    Rng rng(4);
    for (DType dt : {DType::f32, DType::bf16}) {
        for (const auto [rows, width, cols, col] : {std::array<int64_t, 4>{37, 300, 100, 150},
                                                    {1, 5, 5, 0},
                                                    {3, 1000, 1, 999},
                                                    {257, 64, 13, 0}}) {
            HostTensor dst0 = test::bf16_values({rows, width}, rng);
            HostTensor src = test::bf16_values({rows, cols}, rng);
            DeviceTensor d = test::to_gpu(gpu(), dst0, dt);
            DeviceTensor s = test::to_gpu(gpu(), src, dt);
            gpu().copy_columns(d, col, s);
            HostTensor got = test::to_cpu(gpu(), d);
            HostTensor want = dst0.clone();
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    want.f32()[r * width + col + c] = src.f32()[r * cols + c];
            EXPECT_EQ(bit_mismatch(got, want), "")
                << dtype_name(dt) << " rows " << rows << " width " << width << " cols " << cols
                << " col " << col;
        }
    }
}

TEST_F(CudaCopy, FillWritesEveryElementOfEachDtype) {
    for (int64_t n : {1, 7, 1000003}) {
        DeviceTensor f(gpu(), {n + 1}, DType::f32);
        DeviceTensor h(gpu(), {n + 1}, DType::bf16);
        DeviceTensor i(gpu(), {n + 1}, DType::i32);
        for (int64_t off : {0, 1}) {
            gpu().fill(f.view().rows(off, off + n), -1.7f);
            gpu().fill(h.view().rows(off, off + n), -1.7f);
            gpu().fill(i.view().rows(off, off + n), -3.0f);
            HostTensor gf({n}, DType::f32), gh({n}, DType::bf16), gi({n}, DType::i32);
            gpu().download(gf, f.view().rows(off, off + n));
            gpu().download(gh, h.view().rows(off, off + n));
            gpu().download(gi, i.view().rows(off, off + n));
            HostTensor wf({n}, DType::f32), wh({n}, DType::bf16), wi({n}, DType::i32);
            for (int64_t k = 0; k < n; ++k) {
                wf.f32()[k] = -1.7f;
                wh.view().bf16()[k] = f32_to_bf16(-1.7f);
                wi.i32()[k] = -3;
            }
            EXPECT_EQ(bit_mismatch(gf, wf), "") << "f32 n=" << n << " off " << off;
            EXPECT_EQ(bit_mismatch(gh, wh), "") << "bf16 n=" << n << " off " << off;
            EXPECT_EQ(bit_mismatch(gi, wi), "") << "i32 n=" << n << " off " << off;
        }
        // The element before an offset view is untouched.
        gpu().fill(f, 0.0f);
        gpu().fill(f.view().rows(1, n + 1), 2.0f);
        HostTensor first({1}, DType::f32);
        gpu().download(first, f.view().rows(0, 1));
        EXPECT_EQ(first.f32()[0], 0.0f);
    }
}

TEST_F(CudaCopy, RejectsBadArguments) {
    DeviceTensor a(gpu(), {4, 6}, DType::f32);
    DeviceTensor b(gpu(), {4, 6}, DType::i32);
    DeviceTensor c(gpu(), {5}, DType::f32);
    DeviceTensor s(gpu(), {4, 3}, DType::f32);
    HostTensor host({4, 6});
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().copy(b, a); }), "cannot convert"));
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().copy(c, a); }), "same element count"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().copy(a, host); }), "expected a tensor on cuda:0"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().copy_columns(a, 4, s); }), "cannot place src"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().fill(host, 1.0f); }), "expected a tensor on cuda:0"));
}

}  // namespace
}  // namespace dflash
