// CUDA Gated DeltaNet against the CPU reference (backend/cpu/gdn.cpp): the conv (K = 2 and 4,
// with a state) and its cache roll bit for bit, gdn_prepare with f32 and bf16 a_log / dt_bias,
// the gated norm, gdn_recurrent (with and without a count, o empty) and gdn_chunked on awkward
// lengths (T = 1, 17, 64, 65, 300, 3000) at the real head size (Hk 2, Hv 4, dk = dv = 128) and
// small dims, chunked runs bit-identical twice (no atomics), gdn_recurrent with a device count
// recorded in a CUDA graph and replayed with other counts, and argument errors. Skips visibly
// without a GPU. Forward only: these ops have no backward.
//
// Tolerances. bf16 outputs (conv, gated norm): the CPU computes in f32 from the same bf16-rounded
// inputs; the GPU rounds once (conv) or three times (the gated norm follows HF's bf16 casts), so
// rtol 1/256 resp. 3/256. f32 outputs (prepare, both rules): the two sides differ only in the
// order of f32 sums (and expf / log1pf against std::), a few 1e-7 relative per step; over
// thousands of tokens the decayed state forgets old rounding, so rel error norm 1e-5 (prepare)
// and 1e-4 (the rules) with every element within 1e-3 |ref| + 1e-4 max|ref|.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/step_graph.h"
#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

class CudaGdn : public test::CudaVsCpu {};

std::string dims_of(int64_t S, int64_t Hk, int64_t dk, int64_t Hv, int64_t dv) {
    return "S " + std::to_string(S) + " Hk " + std::to_string(Hk) + " dk " + std::to_string(dk) +
           " Hv " + std::to_string(Hv) + " dv " + std::to_string(dv);
}

test::Tol rule_tol(const HostTensor& ref) {
    return {1e-4, 1e-3, 1e-4 * std::max(1.0, test::max_abs(ref))};
}

TEST_F(CudaGdn, ConvMatchesCpu) {
    Rng rng(1);
    for (const int64_t K : {2, 4})
        for (const int64_t S : {1, 5, 300}) {
            const int64_t C = 2 * 2 * 16 + 4 * 24 + 3;  // off every vector width
            const HostTensor x = test::bf16_values({S, C}, rng);
            const HostTensor w = test::bf16_values({C, K}, rng, 0.6f);
            const HostTensor state = test::f32_values({K - 1, C}, rng);
            HostTensor y_ref({S, C});
            cpu().gdn_conv(x, w, state, y_ref);
            DeviceTensor gx = test::to_gpu(gpu(), x, DType::bf16),
                         gw = test::to_gpu(gpu(), w, DType::bf16),
                         gs = test::to_gpu(gpu(), state, DType::f32),
                         gy(gpu(), {S, C}, DType::bf16);
            test::poison(gpu(), gy);
            gpu().gdn_conv(gx, gw, gs, gy);
            EXPECT_EQ(test::mismatch(test::to_cpu(gpu(), gy), y_ref, test::bf16_tol(1e-3)), "")
                << "K " << K << " S " << S;
        }
}

TEST_F(CudaGdn, ConvAdvanceMatchesCpuBitForBit) {
    Rng rng(2);
    const int64_t K = 4, C = 37, S = 6;
    const HostTensor x = test::bf16_values({S, C}, rng);
    const HostTensor state0 = test::f32_values({K - 1, C}, rng);
    DeviceTensor gx = test::to_gpu(gpu(), x, DType::bf16);
    for (const int32_t n : {0, 1, 2, 3, 5, 6, 40, -3}) {
        HostTensor ref = state0.clone();
        const HostTensor count = HostTensor::from_i32({1}, {n});
        cpu().gdn_conv_advance(ref, x, count);
        DeviceTensor gs = test::to_gpu(gpu(), state0, DType::f32);
        DeviceTensor gc = test::to_gpu_i32(gpu(), count);
        gpu().gdn_conv_advance(gs, gx, gc);
        EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gs), ref), "") << "count " << n;
    }
}

struct Prepared {
    HostTensor q, k, v, g, beta;
};

// gdn_prepare on both backends from bf16-rounded projections; returns the CPU's outputs.
Prepared prepare_both(Backend& cpu, Backend& gpu, int64_t S, int64_t Hk, int64_t dk, int64_t Hv,
                      int64_t dv, DType param_dtype, Rng& rng, std::string* mismatch) {
    const int64_t C = 2 * Hk * dk + Hv * dv;
    const HostTensor conv_out = test::bf16_values({S, C}, rng);
    const HostTensor b = test::bf16_values({S, Hv}, rng, 2.0f);
    HostTensor a = test::bf16_values({S, Hv}, rng, 2.0f);
    a.f32()[0] = 24.0f;  // softplus's linear branch
    HostTensor a_log({Hv});
    for (int64_t h = 0; h < Hv; ++h)
        a_log.f32()[h] =
            test::round_bf16(-4.0f + 4.5f * static_cast<float>(h) / static_cast<float>(Hv));
    const HostTensor dt_bias = test::bf16_values({Hv}, rng, 0.1f);
    Prepared ref{HostTensor({S, Hk, dk}), HostTensor({S, Hk, dk}), HostTensor({S, Hv, dv}),
                 HostTensor({S, Hv}), HostTensor({S, Hv})};
    cpu.gdn_prepare(conv_out, b, a, a_log, dt_bias, ref.q, ref.k, ref.v, ref.g, ref.beta);
    DeviceTensor gc = test::to_gpu(gpu, conv_out, DType::bf16),
                 gb = test::to_gpu(gpu, b, DType::bf16), ga = test::to_gpu(gpu, a, DType::bf16),
                 gal = test::to_gpu(gpu, a_log, param_dtype),
                 gdt = test::to_gpu(gpu, dt_bias, param_dtype);
    DeviceTensor q(gpu, {S, Hk, dk}, DType::f32), k(gpu, {S, Hk, dk}, DType::f32),
        v(gpu, {S, Hv, dv}, DType::f32), g(gpu, {S, Hv}, DType::f32),
        beta(gpu, {S, Hv}, DType::f32);
    for (const Tensor& t : {q.view(), k.view(), v.view(), g.view(), beta.view()})
        test::poison(gpu, t);
    gpu.gdn_prepare(gc, gb, ga, gal, gdt, q, k, v, g, beta);
    const test::Tol tol{1e-5, 1e-5, 1e-6};
    std::string m;
    const auto check = [&](const char* name, const Tensor& got, const HostTensor& want) {
        const std::string e = test::mismatch(test::to_cpu(gpu, got), want, tol);
        if (!e.empty()) m += std::string(name) + ": " + e + "\n";
    };
    check("q", q, ref.q);
    check("k", k, ref.k);
    check("v", v, ref.v);
    check("g", g, ref.g);
    check("beta", beta, ref.beta);
    *mismatch = m;
    return ref;
}

TEST_F(CudaGdn, PrepareMatchesCpu) {
    Rng rng(3);
    std::string m;
    prepare_both(cpu(), gpu(), 7, 3, 5, 6, 7, DType::f32, rng, &m);
    EXPECT_EQ(m, "") << "small, f32 params";
    prepare_both(cpu(), gpu(), 5, 2, 128, 4, 128, DType::bf16, rng, &m);
    EXPECT_EQ(m, "") << "real head size, bf16 params";
    prepare_both(cpu(), gpu(), 3, 16, 128, 48, 128, DType::f32, rng, &m);
    EXPECT_EQ(m, "") << "Qwen3.5-27B geometry";
}

TEST_F(CudaGdn, GatedNormMatchesCpu) {
    Rng rng(4);
    for (const int64_t dv : {24, 128, 45}) {
        const int64_t S = 9, Hv = 3;
        const HostTensor o = test::f32_values({S, Hv, dv}, rng, 2.0f);
        const HostTensor z = test::bf16_values({S, Hv * dv}, rng, 2.0f);
        const HostTensor w = test::bf16_values({dv}, rng);
        HostTensor ref({S, Hv * dv});
        cpu().gdn_gated_norm(o, z, w, 1e-6f, ref);
        DeviceTensor go = test::to_gpu(gpu(), o, DType::f32),
                     gz = test::to_gpu(gpu(), z, DType::bf16),
                     gw = test::to_gpu(gpu(), w, DType::bf16), gy(gpu(), {S, Hv * dv}, DType::bf16);
        test::poison(gpu(), gy);
        gpu().gdn_gated_norm(go, gz, gw, 1e-6f, gy);
        EXPECT_EQ(test::mismatch(test::to_cpu(gpu(), gy), ref, {1e-2, 3.0 / 256, 1e-3}), "")
            << "dv " << dv;
    }
}

// The rule's f32 inputs on the GPU.
struct GpuRule {
    DeviceTensor q, k, v, g, beta;
    GpuRule(Backend& gpu, const Prepared& p)
        : q(test::to_gpu(gpu, p.q, DType::f32)),
          k(test::to_gpu(gpu, p.k, DType::f32)),
          v(test::to_gpu(gpu, p.v, DType::f32)),
          g(test::to_gpu(gpu, p.g, DType::f32)),
          beta(test::to_gpu(gpu, p.beta, DType::f32)) {}
};

struct RuleCase {
    int64_t S, Hk, dk, Hv, dv;
};

TEST_F(CudaGdn, RulesMatchCpu) {
    Rng rng(5);
    std::vector<RuleCase> cases;
    for (const int64_t S : {1, 17, 64, 65, 300, 3000}) {
        cases.push_back({S, 2, 128, 4, 128});
        cases.push_back({S, 2, 16, 4, 24});
        cases.push_back({S, 1, 12, 3, 20});
    }
    for (const RuleCase& c : cases) {
        const std::string what = dims_of(c.S, c.Hk, c.dk, c.Hv, c.dv);
        std::string m;
        const Prepared p =
            prepare_both(cpu(), gpu(), c.S, c.Hk, c.dk, c.Hv, c.dv, DType::f32, rng, &m);
        ASSERT_EQ(m, "") << what;
        const HostTensor state0 = test::f32_values({c.Hv, c.dk, c.dv}, rng, 0.3f);
        GpuRule gr(gpu(), p);
        for (const bool chunked : {false, true}) {
            HostTensor st_ref = state0.clone(), o_ref({c.S, c.Hv, c.dv});
            DeviceTensor gs = test::to_gpu(gpu(), state0, DType::f32),
                         go(gpu(), {c.S, c.Hv, c.dv}, DType::f32);
            test::poison(gpu(), go);
            if (chunked) {
                cpu().gdn_chunked(p.q, p.k, p.v, p.g, p.beta, st_ref, o_ref);
                gpu().gdn_chunked(gr.q, gr.k, gr.v, gr.g, gr.beta, gs, go);
            } else {
                cpu().gdn_recurrent(p.q, p.k, p.v, p.g, p.beta, st_ref, o_ref, Tensor{});
                gpu().gdn_recurrent(gr.q, gr.k, gr.v, gr.g, gr.beta, gs, go, Tensor{});
            }
            const char* kind = chunked ? " chunked" : " recurrent";
            EXPECT_EQ(test::mismatch(test::to_cpu(gpu(), go), o_ref, rule_tol(o_ref)), "")
                << what << kind << " o";
            EXPECT_EQ(test::mismatch(test::to_cpu(gpu(), gs), st_ref, rule_tol(st_ref)), "")
                << what << kind << " state";
            if (chunked && c.S == 300 && c.dk == 128) {
                // Deterministic: a second run gives the same bits.
                DeviceTensor gs2 = test::to_gpu(gpu(), state0, DType::f32),
                             go2(gpu(), {c.S, c.Hv, c.dv}, DType::f32);
                gpu().gdn_chunked(gr.q, gr.k, gr.v, gr.g, gr.beta, gs2, go2);
                EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), go2), test::to_cpu(gpu(), go)), "")
                    << what << " chunked rerun";
                EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gs2), test::to_cpu(gpu(), gs)), "")
                    << what << " chunked rerun state";
            }
        }
    }
}

TEST_F(CudaGdn, RecurrentCountAndEmptyOutput) {
    Rng rng(6);
    const RuleCase c{16, 2, 128, 4, 128};
    std::string m;
    const Prepared p = prepare_both(cpu(), gpu(), c.S, c.Hk, c.dk, c.Hv, c.dv, DType::f32, rng, &m);
    ASSERT_EQ(m, "");
    const HostTensor state0 = test::f32_values({c.Hv, c.dk, c.dv}, rng, 0.3f);
    GpuRule gr(gpu(), p);
    for (const int32_t n : {0, 1, 7, 16, 20}) {
        const HostTensor count = HostTensor::from_i32({1}, {n});
        HostTensor st_ref = state0.clone(), o_ref({c.S, c.Hv, c.dv});
        fill_f32(o_ref, std::nanf(""));  // rows past n stay as poisoned
        cpu().gdn_recurrent(p.q, p.k, p.v, p.g, p.beta, st_ref, o_ref, count);
        DeviceTensor gc = test::to_gpu_i32(gpu(), count);
        DeviceTensor gs = test::to_gpu(gpu(), state0, DType::f32),
                     go(gpu(), {c.S, c.Hv, c.dv}, DType::f32);
        test::poison(gpu(), go);
        gpu().gdn_recurrent(gr.q, gr.k, gr.v, gr.g, gr.beta, gs, go, gc);
        EXPECT_EQ(test::mismatch(test::to_cpu(gpu(), go), o_ref, rule_tol(st_ref)), "")
            << "count " << n;
        EXPECT_EQ(test::mismatch(test::to_cpu(gpu(), gs), st_ref, rule_tol(st_ref)), "")
            << "count " << n;
        // o empty: the same state.
        DeviceTensor gs2 = test::to_gpu(gpu(), state0, DType::f32);
        gpu().gdn_recurrent(gr.q, gr.k, gr.v, gr.g, gr.beta, gs2, Tensor{}, gc);
        EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), gs2), test::to_cpu(gpu(), gs)), "")
            << "count " << n << ", o empty";
    }
}

// gdn_recurrent inside Backend::run_step: captured once, replayed with other counts (read on the
// device, not baked into the graph); every replay gives the bits of an eager run.
TEST_F(CudaGdn, RecurrentWithCountRecordsInACudaGraph) {
    GraphOptions graphs;
    graphs.enabled = true;
    graphs.warmup_runs = 1;
    auto gpu_graphs = make_backend(DeviceKind::cuda, 0, 1, graphs);
    Backend& be = *gpu_graphs;
    Rng rng(7);
    const RuleCase c{16, 2, 128, 4, 128};
    std::string m;
    const Prepared p = prepare_both(cpu(), be, c.S, c.Hk, c.dk, c.Hv, c.dv, DType::f32, rng, &m);
    ASSERT_EQ(m, "");
    const HostTensor state0 = test::f32_values({c.Hv, c.dk, c.dv}, rng, 0.3f);
    GpuRule gr(be, p);
    DeviceTensor gs(be, {c.Hv, c.dk, c.dv}, DType::f32), go(be, {c.S, c.Hv, c.dv}, DType::f32),
        gc(be, {1}, DType::i32);
    const StepKey key{be.new_step_owner(), "gdn.test", {c.S}};
    const auto step = [&] { be.gdn_recurrent(gr.q, gr.k, gr.v, gr.g, gr.beta, gs, go, gc); };
    for (const int32_t n : {3, 16, 1, 9}) {
        const HostTensor count = HostTensor::from_i32({1}, {n});
        be.upload(gc, count);
        from_host_f32(be, gs, state0);
        be.fill(go, 0.0f);
        be.synchronize();
        be.run_step(key, step);
        const HostTensor got_o = test::to_cpu(be, go), got_s = test::to_cpu(be, gs);
        from_host_f32(be, gs, state0);
        be.fill(go, 0.0f);
        be.synchronize();
        step();  // eagerly, outside any step
        EXPECT_EQ(test::bit_mismatch(got_o, test::to_cpu(be, go)), "") << "count " << n;
        EXPECT_EQ(test::bit_mismatch(got_s, test::to_cpu(be, gs)), "") << "count " << n;
        HostTensor st_ref = state0.clone(), o_ref({c.S, c.Hv, c.dv});
        cpu().gdn_recurrent(p.q, p.k, p.v, p.g, p.beta, st_ref, o_ref, count);
        EXPECT_EQ(test::mismatch(got_s, st_ref, rule_tol(st_ref)), "") << "count " << n;
    }
    const GraphStats s = be.graph_stats();
    EXPECT_EQ(s.captures, 1) << s.summary();
    EXPECT_GE(s.replays, 2) << s.summary();
    EXPECT_TRUE(s.fallback_reasons.empty()) << s.summary();
}

TEST_F(CudaGdn, ArgumentErrors) {
    DeviceTensor x32(gpu(), {4, 8}, DType::f32), x(gpu(), {4, 8}, DType::bf16),
        w(gpu(), {8, 4}, DType::bf16), st(gpu(), {3, 8}, DType::f32), y(gpu(), {4, 8}, DType::bf16);
    EXPECT_NO_THROW(gpu().gdn_conv(x, w, st, y));
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().gdn_conv(x32, w, st, y); }), "gdn_conv: x is"));
    DeviceTensor q(gpu(), {2, 1, 132}, DType::f32), k(gpu(), {2, 1, 132}, DType::f32),
        v(gpu(), {2, 1, 8}, DType::f32), g(gpu(), {2, 1}, DType::f32),
        beta(gpu(), {2, 1}, DType::f32), s(gpu(), {1, 132, 8}, DType::f32),
        o(gpu(), {2, 1, 8}, DType::f32);
    EXPECT_TRUE(test::has(test::error_of([&] { gpu().gdn_chunked(q, k, v, g, beta, s, o); }),
                          "gdn_chunked: dk=132 and dv=8 must be at most 128"));
    DeviceTensor bad_state(gpu(), {1, 8, 132}, DType::f32);
    EXPECT_TRUE(test::has(
        test::error_of([&] { gpu().gdn_recurrent(q, k, v, g, beta, bad_state, o, Tensor{}); }),
        "gdn_recurrent: state is"));
    DeviceTensor count_f32(gpu(), {1}, DType::f32);
    EXPECT_TRUE(
        test::has(test::error_of([&] { gpu().gdn_recurrent(q, k, v, g, beta, s, o, count_f32); }),
                  "gdn_recurrent: count is"));
}

}  // namespace
}  // namespace dflash
