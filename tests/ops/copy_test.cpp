// cpu::copy (same dtype and f32 <-> bf16), cpu::copy_columns, cpu::write_rows and cpu::fill: every
// element,
// including those past the point where the pool splits the work over threads, gets exactly the
// value of the scalar conversion; bad shapes are errors.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

// Above the ops' threshold for sharing (65536) and not a multiple of 3 threads.
constexpr int64_t kBig = 200003;

TEST(Copy, ConvertsEveryElementAsTheScalarConversionOnAnyThreadCount) {
    Rng rng(7);
    for (const int64_t n : {int64_t{5}, kBig}) {
        const HostTensor src = test::random_tensor({n}, rng, 3.0f);
        HostTensor half({n}, DType::bf16), back({n});
        cpu::copy(cpu::PooledExec{3}, half, src);
        cpu::copy(cpu::PooledExec{3}, back, half);
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(half.view().bf16()[i], f32_to_bf16(src.f32()[i])) << i;
            ASSERT_EQ(back.f32()[i], bf16_to_f32(half.view().bf16()[i])) << i;
        }
        HostTensor same({n});
        cpu::copy(cpu::PooledExec{3}, same, src);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(same.f32()[i], src.f32()[i]) << i;
    }
    HostTensor small({4}), big({5});
    EXPECT_THROW(cpu::copy(cpu::PooledExec{1}, small, big), Error);
}

TEST(Copy, FillSetsEveryElementOfEachDtype) {
    for (const int64_t n : {int64_t{3}, kBig}) {
        HostTensor f({n}), b({n}, DType::bf16), k({n}, DType::i32);
        cpu::fill(cpu::PooledExec{3}, f, -2.5f);
        cpu::fill(cpu::PooledExec{3}, b, 1.5f);
        cpu::fill(cpu::PooledExec{3}, k, 7.0f);
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(f.f32()[i], -2.5f) << i;
            ASSERT_EQ(bf16_to_f32(b.view().bf16()[i]), 1.5f) << i;
            ASSERT_EQ(k.i32()[i], 7) << i;
        }
    }
}

TEST(Copy, CopyColumnsPlacesABlockAndRefusesOneThatDoesNotFit) {
    HostTensor dst({3, 5});
    const HostTensor src = HostTensor::from_f32({3, 2}, {1, 2, 3, 4, 5, 6});
    cpu::copy_columns(cpu::PooledExec{2}, dst, 2, src);
    const float expect[15] = {0, 0, 1, 2, 0, 0, 0, 3, 4, 0, 0, 0, 5, 6, 0};
    for (int i = 0; i < 15; ++i) EXPECT_EQ(dst.f32()[i], expect[i]) << i;
    EXPECT_THROW(cpu::copy_columns(cpu::PooledExec{1}, dst, 4, src), Error);
}

TEST(Copy, WriteRowsPlacesRowsAtTheRowHeldInTheTensorAndNeverPastTheEnd) {
    Rng rng(9);
    for (const DType dt : {DType::f32, DType::bf16}) {
        HostTensor dst({7, 3, 5}, dt), src({2, 3, 5}, dt), row0({1}, DType::i32);
        std::vector<uint8_t> before(dst.nbytes());
        for (size_t i = 0; i < before.size(); ++i)
            static_cast<uint8_t*>(dst.view().data())[i] = static_cast<uint8_t>(rng.below(256));
        for (size_t i = 0; i < src.nbytes(); ++i)
            static_cast<uint8_t*>(src.view().data())[i] = static_cast<uint8_t>(rng.below(256));
        const size_t row = dst.nbytes() / 7;
        for (const int32_t r0 : {0, 3, 6, 7}) {
            std::memcpy(before.data(), dst.view().data(), dst.nbytes());
            row0.i32()[0] = r0;
            cpu::write_rows(cpu::PooledExec{1}, dst, row0, src);
            const auto* d = static_cast<const uint8_t*>(dst.view().data());
            const auto* s = static_cast<const uint8_t*>(src.view().data());
            for (size_t b = 0; b < dst.nbytes(); ++b) {
                const auto r = static_cast<int64_t>(b / row);
                const bool written = r >= r0 && r < r0 + 2;
                ASSERT_EQ(d[b], written ? s[b - static_cast<size_t>(r0) * row] : before[b])
                    << "row0 " << r0 << " byte " << b;
            }
        }
    }
    HostTensor dst({4, 6}), wrong({1, 5}), row0({1}, DType::i32), bad_row0({1});
    EXPECT_THROW(cpu::write_rows(cpu::PooledExec{1}, dst, row0, wrong), Error);
    EXPECT_THROW(cpu::write_rows(cpu::PooledExec{1}, dst, bad_row0, HostTensor({1, 6})), Error);
}

}  // namespace
}  // namespace dflash
