// JSONL -> shards (see prepare.h). Tested by tests/data/prepare_test.cpp.
#include "data/prepare.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/anchors.h"
#include "data/jsonl.h"
#include "data/shard.h"

namespace dflash {

namespace {

namespace fs = std::filesystem;

// Owns the shard being filled and the list of finished ones, so a failure can undo them.
class ShardSink {
  public:
    ShardSink(const PrepareOptions& opt, const Tokenizer& tok) : opt_(opt), tok_(tok) {}

    void add(const Encoded& s) {
        if (!cur_) {
            const fs::path p =
                opt_.output_dir / fmt::format("shard-{:05d}{}", written_.size(), kShardExtension);
            cur_.emplace(p, tok_.name(), tok_.vocab_size());
            cur_path_ = p;
        }
        cur_->add(s);
        if (cur_->num_samples() >= opt_.samples_per_shard) close_current();
    }

    void close_current() {
        if (!cur_) return;
        cur_->finish();
        written_.push_back(cur_path_);
        cur_.reset();
    }

    void remove_written() {
        std::error_code ec;
        for (const auto& p : written_) fs::remove(p, ec);
        written_.clear();
    }

    int64_t num_written() const { return static_cast<int64_t>(written_.size()); }

  private:
    const PrepareOptions& opt_;
    const Tokenizer& tok_;
    std::optional<ShardWriter> cur_;
    fs::path cur_path_;
    std::vector<fs::path> written_;
};

void prepare_output_dir(const PrepareOptions& opt) {
    std::error_code ec;
    fs::create_directories(opt.output_dir, ec);
    DF_CHECK(!ec && fs::is_directory(opt.output_dir), "cannot create output directory {}: {}",
             opt.output_dir.string(), ec.message());
    const auto existing = list_shards(opt.output_dir);
    DF_CHECK(existing.empty() || opt.overwrite,
             "{} already holds {} shard(s) ({}...); pass --overwrite to replace them or choose "
             "another --output",
             opt.output_dir.string(), existing.size(), existing.front().filename().string());
    for (const auto& p : existing) {
        fs::remove(p, ec);
        DF_CHECK(!ec,
                 "cannot remove the old shard {} before writing new ones: {}; check its "
                 "permissions or choose another --output",
                 p.string(), ec.message());
    }
    if (opt.overwrite) fs::remove(opt.output_dir / "manifest.json", ec);  // describes old shards
}

void write_manifest(const PrepareOptions& opt, const Tokenizer& tok, const PrepareStats& st) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const auto& p : opt.inputs) inputs.push_back(p.string());
    const nlohmann::json j = {
        {"format", "dfshard"},
        {"format_version", kShardVersion},
        {"tokenizer", tok.name()},
        {"vocab_size", tok.vocab_size()},
        {"inputs", inputs},
        {"records", st.records},
        {"samples", st.samples},
        {"tokens", st.tokens},
        {"response_tokens", st.response_tokens},
        {"skipped", st.skipped},
        {"shards", st.shards},
    };
    write_text_atomic(opt.output_dir / "manifest.json", j.dump(2) + "\n");
}

}  // namespace

PrepareStats prepare_dataset(const PrepareOptions& opt, const Tokenizer& tok, const Logger& log) {
    DF_CHECK(!opt.inputs.empty(), "no input files; pass at least one --input FILE.jsonl");
    DF_CHECK(opt.samples_per_shard >= 1, "samples_per_shard={} must be >= 1",
             opt.samples_per_shard);
    for (const auto& in : opt.inputs) {
        DF_CHECK(fs::is_regular_file(in), "input {} does not exist or is not a file", in.string());
    }
    prepare_output_dir(opt);

    PrepareStats st;
    ShardSink sink(opt, tok);
    using Clock = std::chrono::steady_clock;
    auto last_report = Clock::now();
    try {
        for (const auto& in : opt.inputs) {
            read_jsonl(in, [&](const JsonlRecord& rec, const JsonlPosition& pos) {
                ++st.records;
                Encoded e = encode_record(tok, rec);
                if (anchor_candidates(e.loss_mask).empty()) {
                    ++st.skipped;
                } else {
                    for (uint8_t m : e.loss_mask) st.response_tokens += m;
                    st.tokens += static_cast<int64_t>(e.tokens.size());
                    ++st.samples;
                    sink.add(e);
                }
                const auto now = Clock::now();
                if (std::chrono::duration<double>(now - last_report).count() >=
                    opt.progress_interval_s) {
                    last_report = now;
                    log.info("{}: line {} ({:.1f}%), {} samples, {} tokens", in.filename().string(),
                             pos.line, 100.0 * pos.byte_end / std::max<uint64_t>(pos.file_bytes, 1),
                             st.samples, st.tokens);
                }
            });
        }
        sink.close_current();
        DF_CHECK(st.samples > 0,
                 "all {} records were skipped: none has two consecutive response tokens (chat "
                 "data needs assistant messages with content)",
                 st.records);
        st.shards = sink.num_written();
        write_manifest(opt, tok, st);
    } catch (...) {
        sink.remove_written();
        throw;
    }
    return st;
}

}  // namespace dflash
