// Loading mixture-of-experts targets in every expert spelling: qwen3_moe per-expert (Hub) and
// fused (transformers 5), gpt_oss in transformers' bf16 layout and as MXFP4 blocks encoded here;
// each loads to the same weights, save() writes the Hub layout that loads back identically, and
// bad checkpoints (expert counts that disagree, truncated MXFP4 blocks or scales) are refused
// with the file and tensor named before the model is allocated.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "backend/backend.h"
#include "core/checkpoint_io.h"
#include "core/rng.h"
#include "model/expert_weights.h"
#include "model/target.h"
#include "model/tiny_moe_models.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// One tensor of a hand-written safetensors file (the library writes only float and i32 tensors;
// MXFP4 checkpoints hold U8 ones).
struct RawTensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

RawTensor raw_f32(const std::string& name, const HostTensor& t) {
    RawTensor r{name, "F32", t.shape().to_vector(), std::vector<uint8_t>(t.nbytes())};
    std::memcpy(r.bytes.data(), t.f32(), t.nbytes());
    return r;
}

void write_raw_safetensors(const fs::path& path, const std::vector<RawTensor>& tensors) {
    json h = json::object();
    uint64_t off = 0;
    for (const auto& t : tensors) {
        h[t.name] = {
            {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
        off += t.bytes.size();
    }
    h["__metadata__"] = {{"format", "pt"}};
    std::string header = h.dump();
    while (header.size() % 8 != 0) header += ' ';
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), static_cast<std::streamsize>(n));
    for (const auto& t : tensors)
        f.write(reinterpret_cast<const char*>(t.bytes.data()),
                static_cast<std::streamsize>(t.bytes.size()));
}

// Every parameter's f32 values, by name.
std::map<std::string, std::vector<float>> weights_of(const TargetModel& m) {
    std::map<std::string, std::vector<float>> out;
    for (const Param& p : m.params().params()) {
        const HostTensor h = m.params().read_f32(p.name);
        out[p.name].assign(h.f32(), h.f32() + h.numel());
    }
    return out;
}

// Every tensor of a saved checkpoint except those `drop` says, read as F32 raw tensors.
std::vector<RawTensor> stored_except(const fs::path& dir,
                                     const std::function<bool(const std::string&)>& drop) {
    const CheckpointReader r = CheckpointReader::open(dir);
    std::vector<RawTensor> out;
    for (const auto& n : r.names())
        if (!drop(n)) out.push_back(raw_f32(n, r.read_f32(n)));
    return out;
}

void write_config(const fs::path& dir, const TargetConfig& c) {
    fs::create_directories(dir);
    c.save(dir);
}

TEST(MoeLoading, Qwen3MoeSavesPerExpertAndLoadsBothSpellingsIdentically) {
    auto be = make_cpu_backend(1);
    const TargetConfig cfg = test::tiny_qwen3_moe_config();
    const TargetModel m = TargetModel::random(*be, cfg, 5, 0.2f);
    const auto want = weights_of(m);
    test::TempDir hub("moe_hub");
    m.save(hub.path(), DType::f32);
    // The Hub layout: per-expert Linear weights, no fused tensors; layer 1 is dense.
    const CheckpointReader r = CheckpointReader::open(hub.path());
    EXPECT_TRUE(r.has("model.layers.0.mlp.experts.4.gate_proj.weight"));
    EXPECT_EQ(r.shape("model.layers.2.mlp.experts.0.down_proj.weight"),
              (std::vector<int64_t>{24, 12}));
    EXPECT_TRUE(r.has("model.layers.0.mlp.gate.weight"));
    EXPECT_FALSE(r.has("model.layers.0.mlp.experts.gate_up_proj"));
    EXPECT_TRUE(r.has("model.layers.1.mlp.gate_proj.weight"));
    // Expert 3's up rows are rows [I, 2I) of its slab in the model.
    const HostTensor up = r.read_f32("model.layers.2.mlp.experts.3.up_proj.weight");
    const auto& slab = want.at("model.layers.2.mlp.experts.gate_up_proj");
    for (int64_t k = 0; k < up.numel(); ++k) ASSERT_EQ(up.f32()[k], slab[(3 * 24 + 12) * 24 + k]);
    EXPECT_EQ(weights_of(TargetModel::load(*be, hub.path())), want);

    // The transformers-5 spelling, built here from the per-expert tensors.
    test::TempDir fused("moe_fused");
    auto tensors = stored_except(hub.path(), [](const std::string& n) {
        return n.find(".mlp.experts.") != std::string::npos;
    });
    for (int64_t l : {0, 2}) {
        const std::string pre = fmt::format("model.layers.{}.mlp.experts.", l);
        HostTensor gu({5, 24, 24}), dn({5, 24, 12});
        for (int64_t e = 0; e < 5; ++e) {
            const HostTensor g = r.read_f32(fmt::format("{}{}.gate_proj.weight", pre, e));
            const HostTensor u = r.read_f32(fmt::format("{}{}.up_proj.weight", pre, e));
            const HostTensor d = r.read_f32(fmt::format("{}{}.down_proj.weight", pre, e));
            std::memcpy(gu.f32() + e * 24 * 24, g.f32(), g.nbytes());
            std::memcpy(gu.f32() + e * 24 * 24 + 12 * 24, u.f32(), u.nbytes());
            std::memcpy(dn.f32() + e * 24 * 12, d.f32(), d.nbytes());
        }
        tensors.push_back(raw_f32(pre + "gate_up_proj", gu));
        tensors.push_back(raw_f32(pre + "down_proj", dn));
    }
    write_raw_safetensors(fused / kSingleCheckpointFile, tensors);
    write_config(fused.path(), cfg);
    EXPECT_EQ(weights_of(TargetModel::load(*be, fused.path())), want);
}

TEST(MoeLoading, GptOssSavesTransformersLayoutAndLoadsItBack) {
    auto be = make_cpu_backend(1);
    const TargetConfig cfg = test::tiny_gpt_oss_config();
    const TargetModel m = TargetModel::random(*be, cfg, 6, 0.2f);
    const auto want = weights_of(m);
    test::TempDir dir("gpt_oss_bf16");
    m.save(dir.path(), DType::f32);
    const CheckpointReader r = CheckpointReader::open(dir.path());
    const int64_t E = 4, D = 64, I = 32;
    EXPECT_EQ(r.shape("model.layers.0.mlp.experts.gate_up_proj"),
              (std::vector<int64_t>{E, D, 2 * I}));
    EXPECT_EQ(r.shape("model.layers.0.mlp.experts.down_proj"), (std::vector<int64_t>{E, I, D}));
    EXPECT_EQ(r.shape("model.layers.3.self_attn.sinks"), (std::vector<int64_t>{6}));
    EXPECT_TRUE(r.has("model.layers.1.mlp.router.bias"));
    EXPECT_TRUE(r.has("model.layers.1.self_attn.o_proj.bias"));
    // x·W with gate/up interleaved: column 2u is gate unit u, 2u+1 up unit u.
    const HostTensor gu = r.read_f32("model.layers.1.mlp.experts.gate_up_proj");
    const auto& slab = want.at("model.layers.1.mlp.experts.gate_up_proj");
    const HostTensor dn = r.read_f32("model.layers.1.mlp.experts.down_proj");
    const auto& down = want.at("model.layers.1.mlp.experts.down_proj");
    const HostTensor gb = r.read_f32("model.layers.1.mlp.experts.gate_up_proj_bias");
    const auto& bias = want.at("model.layers.1.mlp.experts.gate_up_proj_bias");
    for (int64_t e = 0; e < E; ++e)
        for (int64_t u = 0; u < I; ++u) {
            ASSERT_EQ(gb.f32()[e * 2 * I + 2 * u], bias[e * 2 * I + u]);
            ASSERT_EQ(gb.f32()[e * 2 * I + 2 * u + 1], bias[e * 2 * I + I + u]);
            for (int64_t k = 0; k < D; ++k) {
                ASSERT_EQ(gu.f32()[(e * D + k) * 2 * I + 2 * u], slab[(e * 2 * I + u) * D + k]);
                ASSERT_EQ(gu.f32()[(e * D + k) * 2 * I + 2 * u + 1],
                          slab[(e * 2 * I + I + u) * D + k]);
                ASSERT_EQ(dn.f32()[(e * I + u) * D + k], down[(e * D + k) * I + u]);
            }
        }
    EXPECT_EQ(weights_of(TargetModel::load(*be, dir.path())), want);
}

// Random MXFP4 blocks and scales for `rows` rows of `cols` inputs of E experts.
struct Mxfp4 {
    std::vector<uint8_t> blocks, scales;
};
Mxfp4 random_mxfp4(Rng& rng, int64_t e, int64_t rows, int64_t cols) {
    Mxfp4 m;
    m.blocks.resize(e * rows * cols / 2);
    m.scales.resize(e * rows * cols / 32);
    for (auto& b : m.blocks) b = static_cast<uint8_t>(rng.below(256));
    for (auto& s : m.scales) s = static_cast<uint8_t>(124 + rng.below(5));  // 2^-3 .. 2^1
    return m;
}

// Element (e, row, col) of MXFP4 data as the format defines it, decoded independently of the
// library: group col/32, byte (col%32)/2, low nibble for even col, sign bit 3.
float mxfp4_at(const Mxfp4& m, int64_t rows, int64_t cols, int64_t e, int64_t row, int64_t col) {
    const int64_t g = (e * rows + row) * (cols / 32) + col / 32;
    const uint8_t byte = m.blocks[g * 16 + (col % 32) / 2];
    const uint8_t code = col % 2 == 0 ? byte & 15 : byte >> 4;
    const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    const float v = (code & 8) ? -mags[code & 7] : mags[code & 7];
    return v * std::pow(2.0f, static_cast<float>(m.scales[g]) - 127.0f);
}

RawTensor raw_u8(const std::string& name, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    return {name, "U8", std::move(shape), std::move(bytes)};
}

// A gpt_oss checkpoint whose experts are MXFP4 (everything else from a saved random model).
struct Mxfp4Checkpoint {
    std::vector<RawTensor> tensors;
    std::map<std::string, std::pair<Mxfp4, Mxfp4>> experts;  // layer prefix -> (gate_up, down)
};
Mxfp4Checkpoint mxfp4_checkpoint(const fs::path& saved, const TargetConfig& c, uint64_t seed) {
    const int64_t E = c.num_experts, D = c.hidden_size, I = c.moe_intermediate_size;
    Mxfp4Checkpoint out;
    out.tensors = stored_except(saved, [](const std::string& n) {
        return n.ends_with("experts.gate_up_proj") || n.ends_with("experts.down_proj");
    });
    Rng rng(seed);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string pre = fmt::format("model.layers.{}.mlp.experts.", l);
        Mxfp4 gu = random_mxfp4(rng, E, 2 * I, D), dn = random_mxfp4(rng, E, D, I);
        out.tensors.push_back(
            raw_u8(pre + "gate_up_proj_blocks", {E, 2 * I, D / 32, 16}, gu.blocks));
        out.tensors.push_back(raw_u8(pre + "gate_up_proj_scales", {E, 2 * I, D / 32}, gu.scales));
        out.tensors.push_back(raw_u8(pre + "down_proj_blocks", {E, D, I / 32, 16}, dn.blocks));
        out.tensors.push_back(raw_u8(pre + "down_proj_scales", {E, D, I / 32}, dn.scales));
        out.experts[pre] = {std::move(gu), std::move(dn)};
    }
    return out;
}

TEST(MoeLoading, GptOssMxfp4ExpertsDecodeToTheFormatsValues) {
    auto be = make_cpu_backend(1);
    const TargetConfig cfg = test::tiny_gpt_oss_config();
    test::TempDir saved("gpt_oss_saved"), dir("gpt_oss_mxfp4");
    TargetModel::random(*be, cfg, 7, 0.2f).save(saved.path(), DType::f32);
    const Mxfp4Checkpoint ck = mxfp4_checkpoint(saved.path(), cfg, 8);
    write_raw_safetensors(dir / kSingleCheckpointFile, ck.tensors);
    write_config(dir.path(), cfg);
    const TargetModel m = TargetModel::load(*be, dir.path());
    const int64_t E = 4, D = 64, I = 32;
    for (const auto& [pre, mx] : ck.experts) {
        const HostTensor gu = m.params().read_f32(pre + "gate_up_proj");
        const HostTensor dn = m.params().read_f32(pre + "down_proj");
        for (int64_t e = 0; e < E; ++e)
            for (int64_t u = 0; u < I; ++u)
                for (int64_t k = 0; k < D; ++k) {
                    // Stored rows interleave gate (2u) and up (2u+1); ours are gate then up.
                    ASSERT_EQ(gu.f32()[(e * 2 * I + u) * D + k],
                              mxfp4_at(mx.first, 2 * I, D, e, 2 * u, k));
                    ASSERT_EQ(gu.f32()[(e * 2 * I + I + u) * D + k],
                              mxfp4_at(mx.first, 2 * I, D, e, 2 * u + 1, k));
                    ASSERT_EQ(dn.f32()[(e * D + k) * I + u], mxfp4_at(mx.second, D, I, e, k, u));
                }
    }
    // The decoded model saved in transformers' layout loads to the same weights.
    test::TempDir again("gpt_oss_again");
    m.save(again.path(), DType::f32);
    EXPECT_EQ(weights_of(TargetModel::load(*be, again.path())), weights_of(m));
}

TEST(MoeLoading, DecodesEveryE2m1CodeAndScale) {
    const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (uint8_t c = 0; c < 16; ++c) EXPECT_EQ(e2m1_value(c), want[c]) << int(c);
    std::vector<uint8_t> blocks(16), scales = {130};
    for (int j = 0; j < 16; ++j) blocks[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    std::vector<float> out(32);
    decode_mxfp4(blocks, scales, 1, 1, out.data());
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[2 * j], want[j] * 8.0f);
        EXPECT_EQ(out[2 * j + 1], want[15 - j] * 8.0f);
    }
}

std::string load_error(const fs::path& dir) {
    auto be = make_cpu_backend(1);
    return test::error_of([&] { TargetModel::load(*be, dir); });
}

TEST(MoeLoading, RefusesTruncatedMxfp4BlocksAndScalesNamingFileAndKey) {
    auto be = make_cpu_backend(1);
    const TargetConfig cfg = test::tiny_gpt_oss_config();
    test::TempDir saved("gpt_oss_saved2");
    TargetModel::random(*be, cfg, 9, 0.2f).save(saved.path(), DType::f32);
    for (const char* which : {"gate_up_proj_blocks", "down_proj_scales"}) {
        Mxfp4Checkpoint ck = mxfp4_checkpoint(saved.path(), cfg, 10);
        const std::string key = std::string("model.layers.2.mlp.experts.") + which;
        for (auto& t : ck.tensors)
            if (t.name == key) {
                // One byte (blocks) or one group (scales) short per row.
                t.shape.back() -= 1;
                int64_t n = 1;
                for (int64_t d : t.shape) n *= d;
                t.bytes.resize(n);
            }
        test::TempDir dir("gpt_oss_truncated");
        write_raw_safetensors(dir / kSingleCheckpointFile, ck.tensors);
        write_config(dir.path(), cfg);
        const std::string err = load_error(dir.path());
        EXPECT_NE(err.find(key), std::string::npos) << err;
        EXPECT_NE(err.find((dir / kSingleCheckpointFile).string()), std::string::npos) << err;
        EXPECT_NE(err.find("do not match its config.json"), std::string::npos) << err;
    }
    // Blocks stored as another dtype than U8.
    Mxfp4Checkpoint ck = mxfp4_checkpoint(saved.path(), cfg, 11);
    for (auto& t : ck.tensors)
        if (t.name == "model.layers.0.mlp.experts.down_proj_scales") t.dtype = "I8";
    test::TempDir dir("gpt_oss_i8");
    write_raw_safetensors(dir / kSingleCheckpointFile, ck.tensors);
    write_config(dir.path(), cfg);
    EXPECT_NE(load_error(dir.path()).find("down_proj_scales' is I8; it must be U8"),
              std::string::npos);
}

TEST(MoeLoading, RefusesExpertCountsThatDisagreeWithTheConfig) {
    auto be = make_cpu_backend(1);
    const TargetConfig cfg = test::tiny_qwen3_moe_config();
    test::TempDir dir("moe_counts");
    TargetModel::random(*be, cfg, 12, 0.2f).save(dir.path(), DType::f32);
    // The config claims a sixth expert the per-expert checkpoint does not have.
    TargetConfig six = cfg;
    six.num_experts = 6;
    write_config(dir.path(), six);
    std::string err = load_error(dir.path());
    EXPECT_NE(err.find("'model.layers.0.mlp.experts.5.gate_proj.weight' [12, 24] is missing"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("'model.layers.0.mlp.gate.weight' in"), std::string::npos) << err;
    // Fused tensors of 4 experts under a config of 5.
    test::TempDir fused("moe_counts_fused");
    auto tensors = stored_except(dir.path(), [](const std::string& n) {
        return n.find(".mlp.experts.") != std::string::npos;
    });
    for (int64_t l : {0, 2}) {
        const std::string pre = fmt::format("model.layers.{}.mlp.experts.", l);
        tensors.push_back(raw_f32(pre + "gate_up_proj", HostTensor({4, 24, 24})));
        tensors.push_back(raw_f32(pre + "down_proj", HostTensor({4, 24, 12})));
    }
    write_raw_safetensors(fused / kSingleCheckpointFile, tensors);
    write_config(fused.path(), cfg);
    err = load_error(fused.path());
    EXPECT_NE(err.find("'model.layers.0.mlp.experts.gate_up_proj' in '" +
                       (fused / kSingleCheckpointFile).string() +
                       "' is [4, 24, 24] but the config implies [5, 24, 24]"),
              std::string::npos)
        << err;
}

}  // namespace
}  // namespace dflash
