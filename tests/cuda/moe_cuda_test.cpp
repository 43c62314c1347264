// CUDA mixture of experts against the CPU reference (backend/cpu/moe.cpp): moe_route's picks bit
// for bit (ties included) and its weights within 2e-6 (expf against std::exp, sums in another
// order); moe_experts on awkward sizes (D and I off the kernels' tiles and off 8, one expert and
// many, experts with more than one 64-row tile), both activations, with and without biases;
// row invariance (a token's output has the same bits alone and inside blocks where its experts
// get other row counts, at other places of their tiles); recording both ops in a CUDA graph; and
// argument errors. MXFP4 experts (blocks and scales in GPU memory, decoded in the GEMMs' tile
// loads): the bits of the op on the decoded bf16 weights on awkward sizes, near the CPU's MXFP4
// op, and row invariant. Skips visibly without a GPU.
//
// Tolerance of moe_experts: inputs are bf16-rounded so both sides see the same values; the GPU
// rounds the activations and each expert's output to bf16 before the fp32 weighted sum and the
// output to bf16, so an element may be off by a few bf16 ulps of the terms it sums: relative
// L2 error <= 1e-2 and every element within 2e-2 |ref| + 1e-2 max|ref|.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/mxfp4.h"
#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

class CudaMoe : public test::CudaVsCpu {};

std::string dims(int64_t R, int64_t E, int64_t k) {
    return "R " + std::to_string(R) + " E " + std::to_string(E) + " k " + std::to_string(k);
}

TEST_F(CudaMoe, RouteMatchesCpu) {
    Rng rng(11);
    struct Case {
        int64_t R, E, k;
        bool ties;
    };
    for (const Case& c : {Case{1, 5, 1, false}, Case{7, 128, 8, false}, Case{37, 32, 4, true},
                          Case{16, 5, 5, true}, Case{3, 300, 32, false}, Case{40, 128, 8, true}}) {
        HostTensor logits({c.R, c.E});
        for (int64_t i = 0; i < logits.numel(); ++i)
            logits.f32()[i] = c.ties ? static_cast<float>(static_cast<int>(rng.uniform() * 6)) - 2
                                     : 3.0f * rng.normal();
        for (const auto& routing : {MoeRouting{MoeRouterKind::softmax_topk, c.k, true},
                                    MoeRouting{MoeRouterKind::softmax_topk, c.k, false},
                                    MoeRouting{MoeRouterKind::topk_softmax, c.k, true}}) {
            const std::string what = dims(c.R, c.E, c.k) + " kind " +
                                     std::to_string(static_cast<int>(routing.kind)) +
                                     (routing.normalize ? " normalized" : "");
            HostTensor ids_ref({c.R, c.k}, DType::i32), w_ref({c.R, c.k});
            cpu().moe_route(logits, routing, ids_ref, w_ref);
            DeviceTensor g_logits = test::to_gpu(gpu(), logits, DType::f32);
            DeviceTensor g_ids(gpu(), {c.R, c.k}, DType::i32), g_w(gpu(), {c.R, c.k}, DType::f32);
            test::poison(gpu(), g_w);
            gpu().moe_route(g_logits, routing, g_ids, g_w);
            HostTensor ids({c.R, c.k}, DType::i32), w({c.R, c.k});
            gpu().download(ids, g_ids);
            gpu().download(w, g_w);
            EXPECT_EQ(test::bit_mismatch(ids, ids_ref), "") << what;
            EXPECT_EQ(test::mismatch(w, w_ref, {2e-6, 0.0, 2e-6}), "") << what;
        }
    }
}

struct Case {
    int64_t R, E, k, D, I;
};

struct Problem {
    HostTensor x, ids, weights, gate_up, gate_up_bias, down, down_bias;
    MoeExperts w;  // the host tensors
};

// bf16-rounded inputs; ids random (repeats within a row allowed: the contract sums them).
Problem make_problem(const Case& c, MoeActivation act, bool biases, Rng& rng) {
    Problem p;
    p.x = test::bf16_values({c.R, c.D}, rng, 1.0f);
    p.ids = HostTensor({c.R, c.k}, DType::i32);
    for (int64_t i = 0; i < p.ids.numel(); ++i)
        p.ids.i32()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.E)));
    p.weights = test::f32_values({c.R, c.k}, rng, 0.5f);
    // Pre-activations of a few units: enough for clamped_swiglu's clamps to bite.
    p.gate_up = test::bf16_values({c.E, 2 * c.I, c.D}, rng, 4.0f / std::sqrt(float(c.D)));
    p.down = test::bf16_values({c.E, c.D, c.I}, rng, 1.0f / std::sqrt(float(c.I)));
    if (biases) {
        p.gate_up_bias = test::bf16_values({c.E, 2 * c.I}, rng, 1.0f);
        p.down_bias = test::bf16_values({c.E, c.D}, rng, 0.5f);
    }
    p.w.gate_up = p.gate_up;
    p.w.gate_up_bias = p.gate_up_bias;
    p.w.down = p.down;
    p.w.down_bias = p.down_bias;
    p.w.activation = act;
    return p;
}

// The problem's tensors on the GPU.
struct GpuProblem {
    DeviceTensor x, ids, weights, gate_up, gate_up_bias, down, down_bias, out;
    MoeExperts w;
    GpuProblem(Backend& gpu, const Problem& p)
        : x(test::to_gpu(gpu, p.x, DType::bf16)),
          ids(test::to_gpu_i32(gpu, p.ids)),
          weights(test::to_gpu(gpu, p.weights, DType::f32)),
          gate_up(test::to_gpu(gpu, p.gate_up, DType::bf16)),
          down(test::to_gpu(gpu, p.down, DType::bf16)),
          out(gpu, p.x.shape(), DType::bf16) {
        if (!p.gate_up_bias.empty()) {
            gate_up_bias = test::to_gpu(gpu, p.gate_up_bias, DType::bf16);
            down_bias = test::to_gpu(gpu, p.down_bias, DType::bf16);
        }
        w = p.w;
        w.gate_up = gate_up;
        w.gate_up_bias = gate_up_bias;
        w.down = down;
        w.down_bias = down_bias;
    }
};

HostTensor cpu_experts(Backend& cpu, const Problem& p) {
    HostTensor out(p.x.shape());
    cpu.moe_experts(p.x, p.ids, p.weights, p.w, out);
    return out;
}

HostTensor gpu_experts(Backend& gpu, GpuProblem& g) {
    test::poison(gpu, g.out);
    gpu.moe_experts(g.x, g.ids, g.weights, g.w, g.out);
    return test::to_cpu(gpu, g.out);
}

TEST_F(CudaMoe, ExpertsMatchCpu) {
    Rng rng(5);
    // D = 13, I = 7: element loads (kdim not a multiple of 8); 300 tokens over 4 experts: about
    // 150 rows (three 64-row tiles) per expert; E = 128, k = 8: the Qwen3-MoE routing shape.
    for (const Case& c : {Case{1, 5, 1, 13, 7}, Case{7, 5, 2, 64, 40}, Case{37, 5, 3, 72, 33},
                          Case{16, 128, 8, 256, 96}, Case{300, 4, 2, 136, 200},
                          Case{5, 1, 1, 200, 130}, Case{9, 6, 3, 30, 21}}) {
        for (const MoeActivation act : {MoeActivation::swiglu, MoeActivation::clamped_swiglu}) {
            for (const bool biases : {false, true}) {
                const Problem p = make_problem(c, act, biases, rng);
                GpuProblem g(gpu(), p);
                const HostTensor ref = cpu_experts(cpu(), p);
                const HostTensor got = gpu_experts(gpu(), g);
                const test::Tol tol{1e-2, 2e-2, 1e-2 * test::max_abs(ref)};
                EXPECT_EQ(test::mismatch(got, ref, tol), "")
                    << dims(c.R, c.E, c.k) << " D " << c.D << " I " << c.I << " act "
                    << static_cast<int>(act) << (biases ? " biases" : "");
            }
        }
    }
}

// An id outside [0, E) (the CPU refuses it; the GPU cannot read ids on the host) adds nothing:
// the same as the CPU with that pick's weight 0 on a valid expert.
TEST_F(CudaMoe, ExpertsSkipIdsOutsideTheExperts) {
    Rng rng(17);
    Problem p = make_problem({6, 5, 3, 64, 40}, MoeActivation::swiglu, true, rng);
    GpuProblem g(gpu(), p);
    HostTensor bad_ids = p.ids.clone();
    for (const int64_t i : {1, 7, 8, 17}) {
        bad_ids.i32()[i] = i == 8 ? -3 : 5;
        p.ids.i32()[i] = 0;
        p.weights.f32()[i] = 0.0f;
    }
    gpu().upload(g.ids, bad_ids);
    const HostTensor got = gpu_experts(gpu(), g);
    const HostTensor ref = cpu_experts(cpu(), p);
    EXPECT_EQ(test::mismatch(got, ref, {1e-2, 2e-2, 1e-2 * test::max_abs(ref)}), "");
}

// Token 0 of `solo` alone, then as row `at` of blocks whose other rows send its experts other
// numbers of rows (none, a few, all 16, 70: a second 64-row tile).
void expect_row_invariant(Backend& gpu, const Case& shape, MoeActivation act) {
    Rng rng(23);
    const Problem base = make_problem({80, shape.E, shape.k, shape.D, shape.I}, act, true, rng);
    const std::vector<int32_t> mine = {1, 4, 2};  // token's experts (k = 3)
    const auto row_of = [&](const Problem& p, int64_t r) {
        HostTensor one({1, shape.D});
        GpuProblem g(gpu, p);
        const HostTensor all = gpu_experts(gpu, g);
        std::copy_n(all.f32() + r * shape.D, shape.D, one.f32());
        return one;
    };
    // The token alone: the first row of base with its own ids.
    Problem solo = make_problem({1, shape.E, shape.k, shape.D, shape.I}, act, true, rng);
    copy_tensor(solo.gate_up, base.gate_up);
    copy_tensor(solo.gate_up_bias, base.gate_up_bias);
    copy_tensor(solo.down, base.down);
    copy_tensor(solo.down_bias, base.down_bias);
    std::copy_n(base.x.f32(), shape.D, solo.x.f32());
    std::copy_n(mine.data(), 3, solo.ids.i32());
    std::copy_n(base.weights.f32(), 3, solo.weights.f32());
    const HostTensor alone = row_of(solo, 0);

    struct Block {
        int64_t rows, at;
        int fill;  // other rows' experts: -1 random, else every pick this expert
    };
    for (const Block& b :
         {Block{16, 5, -1}, Block{16, 15, 1}, Block{16, 0, 3}, Block{80, 70, 1}, Block{80, 3, 4}}) {
        Problem p = make_problem({b.rows, shape.E, shape.k, shape.D, shape.I}, act, true, rng);
        copy_tensor(p.gate_up, base.gate_up);
        copy_tensor(p.gate_up_bias, base.gate_up_bias);
        copy_tensor(p.down, base.down);
        copy_tensor(p.down_bias, base.down_bias);
        if (b.fill >= 0) std::fill_n(p.ids.i32(), p.ids.numel(), b.fill);
        std::copy_n(solo.x.f32(), shape.D, p.x.f32() + b.at * shape.D);
        std::copy_n(mine.data(), 3, p.ids.i32() + b.at * 3);
        std::copy_n(solo.weights.f32(), 3, p.weights.f32() + b.at * 3);
        EXPECT_EQ(test::bit_mismatch(row_of(p, b.at), alone), "")
            << "block of " << b.rows << " at " << b.at << " fill " << b.fill << " D " << shape.D;
    }
}

TEST_F(CudaMoe, ExpertsRowInvariant) {
    expect_row_invariant(gpu(), {1, 6, 3, 136, 200}, MoeActivation::swiglu);
    expect_row_invariant(gpu(), {1, 6, 3, 13, 7}, MoeActivation::clamped_swiglu);  // element loads
}

// A workspace too small for all rows' temporaries: the op runs over row slices that fit, with
// the bits of one pass (300 rows x k 3 x (D 136 + I 200) x 2 bytes = 605 KB at once; 64 KB
// holds about 30 rows, so about 10 slices), and without any workspace room it names the shortfall.
TEST_F(CudaMoe, ExpertsRunInRowSlicesWhenTheWorkspaceIsSmall) {
    Rng rng(41);
    const Problem p = make_problem({300, 6, 3, 136, 200}, MoeActivation::swiglu, true, rng);
    GpuProblem g(gpu(), p);
    const HostTensor whole = gpu_experts(gpu(), g);
    cuda::CudaBackendOptions opt;
    opt.op_workspace_bytes = size_t{64} << 10;
    auto small = cuda::make_cuda_backend(0, opt);
    GpuProblem gs(*small, p);
    const HostTensor sliced = gpu_experts(*small, gs);
    ASSERT_EQ(whole.numel(), sliced.numel());
    EXPECT_EQ(std::memcmp(whole.view().data(), sliced.view().data(), whole.nbytes()), 0)
        << "row slices changed the bits";
    opt.op_workspace_bytes = 1024;  // not even the sort's counters of one row fit
    auto tiny = cuda::make_cuda_backend(0, opt);
    GpuProblem gt(*tiny, p);
    const std::string error = test::error_of([&] { gpu_experts(*tiny, gt); });
    EXPECT_TRUE(test::has(error, "op workspace exhausted")) << error;
    EXPECT_TRUE(test::has(error, "moe_experts")) << error;
}

// Both ops inside Backend::run_step: captured once, replayed with other logits, and every run
// gives the bits of an eager run (the routing, the sort and the tile counts are read on the
// device, not baked into the graph).
TEST_F(CudaMoe, RecordsInACudaGraph) {
    GraphOptions graphs;
    graphs.enabled = true;
    graphs.warmup_runs = 1;
    auto gpu_graphs = make_backend(DeviceKind::cuda, 0, 1, graphs);
    Backend& be = *gpu_graphs;
    Rng rng(31);
    const Case c{12, 16, 4, 64, 48};
    const Problem p = make_problem(c, MoeActivation::clamped_swiglu, true, rng);
    GpuProblem g(be, p);
    DeviceTensor logits(be, {c.R, c.E}, DType::f32);
    const MoeRouting routing{MoeRouterKind::topk_softmax, c.k, true};
    const StepKey key{be.new_step_owner(), "moe.test", {c.R}};
    const auto step = [&] {
        be.moe_route(logits, routing, g.ids, g.weights);
        be.moe_experts(g.x, g.ids, g.weights, g.w, g.out);
    };
    for (int run = 0; run < 4; ++run) {
        const HostTensor l = test::f32_values({c.R, c.E}, rng, 2.0f);
        be.upload(logits, l);
        be.synchronize();
        be.run_step(key, step);
        const HostTensor got = test::to_cpu(be, g.out);
        be.synchronize();
        step();  // eagerly, outside any step
        const HostTensor eager = test::to_cpu(be, g.out);
        EXPECT_EQ(test::bit_mismatch(got, eager), "") << "run " << run;
    }
    const GraphStats s = be.graph_stats();
    EXPECT_EQ(s.captures, 1) << s.summary();
    EXPECT_GE(s.replays, 2) << s.summary();
    EXPECT_TRUE(s.fallback_reasons.empty()) << s.summary();
}

TEST_F(CudaMoe, ArgumentErrors) {
    Rng rng(2);
    const Problem p = make_problem({3, 4, 2, 16, 8}, MoeActivation::swiglu, false, rng);
    GpuProblem g(gpu(), p);
    EXPECT_NO_THROW(gpu().moe_experts(g.x, g.ids, g.weights, g.w, g.out));
    DeviceTensor x_f32(gpu(), {3, 16}, DType::f32);
    EXPECT_TRUE(test::has(
        test::error_of([&] { gpu().moe_experts(x_f32, g.ids, g.weights, g.w, g.out); }), "x"));
    DeviceTensor out_bad(gpu(), {3, 17}, DType::bf16);
    EXPECT_TRUE(test::has(
        test::error_of([&] { gpu().moe_experts(g.x, g.ids, g.weights, g.w, out_bad); }), "out"));
    DeviceTensor logits(gpu(), {3, 40}, DType::f32), ids(gpu(), {3, 33}, DType::i32),
        w(gpu(), {3, 33}, DType::f32);
    EXPECT_TRUE(
        test::has(test::error_of([&] {
                      gpu().moe_route(logits, {MoeRouterKind::softmax_topk, 33, true}, ids, w);
                  }),
                  "k=33"));
}

// ---- MXFP4 experts ----------------------------------------------------------------------------

// Random MXFP4 experts: u8 blocks and scales on the host and the GPU. make_mx_problem puts their
// decoded values into the problem's f32 weights (exact in bf16), so the bf16 GpuProblem of it is
// the decoded-bf16 twin.
struct MxHost {
    HostTensor gu_blocks, gu_scales, dn_blocks, dn_scales;
};
struct MxGpu {
    DeviceTensor gu_blocks, gu_scales, dn_blocks, dn_scales;
};

HostTensor random_bytes(Shape shape, Rng& rng, int lo, int hi) {
    HostTensor t(shape, DType::u8);
    for (int64_t i = 0; i < t.numel(); ++i)
        t.view().u8()[i] = static_cast<uint8_t>(lo + static_cast<int>(rng.below(hi - lo + 1)));
    return t;
}

void decode_into(const HostTensor& blocks, const HostTensor& scales, const HostTensor& out) {
    const int64_t groups = blocks.dim(2), rows = blocks.numel() / (groups * 16);
    decode_mxfp4({blocks.view().u8(), blocks.nbytes()}, {scales.view().u8(), scales.nbytes()}, rows,
                 groups, out.f32());
}

MxHost make_mx(Problem& p, const Case& c, Rng& rng) {
    MxHost m;
    m.gu_blocks = random_bytes({c.E, 2 * c.I, c.D / 32, 16}, rng, 0, 255);
    m.gu_scales = random_bytes({c.E, 2 * c.I, c.D / 32}, rng, 121, 125);
    m.dn_blocks = random_bytes({c.E, c.D, c.I / 32, 16}, rng, 0, 255);
    m.dn_scales = random_bytes({c.E, c.D, c.I / 32}, rng, 120, 123);
    decode_into(m.gu_blocks, m.gu_scales, p.gate_up);
    decode_into(m.dn_blocks, m.dn_scales, p.down);
    return m;
}

MxGpu to_gpu_mx(Backend& gpu, const MxHost& m) {
    const auto up = [&](const HostTensor& h) {
        DeviceTensor d(gpu, h.shape(), DType::u8);
        gpu.upload(d, h);
        gpu.synchronize();
        return d;
    };
    return {up(m.gu_blocks), up(m.gu_scales), up(m.dn_blocks), up(m.dn_scales)};
}

// w with its matrices replaced by MXFP4 tensors (host or device).
MoeExperts as_mx(MoeExperts w, const Tensor& gub, const Tensor& gus, const Tensor& dnb,
                 const Tensor& dns) {
    w.gate_up = Tensor();
    w.down = Tensor();
    w.gate_up_blocks = gub;
    w.gate_up_scales = gus;
    w.down_blocks = dnb;
    w.down_scales = dns;
    return w;
}

TEST_F(CudaMoe, Mxfp4SameBitsAsDecodedBf16) {
    Rng rng(41);
    // D and I multiples of 32 but not of the 64-wide slice (96, 160, 352), two gated column
    // tiles (I = 96, 160), several output tiles (D = 160, 352), experts without rows (E = 6 and
    // 128 with few pairs), 300 tokens (several row tiles an expert), gpt-oss's top-4.
    for (const Case& c : {Case{1, 3, 1, 32, 32}, Case{2, 6, 2, 96, 160}, Case{300, 4, 2, 160, 96},
                          Case{16, 128, 4, 256, 96}, Case{37, 5, 3, 352, 64}}) {
        for (const MoeActivation act : {MoeActivation::swiglu, MoeActivation::clamped_swiglu}) {
            Problem p = make_problem(c, act, true, rng);
            const MxHost mh = make_mx(p, c, rng);
            GpuProblem g(gpu(), p);  // bf16 weights: the decoded values
            const HostTensor want = gpu_experts(gpu(), g);
            const MxGpu mg = to_gpu_mx(gpu(), mh);
            const MoeExperts bf16_w = g.w;
            g.w = as_mx(g.w, mg.gu_blocks, mg.gu_scales, mg.dn_blocks, mg.dn_scales);
            const HostTensor got = gpu_experts(gpu(), g);
            const std::string what = dims(c.R, c.E, c.k) + " D " + std::to_string(c.D) + " I " +
                                     std::to_string(c.I) + " act " +
                                     std::to_string(static_cast<int>(act));
            EXPECT_EQ(test::bit_mismatch(got, want), "") << what;
            // The CPU's MXFP4 op (decoding on the fly, in f32) within the bf16 tolerance.
            HostTensor ref(p.x.shape());
            cpu().moe_experts(p.x, p.ids, p.weights,
                              as_mx(p.w, mh.gu_blocks, mh.gu_scales, mh.dn_blocks, mh.dn_scales),
                              ref);
            EXPECT_EQ(test::mismatch(got, ref, {1e-2, 2e-2, 1e-2 * test::max_abs(ref)}), "")
                << what;
            g.w = bf16_w;
        }
    }
}

// Token 40 of a 70-token block (70 rows on expert 0: two row tiles) has the bits it has alone.
TEST_F(CudaMoe, Mxfp4RowInvariant) {
    Rng rng(43);
    const Case c{70, 4, 2, 96, 64};
    Problem block = make_problem(c, MoeActivation::clamped_swiglu, true, rng);
    const MxHost mh = make_mx(block, c, rng);
    const MxGpu mg = to_gpu_mx(gpu(), mh);
    std::fill_n(block.ids.i32(), block.ids.numel(), 0);
    block.ids.i32()[40 * 2 + 1] = 3;
    GpuProblem gb(gpu(), block);
    gb.w = as_mx(gb.w, mg.gu_blocks, mg.gu_scales, mg.dn_blocks, mg.dn_scales);
    const HostTensor all = gpu_experts(gpu(), gb);
    Problem solo = make_problem({1, c.E, c.k, c.D, c.I}, MoeActivation::clamped_swiglu, true, rng);
    copy_tensor(solo.gate_up_bias, block.gate_up_bias);
    copy_tensor(solo.down_bias, block.down_bias);
    std::copy_n(block.x.f32() + 40 * c.D, c.D, solo.x.f32());
    std::copy_n(block.ids.i32() + 40 * 2, 2, solo.ids.i32());
    std::copy_n(block.weights.f32() + 40 * 2, 2, solo.weights.f32());
    GpuProblem gs(gpu(), solo);
    gs.w = as_mx(gs.w, mg.gu_blocks, mg.gu_scales, mg.dn_blocks, mg.dn_scales);
    const HostTensor alone = gpu_experts(gpu(), gs);
    HostTensor row({1, c.D});
    std::copy_n(all.f32() + 40 * c.D, c.D, row.f32());
    EXPECT_EQ(test::bit_mismatch(row, alone), "");
}

}  // namespace
}  // namespace dflash
