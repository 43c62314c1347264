// Packed MXFP4 experts (model/expert_weights.h: PackedExperts) on the CPU backend, whose
// moe_experts reference decodes them on the fly: the gpt-oss MXFP4 fixture
// (tests/fixtures/targets/gpt_oss_mxfp4, made by transformers) loaded packed gives the bits the
// fixture loaded decoded gives (a prefill and decode steps), keeps no expert matrices among its
// parameters, and saves every tensor back byte for byte. And the bad inputs of issue 24 for MXFP4
// checkpoints: data cut short inside the blocks, expert counts that disagree with the tensors, a
// router kind dflash does not run: errors that name the file and the tensor or key, raised
// before the model is allocated.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/checkpoint_io.h"
#include "model/expert_weights.h"
#include "model/target.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = DFLASH_SOURCE_DIR "/tests/fixtures/targets/gpt_oss_mxfp4";

std::vector<int32_t> first_prompt() {
    std::ifstream f(kFixture / "expected.json");
    return nlohmann::json::parse(f)["prompts"][0].get<std::vector<int32_t>>();
}

// Logits of a prefill of `prompt` and of three decode steps after it, concatenated.
std::vector<float> session_logits(Backend& be, const TargetModel& m,
                                  const std::vector<int32_t>& prompt) {
    const int64_t V = m.config().vocab_size;
    TargetSession s(m, be, static_cast<int64_t>(prompt.size()) + 3, {}, 16);
    HostTensor all({static_cast<int64_t>(prompt.size()), V}), one({1, V});
    s.forward(prompt, all, Tensor());
    std::vector<float> out(all.f32(), all.f32() + all.numel());
    for (const int32_t t : {5, 77, 3}) {
        s.forward(std::span(&t, 1), one, Tensor());
        out.insert(out.end(), one.f32(), one.f32() + one.numel());
    }
    return out;
}

TEST(MoePacked, SameLogitsAsTheDecodedExperts) {
    auto be = make_cpu_backend(2);
    const TargetModel packed = TargetModel::load(*be, kFixture, Mxfp4Storage::packed);
    const TargetModel decoded = TargetModel::load(*be, kFixture);  // the CPU's default
    EXPECT_TRUE(decoded.packed_experts().empty());
    ASSERT_FALSE(packed.packed_experts().empty());
    // 4 layers of 4 experts: gate_up 64 rows of 3 groups, down 96 rows of 1 group, 17 bytes each.
    EXPECT_EQ(packed.packed_experts().bytes(), 4 * 4 * (64 * 3 + 96 * 1) * 17);
    EXPECT_FALSE(packed.params().has("model.layers.0.mlp.experts.gate_up_proj"));
    EXPECT_FALSE(packed.params().has("model.layers.3.mlp.experts.down_proj"));
    EXPECT_TRUE(packed.params().has("model.layers.0.mlp.experts.gate_up_proj_bias"));
    EXPECT_EQ(decoded.params().numel() - packed.params().numel(), 4 * 4 * 3 * 96 * 32);
    const std::vector<int32_t> prompt = first_prompt();
    const std::vector<float> want = session_logits(*be, decoded, prompt);
    const std::vector<float> got = session_logits(*be, packed, prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

TEST(MoePacked, SavesEveryTensorBackByteForByte) {
    auto be = make_cpu_backend(1);
    const TargetModel packed = TargetModel::load(*be, kFixture, Mxfp4Storage::packed);
    test::TempDir dir("packed_save");
    packed.save(dir.path(), DType::bf16);
    const CheckpointReader want = CheckpointReader::open(kFixture);
    const CheckpointReader got = CheckpointReader::open(dir.path());
    ASSERT_EQ(got.names(), want.names());
    for (const std::string& n : want.names()) {
        EXPECT_EQ(got.dtype(n), want.dtype(n)) << n;
        EXPECT_EQ(got.shape(n), want.shape(n)) << n;
        const auto a = got.raw_bytes(n), b = want.raw_bytes(n);
        EXPECT_TRUE(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0) << n;
    }
}

// A copy of the fixture in `dir` with its config changed by `edit`.
void copy_fixture(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
    fs::copy_file(kFixture / "model.safetensors", dir / "model.safetensors");
    std::ifstream f(kFixture / "config.json");
    nlohmann::json cfg = nlohmann::json::parse(f);
    edit(cfg);
    test::write_file(dir / "config.json", cfg.dump(2));
}

std::string load_error(const fs::path& dir, Mxfp4Storage s) {
    auto be = make_cpu_backend(1);
    return test::error_of([&] { TargetModel::load(*be, dir, s); });
}

TEST(MoePacked, RefusesBlocksCutShortNamingFileAndTensor) {
    // The file cut in the middle of layer 2's gate_up blocks (an interrupted download).
    const std::string key = "model.layers.2.mlp.experts.gate_up_proj_blocks";
    test::TempDir dir("packed_cut");
    copy_fixture(dir.path(), [](nlohmann::json&) {});
    // The blocks' place in the file: 8 bytes of header length, the header, then data_offsets.
    std::ifstream in(kFixture / "model.safetensors", std::ios::binary);
    uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), 8);
    std::string h(header, '\0');
    in.read(h.data(), static_cast<std::streamsize>(header));
    const auto span = nlohmann::json::parse(h)[key]["data_offsets"];
    const uint64_t begin = span[0].get<uint64_t>(), end = span[1].get<uint64_t>();
    const uint64_t cut = 8 + header + (begin + end) / 2;
    fs::resize_file(dir / "model.safetensors", cut);
    for (const Mxfp4Storage s : {Mxfp4Storage::packed, Mxfp4Storage::decoded}) {
        const std::string err = load_error(dir.path(), s);
        EXPECT_TRUE(test::has(err, (dir / "model.safetensors").string())) << err;
        EXPECT_TRUE(test::has(err, "tensor '" + key + "' and those after it are cut short")) << err;
    }
}

TEST(MoePacked, RefusesExpertCountsThatDisagreeWithTheBlocks) {
    test::TempDir dir("packed_counts");
    copy_fixture(dir.path(), [](nlohmann::json& c) { c["num_local_experts"] = 5; });
    for (const Mxfp4Storage s : {Mxfp4Storage::packed, Mxfp4Storage::decoded}) {
        const std::string err = load_error(dir.path(), s);
        EXPECT_TRUE(test::has(err, "'model.layers.0.mlp.experts.gate_up_proj_blocks' in '" +
                                       (dir / "model.safetensors").string() +
                                       "' is [4, 64, 3, 16] but the config implies [5, 64, 3, 16]"))
            << err;
    }
    // Scales one group short per row under the fixture's own config.
    test::TempDir short_dir("packed_scales");
    copy_fixture(short_dir.path(), [](nlohmann::json&) {});
    const CheckpointReader r = CheckpointReader::open(kFixture);
    std::vector<std::pair<std::string, HostTensor>> tensors;
    for (const std::string& n : r.names()) {
        const auto b = r.raw_bytes(n);
        std::vector<int64_t> shape = r.shape(n);
        if (r.dtype(n) == "U8") {
            if (n == "model.layers.1.mlp.experts.gate_up_proj_scales") shape.back() -= 1;
            HostTensor t(Shape(shape), DType::u8);
            std::memcpy(t.view().u8(), b.data(), t.nbytes());
            tensors.emplace_back(n, std::move(t));
        } else {
            tensors.emplace_back(n, r.read_f32(n));
        }
    }
    std::vector<std::pair<std::string, Tensor>> views;
    for (const auto& [n, t] : tensors) views.emplace_back(n, t.view());
    write_checkpoint(short_dir.path(), views, DType::bf16, size_t{1} << 30);
    const std::string err = load_error(short_dir.path(), Mxfp4Storage::packed);
    EXPECT_TRUE(test::has(err, "'model.layers.1.mlp.experts.gate_up_proj_scales' in '" +
                                   (short_dir / "model.safetensors").string() +
                                   "' is [4, 64, 2] but the config implies [4, 64, 3]"))
        << err;
}

TEST(MoePacked, RefusesAnUnknownRouterKindNamingTheConfig) {
    test::TempDir dir("packed_router");
    copy_fixture(dir.path(), [](nlohmann::json& c) { c["scoring_func"] = "sigmoid"; });
    const std::string err = load_error(dir.path(), Mxfp4Storage::packed);
    EXPECT_TRUE(test::has(err, (dir / "config.json").string())) << err;
    EXPECT_TRUE(test::has(err, "config key 'scoring_func' is \"sigmoid\"")) << err;
}

}  // namespace
}  // namespace dflash
