// CUDA rnn Markov head recurrence (markov_rnn_fwd / markov_rnn_bwd) against the CPU reference on
// the same bf16 values: awkward R x r, j wider than the state's columns, block sizes 1..9, a rank
// above the kernels' 256 threads (channels loop), and the released geometry (r 256, 7 slots).
// Tolerances: act is f32 from the same f32 sums in the same order (tanhf/expf vs std:: differ by
// ulps, compounded over the slots: 1e-4 of the largest |ref|); out, dact and s_prev are bf16 of
// f32 math (bf16_tol with 2e-3 of the largest |ref|); dbias is f32, summed over the rows from
// the bf16 dact on CUDA and the f32 one on the CPU (a bf16 rounding per term: 1e-2 relative).
#include <string>

#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::mismatch;

struct Case {
    int64_t R, r, C, bs;
};

class CudaMarkovRnn : public test::CudaVsCpu {
  protected:
    void check(const Case& cs, Rng& rng);
};

void CudaMarkovRnn::check(const Case& cs, Rng& rng) {
    const std::string what = "R " + std::to_string(cs.R) + " r " + std::to_string(cs.r) + " C " +
                             std::to_string(cs.C) + " bs " + std::to_string(cs.bs);
    const int64_t A = 3 * cs.r;
    HostTensor pre = test::bf16_values({cs.R, A}, rng);
    HostTensor bias = test::bf16_values({A}, rng);
    // j scaled so the state's part of a_k stays O(1) at large r.
    HostTensor j = test::bf16_values({A, cs.C}, rng, 1.0f / static_cast<float>(cs.r));
    HostTensor dout = test::bf16_values({cs.R, cs.r}, rng);
    HostTensor dbias0 = test::f32_values({A}, rng);
    HostTensor act_ref({cs.R, A}), out_ref({cs.R, cs.r}), dact_ref({cs.R, A}),
        s_prev_ref({cs.R, cs.r}), dbias_ref = dbias0.clone();
    cpu().markov_rnn_fwd(pre, bias, j, cs.bs, act_ref, out_ref);
    cpu().markov_rnn_bwd(dout, act_ref, j, cs.bs, dact_ref, dbias_ref, s_prev_ref);

    DeviceTensor gpre = test::to_gpu(gpu(), pre, DType::bf16),
                 gbias = test::to_gpu(gpu(), bias, DType::bf16);
    DeviceTensor gj = test::to_gpu(gpu(), j, DType::bf16),
                 gdout = test::to_gpu(gpu(), dout, DType::bf16);
    DeviceTensor gact(gpu(), {cs.R, A}, DType::f32), gout(gpu(), {cs.R, cs.r}, DType::bf16);
    DeviceTensor gdact(gpu(), {cs.R, A}, DType::bf16), gs(gpu(), {cs.R, cs.r}, DType::bf16);
    DeviceTensor gdbias = test::to_gpu(gpu(), dbias0, DType::f32);
    test::poison(gpu(), gact);
    test::poison(gpu(), gout);
    test::poison(gpu(), gdact);
    test::poison(gpu(), gs);
    gpu().markov_rnn_fwd(gpre, gbias, gj, cs.bs, gact, gout);
    // The backward from the CPU's act, so its check does not compound the forward's rounding.
    DeviceTensor gact_ref = test::to_gpu(gpu(), act_ref, DType::f32);
    gpu().markov_rnn_bwd(gdout, gact_ref, gj, cs.bs, gdact, gdbias, gs);
    const test::Tol act_tol{1e-4, 1e-4, 1e-4 * test::max_abs(act_ref)};
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gact), act_ref, act_tol), "") << what << ": act";
    auto tol = [](const HostTensor& ref) { return test::bf16_tol(2e-3 * test::max_abs(ref)); };
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gout), out_ref, tol(out_ref)), "") << what << ": out";
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdact), dact_ref, tol(dact_ref)), "")
        << what << ": dact";
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gs), s_prev_ref, tol(s_prev_ref)), "")
        << what << ": s_prev";
    const test::Tol dbias_tol{1e-2, 1e-2, 1e-2 * test::max_abs(dbias_ref)};
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), gdbias), dbias_ref, dbias_tol), "") << what << ": dbias";
}

TEST_F(CudaMarkovRnn, MatchesCpuOnAwkwardShapes) {
    Rng rng(1);
    for (const Case& cs : {Case{12, 3, 3, 4}, Case{35, 5, 41, 7}, Case{7, 13, 13, 1},
                           Case{18, 300, 333, 9}, Case{56, 256, 256 + 2 * 64 + 64, 7}})
        check(cs, rng);
}

TEST_F(CudaMarkovRnn, BadArgumentsAreErrors) {
    DeviceTensor pre(gpu(), {8, 9}, DType::bf16), bias(gpu(), {9}, DType::bf16);
    DeviceTensor j(gpu(), {9, 5}, DType::bf16), act(gpu(), {8, 9}, DType::f32);
    DeviceTensor out(gpu(), {8, 3}, DType::bf16), out_f32(gpu(), {8, 3}, DType::f32);
    EXPECT_NO_THROW(gpu().markov_rnn_fwd(pre, bias, j, 4, act, out));
    EXPECT_THROW(gpu().markov_rnn_fwd(pre, bias, j, 3, act, out), Error);
    EXPECT_THROW(gpu().markov_rnn_fwd(pre, bias, j, 4, act, out_f32), Error);
}

}  // namespace
}  // namespace dflash
