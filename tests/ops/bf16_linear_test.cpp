// The bf16 linear layer (backend/cpu/bf16_linear.h): rounding to bf16 against values worked out by
// hand; the portable kernel and (where the CPU has them) the AMX, AVX512-BF16 and AVX-512F kernels
// against a double-precision sum of the rounded operands, within fp32 summation's error bound, on
// awkward shapes, strides and beta; the AVX-512F kernel equal to the portable one bit for bit;
// their conversion of x equal to the scalar one bit for bit; any thread count giving the same bits;
// and the CPU backend's prepared weights in linear().
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/bf16_linear.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace dflash {
namespace {

using cpu::Bf16Kernel;

std::vector<Bf16Kernel> kernels_here() {
    std::vector<Bf16Kernel> k;
    for (const Bf16Kernel kern :
         {Bf16Kernel::portable, Bf16Kernel::avx512, Bf16Kernel::avx512_bf16, Bf16Kernel::amx})
        if (cpu::bf16_kernel_available(kern)) k.push_back(kern);
    return k;
}

uint32_t bits(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(uint32_t u) {
    float f = 0;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST(Bf16LinearTest, RoundsToNearestEvenAndFlushesDenormals) {
    EXPECT_EQ(cpu::to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(cpu::to_bf16(-2.0f), 0xc000);
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
    EXPECT_EQ(cpu::to_bf16(from_bits(0x3f808000u)), 0x3f80);
    // (1 + 2^-7) + 2^-8 is halfway too: up to the even 1 + 2^-6.
    EXPECT_EQ(cpu::to_bf16(from_bits(0x3f818000u)), 0x3f82);
    EXPECT_EQ(cpu::to_bf16(from_bits(0x3f808001u)), 0x3f81);  // just above halfway: up
    EXPECT_EQ(cpu::to_bf16(1e-40f), 0x0000);                  // a denormal: zero
    EXPECT_EQ(cpu::to_bf16(-1e-40f), 0x8000);
    EXPECT_EQ(cpu::to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(cpu::to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the top
    const uint16_t nan = cpu::to_bf16(std::numeric_limits<float>::quiet_NaN());
    EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
    EXPECT_TRUE(std::isnan(bf16_to_f32(cpu::to_bf16(from_bits(0x7f800001u)))));  // signalling
    EXPECT_EQ(bits(bf16_to_f32(0x3f81)), 0x3f810000u);
}

struct Shape3 {
    int64_t m, n, k;
};

// x [m, ldx], W [n, k], y [m, ldy].
struct Problem {
    int64_t m, n, k, ldx, ldy;
    std::vector<float> x, w, y0;
};

Problem make_problem(Rng& rng, Shape3 s, int64_t pad) {
    Problem p{s.m, s.n, s.k, s.k + pad, s.n + pad, {}, {}, {}};
    p.x.resize(static_cast<size_t>(p.m * p.ldx));
    p.w.resize(static_cast<size_t>(p.n * p.k));
    p.y0.resize(static_cast<size_t>(p.m * p.ldy));
    for (auto& v : p.x) v = rng.normal();
    for (auto& v : p.w) v = 0.05f * rng.normal();
    for (auto& v : p.y0) v = rng.normal();
    return p;
}

// Every output within fp32 summation's bound of the exact sum of the rounded operands (plus
// beta * y0, itself rounded once), and the columns past n left alone.
void expect_close(const Problem& p, const std::vector<float>& y, float beta, const char* what) {
    int64_t bad = 0;
    for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) {
            double exact = 0, mag = 0;
            for (int64_t c = 0; c < p.k; ++c) {
                const double a = bf16_to_f32(cpu::to_bf16(p.x[i * p.ldx + c])),
                             b = bf16_to_f32(cpu::to_bf16(p.w[j * p.k + c]));
                exact += a * b;
                mag += std::fabs(a * b);
            }
            const double y0 = p.y0[i * p.ldy + j];
            if (beta != 0.0f) {
                exact += beta * y0;
                mag += std::fabs(beta * y0);
            }
            const double bound =
                (static_cast<double>(p.k) + 2) * std::ldexp(1.0, -23) * mag + 1e-30;
            const double got = y[i * p.ldy + j];
            if (!(std::fabs(got - exact) <= bound) && bad++ < 5)
                ADD_FAILURE() << what << " [" << p.m << ", " << p.n << ", " << p.k << "] (" << i
                              << ", " << j << "): " << got << " vs " << exact << " (bound " << bound
                              << ")";
        }
        for (int64_t j = p.n; j < p.ldy; ++j)
            EXPECT_EQ(bits(y[i * p.ldy + j]), bits(p.y0[i * p.ldy + j])) << what << ": pad";
    }
    EXPECT_EQ(bad, 0) << what;
}

TEST(Bf16LinearTest, EachKernelMatchesTheExactSumOfRoundedOperands) {
    Rng rng(11);
    const cpu::Exec one{};
    // Edges of the 16-row, 16-column and 32-k tiles, several tiles, and k past one converted
    // chunk (1024).
    const Shape3 shapes[] = {{1, 1, 1},    {1, 16, 32},   {5, 37, 70},    {8, 768, 256},
                             {16, 15, 33}, {17, 100, 31}, {33, 65, 1100}, {3, 20, 2100}};
    for (const Shape3 s : shapes) {
        const Problem p = make_problem(rng, s, 3);
        const cpu::Bf16Weight w = cpu::pack_bf16_weight(one, p.w.data(), p.n, p.k);
        for (const Bf16Kernel kern : kernels_here()) {
            for (const float beta : {0.0f, 1.0f, -0.5f}) {
                std::vector<float> y = p.y0;
                cpu::linear_bf16_with(kern, one, p.m, p.x.data(), p.ldx, w, beta, y.data(), p.ldy);
                expect_close(p, y, beta, cpu::bf16_kernel_name(kern));
            }
        }
    }
}

// The AVX-512F kernel's FMAs on exact bf16 products round as the portable kernel's multiply-adds,
// in the same order: the same bits.
TEST(Bf16LinearTest, Avx512KernelGivesThePortableBits) {
    if (!cpu::bf16_kernel_available(Bf16Kernel::avx512)) GTEST_SKIP() << "no AVX-512F on this CPU";
    Rng rng(13);
    const cpu::Exec one{};
    for (const Shape3 s : {Shape3{8, 768, 256}, Shape3{17, 100, 31}, Shape3{3, 20, 2100}}) {
        const Problem p = make_problem(rng, s, 3);
        const cpu::Bf16Weight w = cpu::pack_bf16_weight(one, p.w.data(), p.n, p.k);
        for (const float beta : {0.0f, 1.0f}) {
            std::vector<float> a = p.y0, b = p.y0;
            cpu::linear_bf16_with(Bf16Kernel::portable, one, p.m, p.x.data(), p.ldx, w, beta,
                                  a.data(), p.ldy);
            cpu::linear_bf16_with(Bf16Kernel::avx512, one, p.m, p.x.data(), p.ldx, w, beta,
                                  b.data(), p.ldy);
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
                << "[" << s.m << ", " << s.n << ", " << s.k << "] beta " << beta;
        }
    }
}

TEST(Bf16LinearTest, BetaZeroDoesNotReadY) {
    Rng rng(5);
    const cpu::Exec one{};
    Problem p = make_problem(rng, {4, 20, 40}, 0);
    for (auto& v : p.y0) v = std::numeric_limits<float>::quiet_NaN();
    const cpu::Bf16Weight w = cpu::pack_bf16_weight(one, p.w.data(), p.n, p.k);
    for (const Bf16Kernel kern : kernels_here()) {
        std::vector<float> y = p.y0;
        cpu::linear_bf16_with(kern, one, p.m, p.x.data(), p.ldx, w, 0.0f, y.data(), p.ldy);
        for (const float v : y) ASSERT_FALSE(std::isnan(v)) << cpu::bf16_kernel_name(kern);
    }
}

// With k = 1 and W = 1 each output is bf16(x) itself: the vector conversion of x (AMX and
// AVX512-BF16 and AVX-512F kernels) must give the scalar conversion's bits, at ties, denormals,
// infinities and huge values too.
TEST(Bf16LinearTest, VectorKernelsConvertXAsTheScalarRoundingDoes) {
    if (cpu::best_bf16_kernel() == Bf16Kernel::portable) GTEST_SKIP() << "no AVX-512 on this CPU";
    const cpu::Exec one{};
    Rng rng(3);
    const std::vector<uint32_t> special = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x00000001u,
                                           0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu,
                                           0x7f800000u, 0xff800000u, 0x80000000u, 0x3f7fffffu};
    const int64_t m = 16 * 5;
    std::vector<float> x(m);
    for (int64_t i = 0; i < m; ++i)
        x[i] = i < static_cast<int64_t>(special.size())
                   ? from_bits(special[i])
                   : from_bits(static_cast<uint32_t>(rng.next_u64()) & 0xbfffffffu);
    const std::vector<float> ones(16, 1.0f);
    const cpu::Bf16Weight w = cpu::pack_bf16_weight(one, ones.data(), 16, 1);
    for (const Bf16Kernel kern : kernels_here()) {
        if (kern == Bf16Kernel::portable) continue;
        std::vector<float> y(m * 16);
        cpu::linear_bf16_with(kern, one, m, x.data(), 1, w, 0.0f, y.data(), 16);
        for (int64_t i = 0; i < m; ++i) {
            // The sum starts at +0, so a zero product gives +0 whatever its sign.
            const float want = 0.0f + bf16_to_f32(cpu::to_bf16(x[i]));
            for (int64_t j = 0; j < 16; ++j)
                ASSERT_EQ(bits(y[i * 16 + j]), bits(want))
                    << cpu::bf16_kernel_name(kern) << ": x = " << x[i] << " (0x" << std::hex
                    << bits(x[i]) << ")";
        }
    }
}

TEST(Bf16LinearTest, AnyThreadCountGivesTheSameBits) {
    Rng rng(7);
    const cpu::Exec one{};
    const cpu::PooledExec three(3);
    const Problem p = make_problem(rng, {9, 300, 260}, 1);
    const cpu::Bf16Weight w1 = cpu::pack_bf16_weight(one, p.w.data(), p.n, p.k);
    const cpu::Bf16Weight w3 = cpu::pack_bf16_weight(three, p.w.data(), p.n, p.k);
    const size_t tiles = static_cast<size_t>(w1.blocks() * w1.k_tiles) * 512;
    ASSERT_EQ(std::memcmp(w1.data.get(), w3.data.get(), tiles * 2), 0);
    for (const Bf16Kernel kern : kernels_here()) {
        std::vector<float> a = p.y0, b = p.y0;
        cpu::linear_bf16_with(kern, one, p.m, p.x.data(), p.ldx, w1, 1.0f, a.data(), p.ldy);
        cpu::linear_bf16_with(kern, three, p.m, p.x.data(), p.ldx, w1, 1.0f, b.data(), p.ldy);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << cpu::bf16_kernel_name(kern);
    }
}

// Backend::linear through a prepared copy is the bf16 product; without one it is gemm; a copy of
// another tensor is refused. Where the CPU has no AVX-512 the backend makes
// no copies.
TEST(Bf16LinearTest, CpuBackendPreparesCopiesOnlyWithAFastKernel) {
    auto be = make_cpu_backend(1);
    Rng rng(9);
    const int64_t m = 6, n = 40, k = 72;
    HostTensor x({m, k}), w({n, k}), other({n, k}), y({m, n}), y_ref({m, n});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.normal();
    for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = 0.05f * rng.normal();
    std::unique_ptr<PreparedWeight> p = be->prepare_bf16_weight(w.view());
    ASSERT_EQ(p != nullptr, cpu::best_bf16_kernel() != Bf16Kernel::portable);
    be->linear(x.view(), w.view(), nullptr, y_ref.view());
    HostTensor g({m, n});
    be->gemm(x.view(), false, w.view(), true, g.view());
    ASSERT_EQ(std::memcmp(y_ref.f32(), g.f32(), static_cast<size_t>(m * n) * 4), 0);
    if (!p) return;
    be->linear(x.view(), w.view(), p.get(), y.view());
    const cpu::Exec one{};
    const cpu::Bf16Weight packed = cpu::pack_bf16_weight(one, w.f32(), n, k);
    std::vector<float> want(static_cast<size_t>(m * n));
    cpu::linear_bf16(one, m, x.f32(), k, packed, 0.0f, want.data(), n);
    EXPECT_EQ(std::memcmp(y.f32(), want.data(), want.size() * 4), 0);
    EXPECT_THROW(be->linear(x.view(), other.view(), p.get(), y.view()), Error);
}

}  // namespace
}  // namespace dflash
