// The row-major to cuBLASLt mapping of the CUDA GEMM engine (backend/cuda/gemm_layout.h), checked
// without a GPU: a column-major GEMM with cuBLASLt's operand conventions, fed the mapped layouts
// and our row-major buffers, must reproduce the row-major product exactly (same integer inputs,
// same summation order) for every transpose combination and awkward sizes. Also the alignment
// helpers the plan key uses.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/gemm_layout.h"

namespace dflash::cuda {
namespace {

// Element (i, j) of op(X) for a column-major stored matrix X.
int64_t at(const std::vector<int64_t>& x, const LtOperand& o, int64_t i, int64_t j) {
    return o.trans ? x[static_cast<size_t>(i * o.ld + j)] : x[static_cast<size_t>(j * o.ld + i)];
}

// D = op(A) · op(B) the way cuBLASLt reads its layouts: all matrices column-major.
std::vector<int64_t> column_major_gemm(const LtGemm& g, const std::vector<int64_t>& a,
                                       const std::vector<int64_t>& b) {
    const int64_t rows = g.c.rows, cols = g.c.cols;
    const int64_t k = g.a.trans ? g.a.rows : g.a.cols;
    EXPECT_EQ(k, g.b.trans ? g.b.cols : g.b.rows) << "inner dimensions of the mapped operands";
    EXPECT_EQ(rows, g.a.trans ? g.a.cols : g.a.rows);
    EXPECT_EQ(cols, g.b.trans ? g.b.rows : g.b.cols);
    std::vector<int64_t> d(static_cast<size_t>(g.c.ld * cols), 0);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            int64_t acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += at(a, g.a, i, p) * at(b, g.b, p, j);
            d[static_cast<size_t>(j * g.c.ld + i)] = acc;
        }
    return d;
}

TEST(GemmLayout, ColumnMajorMappingReproducesRowMajorProduct) {
    int cases = 0;
    for (int64_t m : {1, 2, 7}) {
        for (int64_t n : {1, 3, 8}) {
            for (int64_t k : {1, 5, 6}) {
                for (int combo = 0; combo < 4; ++combo) {
                    const bool ta = combo & 1, tb = combo & 2;
                    // Row-major storage: A [m, k] or [k, m]; B [k, n] or [n, k].
                    std::vector<int64_t> a(static_cast<size_t>(m * k)),
                        b(static_cast<size_t>(k * n));
                    for (size_t i = 0; i < a.size(); ++i)
                        a[i] = static_cast<int64_t>(i * 7 % 11) - 5;
                    for (size_t i = 0; i < b.size(); ++i)
                        b[i] = static_cast<int64_t>(i * 5 % 13) - 6;
                    const auto opa = [&](int64_t i, int64_t p) {
                        return ta ? a[static_cast<size_t>(p * m + i)]
                                  : a[static_cast<size_t>(i * k + p)];
                    };
                    const auto opb = [&](int64_t p, int64_t j) {
                        return tb ? b[static_cast<size_t>(j * k + p)]
                                  : b[static_cast<size_t>(p * n + j)];
                    };
                    const LtGemm g = lt_gemm_for_row_major(m, n, k, ta, tb);
                    // cuBLASLt's A is our B, its B our A (the pointers the engine passes).
                    const std::vector<int64_t> d = column_major_gemm(g, b, a);
                    for (int64_t i = 0; i < m; ++i)
                        for (int64_t j = 0; j < n; ++j) {
                            int64_t want = 0;
                            for (int64_t p = 0; p < k; ++p) want += opa(i, p) * opb(p, j);
                            // Row-major C [m, n] is the column-major [n, m] with ld n.
                            ASSERT_EQ(d[static_cast<size_t>(i * n + j)], want)
                                << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta
                                << " tb=" << tb << " at (" << i << ", " << j << ")";
                        }
                    // Leading dimensions are the stored rows' lengths.
                    EXPECT_EQ(g.a.ld, tb ? k : n);
                    EXPECT_EQ(g.b.ld, ta ? m : k);
                    EXPECT_EQ(g.c.ld, n);
                    ++cases;
                }
            }
        }
    }
    EXPECT_EQ(cases, 3 * 3 * 3 * 4);
}

TEST(GemmLayout, PointerAlignmentIsLargestPowerOfTwoUpTo256) {
    EXPECT_EQ(pointer_alignment(0), 256u);
    EXPECT_EQ(pointer_alignment(256 * 1000), 256u);
    EXPECT_EQ(pointer_alignment(512 + 128), 128u);
    EXPECT_EQ(pointer_alignment(256 + 2), 2u);  // a bf16 row view at an odd row of odd width
    EXPECT_EQ(pointer_alignment(4096 + 4), 4u);
    EXPECT_EQ(pointer_alignment(1), 1u);
    for (uintptr_t addr = 1; addr < 4096; ++addr) {
        const uint32_t al = pointer_alignment(addr);
        ASSERT_EQ(addr % al, 0u) << addr;
        ASSERT_TRUE(al == 256 || addr % (2 * al) != 0) << addr;
        ASSERT_EQ(1u << alignment_log2(al), al) << addr;
    }
    EXPECT_EQ(alignment_log2(1), 0);
    EXPECT_EQ(alignment_log2(256), 8);
}

}  // namespace
}  // namespace dflash::cuda
