// CUDA embedding against the CPU reference. Forward: an exact gather (0 ulp) on awkward shapes
// (odd D: the scalar path). Backward: the sort + segment kernel adds each id's rows in position
// order, exactly as the CPU does, so dtable must match bit for bit (0 ulp) — with few ids (long
// runs), all ids equal (one run of 5000 rows), all ids distinct — and two runs give the same bits.
// Ids outside the vocabulary: forward writes zeros, backward skips them, nothing reads out of
// bounds.
#include <array>
#include <vector>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::bit_mismatch;

HostTensor random_ids(int64_t s, int64_t vocab, Rng& rng) {
    HostTensor ids({s}, DType::i32);
    for (int64_t i = 0; i < s; ++i) ids.i32()[i] = static_cast<int32_t>(rng.below(vocab));
    return ids;
}

// S, V, D
constexpr std::array<std::array<int64_t, 3>, 8> kShapes = {{{1, 1, 1},
                                                            {3, 7, 5},
                                                            {257, 1000, 64},
                                                            {4097, 151, 128},
                                                            {33, 50, 1000},
                                                            {17, 11, 4096},
                                                            {19, 13, 515},
                                                            {300, 3, 8}}};

class CudaEmbedding : public test::CudaVsCpu {};

TEST_F(CudaEmbedding, ForwardGathersRowsExactly) {
    Rng rng(1);
    for (const auto [s, v, d] : kShapes) {
        HostTensor table = test::bf16_values({v, d}, rng);
        HostTensor ids = random_ids(s, v, rng);
        HostTensor want({s, d});
        cpu().embedding_fwd(table, ids, want);
        DeviceTensor g_table = test::to_gpu(gpu(), table, DType::bf16);
        DeviceTensor g_ids = test::to_gpu_i32(gpu(), ids);
        DeviceTensor g_out(gpu(), {s, d}, DType::bf16);
        test::poison(gpu(), g_out);
        gpu().embedding_fwd(g_table, g_ids, g_out);
        EXPECT_EQ(bit_mismatch(test::to_cpu(gpu(), g_out), want), "")
            << "S " << s << " V " << v << " D " << d;
    }
}

// Runs the backward on the GPU from dtable0 and returns dtable.
HostTensor gpu_backward(Backend& gpu, const HostTensor& ids, const HostTensor& dout,
                        const HostTensor& dtable0) {
    DeviceTensor g_ids = test::to_gpu_i32(gpu, ids);
    DeviceTensor g_dout = test::to_gpu(gpu, dout, DType::bf16);
    DeviceTensor g_dtable = test::to_gpu(gpu, dtable0, DType::f32);
    gpu.embedding_bwd(g_ids, g_dout, g_dtable);
    return test::to_cpu(gpu, g_dtable);
}

void check_backward(Backend& cpu, Backend& gpu, const HostTensor& ids, int64_t v, int64_t d,
                    Rng& rng, const std::string& what) {
    const int64_t s = ids.numel();
    HostTensor dout = test::bf16_values({s, d}, rng);
    HostTensor dtable0 = test::f32_values({v, d}, rng);
    HostTensor want = dtable0.clone();
    cpu.embedding_bwd(ids, dout, want);
    HostTensor got = gpu_backward(gpu, ids, dout, dtable0);
    EXPECT_EQ(bit_mismatch(got, want), "")
        << what << " (max abs diff " << test::max_abs_diff(got, want) << ")";
    HostTensor again = gpu_backward(gpu, ids, dout, dtable0);
    EXPECT_EQ(bit_mismatch(again, got), "") << what << ": second run differs";
}

TEST_F(CudaEmbedding, BackwardMatchesCpuBitForBitAndRepeats) {
    Rng rng(2);
    for (const auto [s, v, d] : kShapes) {
        HostTensor ids = random_ids(s, v, rng);
        check_backward(
            cpu(), gpu(), ids, v, d, rng,
            "S " + std::to_string(s) + " V " + std::to_string(v) + " D " + std::to_string(d));
    }
}

TEST_F(CudaEmbedding, BackwardOneLongRunAndAllDistinct) {
    Rng rng(3);
    HostTensor same({5000}, DType::i32);
    for (int64_t i = 0; i < 5000; ++i) same.i32()[i] = 6;
    check_backward(cpu(), gpu(), same, 9, 136, rng, "5000 equal ids");
    const int64_t v = 4099;
    HostTensor distinct({v}, DType::i32);
    for (int64_t i = 0; i < v; ++i) distinct.i32()[i] = static_cast<int32_t>((i * 1237) % v);
    check_backward(cpu(), gpu(), distinct, v, 64, rng, "all ids distinct");
    // A vocabulary past 2^17 (more sort bits) with a few repeats.
    HostTensor big = random_ids(2000, 151936, rng);
    for (int64_t i = 0; i < 100; ++i) big.i32()[i * 7] = 151935;
    check_backward(cpu(), gpu(), big, 151936, 16, rng, "vocab 151936");
}

// The host validates ids before upload; the kernels must still stay in bounds when one slips by.
TEST_F(CudaEmbedding, OutOfRangeIdsNeitherReadNorWriteOutOfBounds) {
    Rng rng(4);
    const int64_t s = 6, v = 5, d = 16;
    HostTensor ids({s}, DType::i32);
    const int32_t values[s] = {1, -1, 4, 5, 1, 1 << 30};
    for (int64_t i = 0; i < s; ++i) ids.i32()[i] = values[i];
    HostTensor table = test::bf16_values({v, d}, rng);
    DeviceTensor g_table = test::to_gpu(gpu(), table, DType::bf16);
    DeviceTensor g_ids = test::to_gpu_i32(gpu(), ids);
    DeviceTensor g_out(gpu(), {s, d}, DType::bf16);
    test::poison(gpu(), g_out);
    gpu().embedding_fwd(g_table, g_ids, g_out);
    HostTensor out = test::to_cpu(gpu(), g_out);
    for (int64_t i = 0; i < s; ++i) {
        const bool ok = values[i] >= 0 && values[i] < v;
        for (int64_t c = 0; c < d; ++c)
            ASSERT_EQ(out.f32()[i * d + c], ok ? table.f32()[values[i] * d + c] : 0.0f)
                << "row " << i << " col " << c;
    }
    HostTensor dout = test::bf16_values({s, d}, rng);
    HostTensor dtable0 = test::f32_values({v, d}, rng);
    HostTensor got = gpu_backward(gpu(), ids, dout, dtable0);
    HostTensor want = dtable0.clone();
    for (int64_t i = 0; i < s; ++i) {
        if (values[i] < 0 || values[i] >= v) continue;
        for (int64_t c = 0; c < d; ++c) want.f32()[values[i] * d + c] += dout.f32()[i * d + c];
    }
    EXPECT_EQ(bit_mismatch(got, want), "");
}

TEST_F(CudaEmbedding, RejectsBadShapesAndDtypes) {
    DeviceTensor table(gpu(), {5, 8}, DType::bf16);
    DeviceTensor ids(gpu(), {3}, DType::i32);
    DeviceTensor out(gpu(), {3, 7}, DType::bf16);
    DeviceTensor dtable_bf16(gpu(), {5, 8}, DType::bf16);
    DeviceTensor dout(gpu(), {3, 8}, DType::bf16);
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().embedding_fwd(table, ids, out); }),
                          "expected [3, 8]"));
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().embedding_bwd(ids, dout, dtable_bf16); }),
                          "expected f32"));
}

}  // namespace
}  // namespace dflash
