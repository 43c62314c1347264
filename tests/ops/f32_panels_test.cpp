// The fp32 weight panels (backend/cpu/f32_panels.h), for every family with panel kernels that the
// CPU runs: on awkward shapes and beta, the bits of sgemm's packed NT path (one FMA chain per
// element over k in order), hence near a double product; a row alone equal to the same row among
// 8 or 40 (a decode against a verify) bit for bit; any thread count and either family giving the
// same bits; C not read when beta = 0; and the CPU backend's prepared copies in linear().
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/f32_panels.h"
#include "backend/cpu/sgemm.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using cpu::CpuIsa;

std::vector<CpuIsa> panel_isas() {
    std::vector<CpuIsa> out;
    for (const CpuIsa isa : test::supported_isas())
        if (cpu::f32_panels_supported(isa)) out.push_back(isa);
    return out;
}

std::vector<float> normals(int64_t count, Rng& rng) {
    std::vector<float> v(static_cast<size_t>(std::max<int64_t>(1, count)));
    for (float& x : v) x = static_cast<float>(rng.normal());
    return v;
}

// y = x · Wᵀ + beta * y through panels of `isa` on `threads` threads; y starts as y0 (NaN where
// beta == 0: it must not be read).
std::vector<float> through_panels(CpuIsa isa, int threads, int64_t m, int64_t n, int64_t k,
                                  const std::vector<float>& x, const std::vector<float>& w,
                                  float beta, const std::vector<float>& y0) {
    const cpu::PooledExec ex(threads);
    const cpu::F32Panels p = cpu::pack_f32_panels(ex, isa, w.data(), n, k);
    std::vector<float> y = y0;
    if (beta == 0.0f) std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
    cpu::linear_f32_panels(ex, m, x.data(), k, p, beta, y.data(), n);
    return y;
}

TEST(F32Panels, EqualThePackedSgemmPathBitForBitForAnyRowsThreadsAndFamily) {
    if (panel_isas().empty()) GTEST_SKIP() << "no AVX2 or AVX-512 here";
    Rng rng(21);
    const int64_t shapes[][3] = {{1, 1, 1},    {1, 47, 3},    {2, 48, 16},  {3, 49, 17},
                                 {7, 100, 31}, {8, 264, 256}, {9, 130, 65}, {16, 16, 129},
                                 {33, 97, 40}, {40, 203, 301}};
    for (const auto& s : shapes) {
        const int64_t m = s[0], n = s[1], k = s[2];
        const std::vector<float> x = normals(m * k, rng), w = normals(n * k, rng);
        const std::vector<float> y0 = normals(m * n, rng);
        for (const float beta : {0.0f, 1.0f, -0.5f}) {
            // The reference: sgemm's packed NT path (plan_rows >= kSgemmPackRows), alpha = 1.
            std::vector<float> ref = y0;
            cpu::sgemm(m, n, k, 1.0f, {x.data(), k, false}, {w.data(), k, true}, beta, ref.data(),
                       n, cpu::kSgemmPackRows);
            for (const CpuIsa isa : panel_isas()) {
                for (const int threads : {1, 3}) {
                    const std::vector<float> y =
                        through_panels(isa, threads, m, n, k, x, w, beta, y0);
                    EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
                        << cpu::isa_name(isa) << " threads " << threads << " m=" << m << " n=" << n
                        << " k=" << k << " beta=" << beta;
                }
            }
        }
    }
}

TEST(F32Panels, ARowAloneEqualsTheSameRowAmongOthers) {
    if (panel_isas().empty()) GTEST_SKIP() << "no AVX2 or AVX-512 here";
    Rng rng(22);
    const int64_t n = 203, k = 301;
    const std::vector<float> w = normals(n * k, rng);
    for (const CpuIsa isa : panel_isas()) {
        const cpu::PooledExec ex(1);
        const cpu::F32Panels p = cpu::pack_f32_panels(ex, isa, w.data(), n, k);
        for (const int64_t m : {int64_t{8}, int64_t{40}}) {
            const std::vector<float> x = normals(m * k, rng);
            std::vector<float> whole(m * n), part(m * n);
            cpu::linear_f32_panels(ex, m, x.data(), k, p, 0.0f, whole.data(), n);
            for (int64_t i = 0; i < m; ++i)
                cpu::linear_f32_panels(ex, 1, x.data() + i * k, k, p, 0.0f, part.data() + i * n, n);
            EXPECT_EQ(std::memcmp(whole.data(), part.data(), whole.size() * 4), 0)
                << cpu::isa_name(isa) << " m=" << m;
        }
    }
}

TEST(F32Panels, TheCpuBackendMultipliesThroughItsCopy) {
    auto be = make_cpu_backend(2);
    Rng rng(23);
    const HostTensor w = test::random_tensor({70, 33}, rng), x = test::random_tensor({8, 33}, rng);
    const std::unique_ptr<PreparedWeight> copy = be->prepare_f32_weight(w.view());
    if (!cpu::f32_panels_supported(cpu::detected_isa())) {
        EXPECT_EQ(copy, nullptr);
        return;
    }
    ASSERT_NE(copy, nullptr);
    HostTensor y({8, 70}), ref({8, 70});
    be->linear(x.view(), w.view(), copy.get(), y.view());
    cpu::sgemm(8, 70, 33, 1.0f, {x.f32(), 33, false}, {w.f32(), 33, true}, 0.0f, ref.f32(), 70,
               cpu::kSgemmPackRows);
    EXPECT_EQ(std::memcmp(y.f32(), ref.f32(), 8 * 70 * 4), 0);
    // A copy of another tensor is refused.
    const HostTensor other = test::random_tensor({70, 33}, rng);
    EXPECT_THROW(be->linear(x.view(), other.view(), copy.get(), y.view()), Error);
}

}  // namespace
}  // namespace dflash
