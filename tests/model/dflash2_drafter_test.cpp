// DFlash2 drafters (docs/formats.md "DFlash2 drafter directory"): config.json as the released
// drafters lay it out (lookup rule, defaults, errors), the 15-per-layer + 6 tensor layout with bare
// codebook names, save/load, a DFlash drafter converted with neutral modules drafting exactly as
// before, the sliding-window / causal draft attention against a naive masked attention, and the
// selector's lattice against the docs/formats.md formula computed on the host.
#include <cmath>
#include <map>

#include "backend/backend.h"
#include "core/checkpoint_io.h"
#include "infer/spec_decode.h"
#include "model/candidate_selector.h"
#include "model/inspect.h"
#include "model/tensor_layout.h"
#include "support/finite_diff.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

using nlohmann::json;

// The released Muse-Glimmer DFlash2 config's shape (docs/formats.md), scaled down.
json released_style_json() {
    return json::parse(R"({
      "architectures": ["DFlash2DraftModel"], "model_type": "qwen3",
      "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 3,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 37,
      "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
      "num_target_layers": 4, "is_causal": false, "tie_word_embeddings": false,
      "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention"],
      "sliding_window": 2048, "use_sliding_window": true, "max_window_layers": 3,
      "dflash_config": {"block_size": 8, "mask_token_id": 36, "target_layer_ids": [0, 2],
                        "conv_kernel_size": 2, "conv_group_size": 8, "selector_rank": 5,
                        "selector_top_k": 4, "output_multiplier": 0.19611613513818404,
                        "final_logit_softcapping": 20.0}
    })");
}

TEST(Dflash2Config, ReadsTheReleasedLayout) {
    const DrafterConfig d = DrafterConfig::from_json(released_style_json());
    EXPECT_TRUE(d.dflash2());
    EXPECT_EQ(d.block_size, 8);
    EXPECT_EQ(d.d2.conv_kernel_size, 2);
    EXPECT_EQ(d.d2.conv_group_size, 8);
    EXPECT_EQ(d.d2.groups(24), 3);
    EXPECT_EQ(d.d2.selector_rank, 5);
    EXPECT_EQ(d.d2.selector_top_k, 4);
    EXPECT_DOUBLE_EQ(d.d2.output_multiplier, 0.19611613513818404);
    EXPECT_DOUBLE_EQ(d.d2.final_logit_softcapping, 20.0);
    EXPECT_DOUBLE_EQ(d.d2.input_embedding_scale, 1.0);
    // is_causal false is explicit: every layer bidirectional, window 2048 on sliding layers.
    for (int64_t l = 0; l < 3; ++l) {
        EXPECT_FALSE(d.layer_causal(l));
        EXPECT_EQ(d.layer_window(l), 2048);
    }
    // Written back and read again: the same drafter.
    const DrafterConfig back = DrafterConfig::from_json(d.to_json());
    EXPECT_TRUE(back.dflash2());
    EXPECT_EQ(back.d2.selector_top_k, 4);
    EXPECT_DOUBLE_EQ(back.d2.output_multiplier, d.d2.output_multiplier);
    EXPECT_EQ(back.sliding_layers, d.sliding_layers);
    EXPECT_EQ(back.is_causal, 0);
    EXPECT_EQ(d.to_json()["architectures"][0], "DFlash2DraftModel");
    EXPECT_EQ(d.to_json()["dflash_config"]["conv_kernel_size"], 2);
}

TEST(Dflash2Config, LookupRuleDefaultsAndCausality) {
    json j = released_style_json();
    // A key may sit at the top level; dflash_config wins when both hold it.
    j["dflash_config"].erase("selector_rank");
    j["selector_rank"] = 7;
    j["selector_top_k"] = 9;
    j["dflash_config"].erase("output_multiplier");
    j["dflash_config"].erase("final_logit_softcapping");
    // Without is_causal a sliding layer is causal and a full one is not (the reference's rule).
    j.erase("is_causal");
    j["layer_types"][1] = "full_attention";
    const DrafterConfig d = DrafterConfig::from_json(j);
    EXPECT_EQ(d.d2.selector_rank, 7);
    EXPECT_EQ(d.d2.selector_top_k, 4);
    EXPECT_DOUBLE_EQ(d.d2.output_multiplier, 1.0);
    EXPECT_DOUBLE_EQ(d.d2.final_logit_softcapping, 0.0);
    EXPECT_TRUE(d.layer_causal(0));
    EXPECT_FALSE(d.layer_causal(1));
    EXPECT_EQ(d.layer_window(1), 0);
    EXPECT_EQ(d.to_json().count("is_causal"), 0u);
}

TEST(Dflash2Config, ErrorsNameTheValue) {
    json j = released_style_json();
    j["dflash_config"].erase("conv_kernel_size");
    EXPECT_TRUE(
        test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "no 'conv_kernel_size'"));
    j = released_style_json();
    j["dflash_config"]["conv_group_size"] = 7;
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterConfig::from_json(j); }),
                          "conv_group_size=7 must divide hidden_size=24"));
    j = released_style_json();
    j["dflash_config"]["selector_top_k"] = 38;
    EXPECT_TRUE(
        test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "selector_top_k=38"));
    j = released_style_json();
    j["dflash_config"]["conv_kernel_size"] = 9;
    EXPECT_TRUE(
        test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "conv_kernel_size=9"));
    j = released_style_json();
    j["layer_types"][0] = "linear_attention";
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "layer_types[0]"));
    // A DFlash (v1) config takes sliding layers too, always causal (docs/training.md
    // "Sliding-window drafter layers").
    j = released_style_json();
    j["architectures"] = {"DFlashDraftModel"};
    const DrafterConfig v1 = DrafterConfig::from_json(j);
    EXPECT_TRUE(v1.layer_causal(0));
    EXPECT_EQ(v1.layer_window(0), 2048);
}

TEST(Dflash2Layout, FifteenTensorsPerLayerPlusSix) {
    json j = released_style_json();
    j["num_hidden_layers"] = 5;
    j["layer_types"] = std::vector<std::string>(5, "sliding_attention");
    const auto specs = drafter_tensor_specs(DrafterConfig::from_json(j));
    EXPECT_EQ(specs.size(), 81u);  // the released 5-layer count (docs/formats.md)
    auto shape_of = [&](const std::string& name) {
        for (const auto& s : specs)
            if (s.name == name) return s.shape;
        return std::vector<int64_t>{};
    };
    EXPECT_EQ(shape_of("layers.4.attention_conv.base_kernel"), (std::vector<int64_t>{2, 2, 24}));
    EXPECT_EQ(shape_of("layers.0.mlp_conv.kernel_projection.weight"),
              (std::vector<int64_t>{12, 24}));  // 2 * k * G = 2 * 2 * 3
    EXPECT_EQ(shape_of("candidate_selector.hidden_projection.weight"),
              (std::vector<int64_t>{5, 24}));
    EXPECT_EQ(shape_of("candidate_selector.predecessor_codebook"), (std::vector<int64_t>{37, 5}));
    EXPECT_EQ(shape_of("candidate_selector.successor_codebook"), (std::vector<int64_t>{37, 5}));
}

TEST(Dflash2Drafter, SaveLoadKeepsBareCodebookNames) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    DrafterModel d = DrafterModel::random(*be, test::tiny_dflash2_config(tc), 3, 0.3f);
    test::randomize_dflash2_modules(d, 4, 0.3f);
    test::TempDir dir("dflash2");
    d.save(dir.path(), DType::f32);
    const CheckpointReader r = CheckpointReader::open(dir.path());
    EXPECT_TRUE(r.has("candidate_selector.predecessor_codebook"));
    EXPECT_FALSE(r.has("candidate_selector.predecessor_codebook.weight"));
    EXPECT_EQ(r.shape("layers.1.mlp_conv.base_kernel"), (std::vector<int64_t>{2, 2, 24}));
    const DrafterModel back = DrafterModel::load(*be, dir.path());
    EXPECT_TRUE(back.config().dflash2());
    for (const auto& prm : d.params().params())
        EXPECT_EQ(test::max_abs_diff(back.params().value(prm.name), prm.value), 0.0) << prm.name;
    // A tensor of the wrong shape is refused with its name.
    auto tc2 = test::tiny_dflash2_config(tc);
    tc2.d2.selector_rank = 6;
    test::TempDir dir2("dflash2b");
    d.params().save(dir2.path(), DType::f32);
    tc2.save(dir2.path());
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterModel::load(*be, dir2.path()); }),
                          "candidate_selector.hidden_projection.weight"));
}

// A DFlash2 drafter whose config.json says DFlashDraftModel once loaded as a DFlash drafter,
// dropping its 7 DFlash2 tensors without a word, although `dflash inspect` called it BROKEN. The
// loader now makes inspect's check: the unexpected tensors are refused, naming them. Parsing the
// config alone still works (DrafterConfig::load checks no weights).
TEST(Dflash2Drafter, DflashConfigOverDflash2WeightsIsRefused) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    const DrafterModel d = DrafterModel::random(*be, test::tiny_dflash2_config(tc, 1), 3, 0.3f);
    test::TempDir dir("dflash2-as-dflash");
    d.save(dir.path(), DType::f32);
    test::tiny_drafter_config(tc, 1).save(dir.path());  // the same drafter, minus DFlash2
    const DrafterConfig parsed = DrafterConfig::load(dir.path());
    EXPECT_FALSE(parsed.dflash2());
    const std::string e = test::error_of([&] { DrafterModel::load(*be, dir.path()); });
    EXPECT_TRUE(test::has(e, "do not match its config.json")) << e;
    EXPECT_TRUE(test::has(e, "unexpected tensor 'candidate_selector.hidden_projection.weight'"))
        << e;
    EXPECT_TRUE(test::has(e, "and 4 more")) << e;  // 7 DFlash2 tensors in all
    EXPECT_TRUE(test::has(e, "[\"DFlash2DraftModel\"]")) << e;
    const InspectReport r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.problems.size(), 7u) << r.text;
}

// Naive attention of one block's queries over n cache rows with the reference's visibility rule.
HostTensor naive_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t n,
                           bool causal, int64_t window) {
    const int64_t Sq = q.dim(0), H = q.dim(1), Dh = q.dim(2), Hkv = k.dim(1);
    HostTensor out({Sq, H * Dh});
    for (int64_t i = 0; i < Sq; ++i) {
        const int64_t qpos = n - Sq + i;
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / Hkv);
            std::vector<double> s(n, -INFINITY);
            double top = -INFINITY;
            for (int64_t j = 0; j < n; ++j) {
                bool vis = !causal || j <= qpos;
                if (window > 0) vis = vis && qpos - j < window && (causal || j - qpos < window);
                if (!vis) continue;
                double dot = 0;
                for (int64_t e = 0; e < Dh; ++e)
                    dot += double{q.f32()[(i * H + h) * Dh + e]} * k.f32()[(j * Hkv + g) * Dh + e];
                s[j] = dot / std::sqrt(static_cast<double>(Dh));
                top = std::max(top, s[j]);
            }
            double z = 0;
            for (int64_t j = 0; j < n; ++j) z += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - top);
            for (int64_t e = 0; e < Dh; ++e) {
                double acc = 0;
                for (int64_t j = 0; j < n; ++j)
                    if (!std::isinf(s[j]))
                        acc += std::exp(s[j] - top) / z * v.f32()[(j * Hkv + g) * Dh + e];
                out.f32()[i * H * Dh + h * Dh + e] = static_cast<float>(acc);
            }
        }
    }
    return out;
}

TEST(Dflash2Drafter, DraftAttentionHonoursWindowAndCausality) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    const LayerDims dims = layer_dims(tc);
    Workspace ws = test::test_workspace(*be);
    const DeviceTensor inv = upload_inv_freq(*be, tc.rope, dims.Dh);
    const Tensor inv_view = inv.view();
    const LayerContext lc{*be, ws, dims, inv_view};
    Rng rng(11);
    for (const int64_t n : {6, 13}) {
        for (const bool causal : {false, true}) {
            for (const int64_t window : {0, 3, 5, 20}) {
                const int64_t Sq = 4, cap = 16;
                LayerKvCache cache;
                cache.k = DeviceTensor(*be, {cap, dims.Hkv, dims.Dh}, DType::f32);
                cache.v = DeviceTensor(*be, {cap, dims.Hkv, dims.Dh}, DType::f32);
                HostTensor k = test::random_tensor({cap, dims.Hkv, dims.Dh}, rng);
                HostTensor v = test::random_tensor({cap, dims.Hkv, dims.Dh}, rng);
                HostTensor q = test::random_tensor({Sq, dims.H, dims.Dh}, rng);
                be->copy(cache.k.view(), k);
                be->copy(cache.v.view(), v);
                HostTensor kv_len = test::ids_tensor({static_cast<int32_t>(n)});
                HostTensor out({Sq, dims.H * dims.Dh});
                draft_attention(lc, q, cache, n, kv_len, DraftAttention{causal, window}, out);
                const HostTensor ref = naive_attention(q, k, v, n, causal, window);
                EXPECT_LT(test::max_abs_diff(out, ref), 1e-5)
                    << "n " << n << " causal " << causal << " window " << window;
            }
        }
    }
}

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

std::vector<int32_t> trace_drafts(const Pair& p, Backend& be, const std::vector<int32_t>& prompt,
                                  int64_t new_tokens, std::vector<int64_t>* accepted = nullptr) {
    SpeculativeEngine spec(p.target, &p.drafter, be);
    GenerateOptions o;
    o.max_new_tokens = new_tokens;
    std::vector<int32_t> drafts;
    o.trace = [&](const StepTrace& t) {
        drafts.insert(drafts.end(), t.drafted.begin(), t.drafted.end());
        if (accepted) accepted->push_back(t.accepted);
    };
    spec.generate(prompt, o);
    return drafts;
}

// A DFlash drafter converted with identity convolutions and a neutral selector drafts exactly the
// tokens the DFlash drafter drafts (pair scores are exactly 0, so the greedy walk is the argmax
// of the unary logits, ties to the lowest id as argmax_rows breaks them).
TEST(Dflash2Drafter, ConvertedFromDflashDraftsTheSame) {
    auto be = make_cpu_backend(1);
    auto tc = test::tiny_target_config(true, 4);
    tc.vocab_size = 7;  // partial acceptance is common
    const TargetModel t = TargetModel::random(*be, tc, 21, 0.5f);
    const DrafterModel v1 =
        DrafterModel::random(*be, test::tiny_drafter_config(tc, 2, 5), 22, 0.5f);
    DrafterModel v2 =
        DrafterModel::from_dflash(*be, v1, test::tiny_dflash2_config(tc, 2, 5, 3), 23);
    EXPECT_GT(v2.params().numel(), v1.params().numel());
    const Pair a{TargetModel::random(*be, tc, 21, 0.5f), std::move(v2)};
    const Pair b{TargetModel::random(*be, tc, 21, 0.5f),
                 DrafterModel::random(*be, test::tiny_drafter_config(tc, 2, 5), 22, 0.5f)};
    for (int i = 0; i < 6; ++i) {
        const std::vector<int32_t> prompt = {static_cast<int32_t>(i % 6), 3, 1, 4};
        std::vector<int64_t> acc_a, acc_b;
        const auto da = trace_drafts(a, *be, prompt, 30, &acc_a);
        const auto db = trace_drafts(b, *be, prompt, 30, &acc_b);
        EXPECT_EQ(da, db) << "prompt " << i;
        EXPECT_EQ(acc_a, acc_b) << "prompt " << i;
    }
    // Control: the same drafter with non-neutral modules drafts differently.
    test::randomize_dflash2_modules(const_cast<DrafterModel&>(a.drafter), 24, 0.5f);
    bool differs = false;
    for (int i = 0; i < 6; ++i) {
        const std::vector<int32_t> prompt = {static_cast<int32_t>(i % 6), 3, 1, 4};
        differs |= trace_drafts(a, *be, prompt, 30) != trace_drafts(b, *be, prompt, 30);
    }
    EXPECT_TRUE(differs);
}

// The device lattice (top-K, shifted predecessors, pair scores) against the docs/formats.md
// formulas on the host values of the same draft.
TEST(Dflash2Drafter, SelectorLatticeMatchesFormula) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    const TargetModel t = TargetModel::random(*be, tc, 31, 0.5f);
    auto cfg = test::tiny_dflash2_config(tc, 2, 5, 4);
    cfg.d2.output_multiplier = 0.5;
    cfg.d2.final_logit_softcapping = 1.5;
    DrafterModel d = DrafterModel::random(*be, cfg, 32, 0.5f);
    test::randomize_dflash2_modules(d, 33, 0.5f);
    const int64_t V = tc.vocab_size, B = 5, K = 4, r = 5;
    Workspace ws = test::test_workspace(*be);
    const std::vector<int32_t> toks = {3, 9, 1, 30, 2, 7};
    HostTensor feats({6, d.feature_dim()});
    t.forward(*be, ws, toks, cfg.target_layer_ids, feats, Tensor());
    DrafterSession s(d, *be, t.embed(), t.lm_head(), 32);
    HostTensor logits({B - 1, V});
    const int32_t anchor = 11;
    s.draft(feats, anchor, logits);
    CandidateSelector sel(d, *be, B - 1);
    CandidateLattice lat;
    sel.select(logits, s.selector_z(B), anchor, lat);
    const HostTensor z = to_host_f32(*be, s.selector_z(B));
    const HostTensor A = d.params().read_f32("candidate_selector.predecessor_codebook");
    const HostTensor Bc = d.params().read_f32("candidate_selector.successor_codebook");
    ASSERT_EQ(lat.P, B - 1);
    for (int64_t p = 0; p < B - 1; ++p) {
        const float* row = logits.f32() + p * V;
        for (int64_t j = 0; j < K; ++j) {
            const int32_t c = lat.ids[p * K + j];
            // Ranked: nothing outside the candidates beats the K-th.
            if (j > 0) {
                EXPECT_GE(row[lat.ids[p * K + j - 1]], row[c]);
            }
            const double u = 1.5 * std::tanh(0.5 * row[c] / 1.5);
            EXPECT_NEAR(lat.unary[p * K + j], u, 1e-5);
            for (int64_t i = 0; i < K; ++i) {
                const int32_t a = p == 0 ? anchor : lat.ids[(p - 1) * K + i];
                double e = 0;
                for (int64_t q = 0; q < r; ++q)
                    e += double{A.f32()[a * r + q]} * z.f32()[p * r + q] * Bc.f32()[c * r + q];
                EXPECT_NEAR(lat.pair[(p * K + i) * K + j], e, 1e-5) << p << " " << i << " " << j;
            }
        }
        int64_t beaten = 0;
        for (int64_t v = 0; v < V; ++v) beaten += row[v] > row[lat.ids[p * K + K - 1]];
        EXPECT_LT(beaten, K);
    }
}

// Training: the block-sparse packed forward gives, row for row, the logits the inference session
// drafts (conv taps stop at each block's anchor in both), and the whole-model gradient matches
// finite differences for every tensor the unary loss reaches (the selector is not in it).
struct TrainPair {
    TargetModel target;
    DrafterModel drafter;
};

TrainPair train_pair(Backend& be, uint64_t seed) {
    auto tc = test::tiny_target_config(true, 4);
    TargetModel t = TargetModel::random(be, tc, seed, 0.3f);
    auto dc = test::tiny_dflash2_config(tc, 2, 4, 5);
    dc.d2.input_embedding_scale = 1.5;
    DrafterModel d = DrafterModel::random(be, dc, seed + 1, 0.3f);
    test::randomize_dflash2_modules(d, seed + 2, 0.3f);
    return {std::move(t), std::move(d)};
}

HostTensor features_of(Backend& be, const TrainPair& p, const std::vector<int32_t>& toks) {
    Workspace ws = test::test_workspace(be);
    HostTensor f({static_cast<int64_t>(toks.size()), p.drafter.feature_dim()});
    p.target.forward(be, ws, toks, p.drafter.config().target_layer_ids, f, Tensor());
    return f;
}

TEST(Dflash2Training, InferencePathMatchesTrainingPath) {
    auto be = make_cpu_backend(1);
    TrainPair p = train_pair(*be, 41);
    const int64_t S = 17, B = 4, V = p.target.config().vocab_size;
    std::vector<int32_t> toks(S);
    Rng rng(2);
    for (auto& t : toks) t = static_cast<int32_t>(rng.below(V - 1));
    const HostTensor feats = features_of(*be, p, toks);
    const std::vector<int32_t> anchors = {0, 5, 9, 15};
    Workspace ws = test::test_workspace(*be);
    HostTensor hf({static_cast<int64_t>(anchors.size()) * B, p.drafter.dims().D});
    p.drafter.block_hidden(*be, ws, p.target.embed(), feats, toks, anchors, hf);
    HostTensor train_logits({hf.dim(0), V});
    be->gemm(hf, false, p.target.lm_head(), true, train_logits);
    for (size_t j = 0; j < anchors.size(); ++j) {
        const int64_t a = anchors[j];
        DrafterSession s(p.drafter, *be, p.target.embed(), p.target.lm_head(), 64);
        HostTensor logits({B - 1, V});
        s.draft(feats.view().rows(0, a), toks[a], logits);
        const Tensor ref = train_logits.view().rows(j * B + 1, (j + 1) * B);
        EXPECT_LT(test::max_rel_diff(logits, ref), 1e-5) << "anchor " << a;
    }
}

TEST(Dflash2Training, GradientMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    TrainPair p = train_pair(*be, 51);
    p.drafter.params().enable_training();
    const int64_t S = 14, V = p.target.config().vocab_size;
    std::vector<int32_t> toks(S);
    Rng trng(3);
    for (auto& t : toks) t = static_cast<int32_t>(trng.below(V - 1));
    std::vector<uint8_t> mask(S, 1);
    mask[0] = mask[1] = mask[7] = 0;
    const HostTensor feats = features_of(*be, p, toks);
    const std::vector<int32_t> anchors = {2, 6, 10};
    auto loss = [&]() {
        return test::drafter_step(*be, p.drafter, p.target, feats, toks, mask, anchors, 3.0, 1.0f,
                                  7)
            .loss_sum;
    };
    p.drafter.params().zero_grads();
    test::drafter_step(*be, p.drafter, p.target, feats, toks, mask, anchors, 3.0, 1.0f, 7);
    std::map<std::string, HostTensor> snapshot;
    for (const auto& prm : p.drafter.params().params())
        snapshot.emplace(prm.name, to_host_f32(*be, prm.grad));
    Rng rng(5);
    int64_t conv_checked = 0;
    for (const auto& prm : p.drafter.params().params()) {
        const Tensor g = snapshot.at(prm.name).view();
        if (prm.name.starts_with("candidate_selector.")) {
            EXPECT_EQ(test::max_abs_diff(g, HostTensor(g.shape()).view()), 0.0)
                << prm.name << ": the unary loss does not reach it";
            continue;
        }
        Tensor w = prm.value;
        const auto idx = test::fd_check_indices(g.f32(), g.numel(), 3, 3, rng);
        EXPECT_GT(std::fabs(g.f32()[idx[0]]), 1e-4) << prm.name << " gets no gradient";
        for (int64_t i : idx) {
            const double fd = test::fd_derivative_in_place(w.f32()[i], loss, 1e-2f);
            EXPECT_NEAR(g.f32()[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << prm.name << "[" << i << "]";
        }
        conv_checked += prm.name.find("_conv.") != std::string::npos;
    }
    EXPECT_EQ(conv_checked, 8);  // 2 layers x 2 convs x (base, projection)
}

// Causal layers train with causal blocks (the keys they decode with; drafter_window_test.cpp
// checks training against decoding).
TEST(Dflash2Training, CausalLayersTrain) {
    auto be = make_cpu_backend(1);
    TrainPair p = train_pair(*be, 61);
    auto cfg = p.drafter.config();
    cfg.is_causal = 1;
    DrafterModel d = DrafterModel::random(*be, cfg, 3, 0.3f);
    std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6};
    std::vector<uint8_t> mask(6, 1);
    const HostTensor feats = features_of(*be, p, toks);
    const std::vector<int32_t> anchors = {1};
    const test::StepStats s =
        test::drafter_step(*be, d, p.target, feats, toks, mask, anchors, 3.0, 1.0f, 7);
    EXPECT_TRUE(std::isfinite(s.loss_sum));
    EXPECT_GT(s.loss_sum, 0.0);
}

}  // namespace
}  // namespace dflash
