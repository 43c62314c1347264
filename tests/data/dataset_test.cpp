// ShardedDataset across several shards, and PackedLoader: deterministic shuffle, packing rules,
// worker slices that are disjoint and cover the data, and bitwise-exact resume from LoaderState.
#include "data/dataset.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVocab = 1000;

// Sample i: every token is i (so a sequence says which samples it holds), length 1 + (7i mod 23),
// mask alternating by position.
Encoded make_sample(int64_t i) {
    Encoded e;
    const int64_t len = 1 + (7 * i) % 23;
    for (int64_t k = 0; k < len; ++k) {
        e.tokens.push_back(static_cast<int32_t>(i));
        e.loss_mask.push_back(static_cast<uint8_t>((k + i) % 2));
    }
    return e;
}

void write_dataset(const fs::path& dir, int64_t n, int64_t per_shard) {
    for (int64_t s = 0; s * per_shard < n; ++s) {
        ShardWriter w(dir / fmt::format("shard-{:05d}.dfshard", s), "test", kVocab);
        for (int64_t i = s * per_shard; i < std::min(n, (s + 1) * per_shard); ++i) {
            w.add(make_sample(i));
        }
        w.finish();
    }
}

// The samples a sequence holds, recovered from its tokens and sample_starts.
std::vector<int64_t> samples_of(const Sequence& s) {
    std::vector<int64_t> out;
    for (int32_t start : s.sample_starts) out.push_back(s.tokens[start]);
    return out;
}

bool same(const Sequence& a, const Sequence& b) {
    return a.tokens == b.tokens && a.loss_mask == b.loss_mask && a.sample_starts == b.sample_starts;
}

TEST(ShardedDataset, IndexesAcrossShards) {
    test::TempDir dir("ds");
    write_dataset(dir.path(), 50, 7);
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    EXPECT_EQ(ds.num_shards(), 8);
    EXPECT_EQ(ds.num_samples(), 50);
    EXPECT_EQ(ds.tokenizer_name(), "test");
    EXPECT_EQ(ds.vocab_size(), kVocab);
    int64_t tokens = 0;
    for (int64_t i = 0; i < 50; ++i) {
        const Encoded want = make_sample(i);
        const Encoded got = ds.sample(i);
        EXPECT_EQ(got.tokens, want.tokens) << i;
        EXPECT_EQ(got.loss_mask, want.loss_mask) << i;
        EXPECT_EQ(ds.sample_length(i), static_cast<int64_t>(want.tokens.size()));
        tokens += static_cast<int64_t>(want.tokens.size());
    }
    EXPECT_EQ(ds.num_tokens(), tokens);
    EXPECT_THROW(ds.sample(50), Error);
    EXPECT_THROW(ds.sample(-1), Error);
}

TEST(ShardedDataset, RejectsEmptyDirAndMixedTokenizers) {
    test::TempDir dir("ds");
    EXPECT_THROW(ShardedDataset::open(dir.path()), Error);
    write_dataset(dir.path(), 3, 3);
    ShardWriter w(dir / "zz.dfshard", "byte", 264);
    w.add({{1, 2}, {1, 1}});
    w.finish();
    try {
        ShardedDataset::open(dir.path());
        FAIL() << "mixed tokenizers accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("zz.dfshard"), std::string::npos) << e.what();
    }
}

TEST(PackedLoader, EpochIsAShuffledPackingOfEverySample) {
    test::TempDir dir("ds");
    write_dataset(dir.path(), 60, 16);
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    LoaderOptions opt;
    opt.max_length = 40;
    opt.seed = 3;
    PackedLoader loader(ds, opt);
    const int64_t n_seq = loader.sequences_per_epoch();
    std::vector<int64_t> order;
    std::vector<Sequence> seqs;
    for (int64_t s = 0; s < n_seq; ++s) seqs.push_back(loader.next());
    for (int64_t s = 0; s < n_seq; ++s) {
        const Sequence& q = seqs[s];
        ASSERT_LE(q.tokens.size(), 40u);
        ASSERT_EQ(q.tokens.size(), q.loss_mask.size());
        ASSERT_EQ(q.sample_starts.front(), 0);
        const auto ids = samples_of(q);
        EXPECT_EQ(ids, loader.sequence_samples(0, s));
        // Whole samples, in order, with their own masks.
        int32_t pos = 0;
        for (int64_t id : ids) {
            const Encoded e = make_sample(id);
            for (size_t k = 0; k < e.tokens.size(); ++k) {
                ASSERT_EQ(q.tokens[pos + k], id);
                ASSERT_EQ(q.loss_mask[pos + k], e.loss_mask[k]);
            }
            pos += static_cast<int32_t>(e.tokens.size());
        }
        EXPECT_EQ(pos, static_cast<int32_t>(q.tokens.size()));
        // Greedy: the first sample of the next sequence would not have fitted in this one.
        if (s + 1 < n_seq) {
            EXPECT_GT(q.tokens.size() + make_sample(samples_of(seqs[s + 1])[0]).tokens.size(), 40u);
        }
        order.insert(order.end(), ids.begin(), ids.end());
    }
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 60; ++i) ASSERT_EQ(sorted[i], i);  // every sample exactly once
    std::vector<int64_t> identity(60);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_NE(order, identity);  // shuffled

    // Same (seed, epoch) -> same sequences; the next epoch has another order.
    PackedLoader again(ds, opt);
    for (const auto& q : seqs) EXPECT_TRUE(same(again.next(), q));
    EXPECT_EQ(again.state(), (LoaderState{0, n_seq}));
    const Sequence first_of_epoch1 = again.next();
    EXPECT_EQ(again.state(), (LoaderState{1, 1}));
    EXPECT_NE(samples_of(first_of_epoch1), samples_of(seqs[0]));
    opt.seed = 4;
    EXPECT_NE(samples_of(PackedLoader(ds, opt).next()), samples_of(seqs[0]));
}

TEST(PackedLoader, TruncatesLongSamplesAndCanDisablePacking) {
    test::TempDir dir("ds");
    write_dataset(dir.path(), 30, 30);
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    LoaderOptions opt;
    opt.max_length = 10;
    opt.packing = false;
    PackedLoader loader(ds, opt);
    EXPECT_EQ(loader.sequences_per_epoch(), 30);
    std::set<int64_t> seen;
    for (int i = 0; i < 30; ++i) {
        const Sequence q = loader.next();
        const auto ids = samples_of(q);
        ASSERT_EQ(ids.size(), 1u);
        seen.insert(ids[0]);
        const Encoded e = make_sample(ids[0]);
        const size_t want = std::min<size_t>(e.tokens.size(), 10);
        ASSERT_EQ(q.tokens.size(), want);
        EXPECT_TRUE(std::equal(q.loss_mask.begin(), q.loss_mask.end(), e.loss_mask.begin()));
    }
    EXPECT_EQ(seen.size(), 30u);
    // With packing, a truncated sample fills its sequence alone.
    opt.packing = true;
    PackedLoader packed(ds, opt);
    for (int64_t s = 0; s < packed.sequences_per_epoch(); ++s) {
        const Sequence q = packed.next();
        ASSERT_LE(q.tokens.size(), 10u);
        for (int64_t id : samples_of(q)) {
            if (make_sample(id).tokens.size() >= 10) {
                EXPECT_EQ(q.sample_starts.size(), 1u);
            }
        }
    }
}

TEST(PackedLoader, ResumeFromStateGivesTheSameSequencesBitwise) {
    test::TempDir dir("ds");
    write_dataset(dir.path(), 45, 10);
    LoaderOptions opt;
    opt.max_length = 32;
    opt.seed = 11;
    opt.rank = 1;
    opt.world = 2;
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    PackedLoader straight(ds, opt);
    const int64_t per_epoch = straight.sequences_per_epoch();
    // Stop in the middle of epoch 1, so that the continuation crosses into epoch 2.
    const int64_t k = per_epoch + per_epoch / 2;
    const int64_t more = per_epoch + 3;
    std::vector<Sequence> want;
    for (int64_t i = 0; i < k + more; ++i) want.push_back(straight.next());

    nlohmann::json saved;
    {
        PackedLoader first(ds, opt);
        for (int64_t i = 0; i < k; ++i) ASSERT_TRUE(same(first.next(), want[i])) << i;
        saved = loader_state_to_json(first.state());
    }
    const ShardedDataset reopened = ShardedDataset::open(dir.path());
    PackedLoader resumed(reopened, opt);
    resumed.set_state(loader_state_from_json(nlohmann::json::parse(saved.dump())));
    EXPECT_EQ(resumed.state().epoch, 1);
    for (int64_t i = k; i < k + more; ++i) ASSERT_TRUE(same(resumed.next(), want[i])) << i;

    EXPECT_THROW(resumed.set_state({0, per_epoch + 1}), Error);
    EXPECT_THROW(resumed.set_state({-1, 0}), Error);
    EXPECT_THROW(loader_state_from_json(nlohmann::json{{"epoch", 1}}), Error);
}

TEST(PackedLoader, WorkerSlicesAreDisjointAndCoverTheData) {
    test::TempDir dir("ds");
    write_dataset(dir.path(), 71, 20);
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    for (const int64_t world : {1, 2, 3, 4}) {
        for (const bool drop_last : {false, true}) {
            std::map<int64_t, int> count;
            int64_t per_rank = -1;
            int64_t total_global = 0;
            for (int64_t rank = 0; rank < world; ++rank) {
                LoaderOptions opt{.max_length = 24,
                                  .packing = true,
                                  .seed = 5,
                                  .rank = rank,
                                  .world = world,
                                  .drop_last = drop_last};
                PackedLoader l(ds, opt);
                if (per_rank < 0) per_rank = l.sequences_per_epoch();
                EXPECT_EQ(l.sequences_per_epoch(), per_rank) << "ranks must step in lockstep";
                for (int64_t s = 0; s < per_rank; ++s) {
                    for (int64_t id : samples_of(l.next())) ++count[id];
                }
                LoaderOptions one = opt;
                one.rank = 0;
                one.world = 1;
                total_global = PackedLoader(ds, one).sequences_per_epoch();
            }
            const int64_t remainder = total_global % world;
            if (drop_last) {
                EXPECT_EQ(per_rank, total_global / world);
                for (const auto& [id, c] : count) EXPECT_EQ(c, 1) << "sample " << id;
                if (remainder == 0) {
                    EXPECT_EQ(count.size(), 71u);
                }
            } else {
                EXPECT_EQ(per_rank, (total_global + world - 1) / world);
                EXPECT_EQ(count.size(), 71u) << "world " << world;  // covers every sample
                // Only the padding of the last round repeats sequences (at most world-1 of them).
                int64_t repeated = 0;
                for (const auto& [id, c] : count) repeated += c - 1;
                if (remainder == 0) {
                    EXPECT_EQ(repeated, 0);
                }
                EXPECT_LE(repeated, (world - 1) * 24);
            }
        }
    }
}

TEST(PackedLoader, TotalSequencesSumsEpochs) {
    test::TempDir dir("ds");
    write_dataset(dir.path(), 40, 40);
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    PackedLoader l(ds, {.max_length = 30, .seed = 9});
    int64_t counted = 0;
    for (int64_t e = 0; e < 3; ++e) {
        const int64_t n = l.sequences_in_epoch(e);
        for (int64_t s = 0; s < n; ++s) {
            l.next();
            ASSERT_EQ(l.state(), (LoaderState{e, s + 1}));
            EXPECT_EQ(l.sequences_per_epoch(), n);
            ++counted;
        }
    }
    EXPECT_EQ(counted, l.total_sequences(3));
    l.next();
    EXPECT_EQ(l.state(), (LoaderState{3, 1}));
}

TEST(PackedLoader, RejectsBadOptions) {
    test::TempDir dir("ds");
    write_dataset(dir.path(), 3, 3);
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    EXPECT_THROW(PackedLoader(ds, {.max_length = 1}), Error);
    EXPECT_THROW(PackedLoader(ds, {.rank = 2, .world = 2}), Error);
    // 3 tiny samples pack into one sequence: 2 workers cannot both get one when dropping.
    EXPECT_THROW(PackedLoader(ds, {.max_length = 100, .world = 2, .drop_last = true}), Error);
    EXPECT_NO_THROW(PackedLoader(ds, {.max_length = 100, .rank = 1, .world = 2}));
}

}  // namespace
}  // namespace dflash
