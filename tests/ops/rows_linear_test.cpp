// The decode block's ops on the CPU (backend/op_list.h: rows_linear, qk_norm_rope_cache), the
// oracle of the CUDA kernels: rows_linear against gemm (+ add_inplace, swiglu_fwd) for every
// epilogue and segment count, qk_norm_rope_cache against rmsnorm_fwd + rope_fwd + write_rows
// (norms present or absent, partial rotary, rows past the cache's end), the shape checks, and a
// target decoded through them (LayerContext::rows_ops): verify rows equal decode steps bit for bit
// and the logits stay those of the general path to fp32 rounding.
#include <gtest/gtest.h>

#include <cstring>
#include <span>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "core/rng.h"
#include "model/decoder_layer.h"
#include "model/target.h"
#include "model/tensor_layout.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

HostTensor randn(Shape s, Rng& rng, float scale = 1.0f) {
    HostTensor t(s, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * rng.normal();
    return t;
}

TEST(RowsLinear, StoreAddSwigluMatchGemm) {
    auto be = make_cpu_backend(2);
    Rng rng(3);
    for (const int64_t R : {1, 5, 16}) {
        const int64_t K = 40;
        HostTensor x = randn({R, K}, rng), w0 = randn({24, K}, rng), w1 = randn({8, K}, rng),
                   w2 = randn({16, K}, rng);
        // store, three segments side by side
        RowsLinear st;
        st.w[0] = w0;
        st.w[1] = w1;
        st.w[2] = w2;
        HostTensor y({R, 48});
        be->rows_linear(x, st, Tensor(), y);
        HostTensor ref({R, 48});
        HostTensor p0({R, 24}), p1({R, 8}), p2({R, 16});
        be->gemm(x, false, w0, true, p0);
        be->gemm(x, false, w1, true, p1);
        be->gemm(x, false, w2, true, p2);
        be->copy_columns(ref, 0, p0);
        be->copy_columns(ref, 24, p1);
        be->copy_columns(ref, 32, p2);
        EXPECT_LT(test::max_rel_diff(y, ref), 1e-5) << "store R=" << R;

        // add, with y aliasing the residual
        HostTensor res = randn({R, 24}, rng);
        HostTensor add_ref = res.clone();
        be->gemm(x, false, w0, true, add_ref, 1.0f, 1.0f);
        RowsLinear ad;
        ad.w[0] = w0;
        ad.epilogue = RowsEpilogue::add;
        be->rows_linear(x, ad, res, res);
        EXPECT_LT(test::max_rel_diff(res, add_ref), 1e-5) << "add R=" << R;

        // swiglu
        HostTensor wu = randn({24, K}, rng), g({R, 24}), u({R, 24}), sw_ref({R, 24}), sw({R, 24});
        be->gemm(x, false, w0, true, g);
        be->gemm(x, false, wu, true, u);
        be->swiglu_fwd(g, u, sw_ref);
        RowsLinear sg;
        sg.w[0] = w0;
        sg.w[1] = wu;
        sg.epilogue = RowsEpilogue::swiglu;
        be->rows_linear(x, sg, Tensor(), sw);
        EXPECT_LT(test::max_rel_diff(sw, sw_ref), 1e-5) << "swiglu R=" << R;
    }
}

TEST(RowsLinear, RejectsBadShapes) {
    auto be = make_cpu_backend(1);
    Rng rng(4);
    HostTensor x17 = randn({17, 8}, rng), x = randn({2, 8}, rng), w = randn({4, 8}, rng);
    HostTensor w9 = randn({4, 9}, rng), y({2, 4}), y17({17, 4}), bad_y({2, 5});
    RowsLinear st;
    st.w[0] = w;
    EXPECT_THROW(be->rows_linear(x17, st, Tensor(), y17), UserError);  // more than 16 rows
    EXPECT_THROW(be->rows_linear(x, st, Tensor(), bad_y), UserError);  // y's columns
    RowsLinear wrong_k;
    wrong_k.w[0] = w9;
    EXPECT_THROW(be->rows_linear(x, wrong_k, Tensor(), y), UserError);
    RowsLinear add;
    add.w[0] = w;
    add.epilogue = RowsEpilogue::add;
    EXPECT_THROW(be->rows_linear(x, add, Tensor(), y), UserError);  // no residual
    RowsLinear swiglu;
    swiglu.w[0] = w;
    swiglu.epilogue = RowsEpilogue::swiglu;
    EXPECT_THROW(be->rows_linear(x, swiglu, Tensor(), y), UserError);  // no up weight
    RowsLinear gap;
    gap.w[0] = w;
    gap.w[2] = w;
    HostTensor y8({2, 8});
    EXPECT_THROW(be->rows_linear(x, gap, Tensor(), y8), UserError);  // w[2] without w[1]
}

// The composition qk_norm_rope_cache replaces, on the same values.
void unfused(Backend& be, const HostTensor& qkv, const HostTensor& qn, const HostTensor& kn,
             const HostTensor& pos, const HostTensor& freq, int64_t H, int64_t Hkv, int64_t Dh,
             const HostTensor& row0, HostTensor& q, HostTensor& kc, HostTensor& vc) {
    const int64_t R = qkv.dim(0);
    HostTensor ql({R, H, Dh}), kl({R, Hkv, Dh}), v({R, Hkv, Dh});
    for (int64_t r = 0; r < R; ++r) {
        const float* in = qkv.f32() + r * (H + 2 * Hkv) * Dh;
        std::memcpy(ql.f32() + r * H * Dh, in, H * Dh * 4);
        std::memcpy(kl.f32() + r * Hkv * Dh, in + H * Dh, Hkv * Dh * 4);
        std::memcpy(v.f32() + r * Hkv * Dh, in + (H + Hkv) * Dh, Hkv * Dh * 4);
    }
    HostTensor k({R, Hkv, Dh});
    if (!qn.empty()) {
        be.rmsnorm_fwd(ql.view().reshape({R * H, Dh}), qn, 1e-6f, q.view().reshape({R * H, Dh}),
                       Tensor());
        be.rmsnorm_fwd(kl.view().reshape({R * Hkv, Dh}), kn, 1e-6f, k.view().reshape({R * Hkv, Dh}),
                       Tensor());
    } else {
        be.copy(q, ql);
        be.copy(k, kl);
    }
    be.rope_fwd(q, pos, freq);
    be.rope_fwd(k, pos, freq);
    be.write_rows(kc, row0, k);
    be.write_rows(vc, row0, v);
}

TEST(QkNormRopeCache, MatchesNormRopeAndRowWrites) {
    auto be = make_cpu_backend(1);
    Rng rng(5);
    const int64_t H = 4, Hkv = 2, C = 10;
    for (const int64_t Dh : {8, 64}) {
        for (const bool norms : {true, false}) {
            for (const int64_t half : {Dh / 2, Dh / 4}) {          // full and partial rotary
                for (const int64_t start : {int64_t{0}, C - 2}) {  // the last rows fall off
                    const int64_t R = 3;
                    HostTensor qkv = randn({R, (H + 2 * Hkv) * Dh}, rng, 2.0f);
                    HostTensor qn = norms ? randn({Dh}, rng) : HostTensor();
                    HostTensor kn = norms ? randn({Dh}, rng) : HostTensor();
                    HostTensor pos({R}, DType::i32), row0({1}, DType::i32);
                    for (int64_t r = 0; r < R; ++r) pos.i32()[r] = static_cast<int32_t>(start + r);
                    row0.i32()[0] = static_cast<int32_t>(start);
                    HostTensor freq({half});
                    for (int64_t i = 0; i < half; ++i)
                        freq.f32()[i] = std::pow(10000.0f, -static_cast<float>(2 * i) / Dh);
                    HostTensor q({R, H, Dh}), kc({C, Hkv, Dh}), vc({C, Hkv, Dh});
                    HostTensor q_ref({R, H, Dh}), kc_ref({C, Hkv, Dh}), vc_ref({C, Hkv, Dh});
                    for (HostTensor* t : {&kc, &vc, &kc_ref, &vc_ref}) be->fill(*t, 7.0f);
                    be->qk_norm_rope_cache(qkv, qn, kn, 1e-6f, pos, freq, q, kc, vc, row0);
                    unfused(*be, qkv, qn, kn, pos, freq, H, Hkv, Dh, row0, q_ref, kc_ref, vc_ref);
                    const std::string what =
                        "Dh " + std::to_string(Dh) + (norms ? " norms" : " no norms") + " half " +
                        std::to_string(half) + " start " + std::to_string(start);
                    EXPECT_LT(test::max_abs_diff(q, q_ref), 1e-5) << what;
                    EXPECT_LT(test::max_abs_diff(kc, kc_ref), 1e-5) << what;
                    EXPECT_EQ(test::max_abs_diff(vc, vc_ref), 0.0) << what;
                }
            }
        }
    }
}

TEST(QkNormRopeCache, RejectsBadShapes) {
    auto be = make_cpu_backend(1);
    HostTensor qkv({2, 64}), q({2, 4, 8}), kc({5, 2, 8}), vc({5, 2, 8}), freq({4});
    HostTensor pos({2}, DType::i32), row0({1}, DType::i32), pos3({3}, DType::i32);
    HostTensor kc3({5, 3, 8}), qkv_bad({2, 60}), norm7({7});
    be->fill(pos, 0.0f);
    be->fill(row0, 0.0f);
    EXPECT_NO_THROW(
        be->qk_norm_rope_cache(qkv, Tensor(), Tensor(), 1e-6f, pos, freq, q, kc, vc, row0));
    EXPECT_THROW(
        be->qk_norm_rope_cache(qkv_bad, Tensor(), Tensor(), 1e-6f, pos, freq, q, kc, vc, row0),
        UserError);
    EXPECT_THROW(
        be->qk_norm_rope_cache(qkv, Tensor(), Tensor(), 1e-6f, pos3, freq, q, kc, vc, row0),
        UserError);
    EXPECT_THROW(
        be->qk_norm_rope_cache(qkv, Tensor(), Tensor(), 1e-6f, pos, freq, q, kc3, vc, row0),
        UserError);  // 4 heads over 3 kv heads
    EXPECT_THROW(be->qk_norm_rope_cache(qkv, norm7, Tensor(), 1e-6f, pos, freq, q, kc, vc, row0),
                 UserError);
}

// The target through the decode-block ops (the CUDA engine's way, here on their CPU references):
// a verify block's rows equal the decode steps bit for bit, and the logits equal the general
// path's to fp32 rounding (Qwen3 with head norms, and Llama with llama3 RoPE scaling).
TEST(RowsTarget, VerifyRowsEqualDecodeStepsAndTheGeneralPath) {
    auto be = make_cpu_backend(2);
    for (const bool qwen3 : {true, false}) {
        TargetModel m = TargetModel::random(*be, test::tiny_target_config(qwen3), 16, 0.2f);
        const int64_t V = m.config().vocab_size;
        const auto toks = test::random_tokens(13, V, 9);
        TargetSession general(m, *be, 32, {}, 8);
        TargetSession steps(m, *be, 32, {}, 8, nullptr, true),
            block(m, *be, 32, {}, 8, nullptr, true);
        HostTensor ref({13, V}), one({13, V}), eight({13, V});
        for (TargetSession* s : {&general, &steps, &block}) {
            HostTensor& out = s == &general ? ref : s == &steps ? one : eight;
            s->forward(std::span(toks).subspan(0, 5), out.view().rows(0, 5), Tensor());
        }
        for (int64_t t = 5; t < 13; ++t) {
            steps.forward(std::span(toks).subspan(t, 1), one.view().rows(t, t + 1), Tensor());
            general.forward(std::span(toks).subspan(t, 1), ref.view().rows(t, t + 1), Tensor());
        }
        block.forward(std::span(toks).subspan(5, 8), eight.view().rows(5, 13), Tensor());
        const size_t bytes = static_cast<size_t>(8 * V) * sizeof(float);
        EXPECT_EQ(std::memcmp(one.view().rows(5, 13).f32(), eight.view().rows(5, 13).f32(), bytes),
                  0)
            << (qwen3 ? "qwen3" : "llama");
        EXPECT_LT(test::max_rel_diff(one, ref), 1e-5) << (qwen3 ? "qwen3" : "llama");
    }
}

// The per-product choice between rows_linear and the general GEMMs (decoder_layer.h), at the sizes
// it was measured on: every Qwen3-0.6B product but its LM head, and of Qwen3-8B's q/k/v and
// gate/up.
TEST(RowsTarget, RowsLinearPaysWhereItMeasuredFaster) {
    auto bf16 = [](int64_t n, int64_t k) { return HostTensor({n, k}, DType::bf16); };
    const HostTensor q06 = bf16(2048, 1024), kv06 = bf16(1024, 1024), o06 = bf16(1024, 2048);
    const HostTensor gate06 = bf16(3072, 1024), down06 = bf16(1024, 3072);
    EXPECT_TRUE(rows_linear_pays(RowsLimits{}, {q06, kv06, kv06}));
    EXPECT_TRUE(rows_linear_pays(RowsLimits{}, {o06}));
    EXPECT_TRUE(rows_linear_pays(RowsLimits{}, {gate06, gate06}));
    EXPECT_TRUE(rows_linear_pays(RowsLimits{}, {down06}));
    EXPECT_FALSE(rows_linear_pays(RowsLimits{}, {bf16(151936, 1024)}));  // an LM head
    const HostTensor q8 = bf16(4096, 4096), kv8 = bf16(1024, 4096);
    EXPECT_TRUE(
        rows_linear_pays(RowsLimits{}, {q8, kv8, kv8}));  // 48 MiB in one launch instead of three
    EXPECT_FALSE(rows_linear_pays(RowsLimits{}, {q8}));   // o_proj: 32 MiB alone
    const HostTensor gate8 = bf16(12288, 4096);
    EXPECT_TRUE(rows_linear_pays(RowsLimits{}, {gate8, gate8}));        // 192 MiB, with SwiGLU
    EXPECT_FALSE(rows_linear_pays(RowsLimits{}, {bf16(4096, 12288)}));  // down: 96 MiB alone
}

// One cached layer through the decode-block path with every product on rows_linear (the default
// limits at these sizes) and with none (limits of 0: the general GEMMs beside the fused head-norm
// kernel): both give the general path's output to fp32 rounding, and with the GEMMs too four
// verify rows equal four decode steps bit for bit.
TEST(RowsTarget, LayerTakesEitherWayForEachProduct) {
    auto be = make_cpu_backend(1);
    const TargetConfig tc = test::tiny_target_config(true, 1);
    const LayerDims dims = layer_dims(tc);
    ParamSet ps(*be, target_tensor_specs(tc));
    ps.init_random(7, 0.3f);
    const LayerWeights w = layer_weights(ps, "model.layers.0.", dims);
    const DeviceTensor inv_freq = upload_inv_freq(*be, tc.rope, tc.head_dim);
    const int64_t S = 4, D = dims.D, cap = 8;
    Rng rng(9);
    const HostTensor x = randn({S, D}, rng);
    // Runs the S rows as one block (step = S) or one at a time (step = 1); returns the outputs.
    auto run = [&](bool rows_ops, RowsLimits limits, int64_t step) {
        Workspace ws = test::test_workspace(*be);
        LayerContext lc{*be, ws, dims, inv_freq.view(), nullptr, rows_ops, limits};
        LayerKvCache cache{DeviceTensor(*be, {cap, dims.Hkv, dims.Dh}, DType::f32),
                           DeviceTensor(*be, {cap, dims.Hkv, dims.Dh}, DType::f32)};
        HostTensor out({S, D});
        for (int64_t r0 = 0; r0 < S; r0 += step) {
            ws.reset();
            HostTensor pos({step}, DType::i32), row0({1}, DType::i32), kv_len({1}, DType::i32);
            for (int64_t i = 0; i < step; ++i) pos.i32()[i] = static_cast<int32_t>(r0 + i);
            row0.i32()[0] = static_cast<int32_t>(r0);
            kv_len.i32()[0] = static_cast<int32_t>(r0 + step);
            layer_forward_cached(lc, w, x.view().rows(r0, r0 + step), pos, cache, row0, kv_len,
                                 AttnMaskKind::causal, out.view().rows(r0, r0 + step), 0);
        }
        return out;
    };
    const HostTensor general = run(false, RowsLimits{}, S);
    const HostTensor all_rows = run(true, RowsLimits{}, S);
    const HostTensor gemms = run(true, RowsLimits{0, 0}, S);
    const HostTensor gemm_steps = run(true, RowsLimits{0, 0}, 1);
    EXPECT_LT(test::max_rel_diff(all_rows, general), 1e-5);
    EXPECT_LT(test::max_rel_diff(gemms, general), 1e-5);
    EXPECT_EQ(std::memcmp(gemms.f32(), gemm_steps.f32(), static_cast<size_t>(S * D) * 4), 0);
}

}  // namespace
}  // namespace dflash
