// Single-file and sharded HF checkpoint directories. Tested by tests/core/safetensors_test.cpp.
#include "core/checkpoint_io.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <new>
#include <set>

#include "core/atomic_file.h"
#include "core/input_file.h"

namespace dflash {

namespace {

using nlohmann::json;

std::string shard_name(size_t i, size_t n) {
    return fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
}

// model-DDDDD-of-DDDDD.safetensors
bool is_shard_name(const std::string& name) {
    constexpr std::string_view kPattern = "model-#####-of-#####.safetensors";
    if (name.size() != kPattern.size()) return false;
    for (size_t i = 0; i < name.size(); ++i) {
        const bool ok =
            kPattern[i] == '#' ? (name[i] >= '0' && name[i] <= '9') : name[i] == kPattern[i];
        if (!ok) return false;
    }
    return true;
}

// "a.safetensors, b.safetensors" of what is in `dir`, for errors that say what was found instead.
std::string list_safetensors(const std::filesystem::path& dir) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const auto n = e.path().filename().string();
        if (n.ends_with(".safetensors") || n.ends_with(".json")) found.push_back(n);
    }
    std::sort(found.begin(), found.end());
    if (found.empty()) return "no .safetensors or .json files";
    std::string s;
    for (const auto& n : found) s += (s.empty() ? "" : ", ") + n;
    return s;
}

// The weight_map of an index file: tensor name -> shard file name.
std::map<std::string, std::string> parse_weight_map(const json& index,
                                                    const std::filesystem::path& path) {
    DF_CHECK(
        index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
        "checkpoint index '{}' has no \"weight_map\" object (expected {{\"metadata\": {{...}}, "
        "\"weight_map\": {{tensor: file}}}})",
        path.string());
    std::map<std::string, std::string> out;
    for (const auto& [name, file] : index["weight_map"].items()) {
        DF_CHECK(file.is_string(),
                 "checkpoint index '{}': weight_map['{}'] is {} (expected a file "
                 "name)",
                 path.string(), name, file.dump());
        const auto f = file.get<std::string>();
        DF_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                 "checkpoint index '{}': weight_map['{}'] = '{}' is not a file name in the "
                 "checkpoint directory",
                 path.string(), name, f);
        out[name] = f;
    }
    return out;
}

void remove_if_present(const std::filesystem::path& p) {
    std::error_code ec;
    std::filesystem::remove(p, ec);
}

}  // namespace

// A regular file of at most kMaxJsonFileBytes (read_input_file): an index or config.json that is
// a FIFO or /dev/zero is refused at once instead of being waited on or read without end.
json read_json_file(const std::filesystem::path& path) {
    const std::string text = read_input_file(path, kMaxJsonFileBytes, "JSON file");
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        DF_FAIL("'{}' is not valid JSON: {}", path.string(), e.what());
    }
}

CheckpointReader CheckpointReader::open(const std::filesystem::path& dir) {
    DF_CHECK(std::filesystem::is_directory(dir), "checkpoint directory '{}' does not exist",
             dir.string());
    CheckpointReader r;
    r.dir_ = dir;
    const auto single = dir / kSingleCheckpointFile;
    const auto index_path = dir / kCheckpointIndexFile;
    if (std::filesystem::exists(single)) {
        r.files_.push_back(SafetensorsFile::open(single));
        for (const auto& n : r.files_[0].names()) r.where_[n] = 0;
        return r;
    }
    DF_CHECK(std::filesystem::exists(index_path), "'{}' holds neither {} nor {} (found: {})",
             dir.string(), kSingleCheckpointFile, kCheckpointIndexFile, list_safetensors(dir));
    r.sharded_ = true;
    const auto weight_map = parse_weight_map(read_json_file(index_path), index_path);

    // Every shard must exist before any is opened, so the error lists all that are missing.
    std::map<std::string, std::vector<std::string>> by_file;
    for (const auto& [name, file] : weight_map) by_file[file].push_back(name);
    std::vector<std::string> missing;
    for (const auto& [file, names] : by_file) {
        if (!std::filesystem::exists(dir / file))
            missing.push_back(
                fmt::format("{} ({} tensors, e.g. '{}')", file, names.size(), names.front()));
    }
    DF_CHECK(missing.empty(), "checkpoint '{}': {} shard(s) named by {} are missing: {}",
             dir.string(), missing.size(), kCheckpointIndexFile, fmt::join(missing, "; "));

    for (const auto& [file, names] : by_file) {
        r.files_.push_back(SafetensorsFile::open(dir / file));
        const auto& f = r.files_.back();
        std::vector<std::string> absent;
        for (const auto& n : names) {
            if (f.has(n)) {
                r.where_[n] = r.files_.size() - 1;
            } else {
                absent.push_back(n);
            }
        }
        DF_CHECK(absent.empty(),
                 "checkpoint '{}': {} maps {} tensor(s) to {} but that file lacks them: {}",
                 dir.string(), kCheckpointIndexFile, absent.size(), file, fmt::join(absent, ", "));
    }
    return r;
}

std::vector<std::string> CheckpointReader::names() const {
    std::vector<std::string> out;
    for (const auto& [n, i] : where_) out.push_back(n);
    return out;
}

const SafetensorsFile& CheckpointReader::file_of(const std::string& name) const {
    auto it = where_.find(name);
    DF_CHECK(it != where_.end(), "checkpoint '{}' has no tensor '{}' ({} tensors in it)",
             dir_.string(), name, where_.size());
    return files_[it->second];
}

std::vector<int64_t> CheckpointReader::shape(const std::string& name) const {
    return file_of(name).entry(name).shape;
}

std::string CheckpointReader::dtype(const std::string& name) const {
    return file_of(name).entry(name).dtype;
}

HostTensor CheckpointReader::read_f32(const std::string& name) const {
    const SafetensorsFile& f = file_of(name);
    try {
        return f.read_f32(name);
    } catch (const std::bad_alloc&) {
        const auto& shape = f.entry(name).shape;
        DF_FAIL("out of memory reading tensor '{}' [{}] as f32 from '{}'", name,
                fmt::join(shape, ", "), f.path().string());
    }
}

SafetensorsFile::NonFinite CheckpointReader::nonfinite(const std::string& name) const {
    return file_of(name).nonfinite(name);
}

std::filesystem::path CheckpointReader::file_path(const std::string& name) const {
    return file_of(name).path();
}

std::span<const unsigned char> CheckpointReader::raw_bytes(const std::string& name) const {
    const SafetensorsFile& f = file_of(name);
    return {f.raw_data(name), static_cast<size_t>(f.entry(name).nbytes())};
}

HostTensor CheckpointReader::read(const std::string& name) const {
    return file_of(name).read(name);
}

std::vector<std::filesystem::path> CheckpointReader::files() const {
    std::vector<std::filesystem::path> out;
    for (const auto& f : files_) out.push_back(f.path());
    return out;
}

void write_checkpoint(const std::filesystem::path& dir,
                      const std::vector<std::pair<std::string, Tensor>>& tensors, DType store_as,
                      size_t max_shard_bytes) {
    DF_CHECK(max_shard_bytes > 0, "max_shard_bytes must be positive (got 0)");
    std::filesystem::create_directories(dir);
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    uint64_t total = 0;
    for (const auto& [n, t] : tensors) total += stored_nbytes(t, store_as);

    std::set<std::string> keep;
    if (total <= max_shard_bytes) {
        write_safetensors(dir / kSingleCheckpointFile, tensors, meta, store_as);
        keep.insert(kSingleCheckpointFile);
    } else {
        // Greedy packing in the given order: a shard closes when the next tensor would not fit.
        std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
        uint64_t in_shard = 0;
        for (const auto& nt : tensors) {
            const uint64_t n = stored_nbytes(nt.second, store_as);
            if (!shards.back().empty() && in_shard + n > max_shard_bytes) {
                shards.emplace_back();
                in_shard = 0;
            }
            shards.back().push_back(nt);
            in_shard += n;
        }
        nlohmann::ordered_json index;
        index["metadata"] = {{"total_size", total}};
        index["weight_map"] = nlohmann::ordered_json::object();
        for (size_t i = 0; i < shards.size(); ++i) {
            const auto name = shard_name(i, shards.size());
            write_safetensors(dir / name, shards[i], meta, store_as);
            for (const auto& nt : shards[i]) index["weight_map"][nt.first] = name;
            keep.insert(name);
        }
        // The index goes last: until it exists, a reader never sees a partial shard set.
        write_text_atomic(dir / kCheckpointIndexFile, index.dump(2) + "\n");
        keep.insert(kCheckpointIndexFile);
    }
    // Leftovers of an earlier save in the other layout (or with another shard count).
    if (!keep.count(kSingleCheckpointFile)) remove_if_present(dir / kSingleCheckpointFile);
    if (!keep.count(kCheckpointIndexFile)) remove_if_present(dir / kCheckpointIndexFile);
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const auto n = e.path().filename().string();
        if (is_shard_name(n) && !keep.count(n)) remove_if_present(e.path());
    }
}

}  // namespace dflash
