// Loading and saving the hybrid linear-attention targets (docs/formats.md "Hybrid linear-attention
// targets"): Qwen3-Next's in_proj_qkvz / in_proj_ba grouped per key head and a gated attention's
// per-head [query | gate] q_proj are regrouped at load and written back grouped (the stored rows
// checked against a hand-made grouping); the multimodal wrapper's model.language_model.* names map
// to the text model's, its vision tower and MTP head are skipped and `dflash inspect` says so; a
// wrapper without its language model is refused naming the file and the key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "backend/backend.h"
#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "model/hybrid_weights.h"
#include "model/inspect.h"
#include "model/target.h"
#include "model/tiny_hybrid_models.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::map<std::string, std::vector<float>> weights_of(const TargetModel& m) {
    std::map<std::string, std::vector<float>> out;
    for (const Param& p : m.params().params()) {
        const HostTensor h = m.params().read_f32(p.name);
        out[p.name].assign(h.f32(), h.f32() + h.numel());
    }
    return out;
}

// Row r of the returned [rows, 2] tensor holds (r, -r): a row's values name the row it was.
HostTensor labelled_rows(int64_t rows) {
    HostTensor t({rows, 2});
    for (int64_t r = 0; r < rows; ++r) {
        t.f32()[2 * r] = static_cast<float>(r);
        t.f32()[2 * r + 1] = static_cast<float>(-r);
    }
    return t;
}

TEST(HybridLoading, Qwen3NextProjectionsAreUngroupedPerKeyHead) {
    const TargetConfig c = test::tiny_qwen3_next_config();  // Hk 2, Hv 4 (r 2), dk 6, dv 10
    const int64_t hk = 2, dk = 6, dv = 10, r = 2, group = 2 * dk + 2 * r * dv;
    const auto src = hybrid_row_source(c, "model.layers.0.linear_attn.in_proj_qkvz.weight");
    ASSERT_EQ(static_cast<int64_t>(src.size()), hk * group);
    const HostTensor model = gather_rows(labelled_rows(hk * group), src);
    // The model's order: q of both key heads, k of both, v of the 4 value heads, z of the 4.
    std::vector<int64_t> want;
    for (int64_t g = 0; g < hk; ++g)
        for (int64_t j = 0; j < dk; ++j) want.push_back(g * group + j);
    for (int64_t g = 0; g < hk; ++g)
        for (int64_t j = 0; j < dk; ++j) want.push_back(g * group + dk + j);
    for (int64_t h = 0; h < 4; ++h)  // value head h = g * r + i lives in group g
        for (int64_t j = 0; j < dv; ++j)
            want.push_back((h / r) * group + 2 * dk + (h % r) * dv + j);
    for (int64_t h = 0; h < 4; ++h)
        for (int64_t j = 0; j < dv; ++j)
            want.push_back((h / r) * group + 2 * dk + r * dv + (h % r) * dv + j);
    ASSERT_EQ(want.size(), src.size());
    for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(model.f32()[2 * i], static_cast<float>(want[i])) << "model row " << i;
    // b of the 4 value heads, then a: stored per key head as [b_g (r) | a_g (r)].
    const auto ba = hybrid_row_source(c, "model.layers.0.linear_attn.in_proj_ba.weight");
    EXPECT_EQ(ba, (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
    // save() undoes it.
    const HostTensor back = scatter_rows(model, src);
    EXPECT_EQ(test::max_rel_diff(back, labelled_rows(hk * group)), 0.0);
    // q_proj of the gated attention: per head [query | gate] -> all queries, then all gates.
    const auto q = hybrid_row_source(c, "model.layers.1.self_attn.q_proj.weight");
    ASSERT_EQ(q.size(), 64u);  // 4 heads x 2 x 8
    EXPECT_EQ(q[0], 0);
    EXPECT_EQ(q[8], 16);   // head 1's query
    EXPECT_EQ(q[32], 8);   // head 0's gate
    EXPECT_EQ(q[63], 63);  // head 3's gate, last row
    EXPECT_TRUE(hybrid_row_source(c, "model.layers.1.self_attn.k_proj.weight").empty());
    // Qwen3.5 splits its projections: nothing to regroup there.
    EXPECT_TRUE(hybrid_row_source(test::tiny_qwen3_5_config(),
                                  "model.layers.0.linear_attn.in_proj_qkv.weight")
                    .empty());
}

TEST(HybridLoading, SaveWritesTheHubLayoutThatLoadsBackIdentically) {
    auto be = make_cpu_backend(1);
    for (const TargetConfig& c : {test::tiny_qwen3_next_config(), test::tiny_qwen3_5_config(),
                                  test::tiny_qwen3_5_moe_config()}) {
        const TargetModel m = TargetModel::random(*be, c, 7, 0.3f);
        const auto want = weights_of(m);
        test::TempDir dir("hybrid_save");
        m.save(dir.path(), DType::f32);
        const CheckpointReader r = CheckpointReader::open(dir.path());
        if (c.model_type == "qwen3_next") {
            // Stored grouped: stored row group + dk + j (key head 1's k) is the model's k row.
            const HostTensor qkvz = r.read_f32("model.layers.0.linear_attn.in_proj_qkvz.weight");
            const auto& mine = want.at("model.layers.0.linear_attn.in_proj_qkvz.weight");
            const int64_t group = 2 * 6 + 2 * 2 * 10, d = 24;
            for (int64_t k = 0; k < d; ++k)
                ASSERT_EQ(qkvz.f32()[(group + 6 + 3) * d + k], mine[(2 * 6 + 6 + 3) * d + k]);
            EXPECT_TRUE(r.has("model.layers.0.mlp.experts.4.gate_proj.weight"));  // per expert
            EXPECT_TRUE(r.has("model.layers.2.mlp.gate_proj.weight"));            // mlp_only_layers
            EXPECT_TRUE(r.has("model.layers.0.mlp.shared_expert_gate.weight"));
        }
        if (c.model_type == "qwen3_5_moe") {
            EXPECT_TRUE(r.has("model.layers.0.mlp.experts.gate_up_proj"));  // fused on the Hub
        }
        // Gated q_proj stored per head: stored row 8 (head 0's gate) is the model's row 32.
        const std::string qn = "model.layers.3.self_attn.q_proj.weight";
        const HostTensor q = r.read_f32(qn);
        for (int64_t k = 0; k < 24; ++k) ASSERT_EQ(q.f32()[8 * 24 + k], want.at(qn)[32 * 24 + k]);
        // The norms are saved as w, not 1 + w.
        const HostTensor n = r.read_f32("model.norm.weight");
        EXPECT_EQ(n.f32()[0], want.at("model.norm.weight")[0]);
        EXPECT_EQ(weights_of(TargetModel::load(*be, dir.path())), want) << c.model_type;
        const json saved = read_json_file(dir / "config.json");
        EXPECT_EQ(TargetConfig::from_json(saved).to_json(), c.to_json());
    }
}

// The dense Qwen3.5 checkpoint of `m` rewritten as the published multimodal wrapper (optionally
// without its language model).
void write_wrapper(const TargetModel& m, const fs::path& flat, const fs::path& dir,
                   bool with_language_model) {
    const CheckpointReader r = CheckpointReader::open(flat);
    std::vector<HostTensor> keep;
    std::vector<std::pair<std::string, Tensor>> views;
    keep.reserve(r.names().size() + 3);
    for (const auto& n : r.names()) {
        if (!with_language_model && n.starts_with("model.")) continue;
        keep.push_back(r.read_f32(n));
        const std::string stored =
            n.starts_with("model.") ? "model.language_model." + n.substr(6) : n;
        views.emplace_back(stored, keep.back().view());
    }
    keep.emplace_back(Shape{4, 3});
    views.emplace_back("model.visual.blocks.0.attn.qkv.weight", keep.back().view());
    keep.emplace_back(Shape{5});
    views.emplace_back("model.visual.merger.norm.weight", keep.back().view());
    keep.emplace_back(Shape{24, 48});
    views.emplace_back("mtp.fc.weight", keep.back().view());
    write_checkpoint(dir, views, DType::f32, size_t{1} << 30);
    json text = m.config().to_json();
    json j = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
              {"model_type", "qwen3_5"},
              {"tie_word_embeddings", false},
              {"text_config", text},
              {"vision_config", {{"depth", 1}}}};
    write_text_atomic(dir / "config.json", j.dump(2));
}

TEST(HybridLoading, MultimodalWrapperLoadsItsLanguageModelAndSkipsTheRest) {
    auto be = make_cpu_backend(1);
    const TargetModel m = TargetModel::random(*be, test::tiny_qwen3_5_config(), 9, 0.3f);
    test::TempDir flat("hybrid_flat"), wrapped("hybrid_wrapped"), broken("hybrid_no_lm");
    m.save(flat.path(), DType::f32);
    write_wrapper(m, flat.path(), wrapped.path(), true);
    const TargetModel w = TargetModel::load(*be, wrapped.path());
    EXPECT_TRUE(w.config().multimodal_wrapper);
    EXPECT_EQ(weights_of(w), weights_of(m));
    const InspectReport rep = inspect_directory(wrapped.path());
    EXPECT_TRUE(rep.ok()) << rep.text;
    EXPECT_TRUE(test::has(rep.text, "skipped: 2 vision tensors, 1 MTP tensors")) << rep.text;
    EXPECT_TRUE(test::has(rep.text, "3 Gated DeltaNet layers, 1 full-attention")) << rep.text;
    EXPECT_TRUE(test::has(rep.text, "rotary on 4 of 8 head dims")) << rep.text;
    // Saved as its text model.
    test::TempDir again("hybrid_resaved");
    w.save(again.path(), DType::f32);
    EXPECT_EQ(read_json_file(again / "config.json")["model_type"], "qwen3_5_text");
    EXPECT_EQ(weights_of(TargetModel::load(*be, again.path())), weights_of(m));

    write_wrapper(m, flat.path(), broken.path(), false);
    const std::string msg = test::error_of([&] { TargetModel::load(*be, broken.path()); });
    EXPECT_TRUE(test::has(msg, "model.language_model.")) << msg;
    EXPECT_TRUE(test::has(msg, (broken / "model.safetensors").string())) << msg;
    EXPECT_TRUE(test::has(msg, "language model's weights are missing")) << msg;
}

}  // namespace
}  // namespace dflash
