// DSpark drafters (docs/formats.md "DSpark drafter directory", docs/training.md "DSpark drafters"):
// config.json in the DeepSpec/SGLang and speculators layouts (reading, writing, the dialect, bad
// values), the heads' tensor names and shapes, save/load in both dialects, the training loss
// against a plain host loop over the same formulas (vanilla, gated and rnn heads; the rnn state
// through a block's slots), its gradient (every parameter, the confidence target detached)
// against finite differences, a tiny training run whose loss falls, the decoding head against a
// host loop, and the warm start from a DFlash drafter.
#include <cmath>
#include <functional>
#include <map>

#include "backend/backend.h"
#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "model/dspark_heads.h"
#include "model/inspect.h"
#include "model/tensor_layout.h"
#include "support/finite_diff.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

using nlohmann::json;

DrafterConfig tiny_dspark_config(const TargetConfig& tc, MarkovHeadType head, bool conf = true,
                                 bool with_markov = true, int64_t block = 4) {
    DrafterConfig d = test::tiny_drafter_config(tc, 2, block);
    d.arch = DrafterArch::dspark;
    d.ds.markov_rank = 5;
    d.ds.markov_head = head;
    d.ds.confidence_head = conf;
    d.ds.confidence_with_markov = with_markov;
    return d;
}

// DeepSpec's layout: every key top-level, no dflash_config.
json deepspec_json() {
    return json::parse(R"({
      "architectures": ["Qwen3DSparkModel"], "model_type": "qwen3",
      "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 37,
      "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
      "block_size": 7, "mask_token_id": 36, "target_layer_ids": [0, 2], "num_target_layers": 4,
      "num_anchors": 512, "markov_rank": 6, "markov_head_type": "gated",
      "enable_confidence_head": true, "confidence_head_with_markov": false
    })");
}

TEST(DsparkConfig, ReadsDeepSpecAndSpecForgeLayouts) {
    const DrafterConfig d = DrafterConfig::from_json(deepspec_json());
    EXPECT_TRUE(d.dspark());
    EXPECT_EQ(d.block_size, 7);
    EXPECT_EQ(d.num_drafts(), 7);
    EXPECT_EQ(d.mask_token_id, 36);
    EXPECT_EQ(d.target_layer_ids, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(d.ds.markov_rank, 6);
    EXPECT_EQ(d.ds.markov_head, MarkovHeadType::gated);
    EXPECT_TRUE(d.ds.confidence_head);
    EXPECT_FALSE(d.ds.confidence_with_markov);
    EXPECT_EQ(drafter_config_dialect(deepspec_json()), DrafterDialect::deepspec);
    // SpecForge's: DSparkDraftModel, the DSpark keys inside dflash_config.
    json sf = deepspec_json();
    sf["architectures"] = {"DSparkDraftModel"};
    sf["dflash_config"] = {{"mask_token_id", 36},
                           {"target_layer_ids", {1, 2}},
                           {"projector_type", "dspark"},
                           {"markov_rank", 9},
                           {"markov_head_type", "vanilla"}};
    for (const char* k : {"mask_token_id", "target_layer_ids", "markov_rank", "markov_head_type",
                          "confidence_head_with_markov"})
        sf.erase(k);
    const DrafterConfig s = DrafterConfig::from_json(sf);
    EXPECT_TRUE(s.dspark());
    EXPECT_EQ(s.target_layer_ids, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(s.ds.markov_rank, 9);
    EXPECT_EQ(s.ds.markov_head, MarkovHeadType::vanilla);
    EXPECT_TRUE(s.ds.confidence_with_markov);  // the default
    // Written back (DeepSpec/SGLang): top-level and dflash_config copies, read back the same.
    const json out = d.to_json();
    EXPECT_EQ(out["architectures"][0], "Qwen3DSparkModel");
    EXPECT_EQ(out["markov_rank"], 6);
    EXPECT_EQ(out["dflash_config"]["markov_head_type"], "gated");
    EXPECT_EQ(out["dflash_config"]["projector_type"], "dspark");
    EXPECT_EQ(out["mask_token_id"], 36);
    EXPECT_EQ(out["block_size"], 7);
    // DeepSpec's Qwen3DSparkModel refuses a config without num_anchors (DeepSpec's 512 here).
    EXPECT_EQ(out["num_anchors"], 512);
    const DrafterConfig back = DrafterConfig::from_json(out);
    EXPECT_EQ(back.ds.markov_rank, 6);
    EXPECT_EQ(back.ds.markov_head, MarkovHeadType::gated);
    EXPECT_FALSE(back.ds.confidence_with_markov);
    // A config's own num_anchors is kept.
    json with_anchors = deepspec_json();
    with_anchors["num_anchors"] = 48;
    EXPECT_EQ(DrafterConfig::from_json(with_anchors).to_json()["num_anchors"], 48);
}

TEST(DsparkConfig, RnnIsReadAndWrittenAndBadValuesAreRefusedByName) {
    json j = deepspec_json();
    j["markov_head_type"] = "rnn";
    const DrafterConfig d = DrafterConfig::from_json(j);
    EXPECT_EQ(d.ds.markov_head, MarkovHeadType::rnn);
    EXPECT_EQ(d.to_json()["markov_head_type"], "rnn");
    EXPECT_EQ(d.to_json()["dflash_config"]["markov_head_type"], "rnn");
    EXPECT_EQ(DrafterConfig::from_json(d.to_speculators_json()).ds.markov_head,
              MarkovHeadType::rnn);
    j["markov_head_type"] = "lstm";
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "'lstm'"));
    j = deepspec_json();
    j["markov_rank"] = 0;
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "markov_rank=0"));
}

TEST(DsparkConfig, SpeculatorsLayoutRoundTrips) {
    const DrafterConfig d = DrafterConfig::from_json(deepspec_json());
    const json sp = d.to_speculators_json();
    EXPECT_EQ(sp["speculators_model_type"], "dspark");
    EXPECT_EQ(sp["architectures"][0], "DSparkSpeculator");
    EXPECT_EQ(sp["aux_hidden_state_layer_ids"], (std::vector<int64_t>{1, 3}));  // ids + 1
    EXPECT_EQ(sp["sample_from_anchor"], true);
    EXPECT_EQ(sp["draft_vocab_size"], 37);
    EXPECT_EQ(sp["target_hidden_size"], 24);
    EXPECT_EQ(sp["speculators_config"]["proposal_methods"][0]["speculative_tokens"], 7);
    EXPECT_EQ(sp["transformer_layer_config"]["num_hidden_layers"], 2);
    EXPECT_EQ(drafter_config_dialect(sp), DrafterDialect::speculators);
    EXPECT_TRUE(is_drafter_config_json(sp));
    const DrafterConfig back = DrafterConfig::from_json(sp);
    EXPECT_TRUE(back.dspark());
    EXPECT_EQ(back.target_layer_ids, d.target_layer_ids);
    EXPECT_EQ(back.block_size, 7);
    EXPECT_EQ(back.ds.markov_head, MarkovHeadType::gated);
    EXPECT_EQ(back.ds.markov_rank, 6);
    EXPECT_FALSE(back.ds.confidence_with_markov);
    // The DFlash slot layout is not DSpark's.
    json dflash_slots = sp;
    dflash_slots["sample_from_anchor"] = false;
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterConfig::from_json(dflash_slots); }),
                          "sample_from_anchor false"));
}

std::vector<int64_t> shape_of(const std::vector<TensorSpec>& specs, const std::string& name) {
    for (const auto& s : specs)
        if (s.name == name) return s.shape;
    return {};
}

TEST(DsparkLayout, HeadTensorsHaveTheSpecNamesAndShapes) {
    const auto tc = test::tiny_target_config(true, 4);
    const auto vanilla = drafter_tensor_specs(tiny_dspark_config(tc, MarkovHeadType::vanilla));
    EXPECT_EQ(shape_of(vanilla, "markov_head.markov_w1.weight"), (std::vector<int64_t>{37, 5}));
    EXPECT_EQ(shape_of(vanilla, "markov_head.markov_w2.weight"), (std::vector<int64_t>{37, 5}));
    EXPECT_EQ(shape_of(vanilla, "confidence_head.proj.weight"), (std::vector<int64_t>{1, 29}));
    EXPECT_EQ(shape_of(vanilla, "confidence_head.proj.bias"), (std::vector<int64_t>{1}));
    EXPECT_TRUE(shape_of(vanilla, "markov_head.gate_proj.weight").empty());
    const auto gated =
        drafter_tensor_specs(tiny_dspark_config(tc, MarkovHeadType::gated, true, false));
    EXPECT_EQ(shape_of(gated, "markov_head.gate_proj.weight"), (std::vector<int64_t>{5, 29}));
    EXPECT_EQ(shape_of(gated, "markov_head.gate_proj.bias"), (std::vector<int64_t>{5}));
    EXPECT_EQ(shape_of(gated, "confidence_head.proj.weight"), (std::vector<int64_t>{1, 24}));
    // rnn (recipe spec §1.8): joint_proj [3r, 2r + D] with a bias [3r], no gate_proj.
    const auto rnn = drafter_tensor_specs(tiny_dspark_config(tc, MarkovHeadType::rnn));
    EXPECT_EQ(shape_of(rnn, "markov_head.joint_proj.weight"), (std::vector<int64_t>{15, 34}));
    EXPECT_EQ(shape_of(rnn, "markov_head.joint_proj.bias"), (std::vector<int64_t>{15}));
    EXPECT_TRUE(shape_of(rnn, "markov_head.gate_proj.weight").empty());
    EXPECT_TRUE(shape_of(gated, "markov_head.joint_proj.weight").empty());
    const auto bare = drafter_tensor_specs(tiny_dspark_config(tc, MarkovHeadType::vanilla, false));
    EXPECT_TRUE(shape_of(bare, "confidence_head.proj.weight").empty());
    // The backbone is DFlash's, unchanged.
    const auto dflash = drafter_tensor_specs(test::tiny_drafter_config(tc, 2, 4));
    EXPECT_EQ(vanilla.size(), dflash.size() + 4);
    EXPECT_EQ(gated.size(), dflash.size() + 6);
    EXPECT_EQ(rnn.size(), dflash.size() + 6);
}

TEST(DsparkDrafter, SaveLoadInBothDialectsAndInspectNamesIt) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    for (const MarkovHeadType head : {MarkovHeadType::gated, MarkovHeadType::rnn})
        for (const DrafterDialect dialect :
             {DrafterDialect::deepspec, DrafterDialect::speculators}) {
            const DrafterModel d = DrafterModel::random(*be, tiny_dspark_config(tc, head), 3, 0.3f);
            test::TempDir dir("dspark");
            d.params().save(dir.path(), DType::f32);
            d.config().save(dir.path(), dialect);
            const json j = read_json_file(dir.path() / "config.json");
            EXPECT_EQ(drafter_config_dialect(j), dialect);
            const CheckpointReader r = CheckpointReader::open(dir.path());
            if (head == MarkovHeadType::gated) {
                EXPECT_EQ(r.shape("markov_head.gate_proj.weight"), (std::vector<int64_t>{5, 29}));
            } else {
                EXPECT_EQ(r.shape("markov_head.joint_proj.weight"), (std::vector<int64_t>{15, 34}));
                EXPECT_EQ(r.shape("markov_head.joint_proj.bias"), (std::vector<int64_t>{15}));
            }
            const DrafterModel back = DrafterModel::load(*be, dir.path());
            EXPECT_TRUE(back.config().dspark());
            EXPECT_EQ(back.config().ds.markov_head, head);
            for (const auto& prm : d.params().params())
                EXPECT_EQ(test::max_abs_diff(back.params().value(prm.name), prm.value), 0.0)
                    << prm.name;
            const InspectReport rep = inspect_directory(dir.path());
            EXPECT_TRUE(rep.ok()) << rep.text;
            EXPECT_TRUE(
                test::has(rep.text, std::string("dialect ") + drafter_dialect_name(dialect)))
                << rep.text;
        }
}

// Bad input (issue 26): a checkpoint that lacks a head's weights (the rnn head's joint_proj, an
// enabled confidence head's proj), a layer_types list of the wrong length and a sliding window of
// 0, in either dialect: each refused by DrafterModel::load with an error naming the key and the
// directory.
TEST(DsparkDrafter, BadInputIsRefusedNamingTheKey) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    for (const DrafterDialect dialect : {DrafterDialect::deepspec, DrafterDialect::speculators}) {
        // Weights of a vanilla drafter without a confidence head under configs that need more.
        const DrafterModel bare = DrafterModel::random(
            *be, tiny_dspark_config(tc, MarkovHeadType::vanilla, false), 3, 0.3f);
        struct Missing {
            DrafterConfig config;
            std::string tensor, key;
        };
        for (const Missing& m :
             {Missing{tiny_dspark_config(tc, MarkovHeadType::rnn, false),
                      "markov_head.joint_proj.weight", "markov_head_type \"rnn\""},
              Missing{tiny_dspark_config(tc, MarkovHeadType::vanilla, true),
                      "confidence_head.proj.weight", "enable_confidence_head true"}}) {
            test::TempDir dir("dspark_bad");
            bare.params().save(dir.path(), DType::f32);
            m.config.save(dir.path(), dialect);
            const std::string err = test::error_of([&] { DrafterModel::load(*be, dir.path()); });
            EXPECT_TRUE(test::has(err, "'" + m.tensor + "'")) << err;
            EXPECT_TRUE(test::has(err, "config.json's " + m.key)) << err;
            EXPECT_TRUE(test::has(err, dir.path().string())) << err;
        }
        // The attention layout: layer_types of the wrong length, a window of 0.
        DrafterConfig d = tiny_dspark_config(tc, MarkovHeadType::rnn);
        d.sliding_layers = {true, false};
        d.sliding_window = 8;
        auto layout = [&](json& j) -> json& {
            return dialect == DrafterDialect::speculators ? j["transformer_layer_config"] : j;
        };
        const auto write_and_load = [&](const std::function<void(json&)>& edit) {
            test::TempDir dir("dspark_bad");
            d.save(dir.path(), dialect);
            json j = read_json_file(dir.path() / "config.json");
            edit(layout(j));
            write_text_atomic(dir.path() / "config.json", j.dump(2));
            return test::error_of([&] { DrafterConfig::load(dir.path()); });
        };
        std::string err = write_and_load([](json& j) {
            j["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
        });
        EXPECT_TRUE(test::has(err, "layer_types")) << err;
        EXPECT_TRUE(test::has(err, "config.json")) << err;
        err = write_and_load([](json& j) { j["sliding_window"] = 0; });
        EXPECT_TRUE(test::has(err, "sliding_window is 0")) << err;
        EXPECT_TRUE(test::has(err, "invalid DSpark drafter config")) << err;
        EXPECT_TRUE(test::has(err, "config.json")) << err;
    }
}

// ---- the training loss ------------------------------------------------------------------------

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

Pair make_pair(Backend& be, const DrafterConfig& dc, uint64_t seed) {
    const auto tc = test::tiny_target_config(true, 4);
    TargetModel t = TargetModel::random(be, tc, seed, 0.3f);
    DrafterModel d = DrafterModel::random(be, dc, seed + 1, 0.3f);
    // Larger head weights than the 0.02 init, so the bias and the confidence matter.
    Rng rng(seed + 2);
    for (const auto& p : d.params().params()) {
        if (!p.name.starts_with("markov_head.") && !p.name.starts_with("confidence_head."))
            continue;
        HostTensor h(p.shape);
        fill_normal(rng, h.f32(), h.numel(), 0.5f);
        d.params().write_f32(p.name, h.view());
    }
    return {std::move(t), std::move(d)};
}

struct Batch {
    std::vector<int32_t> toks;
    std::vector<uint8_t> mask;
    std::vector<int32_t> anchors;
    HostTensor features, final_hidden;
};

Batch make_batch(Backend& be, const Pair& p, uint64_t seed) {
    Batch b;
    const int64_t S = 16;
    b.toks = test::random_tokens(S, p.target.config().vocab_size, seed);
    b.mask.assign(S, 1);
    b.mask[0] = b.mask[1] = b.mask[9] = 0;  // slot prefixes cut at 9, one block runs past S
    b.anchors = {2, 5, 8, 13};
    b.features = HostTensor({S, p.drafter.feature_dim()});
    b.final_hidden = HostTensor({S, p.target.dims().D});
    Workspace ws = test::test_workspace(be);
    p.target.forward(be, ws, b.toks, p.drafter.config().target_layer_ids, b.features,
                     b.final_hidden);
    return b;
}

constexpr double kGamma = 3.0;
const DsparkLossWeights kAlpha{0.3, 0.9, 0.7};

test::StepStats step(Backend& be, Pair& p, const Batch& b) {
    Workspace ws = test::test_workspace(be);
    HostTensor stats({LossStatsLayout{p.drafter.block_size()}.size()});
    BlockObjective obj;
    obj.teacher_hidden = b.final_hidden;
    obj.dspark = kAlpha;
    p.drafter.train_step(be, ws, {b.features, b.toks, b.mask, b.anchors},
                         {p.target.embed(), p.target.lm_head(), kGamma, 7}, {1.0f, stats}, obj);
    return test::to_step_stats(stats, p.drafter.block_size());
}

double dot(const float* a, const float* b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double{a[i]} * b[i];
    return s;
}

double max_abs(const Tensor& t) {
    double m = 0;
    for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(double{t.f32()[i]}));
    return m;
}

double sigm(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

// One slot of the rnn head (recipe spec §1.2), written from the formulas: z = [s; e; h],
// [g | c | o] = J z + bJ, s = sigmoid(g) s + (1 - sigmoid(g)) tanh(c), b = tanh(o).
void rnn_slot(const ParamSet& ps, std::vector<double>& state, const float* e, const float* h,
              int64_t D, std::vector<double>& b) {
    const int64_t r = static_cast<int64_t>(state.size()), Z = 2 * r + D;
    const float* jw = ps.value("markov_head.joint_proj.weight").f32();
    const float* jb = ps.value("markov_head.joint_proj.bias").f32();
    std::vector<double> z(state);
    z.insert(z.end(), e, e + r);
    z.insert(z.end(), h, h + D);
    auto pre = [&](int64_t i) {
        double acc = jb[i];
        for (int64_t t = 0; t < Z; ++t) acc += double{jw[i * Z + t]} * z[static_cast<size_t>(t)];
        return acc;
    };
    b.assign(static_cast<size_t>(r), 0.0);
    for (int64_t i = 0; i < r; ++i) {
        const double g = sigm(pre(i));
        state[static_cast<size_t>(i)] =
            g * state[static_cast<size_t>(i)] + (1 - g) * std::tanh(pre(r + i));
        b[static_cast<size_t>(i)] = std::tanh(pre(2 * r + i));
    }
}

// The DSpark loss by the formulas (docs/training.md "DSpark drafters"), row by row on the host,
// from the drafter's block rows (block_hidden) and its heads' weights. frozen: the confidence
// targets c* to use instead of computing them (the gradient treats them as constants); cstar
// receives the computed ones.
double host_loss(Backend& be, const Pair& p, const Batch& b, const std::vector<double>* frozen,
                 std::vector<double>* cstar, double* weight_sum = nullptr) {
    const DrafterConfig& c = p.drafter.config();
    const int64_t B = c.block_size, D = p.target.dims().D, V = c.layer.vocab_size;
    const int64_t r = c.ds.markov_rank, N = static_cast<int64_t>(b.anchors.size());
    HostTensor hf({N * B, D});
    Workspace ws = test::test_workspace(be);
    p.drafter.block_hidden(be, ws, p.target.embed(), b.features, b.toks, b.anchors, hf);
    const ParamSet& ps = p.drafter.params();
    const float* lm = p.target.lm_head().f32();
    const float* w1 = ps.value("markov_head.markov_w1.weight").f32();
    const float* w2 = ps.value("markov_head.markov_w2.weight").f32();
    const bool gated = c.ds.markov_head == MarkovHeadType::gated;
    const bool rnn = c.ds.markov_head == MarkovHeadType::rnn;
    double loss = 0, wsum = 0;
    int64_t row = 0;
    for (int64_t j = 0; j < N; ++j) {
        std::vector<double> state(static_cast<size_t>(r), 0.0);  // rnn: s_{-1} = 0 per block
        for (int64_t k = 0; k < B; ++k, ++row) {
            const int32_t a = b.anchors[j];
            const double w = dspark_slot_weight(a, k, b.mask, kGamma);
            if (w <= 0) continue;
            wsum += w;
            const float* h = hf.f32() + row * D;
            const float* e = w1 + b.toks[a + k] * r;
            std::vector<float> he(h, h + D);
            he.insert(he.end(), e, e + r);
            std::vector<double> bias_in(e, e + r);
            if (gated) {
                const float* gw = ps.value("markov_head.gate_proj.weight").f32();
                const float* gb = ps.value("markov_head.gate_proj.bias").f32();
                for (int64_t i = 0; i < r; ++i)
                    bias_in[i] = sigm(dot(gw + i * (D + r), he.data(), D + r) + gb[i]) * e[i];
            }
            if (rnn) rnn_slot(ps, state, e, h, D, bias_in);
            std::vector<double> q(V), pt(V);
            double mq = -1e300, mp = -1e300;
            const float* th = b.final_hidden.f32() + (a + k) * D;
            for (int64_t v = 0; v < V; ++v) {
                q[v] = dot(lm + v * D, h, D);
                for (int64_t i = 0; i < r; ++i) q[v] += bias_in[i] * w2[v * r + i];
                pt[v] = dot(lm + v * D, th, D);
                mq = std::max(mq, q[v]);
                mp = std::max(mp, pt[v]);
            }
            double zq = 0, zp = 0;
            for (int64_t v = 0; v < V; ++v) {
                zq += std::exp(q[v] - mq);
                zp += std::exp(pt[v] - mp);
            }
            double l1 = 0;
            const int32_t label = b.toks[a + k + 1];
            const double ce = -(q[label] - mq - std::log(zq));
            for (int64_t v = 0; v < V; ++v) {
                q[v] = std::exp(q[v] - mq) / zq;
                l1 += std::fabs(q[v] - std::exp(pt[v] - mp) / zp);
            }
            double bce = 0;
            if (c.ds.confidence_head) {
                const float* cw = ps.value("confidence_head.proj.weight").f32();
                const double z = dot(cw, he.data(), c.ds.confidence_dim(D)) +
                                 ps.value("confidence_head.proj.bias").f32()[0];
                double t = std::clamp(1.0 - l1 / 2, 0.0, 1.0);
                if (cstar) cstar->push_back(t);
                if (frozen) t = (*frozen)[cstar ? cstar->size() - 1 : 0];
                bce = std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z))) - t * z;
            }
            loss += w * (kAlpha.ce * ce + kAlpha.l1 * l1 + kAlpha.confidence * bce);
        }
    }
    if (weight_sum) *weight_sum = wsum;
    return loss;
}

// test::expect_param_grads_match_fd with the step h given: in every parameter tensor the 3
// largest gradients and 2 random elements against 4-point finite differences of loss(), each
// within tol_abs + tol_rel x the tensor's largest gradient (finite_diff.h compare_gradients'
// scale: the kinks of |q - p|_1 and f32 round-off leave small absolute errors everywhere).
void expect_grads_match_fd(ParamSet& params, const std::function<double()>& loss, float h,
                           double tol_abs, double tol_rel) {
    std::map<std::string, std::vector<float>> snapshot;
    for (const auto& prm : params.params())
        snapshot[prm.name].assign(prm.grad.f32(), prm.grad.f32() + prm.grad.numel());
    Rng rng(5);
    for (const auto& prm : params.params()) {
        const std::vector<float>& g = snapshot.at(prm.name);
        const auto idx = test::fd_check_indices(g.data(), prm.grad.numel(), 3, 2, rng);
        const double scale = std::fabs(g[idx[0]]);
        EXPECT_GT(scale, 1e-6) << prm.name << " gets no gradient";
        for (int64_t i : idx) {
            const double fd = test::fd_derivative_in_place(prm.value.f32()[i], loss, h);
            EXPECT_NEAR(g[i], fd, tol_abs + tol_rel * std::max(scale, std::fabs(fd)))
                << prm.name << "[" << i << "]";
        }
    }
}

struct HeadCase {
    MarkovHeadType head;
    bool conf, with_markov;
};

class DsparkLoss : public ::testing::TestWithParam<HeadCase> {};

TEST_P(DsparkLoss, MatchesHostLoop) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    const HeadCase hc = GetParam();
    Pair p = make_pair(*be, tiny_dspark_config(tc, hc.head, hc.conf, hc.with_markov), 21);
    const Batch b = make_batch(*be, p, 4);
    const test::StepStats st = step(*be, p, b);
    double wsum = 0;
    const double ref = host_loss(*be, p, b, nullptr, nullptr, &wsum);
    EXPECT_GT(ref, 0.0);
    EXPECT_NEAR(st.loss_sum, ref, 1e-4 * ref);
    EXPECT_NEAR(st.weight_sum, wsum, 1e-5);
    // weight_sum, computable before the forward, is the same normaliser.
    EXPECT_NEAR(p.drafter.weight_sum(b.mask, b.anchors, kGamma), wsum, 1e-5);
    // Slot 0 (the anchor slot) is trained: its accuracy position counts rows.
    EXPECT_GT(st.count[0], 0.0);
}

TEST_P(DsparkLoss, GradientMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    const HeadCase hc = GetParam();
    Pair p = make_pair(*be, tiny_dspark_config(tc, hc.head, hc.conf, hc.with_markov), 31);
    p.drafter.params().enable_training();
    const Batch b = make_batch(*be, p, 5);
    p.drafter.params().zero_grads();
    step(*be, p, b);
    // c* is detached in the gradient: the finite differences hold it at the unperturbed values.
    std::vector<double> cstar;
    host_loss(*be, p, b, nullptr, &cstar);
    const auto loss = [&] {
        std::vector<double> seen;
        return host_loss(*be, p, b, &cstar, &seen);
    };
    // |q - p|_1 has kinks (q_v = p_v): a step of 1e-3, not the usual 1e-2, stays clear of them.
    expect_grads_match_fd(p.drafter.params(), loss, 1e-3f, 1e-3, 3e-2);
}

INSTANTIATE_TEST_SUITE_P(Heads, DsparkLoss,
                         ::testing::Values(HeadCase{MarkovHeadType::vanilla, true, true},
                                           HeadCase{MarkovHeadType::gated, true, true},
                                           HeadCase{MarkovHeadType::gated, true, false},
                                           HeadCase{MarkovHeadType::vanilla, false, true},
                                           HeadCase{MarkovHeadType::rnn, true, true},
                                           HeadCase{MarkovHeadType::rnn, true, false},
                                           HeadCase{MarkovHeadType::rnn, false, true}),
                         [](const auto& test_case) {
                             const HeadCase& c = test_case.param;
                             return std::string(markov_head_type_name(c.head)) +
                                    (c.conf ? (c.with_markov ? "_conf_markov" : "_conf_hidden")
                                            : "_no_conf");
                         });

TEST(DsparkTraining, TinyRunLossFalls) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    Pair p = make_pair(*be, tiny_dspark_config(tc, MarkovHeadType::gated), 41);
    p.drafter.params().enable_training();
    const Batch b = make_batch(*be, p, 6);
    ParamSet& ps = p.drafter.params();
    double first = 0, last = 0;
    for (int it = 0; it < 30; ++it) {
        ps.zero_grads();
        const test::StepStats st = step(*be, p, b);
        if (it == 0) first = st.loss_sum;
        last = st.loss_sum;
        float* w = ps.flat_master().f32();
        const float* g = ps.flat_grads().f32();
        for (int64_t i = 0; i < ps.numel(); ++i) w[i] -= 0.05f * g[i] / st.weight_sum;
    }
    EXPECT_LT(last, 0.7 * first) << first << " -> " << last;
}

// ---- decoding ---------------------------------------------------------------------------------

TEST(DsparkSlotHead, AddsTheBiasAndGivesTheConfidence) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    for (const bool gated : {false, true}) {
        const Pair p = make_pair(
            *be, tiny_dspark_config(tc, gated ? MarkovHeadType::gated : MarkovHeadType::vanilla),
            51);
        const DrafterConfig& c = p.drafter.config();
        const int64_t D = p.target.dims().D, V = c.layer.vocab_size, r = c.ds.markov_rank;
        Rng rng(3);
        const HostTensor h = test::random_tensor({1, D}, rng);
        const HostTensor base = test::random_tensor({1, V}, rng);
        const HostTensor logits = base.clone();
        DsparkSlotHead head(*be, p.drafter.params(), c.ds, D, c.block_size);
        const int32_t prev = 11;
        const double conf = head.apply(0, h, prev, logits, true);
        const ParamSet& ps = p.drafter.params();
        const float* e = ps.value("markov_head.markov_w1.weight").f32() + prev * r;
        std::vector<float> he(h.f32(), h.f32() + D);
        he.insert(he.end(), e, e + r);
        std::vector<double> bias_in(e, e + r);
        if (gated)
            for (int64_t i = 0; i < r; ++i)
                bias_in[i] *= sigm(dot(ps.value("markov_head.gate_proj.weight").f32() + i * (D + r),
                                       he.data(), D + r) +
                                   ps.value("markov_head.gate_proj.bias").f32()[i]);
        for (int64_t v = 0; v < V; ++v) {
            double want = base.f32()[v];
            for (int64_t i = 0; i < r; ++i)
                want += bias_in[i] * ps.value("markov_head.markov_w2.weight").f32()[v * r + i];
            EXPECT_NEAR(logits.f32()[v], want, 1e-4) << v;
        }
        const double z = dot(ps.value("confidence_head.proj.weight").f32(), he.data(), D + r) +
                         ps.value("confidence_head.proj.bias").f32()[0];
        EXPECT_NEAR(conf, sigm(z), 1e-5);
    }
}

// The rnn head at decode: slot by slot through two blocks, each slot's logits row and confidence
// against the host formulas with the state carried over the block's earlier slots and restarted
// at slot 0; slots out of order are refused.
TEST(DsparkSlotHead, RnnCarriesTheStateThroughTheBlock) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    const Pair p = make_pair(*be, tiny_dspark_config(tc, MarkovHeadType::rnn), 53);
    const DrafterConfig& c = p.drafter.config();
    const int64_t D = p.target.dims().D, V = c.layer.vocab_size, r = c.ds.markov_rank;
    const int64_t B = c.block_size;
    const ParamSet& ps = p.drafter.params();
    DsparkSlotHead head(*be, ps, c.ds, D, B);
    Rng rng(4);
    double state_effect = 0;  // how far the bias is from a state-free head's
    for (int block = 0; block < 2; ++block) {
        std::vector<double> state(static_cast<size_t>(r), 0.0);
        for (int64_t k = 0; k < B; ++k) {
            const HostTensor h = test::random_tensor({1, D}, rng);
            const HostTensor base = test::random_tensor({1, V}, rng);
            const HostTensor logits = base.clone();
            // The same prev tokens in both blocks: block 1 must repeat block 0 where h agrees.
            const auto prev = static_cast<int32_t>((7 * k + 3) % V);
            const double conf = head.apply(k, h, prev, logits, true);
            const float* e = ps.value("markov_head.markov_w1.weight").f32() + prev * r;
            std::vector<double> b, b_fresh, fresh(static_cast<size_t>(r), 0.0);
            rnn_slot(ps, fresh, e, h.f32(), D, b_fresh);
            rnn_slot(ps, state, e, h.f32(), D, b);
            for (int64_t i = 0; i < r; ++i)
                state_effect = std::max(state_effect, std::fabs(b[i] - b_fresh[i]));
            for (int64_t v = 0; v < V; ++v) {
                double want = base.f32()[v];
                for (int64_t i = 0; i < r; ++i)
                    want += b[i] * ps.value("markov_head.markov_w2.weight").f32()[v * r + i];
                EXPECT_NEAR(logits.f32()[v], want, 1e-4) << "block " << block << " slot " << k;
            }
            std::vector<float> he(h.f32(), h.f32() + D);
            he.insert(he.end(), e, e + r);
            const double z = dot(ps.value("confidence_head.proj.weight").f32(), he.data(), D + r) +
                             ps.value("confidence_head.proj.bias").f32()[0];
            EXPECT_NEAR(conf, sigm(z), 1e-5);
        }
    }
    // The state matters: the later slots' biases are not what a state-free head would give.
    EXPECT_GT(state_effect, 1e-2);
    const HostTensor h = test::random_tensor({1, D}, rng);
    const HostTensor logits({1, V});
    EXPECT_TRUE(test::has(test::error_of([&] { head.apply(2, h, 1, logits, false); }),
                          "slot 2 after slot"));
    EXPECT_TRUE(test::has(test::error_of([&] { head.apply(B, h, 1, logits, false); }),
                          "DsparkSlotHead::apply"));
}

TEST(DsparkDrafter, WarmStartFromDflashKeepsEverySharedTensor) {
    auto be = make_cpu_backend(1);
    const auto tc = test::tiny_target_config(true, 4);
    const DrafterModel v1 = DrafterModel::random(*be, test::tiny_drafter_config(tc, 2, 4), 7, 0.3f);
    const DrafterModel d =
        DrafterModel::from_dflash(*be, v1, tiny_dspark_config(tc, MarkovHeadType::gated), 8);
    EXPECT_TRUE(d.config().dspark());
    for (const auto& prm : v1.params().params())
        EXPECT_EQ(test::max_abs_diff(d.params().value(prm.name), prm.value), 0.0) << prm.name;
    // New heads: weights drawn, biases zero.
    EXPECT_GT(max_abs(d.params().value("markov_head.markov_w2.weight")), 0.0);
    EXPECT_EQ(max_abs(d.params().value("markov_head.gate_proj.bias")), 0.0);
    EXPECT_EQ(max_abs(d.params().value("confidence_head.proj.bias")), 0.0);
    // A DSpark drafter is not converted again.
    EXPECT_TRUE(test::has(test::error_of([&] {
                              DrafterModel::from_dflash(
                                  *be, d, tiny_dspark_config(tc, MarkovHeadType::vanilla), 9);
                          }),
                          "not a DFlash drafter"));
}

}  // namespace
}  // namespace dflash
