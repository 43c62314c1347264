// Dataset manifests and `dflash data verify` (manifest.h). Tested by tests/data/manifest_test.cpp.
#include "data/manifest.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "core/error.h"
#include "core/json_int.h"

namespace dflash {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

template <class T>
T field(const json& j, const char* key, const std::string& source) {
    DF_CHECK(j.is_object() && j.contains(key),
             "{}: no \"{}\"; re-create the dataset with `dflash "
             "data prepare` (a manifest lists every shard)",
             source, key);
    // Integers exactly: a get<int64_t>() of 1e30 would give -9223372036854775808.
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
        return json_integer<T>(j.at(key), fmt::format("{}: \"{}\"", source, key));
    try {
        return j.at(key).get<T>();
    } catch (const json::exception&) {
        DF_FAIL("{}: \"{}\" is {}, which has the wrong type", source, key, j.at(key).dump());
    }
}

std::string hex(uint64_t v) {
    return fmt::format("{:016x}", v);
}

uint64_t parse_hex(const std::string& s, const std::string& source) {
    DF_CHECK(s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos,
             "{}: checksum \"{}\" is not 16 hex digits", source, s);
    return std::stoull(s, nullptr, 16);
}

// Opens one listed shard and compares it with its entry; adds the problems found.
void check_shard(const fs::path& dir, const DatasetManifest& m, const ManifestShard& e,
                 DatasetCheck& out) {
    try {
        const ShardReader r(dir / e.file);
        const ShardInfo& i = r.info();
        auto differs = [&](const char* what, const std::string& got, const std::string& want) {
            if (got != want)
                out.problems.push_back(
                    fmt::format("{}: {} is {} but the manifest says {}", e.file, what, got, want));
        };
        differs("the tokenizer", i.tokenizer, m.tokenizer);
        differs("the vocabulary size", std::to_string(i.vocab_size), std::to_string(m.vocab_size));
        differs("the sample count", std::to_string(i.num_samples), std::to_string(e.samples));
        differs("the token count", std::to_string(i.num_tokens), std::to_string(e.tokens));
        differs("the content checksum", hex(i.content_checksum), hex(e.content_checksum));
        for (int64_t k = 0; k < r.num_samples(); ++k)
            for (uint8_t b : r.read(k).loss_mask) out.response_tokens += b;
    } catch (const Error& err) {
        out.problems.push_back(err.what());
    }
}

}  // namespace

void DatasetManifest::add_shard(const fs::path& file, const ShardInfo& info) {
    shards.push_back(
        {file.filename().string(), info.num_samples, info.num_tokens, info.content_checksum});
}

json DatasetManifest::to_json() const {
    json files = json::array();
    for (const auto& s : shards)
        files.push_back({{"file", s.file},
                         {"samples", s.samples},
                         {"tokens", s.tokens},
                         {"content_checksum", hex(s.content_checksum)}});
    return {{"format", "dfshard"},
            {"format_version", kShardVersion},
            {"tokenizer", tokenizer},
            {"vocab_size", vocab_size},
            {"inputs", inputs},
            {"records", records},
            {"samples", samples},
            {"tokens", tokens},
            {"response_tokens", response_tokens},
            {"skipped", skipped},
            {"shards", shards.size()},
            {"shard_files", files}};
}

DatasetManifest DatasetManifest::from_json(const json& j, const std::string& source) {
    DF_CHECK(j.is_object(), "{}: expected a JSON object, got {}", source, j.type_name());
    DF_CHECK(field<std::string>(j, "format", source) == "dfshard",
             "{}: \"format\" is {} (expected \"dfshard\")", source, j["format"].dump());
    DatasetManifest m;
    m.tokenizer = field<std::string>(j, "tokenizer", source);
    m.vocab_size = field<int64_t>(j, "vocab_size", source);
    m.inputs = field<std::vector<std::string>>(j, "inputs", source);
    m.records = field<int64_t>(j, "records", source);
    m.samples = field<int64_t>(j, "samples", source);
    m.tokens = field<int64_t>(j, "tokens", source);
    m.response_tokens = field<int64_t>(j, "response_tokens", source);
    m.skipped = field<int64_t>(j, "skipped", source);
    const auto count = field<int64_t>(j, "shards", source);
    const auto files = field<json>(j, "shard_files", source);
    DF_CHECK(files.is_array() && static_cast<int64_t>(files.size()) == count,
             "{}: \"shard_files\" must list the {} shard(s) of \"shards\"", source, count);
    std::set<std::string> seen;
    for (const json& f : files) {
        ManifestShard s;
        s.file = field<std::string>(f, "file", source);
        DF_CHECK(fs::path(s.file).filename() == s.file && s.file.ends_with(kShardExtension),
                 "{}: shard file \"{}\" must be a *{} name inside the dataset directory", source,
                 s.file, kShardExtension);
        DF_CHECK(seen.insert(s.file).second, "{}: shard file \"{}\" is listed twice", source,
                 s.file);
        s.samples = field<int64_t>(f, "samples", source);
        s.tokens = field<int64_t>(f, "tokens", source);
        s.content_checksum = parse_hex(field<std::string>(f, "content_checksum", source), source);
        m.shards.push_back(std::move(s));
    }
    return m;
}

void write_manifest(const fs::path& dir, const DatasetManifest& m) {
    write_text_atomic(dir / kManifestFile, m.to_json().dump(2) + "\n");
}

DatasetManifest read_manifest(const fs::path& dir) {
    const fs::path p = dir / kManifestFile;
    DF_CHECK(fs::exists(p),
             "'{}' has no {}: without it the shards cannot be checked (a dataset made by `dflash "
             "data prepare` always has one; re-create it)",
             dir.string(), kManifestFile);
    return DatasetManifest::from_json(read_json_file(p), p.string());
}

std::vector<std::string> manifest_file_problems(const fs::path& dir, const DatasetManifest& m) {
    std::set<std::string> listed, present;
    for (const auto& s : m.shards) listed.insert(s.file);
    for (const auto& p : list_shards(dir)) present.insert(p.filename().string());
    std::vector<std::string> out;
    for (const auto& f : listed)
        if (!present.count(f))
            out.push_back(fmt::format("shard {} is listed in {} but missing", f, kManifestFile));
    for (const auto& f : present)
        if (!listed.count(f))
            out.push_back(fmt::format("shard {} is not listed in {} (left from another dataset?)",
                                      f, kManifestFile));
    return out;
}

DatasetCheck verify_dataset(const fs::path& dir) {
    DatasetCheck out;
    try {
        out.manifest = read_manifest(dir);
    } catch (const Error& e) {
        out.problems.push_back(e.what());
        return out;
    }
    const DatasetManifest& m = out.manifest;
    out.problems = manifest_file_problems(dir, m);
    int64_t samples = 0, tokens = 0;
    for (const ManifestShard& e : m.shards) {
        samples += e.samples;
        tokens += e.tokens;
        if (fs::exists(dir / e.file)) check_shard(dir, m, e, out);
    }
    if (samples != m.samples || tokens != m.tokens)
        out.problems.push_back(fmt::format(
            "{} totals ({} samples, {} tokens) disagree with its shard list ({} samples, {} "
            "tokens)",
            kManifestFile, m.samples, m.tokens, samples, tokens));
    if (out.ok() && out.response_tokens != m.response_tokens)
        out.problems.push_back(fmt::format("the samples hold {} response tokens but {} says {}",
                                           out.response_tokens, kManifestFile, m.response_tokens));
    return out;
}

}  // namespace dflash
