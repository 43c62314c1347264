// cuda::lm_head_kl against the CPU reference (cpu::lm_head_kl through the CPU backend) on the same
// bf16-rounded h, t and w: vocabularies that are not a multiple of the chunk, chunk > vocab (one
// chunk: the later passes reuse pass 1's logits), odd chunk widths, weight-0 rows, rows whose
// teacher is close to the draft (small KL: the cancellation-free loss form), dh in bf16 and f32,
// dw accumulated or not asked, loss-only calls, every divergence (kl, rkl, jsd, tv) alone and
// mixed on random awkward sizes, draft == teacher (exactly 0 for every kind), determinism, and
// argument errors. Outputs are NaN-poisoned before the run.
//
// Tolerances (both sides compute the logits in fp32 from identical bf16 inputs):
//   loss_rows f32: max abs <= 2e-3 * max(1, max|ref|) (f32 statistics vs double, tensor-core
//     accumulation of the logits).
//   argmax: equal, or a near-tie: the two logits (double, from the inputs) within 1e-4.
//   dh bf16: rel_norm <= 1e-2 (g passes through bf16 for the GEMM, then the output is rounded to
//     bf16); dh f32: rel_norm <= 6e-3. dw f32 delta: rel_norm <= 6e-3. The same for every kind:
//     each closed form is formed in f32 from the same logits before the bf16 rounding.
// TV's gradient jumps where q_v crosses p_v; rows whose teacher is close to the draft put many
// entries near that jump, where f32 round-off of the two sides may pick the other side, so mixes
// with TV run on independent teachers only (no entry is then within round-off of a tie, in
// practice).
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "cuda/gemm_family_util.h"
#include "cuda/lm_head_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::bf16_random;
using test::compare;
using test::to_device;

struct Problem {
    int64_t r, d, v;
    HostTensor h, t, w, weights, dw0;
    float grad_scale = 0.37f;
    LmHeadDivergences div;  // forward KL unless a test says otherwise
};

// Every third row is ignored (weight 0); with close_rows, every fourth real row has a teacher close
// to the draft (t = h + small noise), so its KL is small and must not drown in f32 round-off.
Problem make_problem(int64_t r, int64_t d, int64_t v, uint64_t seed, bool close_rows = true) {
    Rng rng(seed);
    Problem p{r,
              d,
              v,
              bf16_random({r, d}, rng),
              bf16_random({r, d}, rng),
              bf16_random({v, d}, rng, 3.0f / std::sqrt(d)),
              HostTensor({r}),
              bf16_random({v, d}, rng, 0.1f),
              0.37f,
              {}};
    for (int64_t i = 0; i < r; ++i) {
        const bool ignored = i % 3 == 2;
        p.weights.f32()[i] = ignored ? 0.0f : 0.25f + rng.uniform();
        if (close_rows && !ignored && i % 4 == 1) {
            for (int64_t k = 0; k < d; ++k) {
                const float x = p.h.f32()[i * d + k] + 0.05f * (rng.uniform() - 0.5f);
                p.t.f32()[i * d + k] = bf16_to_f32(f32_to_bf16(x));
            }
        }
    }
    return p;
}

using Outputs = test::LmOutputs;
using Want = test::LmWant;

Outputs run_cpu(Backend& cpu, const Problem& p, int64_t chunk, const Want& want) {
    Outputs o = test::lm_host_outputs(p.r, p.d, p.dw0);
    cpu.lm_head_kl(p.h, p.t, p.w, p.weights, p.grad_scale, chunk, p.div,
                   test::lm_out<LmHeadKlOut>(o, want));
    return o;
}

Outputs run_gpu(Backend& gpu, const Problem& p, int64_t chunk, const Want& want) {
    const DeviceTensor h = to_device(gpu, p.h, DType::bf16), t = to_device(gpu, p.t, DType::bf16);
    const DeviceTensor w = to_device(gpu, p.w, DType::bf16);
    const DeviceTensor weights = to_device(gpu, p.weights, DType::f32);
    const test::LmGpuOut o(gpu, p.r, p.d, p.dw0, want.dh_dtype,
                           gpu.lm_head_kl_workspace(p.r, p.d, p.v, chunk));
    gpu.lm_head_kl(h, t, w, weights, p.grad_scale, chunk, p.div, o.out<LmHeadKlOut>(want));
    return o.download(gpu);
}

void expect_matches(const Problem& p, const Outputs& got, const Outputs& ref, const Want& want,
                    const std::string& what) {
    SCOPED_TRACE(what);
    if (want.loss) {
        double mx = 1;
        for (int64_t i = 0; i < p.r; ++i)
            mx = std::max(mx, std::fabs(double(ref.loss_rows.f32()[i])));
        for (int64_t i = 0; i < p.r; ++i) {
            const float g = got.loss_rows.f32()[i], c = ref.loss_rows.f32()[i];
            if (p.weights.f32()[i] == 0.0f) {
                ASSERT_EQ(g, 0.0f) << "weight-0 row " << i;
            } else {
                EXPECT_NEAR(g, c, 2e-3 * mx) << "row " << i;
            }
        }
    }
    if (want.argmax) test::expect_lm_argmax(p.h, p.w, got.argmax, ref.argmax);
    if (want.dh) {
        const double tol_abs = 3e-2 * compare(got.dh, ref.dh, 0).max_ref;
        const test::Diff d = compare(got.dh, ref.dh, tol_abs);
        EXPECT_TRUE(d.ok(want.dh_dtype == DType::f32 ? 6e-3 : 1e-2, tol_abs))
            << "dh (" << dtype_name(want.dh_dtype) << "): " << d.str();
        for (int64_t i = 0; i < p.r; ++i) {
            if (p.weights.f32()[i] != 0.0f) continue;
            for (int64_t k = 0; k < p.d; ++k)
                ASSERT_EQ(got.dh.f32()[i * p.d + k], 0.0f) << "weight-0 row " << i;
        }
    }
    test::expect_lm_dw(got.dw, ref.dw, p.dw0, want.dw);
}

class CudaLmHeadKl : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        cpu_ = make_cpu_backend(2);
        gpu_ = make_backend(DeviceKind::cuda, 0, 1);
    }
    void check(int64_t r, int64_t d, int64_t v, int64_t chunk, const Want& want, uint64_t seed) {
        const Problem p = make_problem(r, d, v, seed);
        const Outputs ref = run_cpu(*cpu_, p, chunk, want);
        const Outputs got = run_gpu(*gpu_, p, chunk, want);
        expect_matches(p, got, ref, want, test::lm_case_name(r, d, v, chunk, want));
    }
    std::unique_ptr<Backend> cpu_, gpu_;
};

// Vocabularies not a multiple of the chunk (3 chunks of 256 + 232), a chunk larger than the
// vocabulary (one chunk), odd chunk widths, the drafter's shape without dW, dh in f32, and calls
// asking only for the loss or only for dW.
TEST_F(CudaLmHeadKl, ShapesChunkingsAndOutputs) {
    Want no_dw, dh_f32, loss_only, dw_only;
    no_dw.dw = false;
    dh_f32.dh_dtype = DType::f32;
    loss_only.dh = loss_only.dw = false;
    dw_only.dh = false;
    const struct {
        int64_t r, d, v, chunk;
        Want want;
    } cases[] = {{37, 64, 1000, 256, Want{}},    {5, 128, 77, 8192, Want{}},
                 {3, 64, 10, 3, Want{}},         {33, 96, 1031, 129, Want{}},
                 {256, 256, 20000, 8192, no_dw}, {21, 64, 700, 128, dh_f32},
                 {20, 64, 500, 128, loss_only},  {20, 64, 500, 96, dw_only}};
    uint64_t seed = 1;
    for (const auto& c : cases) check(c.r, c.d, c.v, c.chunk, c.want, seed++);
}

// Each kind alone and two mixes (DSpark's L1 is tv with weight 2), on random awkward sizes: rows
// 1 and 7 among them, vocabularies not a multiple of the chunk, chunk 1, a single chunk.
const struct {
    const char* name;
    LmHeadDivergences div;
} kKinds[] = {
    {"kl", {1.0f, 0.0f, 0.0f, 0.0f}},  {"rkl", {0.0f, 1.0f, 0.0f, 0.0f}},
    {"jsd", {0.0f, 0.0f, 1.0f, 0.0f}}, {"tv", {0.0f, 0.0f, 0.0f, 1.0f}},
    {"l1", {0.0f, 0.0f, 0.0f, 2.0f}},  {"kl+rkl+jsd", {0.4f, 0.3f, 1.5f, 0.0f}},
    {"mix", {0.3f, 0.5f, 0.7f, 1.1f}},
};

TEST_F(CudaLmHeadKl, EveryKindMatchesTheCpu) {
    Rng rng(77);
    uint64_t seed = 100;
    for (const auto& kind : kKinds) {
        const bool close_rows = kind.div.tv == 0.0f;
        const struct {
            int64_t r, d, v, chunk;
        } fixed[] = {{1, 64, 1000, 256}, {7, 64, 33, 1}, {7, 96, 1031, 2000}};
        for (const auto& c : fixed) {
            Problem p = make_problem(c.r, c.d, c.v, seed++, close_rows);
            p.div = kind.div;
            expect_matches(
                p, run_gpu(*gpu_, p, c.chunk, Want{}), run_cpu(*cpu_, p, c.chunk, Want{}), Want{},
                std::string(kind.name) + " " + test::lm_case_name(c.r, c.d, c.v, c.chunk, Want{}));
        }
        for (int trial = 0; trial < 3; ++trial) {
            const int64_t r = 1 + static_cast<int64_t>(rng.below(40));
            const int64_t d = 32 * (1 + static_cast<int64_t>(rng.below(4)));
            const int64_t v = 2 + static_cast<int64_t>(rng.below(3000));
            const int64_t chunk =
                1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(v + 50)));
            Want want;
            want.dh_dtype = trial == 1 ? DType::f32 : DType::bf16;
            want.dw = trial != 2;
            Problem p = make_problem(r, d, v, seed++, close_rows);
            p.div = kind.div;
            expect_matches(p, run_gpu(*gpu_, p, chunk, want), run_cpu(*cpu_, p, chunk, want), want,
                           std::string(kind.name) + " " + test::lm_case_name(r, d, v, chunk, want));
        }
    }
}

TEST_F(CudaLmHeadKl, DraftEqualToTeacherGivesZero) {
    for (const auto& kind : kKinds) {
        SCOPED_TRACE(kind.name);
        Problem p = make_problem(16, 64, 3000, 12);
        p.t = p.h.clone();
        p.div = kind.div;
        const Outputs got = run_gpu(*gpu_, p, 1024, Want{});
        for (int64_t i = 0; i < p.r; ++i) EXPECT_EQ(got.loss_rows.f32()[i], 0.0f) << "row " << i;
        for (int64_t i = 0; i < got.dh.numel(); ++i) ASSERT_EQ(got.dh.f32()[i], 0.0f) << i;
        const HostTensor dd = test::lm_delta(got.dw, p.dw0);
        for (int64_t i = 0; i < dd.numel(); ++i) ASSERT_EQ(dd.f32()[i], 0.0f) << i;
    }
}

TEST_F(CudaLmHeadKl, RepeatedRunsGiveIdenticalBits) {
    const Problem p = make_problem(200, 128, 9000, 11);
    const Outputs a = run_gpu(*gpu_, p, 4096, Want{});
    const Outputs b = run_gpu(*gpu_, p, 4096, Want{});
    EXPECT_EQ(std::memcmp(a.loss_rows.f32(), b.loss_rows.f32(), a.loss_rows.nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.argmax.i32(), b.argmax.i32(), a.argmax.nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.dh.f32(), b.dh.f32(), a.dh.nbytes()), 0);
    EXPECT_EQ(std::memcmp(a.dw.f32(), b.dw.f32(), a.dw.nbytes()), 0);
}

TEST_F(CudaLmHeadKl, ArgumentErrors) {
    const DeviceTensor h(*gpu_, {4, 8}, DType::bf16), w(*gpu_, {10, 8}, DType::bf16);
    const DeviceTensor weights(*gpu_, {4}, DType::f32);
    const DeviceTensor small(*gpu_, {gpu_->lm_head_kl_workspace(4, 8, 10, 4) - 1}, DType::f32);
    LmHeadKlOut out;
    out.workspace = small;
    EXPECT_NE(test::error_of([&] {
                  gpu_->lm_head_kl(h, h, w, weights, 1.0f, 4, {}, out);
              }).find("workspace"),
              std::string::npos);
    const DeviceTensor t3(*gpu_, {3, 8}, DType::bf16);
    EXPECT_NE(test::error_of([&] {
                  gpu_->lm_head_kl(h, t3, w, weights, 1.0f, 4, {}, LmHeadKlOut{});
              }).find("teacher"),
              std::string::npos);
    const DeviceTensor hf(*gpu_, {4, 8}, DType::f32);
    EXPECT_THROW(gpu_->lm_head_kl(hf, hf, w, weights, 1.0f, 4, {}, LmHeadKlOut{}), Error);
    EXPECT_THROW(gpu_->lm_head_kl(h, h, w, weights, 1.0f, 0, {}, LmHeadKlOut{}), Error);
    EXPECT_NE(test::error_of([&] {
                  gpu_->lm_head_kl(h, h, w, weights, 1.0f, 4, LmHeadDivergences{0, 0, 0, 0},
                                   LmHeadKlOut{});
              }).find("divergence weights"),
              std::string::npos);
}

}  // namespace
}  // namespace dflash
