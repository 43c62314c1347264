// JSONL -> shards (see prepare.h). Tested by tests/data/prepare_test.cpp.
#include "data/prepare.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/staged_dir.h"
#include "data/anchors.h"
#include "data/jsonl.h"
#include "data/manifest.h"
#include "data/shard.h"

namespace dflash {

namespace {

namespace fs = std::filesystem;

// Fills shards in `dir` one after the other and records each finished one in the manifest.
class ShardSink {
  public:
    ShardSink(const fs::path& dir, const PrepareOptions& opt, const Tokenizer& tok,
              DatasetManifest& manifest)
        : dir_(dir), opt_(opt), tok_(tok), manifest_(manifest) {}

    void add(const Encoded& s) {
        if (!cur_) {
            cur_path_ =
                dir_ / fmt::format("shard-{:05d}{}", manifest_.shards.size(), kShardExtension);
            cur_.emplace(cur_path_, tok_.name(), tok_.vocab_size());
        }
        cur_->add(s);
        if (cur_->num_samples() >= opt_.samples_per_shard) close_current();
    }

    void close_current() {
        if (!cur_) return;
        cur_->finish();
        manifest_.add_shard(cur_path_, cur_->info());
        cur_.reset();
    }

  private:
    fs::path dir_;
    const PrepareOptions& opt_;
    const Tokenizer& tok_;
    DatasetManifest& manifest_;
    std::optional<ShardWriter> cur_;
    fs::path cur_path_;
};

// Tokenizes every input into shards in `dir`; returns the manifest (written by the caller).
DatasetManifest write_shards(const fs::path& dir, const PrepareOptions& opt, const Tokenizer& tok,
                             const Logger& log) {
    DatasetManifest m;
    m.tokenizer = tok.name();
    m.vocab_size = tok.vocab_size();
    for (const auto& p : opt.inputs) m.inputs.push_back(p.string());
    ShardSink sink(dir, opt, tok, m);
    using Clock = std::chrono::steady_clock;
    auto last_report = Clock::now();
    for (const auto& in : opt.inputs) {
        read_jsonl(in, [&](const JsonlRecord& rec, const JsonlPosition& pos) {
            ++m.records;
            Encoded e = encode_record(tok, rec);
            if (anchor_candidates(e.loss_mask).empty()) {
                ++m.skipped;
            } else {
                for (uint8_t b : e.loss_mask) m.response_tokens += b;
                m.tokens += static_cast<int64_t>(e.tokens.size());
                ++m.samples;
                sink.add(e);
            }
            const auto now = Clock::now();
            if (std::chrono::duration<double>(now - last_report).count() >=
                opt.progress_interval_s) {
                last_report = now;
                log.info("{}: line {} ({:.1f}%), {} samples, {} tokens", in.filename().string(),
                         pos.line, 100.0 * pos.byte_end / std::max<uint64_t>(pos.file_bytes, 1),
                         m.samples, m.tokens);
            }
        });
    }
    sink.close_current();
    DF_CHECK(m.samples > 0,
             "all {} records were skipped: none has two consecutive response tokens (chat "
             "data needs assistant messages with content)",
             m.records);
    return m;
}

}  // namespace

PrepareStats prepare_dataset(const PrepareOptions& opt, const Tokenizer& tok, const Logger& log) {
    DF_CHECK(!opt.inputs.empty(), "no input files; pass at least one --input FILE.jsonl");
    DF_CHECK(opt.samples_per_shard >= 1, "samples_per_shard={} must be >= 1",
             opt.samples_per_shard);
    for (const auto& in : opt.inputs) {
        DF_CHECK(fs::is_regular_file(in), "input {} does not exist or is not a file", in.string());
    }
    StagedDirectory out(opt.output_dir, "dataset directory", "dflash data prepare");
    if (!opt.overwrite) {
        const auto existing = list_shards(out.target());
        DF_CHECK(existing.empty() && !fs::exists(out.target() / kManifestFile),
                 "{} already holds a dataset ({}); pass --overwrite to replace it or choose "
                 "another --output",
                 opt.output_dir.string(),
                 existing.empty() ? std::string(kManifestFile)
                                  : fmt::format("{} shard(s): {}...", existing.size(),
                                                existing.front().filename().string()));
    }
    // Everything is built next to the old dataset, which stays usable until the swap.
    const DatasetManifest m = write_shards(out.path(), opt, tok, log);
    write_manifest(out.path(), m);
    out.commit();
    PrepareStats st;
    st.records = m.records;
    st.samples = m.samples;
    st.tokens = m.tokens;
    st.response_tokens = m.response_tokens;
    st.skipped = m.skipped;
    st.shards = static_cast<int64_t>(m.shards.size());
    return st;
}

}  // namespace dflash
