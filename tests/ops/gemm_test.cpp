// cpu::gemm: all four transpose combinations with alpha/beta against a naive double
// product, edge cases (K = 0, beta = 0 over NaN, rank-3 operands), shape errors, the linear-layer
// backward built from gemm against finite differences, and thread-count independence.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::max_rel_diff;
using test::random_tensor;

// C = alpha * op(A) op(B) + beta * C in double; A is stored [M, K] or [K, M] when transposed.
HostTensor naive_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c0,
                      int64_t m, int64_t k, int64_t n, double alpha, double beta) {
    HostTensor c = HostTensor(c0.shape());
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) {
                const double av = ta ? a.f32()[p * m + i] : a.f32()[i * k + p];
                const double bv = tb ? b.f32()[j * k + p] : b.f32()[p * n + j];
                acc += av * bv;
            }
            c.f32()[i * n + j] = static_cast<float>(alpha * acc + beta * c0.f32()[i * n + j]);
        }
    }
    return c;
}

struct Dims {
    int64_t m, k, n;
};

// fp32 against double: rounding grows like sqrt(K) * 6e-8 relative to the largest output;
// 1e-5 (the fp32 bound of docs/design.md "Numerics") leaves a wide margin for K <= 65.
constexpr double kFwdTol = 1e-5;

TEST(Gemm, AllTransposesMatchNaiveWithAlphaBeta) {
    Rng rng(1);
    const cpu::PooledExec ex{1};
    for (const Dims d :
         {Dims{1, 1, 1}, Dims{7, 13, 5}, Dims{17, 3, 31}, Dims{33, 65, 9}, Dims{260, 33, 530}}) {
        for (int combo = 0; combo < 4; ++combo) {
            const bool ta = combo & 1, tb = combo & 2;
            HostTensor a = random_tensor(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, rng);
            HostTensor b = random_tensor(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, rng);
            HostTensor c = random_tensor({d.m, d.n}, rng);
            HostTensor ref = naive_gemm(a, ta, b, tb, c, d.m, d.k, d.n, 0.7, -1.3);
            cpu::gemm(ex, a, ta, b, tb, c, 0.7f, -1.3f);
            EXPECT_LT(max_rel_diff(c, ref), kFwdTol)
                << "M=" << d.m << " K=" << d.k << " N=" << d.n << " ta=" << ta << " tb=" << tb;
        }
    }
}

TEST(Gemm, BetaZeroOverwritesNaNAndKZeroScalesC) {
    Rng rng(2);
    const cpu::PooledExec ex{1};
    HostTensor a = random_tensor({3, 4}, rng), b = random_tensor({4, 5}, rng);
    HostTensor c({3, 5});
    fill_f32(c, std::numeric_limits<float>::quiet_NaN());
    cpu::gemm(ex, a, false, b, false, c, 1.0f, 0.0f);
    for (int64_t i = 0; i < c.numel(); ++i) ASSERT_TRUE(std::isfinite(c.f32()[i])) << i;

    HostTensor a0({3, 0}), b0({0, 5});
    HostTensor c1 = random_tensor({3, 5}, rng);
    HostTensor expect = c1.clone();
    for (int64_t i = 0; i < expect.numel(); ++i) expect.f32()[i] *= 0.5f;
    cpu::gemm(ex, a0, false, b0, false, c1, 1.0f, 0.5f);
    EXPECT_EQ(max_rel_diff(c1, expect), 0.0);
}

TEST(Gemm, Rank3OperandIsFlattenedToRows) {
    // A linear layer on x [S, H, Dh] viewed as [S*H, Dh]: y = x · Wᵀ with W [out, Dh].
    Rng rng(3);
    HostTensor x = random_tensor({2, 3, 4}, rng), w = random_tensor({5, 4}, rng);
    HostTensor y({2, 3, 5}), y0({2, 3, 5});
    cpu::gemm(cpu::PooledExec{1}, x, false, w, true, y, 1.0f, 0.0f);
    HostTensor ref = naive_gemm(x, false, w, true, y0, 6, 4, 5, 1.0, 0.0);
    EXPECT_LT(max_rel_diff(y, ref), kFwdTol);
}

TEST(Gemm, ShapeErrorsNameTheShapes) {
    const cpu::PooledExec ex{1};
    HostTensor a({3, 4}), b({5, 6}), c({3, 6}), v({4});
    try {
        cpu::gemm(ex, a, false, b, false, c, 1.0f, 0.0f);
        FAIL() << "inner-dimension mismatch not detected";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[5, 6]"), std::string::npos) << msg;
    }
    HostTensor b2({4, 6}), cbad({3, 5});
    EXPECT_THROW(cpu::gemm(ex, a, false, b2, false, cbad, 1.0f, 0.0f), Error);
    EXPECT_THROW(cpu::gemm(ex, a, true, b2, false, c, 1.0f, 0.0f), Error);
    EXPECT_THROW(cpu::gemm(ex, v, false, b2, false, c, 1.0f, 0.0f), Error);
    HostTensor ai({3, 4}, DType::i32);
    EXPECT_THROW(cpu::gemm(ex, ai, false, b2, false, c, 1.0f, 0.0f), Error);
}

// The model's linear-layer backward is two gemms: dx = dy · W and dW += dyᵀ · x. Checked against
// finite differences of L = sum(dy * (x · Wᵀ)) evaluated in double (exactly linear, so the 4-point
// formula has no truncation error; the only error is the float gemm, ~1e-7 relative).
TEST(Gemm, LinearLayerBackwardMatchesFiniteDifferences) {
    Rng rng(4);
    const int64_t m = 5, in = 7, out = 3;
    HostTensor x = random_tensor({m, in}, rng), w = random_tensor({out, in}, rng);
    HostTensor dy = random_tensor({m, out}, rng);
    HostTensor dx({m, in}), dw({out, in});
    fill_f32(dw, 0.25f);  // dW accumulates: start from a non-zero value
    cpu::gemm(cpu::PooledExec{1}, dy, false, w, false, dx, 1.0f, 0.0f);
    cpu::gemm(cpu::PooledExec{1}, dy, true, x, false, dw, 1.0f, 1.0f);

    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
        double l = 0;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t o = 0; o < out; ++o) {
                double y = 0;
                for (int64_t p = 0; p < in; ++p) y += xv[i * in + p] * wv[o * in + p];
                l += dy.f32()[i * out + o] * y;
            }
        return l;
    };
    std::vector<double> xv(x.f32(), x.f32() + x.numel()), wv(w.f32(), w.f32() + w.numel());
    const auto gx =
        test::fd_gradient([&](const std::vector<double>& v) { return loss(v, wv); }, xv, 1e-3);
    const auto gw =
        test::fd_gradient([&](const std::vector<double>& v) { return loss(xv, v); }, wv, 1e-3);
    std::vector<double> ax(dx.f32(), dx.f32() + dx.numel()), aw(dw.numel());
    for (int64_t i = 0; i < dw.numel(); ++i) aw[i] = dw.f32()[i] - 0.25;
    const auto rx = test::compare_gradients(ax, gx), rw = test::compare_gradients(aw, gw);
    EXPECT_LT(rx.max_rel_err, 1e-5) << rx.to_string();
    EXPECT_LT(rw.max_rel_err, 1e-5) << rw.to_string();
}

// gemm splits C over its threads (by rows when M is large, else by columns); every element is
// computed alike whoever computes it (Note [sgemm]), so 1, 2 and 3 threads give the same bits.
// 300 x 1100 is split by rows, 8 x 1100 (a verify) by columns, with ragged edges.
TEST(Gemm, ThreadCountDoesNotChangeBits) {
    Rng rng(5);
    for (const int64_t m : {300, 8}) {
        for (int combo = 0; combo < 4; ++combo) {
            const bool ta = combo & 1, tb = combo & 2;
            HostTensor a = random_tensor(ta ? Shape{97, m} : Shape{m, 97}, rng);
            HostTensor b = random_tensor(tb ? Shape{1100, 97} : Shape{97, 1100}, rng);
            HostTensor c0 = random_tensor({m, 1100}, rng);
            HostTensor c1 = c0.clone();
            cpu::gemm(cpu::PooledExec{1}, a, ta, b, tb, c1, 1.5f, 0.5f);
            for (int threads : {2, 3}) {
                HostTensor ct = c0.clone();
                cpu::gemm(cpu::PooledExec{threads}, a, ta, b, tb, ct, 1.5f, 0.5f);
                EXPECT_EQ(std::memcmp(c1.f32(), ct.f32(), c1.nbytes()), 0)
                    << "m=" << m << " ta=" << ta << " tb=" << tb << " threads=" << threads;
            }
        }
    }
}

TEST(Gemm, CpuBackendForwardsToTheReference) {
    Rng rng(6);
    auto be = make_cpu_backend(2);
    HostTensor a = random_tensor({4, 6}, rng), b = random_tensor({6, 3}, rng);
    HostTensor c({4, 3}), ref({4, 3});
    be->gemm(a, false, b, false, c);
    cpu::gemm(cpu::PooledExec{1}, a, false, b, false, ref, 1.0f, 0.0f);
    EXPECT_EQ(std::memcmp(c.f32(), ref.f32(), c.nbytes()), 0);
}

}  // namespace
}  // namespace dflash
