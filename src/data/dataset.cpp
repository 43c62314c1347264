// ShardedDataset and PackedLoader (see Note [Loader plan] in dataset.h).
// Tested by tests/data/dataset_test.cpp.
#include "data/dataset.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/rng.h"
#include "data/manifest.h"

namespace dflash {

// ---- ShardedDataset ----------------------------------------------------------------------------

ShardedDataset ShardedDataset::open(const std::filesystem::path& dir) {
    const auto paths = list_shards(dir);
    DF_CHECK(!paths.empty(), "no *{} files in {}; create them with `dflash data prepare`",
             kShardExtension, dir.string());
    // Where there is a manifest, it decides which shards make the dataset (`data verify` checks
    // every sample too; this costs nothing but the manifest).
    std::optional<DatasetManifest> manifest;
    if (std::filesystem::exists(dir / kManifestFile)) {
        manifest = read_manifest(dir);
        const auto problems = manifest_file_problems(dir, *manifest);
        DF_CHECK(problems.empty(),
                 "the dataset {} does not match its {}: {}; re-create it with `dflash data "
                 "prepare` (`dflash data verify {}` lists every problem)",
                 dir.string(), kManifestFile, fmt::join(problems, "; "), dir.string());
    }
    ShardedDataset ds;
    ds.offsets_.push_back(0);
    for (const auto& p : paths) {
        ShardReader r(p);
        if (ds.shards_.empty()) {
            ds.tokenizer_ = r.info().tokenizer;
            ds.vocab_size_ = r.info().vocab_size;
        }
        DF_CHECK(r.info().tokenizer == ds.tokenizer_ && r.info().vocab_size == ds.vocab_size_,
                 "shard {} was made by tokenizer '{}' (vocab {}) but {} by '{}' (vocab {}); a "
                 "dataset directory must hold shards of one tokenizer",
                 p.string(), r.info().tokenizer, r.info().vocab_size, paths.front().string(),
                 ds.tokenizer_, ds.vocab_size_);
        if (manifest) {
            const auto it = std::find_if(
                manifest->shards.begin(), manifest->shards.end(),
                [&](const ManifestShard& e) { return e.file == p.filename().string(); });
            DF_ASSERT(it != manifest->shards.end());
            DF_CHECK(
                it->content_checksum == r.info().content_checksum && it->samples == r.num_samples(),
                "shard {} is not the one {} lists (its samples or checksum differ: from "
                "another dataset?); re-create the dataset with `dflash data prepare`",
                p.string(), kManifestFile);
        }
        ds.num_tokens_ += r.info().num_tokens;
        ds.offsets_.push_back(ds.offsets_.back() + r.num_samples());
        ds.shards_.push_back(std::move(r));
    }
    return ds;
}

std::pair<size_t, int64_t> ShardedDataset::locate(int64_t i) const {
    DF_CHECK(i >= 0 && i < num_samples(), "sample {} is out of range (the dataset has {})", i,
             num_samples());
    const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), i);
    const size_t shard = static_cast<size_t>(it - offsets_.begin()) - 1;
    return {shard, i - offsets_[shard]};
}

int64_t ShardedDataset::sample_length(int64_t i) const {
    const auto [shard, local] = locate(i);
    return shards_[shard].sample_length(local);
}

Encoded ShardedDataset::sample(int64_t i) const {
    const auto [shard, local] = locate(i);
    return shards_[shard].read(local);
}

// ---- LoaderState -------------------------------------------------------------------------------

nlohmann::json loader_state_to_json(const LoaderState& s) {
    return {{"epoch", s.epoch}, {"cursor", s.cursor}};
}

LoaderState loader_state_from_json(const nlohmann::json& j) {
    DF_CHECK(j.is_object() && j.contains("epoch") && j.contains("cursor") &&
                 j["epoch"].is_number_integer() && j["cursor"].is_number_integer(),
             "data loader state {} must be an object with integer \"epoch\" and \"cursor\"",
             j.dump());
    return {j["epoch"].get<int64_t>(), j["cursor"].get<int64_t>()};
}

// ---- PackedLoader ------------------------------------------------------------------------------

PackedLoader::PackedLoader(const ShardedDataset& ds, LoaderOptions opt) : ds_(ds), opt_(opt) {
    DF_CHECK(opt_.max_length >= 2, "max_length={} must be at least 2 tokens", opt_.max_length);
    DF_CHECK(opt_.world >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world,
             "worker rank {} of world {} is invalid; expected 0 <= rank < world", opt_.rank,
             opt_.world);
    DF_CHECK(ds_.num_samples() > 0, "the dataset has no samples");
    load_epoch(0);
}

PackedLoader::Plan PackedLoader::make_plan(int64_t epoch) const {
    Plan p;
    const int64_t n = ds_.num_samples();
    p.order.resize(static_cast<size_t>(n));
    std::iota(p.order.begin(), p.order.end(), int64_t{0});
    Rng rng = Rng(opt_.seed).fork(static_cast<uint64_t>(epoch));
    for (int64_t i = opt_.shuffle ? n - 1 : 0; i > 0; --i) {
        const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
        std::swap(p.order[i], p.order[j]);
    }
    p.seq_begin.push_back(0);
    int64_t fill = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t len = std::min(ds_.sample_length(p.order[k]), opt_.max_length);
        // A sample that does not fit starts the next sequence; samples are never split.
        if (k > 0 && (!opt_.packing || fill + len > opt_.max_length)) {
            p.seq_begin.push_back(k);
            fill = 0;
        }
        fill += len;
    }
    p.seq_begin.push_back(n);
    const int64_t total = static_cast<int64_t>(p.seq_begin.size()) - 1;
    p.per_worker = opt_.drop_last ? total / opt_.world : (total + opt_.world - 1) / opt_.world;
    DF_CHECK(p.per_worker > 0,
             "epoch {} has {} sequences, fewer than the {} workers, and drop_last is set; use "
             "more data, fewer workers or drop_last=false",
             epoch, total, opt_.world);
    return p;
}

int64_t PackedLoader::global_sequence(const Plan& p, int64_t cursor) const {
    const int64_t total = static_cast<int64_t>(p.seq_begin.size()) - 1;
    // Past the end only when drop_last is off: wrap to the epoch's first sequences.
    return (cursor * opt_.world + opt_.rank) % total;
}

void PackedLoader::load_epoch(int64_t epoch) {
    plan_ = make_plan(epoch);
    per_worker_ = plan_.per_worker;
    state_ = {epoch, 0};
}

void PackedLoader::set_state(LoaderState s) {
    DF_CHECK(s.epoch >= 0 && s.cursor >= 0, "data loader state epoch={} cursor={} is negative",
             s.epoch, s.cursor);
    if (s.epoch != state_.epoch) load_epoch(s.epoch);
    DF_CHECK(s.cursor <= per_worker_,
             "data loader state cursor={} is past the {} sequences of epoch {}; was it saved with "
             "other data, max_length, packing or worker count?",
             s.cursor, per_worker_, s.epoch);
    state_ = s;
}

Sequence PackedLoader::next() {
    if (state_.cursor >= per_worker_) load_epoch(state_.epoch + 1);
    const int64_t g = global_sequence(plan_, state_.cursor);
    Sequence seq;
    for (int64_t k = plan_.seq_begin[g]; k < plan_.seq_begin[g + 1]; ++k) {
        Encoded s = ds_.sample(plan_.order[k]);
        const size_t len = std::min<size_t>(s.tokens.size(), static_cast<size_t>(opt_.max_length));
        seq.sample_starts.push_back(static_cast<int32_t>(seq.tokens.size()));
        seq.tokens.insert(seq.tokens.end(), s.tokens.begin(), s.tokens.begin() + len);
        seq.loss_mask.insert(seq.loss_mask.end(), s.loss_mask.begin(), s.loss_mask.begin() + len);
    }
    DF_ASSERT(static_cast<int64_t>(seq.tokens.size()) <= opt_.max_length);
    ++state_.cursor;
    return seq;
}

int64_t PackedLoader::sequences_in_epoch(int64_t epoch) const {
    return epoch == state_.epoch ? per_worker_ : make_plan(epoch).per_worker;
}

int64_t PackedLoader::total_sequences(int64_t num_epochs) const {
    int64_t total = 0;
    for (int64_t e = 0; e < num_epochs; ++e) total += sequences_in_epoch(e);
    return total;
}

std::vector<int64_t> PackedLoader::sequence_samples(int64_t epoch, int64_t cursor) const {
    const Plan other = epoch == state_.epoch ? Plan{} : make_plan(epoch);
    const Plan& p = epoch == state_.epoch ? plan_ : other;
    DF_CHECK(cursor >= 0 && cursor < p.per_worker, "sequence {} is out of range (epoch {} has {})",
             cursor, epoch, p.per_worker);
    const int64_t g = global_sequence(p, cursor);
    return {p.order.begin() + p.seq_begin[g], p.order.begin() + p.seq_begin[g + 1]};
}

}  // namespace dflash
