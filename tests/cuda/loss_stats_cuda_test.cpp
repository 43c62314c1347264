// cuda::loss_stats and cuda::argmax_rows against the CPU reference (backend/cpu/loss_stats.cpp).
// loss_stats: periods 1, 7 and 16, rows from 1 to 16K + 3 with weight-0 rows, accumulated (+=)
// onto non-zero stats; the counts must be exact, the loss and weight sums (double inside, f32
// out on both sides, different summation order) within 1e-6 relative; two runs give the same
// bits. argmax_rows: 1..300 rows of 1..152064 columns (single- and two-stage), ties (the lowest
// index wins), the max in the first or last column, constant and -inf rows, unaligned row views.
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "cuda/gemm_family_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::to_device;

class CudaLossStats : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        cpu_ = make_cpu_backend(1);
        gpu_ = make_backend(DeviceKind::cuda, 0, 1);
    }
    DeviceTensor to_device_i32(const HostTensor& t) {
        DeviceTensor d(*gpu_, t.shape(), DType::i32);
        gpu_->upload(d, t);
        return d;
    }
    std::vector<int32_t> download_i32(const Tensor& t) {
        HostTensor h(t.shape(), DType::i32);
        gpu_->download(h, t);
        return std::vector<int32_t>(h.i32(), h.i32() + h.numel());
    }
    std::unique_ptr<Backend> cpu_, gpu_;
};

struct Batch {
    HostTensor loss, argmax, labels, weights;
};

Batch make_batch(int64_t r, Rng& rng) {
    Batch b{HostTensor({r}), HostTensor({r}, DType::i32), HostTensor({r}, DType::i32),
            HostTensor({r})};
    for (int64_t i = 0; i < r; ++i) {
        b.loss.f32()[i] = 3.0f * rng.uniform();
        b.labels.i32()[i] = static_cast<int32_t>(rng.below(50));
        b.argmax.i32()[i] =
            rng.uniform() < 0.4f ? b.labels.i32()[i] : static_cast<int32_t>(rng.below(50));
        b.weights.f32()[i] = i % 5 == 3 ? 0.0f : 0.1f + rng.uniform();
    }
    return b;
}

TEST_F(CudaLossStats, MatchesCpuAndAccumulates) {
    Rng rng(21);
    for (int64_t r : {1, 17, 1000, 16387}) {
        for (int64_t period : {1, 7, 16}) {
            const Batch b = make_batch(r, rng);
            const LossStatsLayout lay{period};
            HostTensor stats0({lay.size()});
            for (int64_t k = 0; k < lay.size(); ++k) stats0.f32()[k] = static_cast<float>(k % 5);
            HostTensor ref = stats0.clone();
            cpu_->loss_stats(b.loss, b.argmax, b.labels, b.weights, period, ref);
            cpu_->loss_stats(b.loss, b.argmax, b.labels, b.weights, period, ref);

            const DeviceTensor loss = to_device(*gpu_, b.loss, DType::f32);
            const DeviceTensor weights = to_device(*gpu_, b.weights, DType::f32);
            const DeviceTensor argmax = to_device_i32(b.argmax), labels = to_device_i32(b.labels);
            const DeviceTensor stats = to_device(*gpu_, stats0, DType::f32);
            gpu_->loss_stats(loss, argmax, labels, weights, period, stats);
            gpu_->loss_stats(loss, argmax, labels, weights, period, stats);  // += twice
            const HostTensor got = to_host_f32(*gpu_, stats);
            for (int64_t k = 2; k < lay.size(); ++k)
                ASSERT_EQ(got.f32()[k], ref.f32()[k])
                    << "R=" << r << " P=" << period << " slot " << k;
            for (int64_t k : {LossStatsLayout::kLossSum, LossStatsLayout::kWeightSum})
                EXPECT_NEAR(got.f32()[k], ref.f32()[k], 1e-6 * std::fabs(ref.f32()[k]))
                    << "R=" << r << " P=" << period << " slot " << k;

            const DeviceTensor again = to_device(*gpu_, stats0, DType::f32);
            gpu_->loss_stats(loss, argmax, labels, weights, period, again);
            gpu_->loss_stats(loss, argmax, labels, weights, period, again);
            const HostTensor got2 = to_host_f32(*gpu_, again);
            EXPECT_EQ(std::memcmp(got.f32(), got2.f32(), got.nbytes()), 0) << "not deterministic";
        }
    }
}

TEST_F(CudaLossStats, ArgumentErrors) {
    const DeviceTensor f(*gpu_, {4}, DType::f32), i(*gpu_, {4}, DType::i32);
    const DeviceTensor stats(*gpu_, {4}, DType::f32);  // 2 + 2P for P = 1
    EXPECT_NO_THROW(gpu_->loss_stats(f, i, i, f, 1, stats));
    EXPECT_THROW(gpu_->loss_stats(f, i, i, f, 2, stats), Error);
    EXPECT_THROW(gpu_->loss_stats(f, i, i, f, 0, stats), Error);
    EXPECT_THROW(gpu_->loss_stats(f, f, i, f, 1, stats), Error);
    const DeviceTensor x(*gpu_, {2, 5}, DType::f32), out(*gpu_, {3}, DType::i32);
    EXPECT_THROW(gpu_->argmax_rows(x, out), Error);
    gpu_->synchronize();
}

// Fills rows with patterns that stress the tie rule and the split boundaries.
HostTensor argmax_input(int64_t rows, int64_t v, Rng& rng) {
    HostTensor x({rows, v});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.normal();
    for (int64_t r = 0; r < rows; ++r) {
        float* row = x.f32() + r * v;
        switch (r % 6) {
            case 0:  // two equal maxima far apart: the lower index wins
                row[v - 1] = 10.0f;
                row[v / 3] = 10.0f;
                break;
            case 1:
                row[v - 1] = 10.0f;
                break;
            case 2:
                row[0] = 10.0f;
                row[v - 1] = 10.0f;
                break;
            case 3:
                for (int64_t c = 0; c < v; ++c) row[c] = 1.5f;
                break;
            case 4:
                for (int64_t c = 0; c < v; ++c) row[c] = -INFINITY;
                break;
            default:  // the max at a split boundary, tied one column later
                if (v > 1025) row[1024] = row[1025] = 10.0f;
                break;
        }
    }
    return x;
}

TEST_F(CudaLossStats, ArgmaxRowsMatchesCpu) {
    Rng rng(22);
    for (int64_t rows : {1, 3, 16, 300}) {
        for (int64_t v : {1, 7, 1024, 1025, 151936, 152064}) {
            if (rows * v > 20'000'000) continue;
            const HostTensor x = argmax_input(rows, v, rng);
            HostTensor ref({rows}, DType::i32);
            cpu_->argmax_rows(x, ref);
            const DeviceTensor dx = to_device(*gpu_, x, DType::f32);
            const DeviceTensor out(*gpu_, {rows}, DType::i32);
            gpu_->argmax_rows(dx, out);
            const std::vector<int32_t> got = download_i32(out);
            for (int64_t r = 0; r < rows; ++r)
                ASSERT_EQ(got[r], ref.i32()[r]) << "rows=" << rows << " V=" << v << " row " << r;
        }
    }
}

TEST_F(CudaLossStats, ArgmaxRowsOnUnalignedViews) {
    Rng rng(23);
    for (int64_t v : {1027, 4097}) {  // odd widths: row 1 starts 4 bytes past a 16-byte boundary
        const HostTensor x = argmax_input(9, v, rng);
        const DeviceTensor dx = to_device(*gpu_, x, DType::f32);
        const Tensor view = Tensor(dx).rows(1, 9);
        HostTensor ref({8}, DType::i32);
        cpu_->argmax_rows(x.view().rows(1, 9), ref);
        const DeviceTensor out(*gpu_, {8}, DType::i32);
        gpu_->argmax_rows(view, out);
        const std::vector<int32_t> got = download_i32(out);
        for (int64_t r = 0; r < 8; ++r)
            ASSERT_EQ(got[r], ref.i32()[r]) << "V=" << v << " row " << r;
    }
}

}  // namespace
}  // namespace dflash
