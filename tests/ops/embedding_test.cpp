// cpu::embedding_fwd/bwd: exact gather, scatter-add with repeated ids against a double reference
// and finite differences, accumulation into dtable, id/shape errors, thread-count independence.
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

HostTensor random_ids(int64_t s, int64_t vocab, Rng& rng) {
    HostTensor ids({s}, DType::i32);
    for (int64_t i = 0; i < s; ++i) ids.i32()[i] = static_cast<int32_t>(rng.below(vocab));
    return ids;
}

TEST(Embedding, ForwardGathersRowsExactly) {
    Rng rng(1);
    for (const auto [s, v, d] : {std::array<int64_t, 3>{1, 1, 1}, {13, 7, 5}, {37, 11, 515}}) {
        HostTensor table = random_tensor({v, d}, rng);
        HostTensor ids = random_ids(s, v, rng);
        HostTensor out({s, d});
        cpu::embedding_fwd(cpu::PooledExec{2}, table, ids, out);
        for (int64_t i = 0; i < s; ++i)
            ASSERT_EQ(std::memcmp(out.f32() + i * d, table.f32() + ids.i32()[i] * d, 4 * d), 0)
                << "row " << i;
    }
}

// Few ids, many positions: most rows receive several contributions.
TEST(Embedding, BackwardScatterAddsRepeatedIdsAndAccumulates) {
    Rng rng(2);
    const int64_t s = 53, v = 7, d = 131;
    HostTensor ids = random_ids(s, v, rng);
    HostTensor dout = random_tensor({s, d}, rng);
    HostTensor dtable = random_tensor({v, d}, rng);
    std::vector<double> ref(dtable.f32(), dtable.f32() + dtable.numel());
    for (int64_t i = 0; i < s; ++i)
        for (int64_t c = 0; c < d; ++c) ref[ids.i32()[i] * d + c] += dout.f32()[i * d + c];
    cpu::embedding_bwd(cpu::PooledExec{2}, ids, dout, dtable);
    double worst = 0;
    for (int64_t i = 0; i < dtable.numel(); ++i)
        worst = std::max(worst, std::fabs(dtable.f32()[i] - ref[i]));
    // Up to ~53/7 float additions of O(1) values per element: a few 1e-7.
    EXPECT_LT(worst, 2e-6);
}

// L(table) = sum(dout * table[ids]) in double; linear, so the central difference is exact up to
// round-off and the float scatter-add must agree to ~1e-6.
TEST(Embedding, BackwardMatchesFiniteDifferences) {
    Rng rng(3);
    const int64_t s = 9, v = 5, d = 3;
    HostTensor ids = random_ids(s, v, rng);
    HostTensor dout = random_tensor({s, d}, rng);
    HostTensor dtable({v, d});
    cpu::embedding_bwd(cpu::PooledExec{1}, ids, dout, dtable);
    auto loss = [&](const std::vector<double>& t) {
        double l = 0;
        for (int64_t i = 0; i < s; ++i)
            for (int64_t c = 0; c < d; ++c) l += dout.f32()[i * d + c] * t[ids.i32()[i] * d + c];
        return l;
    };
    const std::vector<double> t0(v * d, 0.5);
    const auto num = test::fd_gradient(loss, t0, 1e-2);
    const std::vector<double> ana(dtable.f32(), dtable.f32() + dtable.numel());
    const auto r = test::compare_gradients(ana, num);
    EXPECT_LT(r.max_rel_err, 1e-6) << r.to_string();
}

TEST(Embedding, OutOfRangeIdNamesIdPositionAndVocab) {
    HostTensor table({10, 4});
    HostTensor ids = HostTensor::from_i32({3}, {1, 12, 3});
    HostTensor out({3, 4});
    try {
        cpu::embedding_fwd(cpu::PooledExec{1}, table, ids, out);
        FAIL() << "id 12 >= vocab 10 not detected";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("ids[1]=12"), std::string::npos) << msg;
        EXPECT_NE(msg.find("10"), std::string::npos) << msg;
    }
    HostTensor neg = HostTensor::from_i32({3}, {1, 2, -1});
    EXPECT_THROW(cpu::embedding_fwd(cpu::PooledExec{1}, table, neg, out), Error);
    EXPECT_THROW(cpu::embedding_bwd(cpu::PooledExec{1}, neg, out, table), Error);
}

TEST(Embedding, ShapeErrors) {
    HostTensor table({10, 4}), ids({3}, DType::i32), out({3, 4});
    HostTensor bad_out({3, 5}), short_out({2, 4}), ids_f32({3}), table1({40});
    EXPECT_THROW(cpu::embedding_fwd(cpu::PooledExec{1}, table, ids, bad_out), Error);
    EXPECT_THROW(cpu::embedding_fwd(cpu::PooledExec{1}, table, ids, short_out), Error);
    EXPECT_THROW(cpu::embedding_fwd(cpu::PooledExec{1}, table, ids_f32, out), Error);
    EXPECT_THROW(cpu::embedding_fwd(cpu::PooledExec{1}, table1, ids, out), Error);
    EXPECT_THROW(cpu::embedding_bwd(cpu::PooledExec{1}, ids, bad_out, table), Error);
}

// 301 x 515 crosses the size above which the loops run in parallel.
TEST(Embedding, ThreadCountDoesNotChangeBits) {
    Rng rng(4);
    const int64_t s = 301, v = 17, d = 515;
    HostTensor table = random_tensor({v, d}, rng);
    HostTensor ids = random_ids(s, v, rng);
    HostTensor dout = random_tensor({s, d}, rng);
    HostTensor o1({s, d}), o3({s, d}), dt1({v, d}), dt3({v, d});
    cpu::embedding_fwd(cpu::PooledExec{1}, table, ids, o1);
    cpu::embedding_fwd(cpu::PooledExec{3}, table, ids, o3);
    cpu::embedding_bwd(cpu::PooledExec{1}, ids, dout, dt1);
    cpu::embedding_bwd(cpu::PooledExec{3}, ids, dout, dt3);
    EXPECT_EQ(std::memcmp(o1.f32(), o3.f32(), o1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(dt1.f32(), dt3.f32(), dt1.nbytes()), 0);
}

}  // namespace
}  // namespace dflash
