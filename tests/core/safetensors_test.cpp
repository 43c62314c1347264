// safetensors reading/writing (round trips, bf16 rounding, every malformed-file error) and
// checkpoint directories (single file, sharded with index, broken shards).
#include "core/safetensors.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

// A file made of an 8-byte length, `header` and `data`; `declared_len` overrides the length.
void write_raw(const fs::path& p, const std::string& header, const std::string& data,
               int64_t declared_len = -1) {
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
}

// Expects opening `p` to fail with a message naming the file and containing `needle`.
void expect_open_error(const fs::path& p, const std::string& needle) {
    const std::string msg = error_of([&] { SafetensorsFile::open(p); });
    ASSERT_FALSE(msg.empty()) << "opening " << p << " should fail";
    EXPECT_NE(msg.find(p.filename().string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() &&
           std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(Safetensors, RoundTripF32IsBitwiseAndKeepsI32) {
    TempDir dir;
    Rng rng(1);
    HostTensor w = test::random_tensor({3, 5}, rng);
    HostTensor v = test::random_tensor({7}, rng);
    HostTensor ids = HostTensor::from_i32({2, 2}, {1, -2, 2147483647, 0});
    HostTensor scalar = HostTensor::from_f32(Shape(std::vector<int64_t>{}), {3.5f});
    const auto path = dir / "a.safetensors";
    write_safetensors(path, {{"w", w}, {"v", v}, {"ids", ids}, {"s", scalar}},
                      {{"format", "pt"}, {"note", "hi"}}, DType::f32);
    EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

    // Header length is padded so the data starts 8-byte aligned.
    uint64_t n = 0;
    std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&n), 8);
    EXPECT_EQ((8 + n) % 8, 0u);

    const auto f = SafetensorsFile::open(path);
    EXPECT_EQ(f.names(), (std::vector<std::string>{"w", "v", "ids", "s"}));  // data order
    EXPECT_EQ(f.metadata().at("note"), "hi");
    EXPECT_EQ(f.entry("w").dtype, "F32");
    EXPECT_EQ(f.entry("w").shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(f.entry("w").begin, 0u);
    EXPECT_EQ(f.entry("w").end, 60u);
    EXPECT_EQ(f.entry("ids").dtype, "I32");
    EXPECT_TRUE(same_bits(f.read_f32("w"), w));
    EXPECT_TRUE(same_bits(f.read("v"), v));
    EXPECT_TRUE(same_bits(f.read("ids"), ids));
    EXPECT_EQ(f.read("s").shape().rank(), 0);
    EXPECT_EQ(f.read("s").f32()[0], 3.5f);
    EXPECT_TRUE(f.has("w"));
    EXPECT_FALSE(f.has("x"));
    EXPECT_NE(error_of([&] { f.read_f32("ids"); }).find("I32"), std::string::npos);
    EXPECT_NE(error_of([&] { f.entry("nope"); }).find("no tensor 'nope'"), std::string::npos);

    // Moving keeps the mapping valid.
    SafetensorsFile g = SafetensorsFile::open(path);
    SafetensorsFile h = std::move(g);
    EXPECT_TRUE(same_bits(h.read("w"), w));
}

TEST(Safetensors, Bf16StorageRoundsToNearestEven) {
    TempDir dir;
    Rng rng(2);
    HostTensor w = test::random_tensor({4, 33}, rng, 3.0f);
    w.f32()[0] = 1.0f + std::ldexp(1.0f, -8);  // a tie: rounds down to 1.0
    const auto path = dir / "b.safetensors";
    write_safetensors(path, {{"w", w}}, {}, DType::bf16);
    const auto f = SafetensorsFile::open(path);
    EXPECT_EQ(f.entry("w").dtype, "BF16");
    EXPECT_EQ(f.entry("w").nbytes(), 4u * 33 * 2);
    HostTensor r = f.read_f32("w");
    for (int64_t i = 0; i < w.numel(); ++i)
        ASSERT_EQ(r.f32()[i], bf16_to_f32(f32_to_bf16(w.f32()[i]))) << "element " << i;
    EXPECT_EQ(r.f32()[0], 1.0f);
    // bf16 tensors written back as f32 widen exactly.
    const auto path2 = dir / "c.safetensors";
    HostTensor half({2}, DType::bf16);
    half.view().bf16()[0] = f32_to_bf16(-2.5f);
    half.view().bf16()[1] = f32_to_bf16(0.15625f);
    write_safetensors(path2, {{"h", half}}, {}, DType::f32);
    HostTensor back = SafetensorsFile::open(path2).read_f32("h");
    EXPECT_EQ(back.f32()[0], -2.5f);
    EXPECT_EQ(back.f32()[1], 0.15625f);
}

TEST(Safetensors, ReadsF16AsF32) {
    TempDir dir;
    const auto p = dir / "h.safetensors";
    const uint16_t vals[] = {0x3c00, 0xc000, 0x3800};  // 1, -2, 0.5
    write_raw(p, R"({"x":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}})",
              std::string(reinterpret_cast<const char*>(vals), 6));
    HostTensor x = SafetensorsFile::open(p).read("x");
    EXPECT_EQ(x.dtype(), DType::f32);
    EXPECT_EQ(x.f32()[0], 1.0f);
    EXPECT_EQ(x.f32()[1], -2.0f);
    EXPECT_EQ(x.f32()[2], 0.5f);
}

TEST(Safetensors, MalformedFilesGiveClearErrors) {
    TempDir dir;
    const std::string eight(8, '\0');
    {
        const auto p = dir / "short.safetensors";
        std::ofstream(p) << "abc";
        expect_open_error(p, "shorter than the 8-byte header length");
    }
    {
        const auto p = dir / "hlen.safetensors";
        write_raw(p, "{}", "", 1000);
        expect_open_error(p, "header length 1000 is larger than the file");
    }
    {
        // A length past the header cap is refused before the header is parsed; the file is
        // sparse, so it takes no disk space.
        const auto p = dir / "hugehead.safetensors";
        constexpr uint64_t kCap = uint64_t{100} << 20;  // safetensors.cpp's header cap
        write_raw(p, "{}", "", static_cast<int64_t>(kCap) + 1);
        fs::resize_file(p, kCap + 16);
        expect_open_error(p, "more than the 100.0 MiB (104857600 bytes) cap of a header");
    }
    {
        // A FIFO named like a checkpoint is refused, not waited on (the open does not block).
        const auto p = dir / "fifo.safetensors";
        ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
        expect_open_error(p, "is a FIFO (named pipe), not a regular file");
        fs::create_directories(dir / "ck");
        fs::create_symlink(p, dir / "ck" / kSingleCheckpointFile);
        EXPECT_TRUE(test::has(error_of([&] { CheckpointReader::open(dir / "ck"); }), "is a FIFO"));
    }
    {
        // An index that is a device is refused, not read until memory runs out.
        fs::create_directories(dir / "ck2");
        fs::create_symlink("/dev/zero", dir / "ck2" / kCheckpointIndexFile);
        EXPECT_TRUE(test::has(error_of([&] { CheckpointReader::open(dir / "ck2"); }),
                              "is a character device"));
        fs::remove(dir / "ck2" / kCheckpointIndexFile);
        fs::create_directories(dir / "ck2" / kCheckpointIndexFile);
        EXPECT_TRUE(
            test::has(error_of([&] { CheckpointReader::open(dir / "ck2"); }), "is a directory"));
    }
    {
        const auto p = dir / "notjson.safetensors";
        write_raw(p, "{\"a\": [1, 2", "");
        expect_open_error(p, "header is not valid JSON");
    }
    {
        const auto p = dir / "dtype.safetensors";
        write_raw(p, R"({"a":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,8]}})", eight);
        expect_open_error(p, "unknown dtype 'Q4_K'");
    }
    {
        const auto p = dir / "size.safetensors";
        write_raw(p, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight);
        expect_open_error(p, "shape and byte size disagree");
    }
    {
        const auto p = dir / "overlap.safetensors";
        write_raw(p,
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  std::string(12, '\0'));
        expect_open_error(p, "overlap");
    }
    {
        // A tensor placed far beyond the data (not a cut-off tail): offsets out of range.
        const auto p = dir / "range.safetensors";
        write_raw(p,
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[1000,1008]}})",
                  std::string(16, '\0'));
        expect_open_error(p, "'b' data_offsets [1000, 1008] are out of range");
    }
    {
        // Packed tensors whose tail is missing: a truncated file.
        const auto p = dir / "trunc.safetensors";
        write_raw(p,
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                  std::string(13, '\0'));
        expect_open_error(p, "data is truncated");
    }
    {
        const auto p = dir / "dup.safetensors";
        write_raw(p,
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  std::string(16, '\0'));
        expect_open_error(p, "tensor name 'a' appears twice");
    }
    {
        const auto p = dir / "meta.safetensors";
        write_raw(p, R"({"__metadata__":{"step":3}})", "");
        expect_open_error(p, "metadata values must be strings");
    }
}

TEST(Safetensors, InvalidInputWritesNothing) {
    TempDir dir;
    HostTensor t({2});
    EXPECT_THROW(write_safetensors(dir / "y.safetensors", {{"a", t}, {"a", t}}, {}, DType::f32),
                 Error);
    EXPECT_THROW(write_safetensors(dir / "y.safetensors", {{"a", t}}, {}, DType::i32), Error);
    EXPECT_FALSE(fs::exists(dir / "y.safetensors"));
}

// ---- checkpoint directories -------------------------------------------------------------------

struct Weights {
    std::vector<HostTensor> owned;
    std::vector<std::pair<std::string, Tensor>> named;
};

Weights make_weights(int n, Rng& rng) {
    Weights w;
    for (int i = 0; i < n; ++i) {
        w.owned.push_back(test::random_tensor({4 + i, 8}, rng));
        w.named.emplace_back("layers." + std::to_string(i) + ".weight", w.owned.back());
    }
    return w;
}

TEST(Safetensors, NonFiniteValuesAreRefusedNamingTheTensor) {
    TempDir dir;
    HostTensor ok({4}), bad({2, 3});
    for (int i = 0; i < 4; ++i) ok.f32()[i] = 0.5f * static_cast<float>(i);
    for (int i = 0; i < 6; ++i) bad.f32()[i] = 1.0f;
    bad.f32()[4] = std::numeric_limits<float>::quiet_NaN();
    bad.f32()[5] = -std::numeric_limits<float>::infinity();
    for (DType store : {DType::f32, DType::bf16}) {
        const fs::path p = dir / (store == DType::f32 ? "f32.safetensors" : "bf16.safetensors");
        write_safetensors(p, {{"ok", ok.view()}, {"layers.0.w", bad.view()}}, {}, store);
        const SafetensorsFile f = SafetensorsFile::open(p);
        EXPECT_NO_THROW(f.read_f32("ok"));
        const std::string msg = error_of([&] { f.read_f32("layers.0.w"); });
        EXPECT_NE(msg.find("tensor 'layers.0.w'"), std::string::npos) << msg;
        EXPECT_NE(msg.find(p.filename().string()), std::string::npos) << msg;
        EXPECT_NE(msg.find("2 of 6 values are NaN or infinite"), std::string::npos) << msg;
        EXPECT_NE(msg.find("at flat index 4"), std::string::npos) << msg;
        EXPECT_EQ(f.nonfinite("ok").count, 0);
        const auto nf = f.nonfinite("layers.0.w");
        EXPECT_EQ(nf.count, 2);
        EXPECT_EQ(nf.first_index, 4);
        EXPECT_TRUE(std::isnan(nf.first_value));
    }
    // A BF16 tensor over several scan chunks (of 65,536 values), its one infinity in the third:
    // the chunks checked on their bits alone must not hide it, nor report a finite one.
    HostTensor big({200000});
    for (int64_t i = 0; i < big.numel(); ++i) big.f32()[i] = (i % 7 == 0 ? -3.0f : 0.25f);
    big.f32()[150001] = std::numeric_limits<float>::infinity();
    write_safetensors(dir / "big.safetensors", {{"big", big.view()}}, {}, DType::bf16);
    const auto big_nf = SafetensorsFile::open(dir / "big.safetensors").nonfinite("big");
    EXPECT_EQ(big_nf.count, 1);
    EXPECT_EQ(big_nf.first_index, 150001);
    write_checkpoint(dir / "ckpt", {{"w", bad.view()}}, DType::bf16, 1 << 20);
    const std::string msg = error_of([&] { CheckpointReader::open(dir / "ckpt").read_f32("w"); });
    EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
}

TEST(Checkpoint, SingleFileRoundTripIsBitwise) {
    TempDir dir;
    Rng rng(3);
    Weights w = make_weights(3, rng);
    write_checkpoint(dir.path(), w.named, DType::f32, size_t{1} << 30);
    EXPECT_TRUE(fs::exists(dir / kSingleCheckpointFile));
    EXPECT_FALSE(fs::exists(dir / kCheckpointIndexFile));
    EXPECT_EQ(SafetensorsFile::open(dir / kSingleCheckpointFile).metadata().at("format"), "pt");
    const auto r = CheckpointReader::open(dir.path());
    EXPECT_FALSE(r.sharded());
    EXPECT_EQ(r.names().size(), 3u);
    for (const auto& [name, t] : w.named) {
        EXPECT_EQ(r.shape(name), t.shape().to_vector());
        EXPECT_TRUE(same_bits(r.read_f32(name), t)) << name;
    }
}

TEST(Checkpoint, ShardedRoundTripRoundsToBf16) {
    TempDir dir;
    Rng rng(4);
    Weights w = make_weights(5, rng);  // bf16 sizes 64, 80, 96, 112, 128 bytes: 480 in all
    write_checkpoint(dir.path(), w.named, DType::f32, size_t{1} << 30);  // stale single file
    write_checkpoint(dir.path(), w.named, DType::bf16, 200);
    EXPECT_FALSE(fs::exists(dir / kSingleCheckpointFile)) << "stale single file left behind";
    const auto index = read_json_file(dir / kCheckpointIndexFile);
    EXPECT_EQ(index["metadata"]["total_size"], 480);
    // Greedy packing: {64, 80}, {96}, {112}, {128}.
    EXPECT_EQ(index["weight_map"]["layers.0.weight"], "model-00001-of-00004.safetensors");
    EXPECT_EQ(index["weight_map"]["layers.1.weight"], "model-00001-of-00004.safetensors");
    EXPECT_EQ(index["weight_map"]["layers.4.weight"], "model-00004-of-00004.safetensors");
    for (int i = 1; i <= 4; ++i)
        EXPECT_TRUE(fs::exists(dir / fmt::format("model-{:05d}-of-00004.safetensors", i)));

    const auto r = CheckpointReader::open(dir.path());
    EXPECT_TRUE(r.sharded());
    EXPECT_EQ(r.files().size(), 4u);
    for (const auto& [name, t] : w.named) {
        EXPECT_EQ(r.dtype(name), "BF16");
        HostTensor got = r.read_f32(name);
        for (int64_t i = 0; i < t.numel(); ++i)
            ASSERT_EQ(got.f32()[i], bf16_to_f32(f32_to_bf16(t.f32()[i]))) << name << " " << i;
    }

    // Back to one file: the index and shards go away.
    write_checkpoint(dir.path(), w.named, DType::bf16, 1000);
    EXPECT_FALSE(fs::exists(dir / kCheckpointIndexFile));
    EXPECT_FALSE(fs::exists(dir / "model-00001-of-00004.safetensors"));
    EXPECT_FALSE(CheckpointReader::open(dir.path()).sharded());
}

TEST(Checkpoint, BrokenDirectoriesNameTheProblem) {
    TempDir dir;
    Rng rng(5);
    Weights w = make_weights(4, rng);
    write_checkpoint(dir.path(), w.named, DType::f32, 300);  // {128, 160}, {192}, {224}
    const auto shard2 = dir / "model-00002-of-00003.safetensors";
    ASSERT_TRUE(fs::exists(shard2));
    const auto saved = dir / "saved";
    fs::rename(shard2, saved);
    std::string msg = error_of([&] { CheckpointReader::open(dir.path()); });
    EXPECT_NE(msg.find("missing: model-00002-of-00003.safetensors"), std::string::npos) << msg;
    fs::rename(saved, shard2);

    // An index entry naming a tensor its shard lacks.
    auto index = read_json_file(dir / kCheckpointIndexFile);
    index["weight_map"]["ghost.weight"] = "model-00001-of-00003.safetensors";
    write_text_atomic(dir / kCheckpointIndexFile, index.dump());
    msg = error_of([&] { CheckpointReader::open(dir.path()); });
    EXPECT_NE(msg.find("lacks them: ghost.weight"), std::string::npos) << msg;

    TempDir empty;
    std::ofstream(empty / "other.safetensors") << "x";
    msg = error_of([&] { CheckpointReader::open(empty.path()); });
    EXPECT_NE(msg.find("holds neither model.safetensors nor"), std::string::npos) << msg;
    EXPECT_NE(msg.find("other.safetensors"), std::string::npos) << msg;
    EXPECT_NE(error_of([&] { CheckpointReader::open(empty / "nope"); }).find("does not exist"),
              std::string::npos);
}

}  // namespace
}  // namespace dflash
