// CUDA RoPE (forward and backward, in place) against the CPU reference on the same bf16 values:
// head dims 2, 6 (odd half: the scalar path), 64, 128; head counts not multiples of the kernel's
// 4 heads per thread; positions up to 2^17 (large angles: sincosf's slow range reduction) and the
// llama3-scaled frequencies. Tolerance: within one bf16 rounding (1/256 |ref| + 1e-3 max|ref|
// per element, 1e-2 relative error norm); the CPU's std::cos/sin and CUDA's sincosf differ by at
// most a few f32 ulp before that rounding. Partial rotary (R < Dh: the hybrid families' 64 of 256
// dims) on both the vector and the scalar path.
#include <array>
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;

class CudaRope : public test::CudaVsCpu {
  protected:
    // r: the rotary dims (0: all of dh).
    void check(int64_t s, int64_t h, int64_t dh, const RopeConfig& cfg, int32_t max_pos, Rng& rng,
               int64_t r = 0);
};

void CudaRope::check(int64_t s, int64_t h, int64_t dh, const RopeConfig& cfg, int32_t max_pos,
                     Rng& rng, int64_t r) {
    if (r == 0) r = dh;
    const std::string what = "x [" + std::to_string(s) + ", " + std::to_string(h) + ", " +
                             std::to_string(dh) + "] rotary " + std::to_string(r) + " max_pos " +
                             std::to_string(max_pos);
    const std::vector<float> freq = rope_inv_freq(cfg, r);
    HostTensor inv_freq = HostTensor::from_f32({r / 2}, freq);
    HostTensor pos({s}, DType::i32);
    for (int64_t i = 0; i < s; ++i) pos.i32()[i] = static_cast<int32_t>(rng.below(max_pos));
    if (s > 1) pos.i32()[s - 1] = max_pos - 1;
    HostTensor x = test::bf16_values({s, h, dh}, rng);
    DeviceTensor g_pos = test::to_gpu_i32(gpu(), pos);
    DeviceTensor g_freq = test::to_gpu(gpu(), inv_freq, DType::f32);
    for (bool backward : {false, true}) {
        HostTensor ref = x.clone();
        DeviceTensor g = test::to_gpu(gpu(), x, DType::bf16);
        if (backward) {
            cpu().rope_bwd(ref, pos, inv_freq);
            gpu().rope_bwd(g, g_pos, g_freq);
        } else {
            cpu().rope_fwd(ref, pos, inv_freq);
            gpu().rope_fwd(g, g_pos, g_freq);
        }
        EXPECT_EQ(mismatch(test::to_cpu(gpu(), g), ref, test::bf16_tol(1e-3 * test::max_abs(ref))),
                  "")
            << what << (backward ? " backward" : " forward");
    }
    // Forward then backward gives x back up to two bf16 roundings.
    DeviceTensor g = test::to_gpu(gpu(), x, DType::bf16);
    gpu().rope_fwd(g, g_pos, g_freq);
    gpu().rope_bwd(g, g_pos, g_freq);
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), g), x, test::Tol{2e-2, 2.0 / 256, 5e-2}), "")
        << what << " round trip";
}

TEST_F(CudaRope, MatchesCpuOnAwkwardShapes) {
    Rng rng(1);
    RopeConfig cfg;
    for (const auto [s, h, dh] : {std::array<int64_t, 3>{1, 1, 2},
                                  {3, 2, 64},
                                  {257, 8, 128},
                                  {33, 5, 6},
                                  {4097, 3, 128},
                                  {17, 32, 128},
                                  {5, 7, 64}})
        check(s, h, dh, cfg, 40000, rng);
}

TEST_F(CudaRope, LargePositionsAndScaledFrequencies) {
    Rng rng(2);
    RopeConfig cfg;
    cfg.theta = 500000.0;
    check(129, 4, 128, cfg, 1 << 17, rng);
    cfg.scaling.type = RopeScalingType::llama3;
    cfg.scaling.factor = 8.0;
    check(65, 3, 64, cfg, 1 << 17, rng);
}

TEST_F(CudaRope, PartialRotaryMatchesCpu) {
    Rng rng(3);
    RopeConfig cfg;
    cfg.theta = 1e7;
    check(100, 4, 256, cfg, 40000, rng, 64);  // Qwen3.5's geometry, vector path
    check(17, 3, 32, cfg, 40000, rng, 8);     // 4 pairs: the scalar path inside a wide head
    check(9, 5, 6, cfg, 40000, rng, 2);       // scalar path
}

TEST_F(CudaRope, RejectsBadArguments) {
    DeviceTensor x(gpu(), {4, 2, 8}, DType::bf16);
    DeviceTensor pos(gpu(), {3}, DType::i32);
    DeviceTensor pos4(gpu(), {4}, DType::i32);
    DeviceTensor freq(gpu(), {4}, DType::f32);
    DeviceTensor freq_bad(gpu(), {5}, DType::f32);  // more than Dh/2
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().rope_fwd(x, pos, freq); }), "expected i32 [4]"));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().rope_fwd(x, pos4, freq_bad); }), "inv_freq of Dh/2"));
}

}  // namespace
}  // namespace dflash
