// The CUDA decode-block ops (backend/op_list.h: rows_linear, qk_norm_rope_cache) against the CPU
// references on the same bf16 values: rows_linear at decode shapes (Qwen3-0.6B's q/k/v, o,
// gate/up and the LM head in f32) and awkward ones, every epilogue, R in {1, 3, 16}; its row
// invariance (each row of a 16-row call has the bits of that row alone); qk_norm_rope_cache with
// and without head norms, partial rotary, head dims 64/128/256 and rows past the cache's end;
// bad input; and a random Qwen3-shaped target decoded through them (LayerContext::rows_ops): a
// verify block's rows equal the decode steps bit for bit and the logits stay near the general
// path's; and the same decode with the decode block's kernels launched with and without
// programmatic dependent launch, in graphs and eagerly: the same bits. Tolerance: fp32 sums in
// another order, then one bf16 rounding (SwiGLU's reference rounds gate and up to bf16 first, as
// the op does on CUDA).
#include <cstring>
#include <span>
#include <string>

#include "backend/backend_factory.h"
#include "cuda/elem_test_util.h"
#include "model/target.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

using test::mismatch;

// A random-weight Qwen3-layout target of the given sizes (head dim 64, untied head).
TargetConfig target_config(int64_t layers, int64_t hidden, int64_t inter, int64_t heads,
                           int64_t kv_heads, int64_t vocab) {
    TargetConfig cfg = test::tiny_target_config(true, layers);
    cfg.hidden_size = hidden;
    cfg.intermediate_size = inter;
    cfg.num_attention_heads = heads;
    cfg.num_key_value_heads = kv_heads;
    cfg.head_dim = 64;
    cfg.vocab_size = vocab;
    return cfg;
}

class CudaRowsLinear : public test::CudaVsCpu {
  protected:
    // Runs one rows_linear on both backends and compares; returns the GPU's result.
    HostTensor check(int64_t R, int64_t K, std::vector<int64_t> n, RowsEpilogue ep, bool f32_out,
                     Rng& rng, const std::string& what);
};

HostTensor CudaRowsLinear::check(int64_t R, int64_t K, std::vector<int64_t> n, RowsEpilogue ep,
                                 bool f32_out, Rng& rng, const std::string& what) {
    HostTensor x = test::bf16_values({R, K}, rng);
    std::vector<HostTensor> w;
    for (int64_t rows : n) w.push_back(test::bf16_values({rows, K}, rng, 0.05f));
    int64_t cols = ep == RowsEpilogue::store ? 0 : n[0];
    if (ep == RowsEpilogue::store)
        for (int64_t rows : n) cols += rows;
    HostTensor res = ep == RowsEpilogue::add ? test::bf16_values({R, cols}, rng) : HostTensor();
    RowsLinear c, g;
    std::vector<DeviceTensor> wd;
    for (const HostTensor& h : w) wd.push_back(test::to_gpu(gpu(), h, DType::bf16));
    for (size_t i = 0; i < w.size(); ++i) {
        c.w[i] = w[i];
        g.w[i] = wd[i];
    }
    c.epilogue = g.epilogue = ep;
    HostTensor ref({R, cols});
    if (ep == RowsEpilogue::swiglu) {
        // The CUDA op rounds gate and up to bf16 before SwiGLU (as gemm + gemm + swiglu_fwd in
        // bf16 would); the f32 CPU op has nothing to round. The reference rounds them too.
        RowsLinear both;
        both.w[0] = w[0];
        both.w[1] = w[1];
        HostTensor gu({R, 2 * cols});
        cpu().rows_linear(x, both, Tensor(), gu);
        HostTensor gate({R, cols}), up({R, cols});
        for (int64_t r = 0; r < R; ++r) {
            for (int64_t j = 0; j < cols; ++j) {
                gate.f32()[r * cols + j] = test::round_bf16(gu.f32()[r * 2 * cols + j]);
                up.f32()[r * cols + j] = test::round_bf16(gu.f32()[r * 2 * cols + cols + j]);
            }
        }
        cpu().swiglu_fwd(gate, up, ref);
    } else {
        cpu().rows_linear(x, c, res, ref);
    }
    DeviceTensor xd = test::to_gpu(gpu(), x, DType::bf16);
    DeviceTensor rd = res.empty() ? DeviceTensor() : test::to_gpu(gpu(), res, DType::bf16);
    DeviceTensor y(gpu(), {R, cols}, f32_out ? DType::f32 : DType::bf16);
    test::poison(gpu(), y);
    gpu().rows_linear(xd, g, rd.empty() ? Tensor() : rd.view(), y);
    HostTensor got = test::to_cpu(gpu(), y);
    EXPECT_EQ(mismatch(got, ref, test::bf16_tol(1e-3 * test::max_abs(ref))), "") << what;
    return got;
}

TEST_F(CudaRowsLinear, DecodeShapesAndAwkwardOnesMatchCpu) {
    Rng rng(7);
    for (const int64_t R : {1, 3, 16}) {
        const std::string r = " R=" + std::to_string(R);
        check(R, 1024, {2048, 1024, 1024}, RowsEpilogue::store, false, rng, "qkv" + r);
        check(R, 2048, {1024}, RowsEpilogue::add, false, rng, "o_proj" + r);
        check(R, 1024, {3072, 3072}, RowsEpilogue::swiglu, false, rng, "gate/up" + r);
        check(R, 3072, {1024}, RowsEpilogue::add, false, rng, "down" + r);
        check(R, 1024, {151936}, RowsEpilogue::store, true, rng, "lm head f32" + r);
        check(R, 72, {40, 24, 13}, RowsEpilogue::store, false, rng, "awkward store" + r);
        check(R, 8, {5}, RowsEpilogue::add, false, rng, "tiny add" + r);
        check(R, 4104, {24, 24}, RowsEpilogue::swiglu, false, rng, "long k swiglu" + r);
    }
}

// Note [rows_linear row invariance]: a decode row and the same row in a verify block.
TEST_F(CudaRowsLinear, RowsHaveTheSameBitsAloneAndInABlock) {
    for (const RowsEpilogue ep : {RowsEpilogue::store, RowsEpilogue::add, RowsEpilogue::swiglu}) {
        Rng rng(11);
        const int64_t K = 1000, N = 264;
        HostTensor x = test::bf16_values({16, K}, rng);
        DeviceTensor xd = test::to_gpu(gpu(), x, DType::bf16);
        DeviceTensor w0 = test::to_gpu(gpu(), test::bf16_values({N, K}, rng, 0.05f), DType::bf16);
        DeviceTensor w1 = test::to_gpu(gpu(), test::bf16_values({N, K}, rng, 0.05f), DType::bf16);
        DeviceTensor res = test::to_gpu(gpu(), test::bf16_values({16, N}, rng), DType::bf16);
        RowsLinear g;
        g.w[0] = w0;
        if (ep != RowsEpilogue::add) g.w[1] = w1;
        g.epilogue = ep;
        const int64_t cols = ep == RowsEpilogue::store ? 2 * N : N;
        DeviceTensor all(gpu(), {16, cols}, DType::bf16), part(gpu(), {16, cols}, DType::bf16);
        const Tensor rs = ep == RowsEpilogue::add ? res.view() : Tensor();
        gpu().rows_linear(xd, g, rs, all);
        for (int64_t r0 = 0; r0 < 16; r0 += 5) {
            const int64_t r1 = std::min<int64_t>(16, r0 + (r0 % 2 == 0 ? 1 : 3));
            gpu().rows_linear(xd.view().rows(r0, r1), g, rs.empty() ? Tensor() : rs.rows(r0, r1),
                              part.view().rows(r0, r1));
            EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), part.view().rows(r0, r1)),
                                         test::to_cpu(gpu(), all.view().rows(r0, r1))),
                      "")
                << "epilogue " << static_cast<int>(ep) << " rows " << r0 << ".." << r1;
        }
    }
}

TEST_F(CudaRowsLinear, QkNormRopeCacheMatchesCpu) {
    Rng rng(13);
    const int64_t H = 16, Hkv = 8, C = 40;
    for (const int64_t Dh : {64, 128, 256}) {
        for (const bool norms : {true, false}) {
            for (const int64_t half : {Dh / 2, Dh / 4}) {
                for (const int64_t start : {int64_t{3}, C - 5}) {
                    const int64_t R = 16;
                    const std::string what = "Dh " + std::to_string(Dh) + (norms ? " norms" : "") +
                                             " half " + std::to_string(half) + " start " +
                                             std::to_string(start);
                    HostTensor qkv = test::bf16_values({R, (H + 2 * Hkv) * Dh}, rng, 2.0f);
                    HostTensor qn = norms ? test::bf16_values({Dh}, rng) : HostTensor();
                    HostTensor kn = norms ? test::bf16_values({Dh}, rng) : HostTensor();
                    HostTensor pos({R}, DType::i32), row0({1}, DType::i32), freq({half});
                    for (int64_t r = 0; r < R; ++r) pos.i32()[r] = static_cast<int32_t>(500 + r);
                    row0.i32()[0] = static_cast<int32_t>(start);
                    for (int64_t i = 0; i < half; ++i)
                        freq.f32()[i] = std::pow(1e6f, -static_cast<float>(2 * i) / Dh);
                    HostTensor q({R, H, Dh}), kc({C, Hkv, Dh}), vc({C, Hkv, Dh});
                    cpu().fill(kc, 0.5f);
                    cpu().fill(vc, 0.5f);
                    cpu().qk_norm_rope_cache(qkv, qn, kn, 1e-6f, pos, freq, q, kc, vc, row0);
                    DeviceTensor qd(gpu(), {R, H, Dh}, DType::bf16);
                    DeviceTensor kd(gpu(), {C, Hkv, Dh}, DType::bf16);
                    DeviceTensor vd(gpu(), {C, Hkv, Dh}, DType::bf16);
                    test::poison(gpu(), qd);
                    gpu().fill(kd, 0.5f);
                    gpu().fill(vd, 0.5f);
                    DeviceTensor qkvd = test::to_gpu(gpu(), qkv, DType::bf16);
                    DeviceTensor qnd =
                        norms ? test::to_gpu(gpu(), qn, DType::bf16) : DeviceTensor();
                    DeviceTensor knd =
                        norms ? test::to_gpu(gpu(), kn, DType::bf16) : DeviceTensor();
                    DeviceTensor posd = test::to_gpu_i32(gpu(), pos);
                    DeviceTensor r0d = test::to_gpu_i32(gpu(), row0);
                    DeviceTensor fd = test::to_gpu(gpu(), freq, DType::f32);
                    gpu().qk_norm_rope_cache(qkvd, qnd.empty() ? Tensor() : qnd.view(),
                                             knd.empty() ? Tensor() : knd.view(), 1e-6f, posd, fd,
                                             qd, kd, vd, r0d);
                    // Two bf16 roundings on the GPU (the normed head, then the rotation), as
                    // the unfused kernels round; none on the CPU.
                    auto tol = [](const HostTensor& ref) {
                        return test::Tol{1e-2, 2.0 / 256, 2e-3 * test::max_abs(ref)};
                    };
                    EXPECT_EQ(mismatch(test::to_cpu(gpu(), qd), q, tol(q)), "") << what << ": q";
                    EXPECT_EQ(mismatch(test::to_cpu(gpu(), kd), kc, tol(kc)), "") << what << ": k";
                    EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), vd), vc), "") << what << ": v";
                }
            }
        }
    }
}

TEST_F(CudaRowsLinear, RejectsBadInput) {
    Rng rng(17);
    DeviceTensor x17 = test::to_gpu(gpu(), test::bf16_values({17, 64}, rng), DType::bf16);
    DeviceTensor x = test::to_gpu(gpu(), test::bf16_values({2, 60}, rng), DType::bf16);
    DeviceTensor w = test::to_gpu(gpu(), test::bf16_values({8, 64}, rng), DType::bf16);
    DeviceTensor w60 = test::to_gpu(gpu(), test::bf16_values({8, 60}, rng), DType::bf16);
    DeviceTensor y17(gpu(), {17, 8}, DType::bf16), y(gpu(), {2, 8}, DType::bf16);
    RowsLinear g;
    g.w[0] = w;
    EXPECT_THROW(gpu().rows_linear(x17, g, Tensor(), y17), UserError);
    g.w[0] = w60;
    EXPECT_THROW(gpu().rows_linear(x, g, Tensor(), y), UserError);  // k not a multiple of 8
    HostTensor on_host({2, 64});
    g.w[0] = w;
    EXPECT_THROW(gpu().rows_linear(on_host, g, Tensor(), y), UserError);
}

// The engine's target on CUDA: verify rows equal decode steps bit for bit through the fused ops,
// and their logits stay within bf16 noise of the general path's.
TEST_F(CudaRowsLinear, TargetVerifyRowsEqualDecodeSteps) {
    const TargetConfig cfg = target_config(3, 256, 512, 4, 2, 1000);
    TargetModel m = TargetModel::random(gpu(), cfg, 21, 0.05f);
    const int64_t V = cfg.vocab_size;
    const auto toks = test::random_tokens(40, V, 3);
    TargetSession general(m, gpu(), 64, {}, 32);
    TargetSession steps(m, gpu(), 64, {}, 32, nullptr, true);
    TargetSession block(m, gpu(), 64, {}, 32, nullptr, true);
    DeviceTensor ref(gpu(), {16, V}, DType::f32), one(gpu(), {16, V}, DType::f32),
        all(gpu(), {16, V}, DType::f32);
    for (TargetSession* s : {&general, &steps, &block})
        s->forward(std::span(toks).first(24), Tensor(), Tensor());
    for (int64_t t = 24; t < 40; ++t) {
        steps.forward(std::span(toks).subspan(t, 1), one.view().rows(t - 24, t - 23), Tensor());
        general.forward(std::span(toks).subspan(t, 1), ref.view().rows(t - 24, t - 23), Tensor());
    }
    block.forward(std::span(toks).subspan(24, 16), all.view(), Tensor());
    EXPECT_EQ(test::bit_mismatch(test::to_cpu(gpu(), one), test::to_cpu(gpu(), all)), "");
    const HostTensor r = test::to_cpu(gpu(), ref);
    EXPECT_EQ(mismatch(test::to_cpu(gpu(), one), r, {5e-2, 5e-2, 5e-2 * test::max_abs(r)}), "");
}

// Programmatic dependent launch (kernels/pdl.cuh) lets each decode-block kernel start before the
// one it reads from has finished; only its wait() orders them. A kernel that read an activation,
// the cache or kv_len before its wait() would see stale values here, and the logits would differ
// from the serially launched run's.
TEST_F(CudaRowsLinear, ProgrammaticLaunchGivesTheSerialLaunchesBits) {
    const TargetConfig cfg = target_config(4, 1024, 3072, 16, 8, 4000);
    const int64_t V = cfg.vocab_size;
    const auto toks = test::random_tokens(80, V, 9);
    // 16 decode steps then one 16-row verify block, after a 48-token prompt.
    auto run = [&](bool graphs, bool pdl) {
        GraphOptions g;
        g.enabled = graphs;
        g.programmatic_launch = pdl;
        auto be = make_backend(DeviceKind::cuda, 0, 1, g);
        TargetModel m = TargetModel::random(*be, cfg, 33, 0.05f);
        TargetSession s(m, *be, 96, {}, 32, nullptr, true);
        DeviceTensor out(*be, {32, V}, DType::f32);
        s.forward(std::span(toks).first(48), Tensor(), Tensor());
        for (int64_t t = 48; t < 64; ++t)
            s.forward(std::span(toks).subspan(t, 1), out.view().rows(t - 48, t - 47), Tensor());
        s.forward(std::span(toks).subspan(64, 16), out.view().rows(16, 32), Tensor());
        return test::to_cpu(*be, out);
    };
    for (const bool graphs : {true, false}) {
        const HostTensor serial = run(graphs, false);
        EXPECT_EQ(test::bit_mismatch(run(graphs, true), serial), "")
            << (graphs ? "graphs" : "eager");
    }
}

}  // namespace
}  // namespace dflash
