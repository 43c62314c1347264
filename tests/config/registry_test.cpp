// Declarations, env names, nearest-key suggestions and set-time checks (src/config/registry.h).
#include "config/registry.h"

#include <gtest/gtest.h>

#include "config/test_registry.h"
#include "core/error.h"
#include "support/test_util.h"

namespace dflash::config {
namespace {

using D = Declaration;
using dflash::test::error_of;

TEST(Registry, EnvNamesMirrorKeys) {
    EXPECT_EQ(env_name_for("cuda_graphs.capture_mode"), "DFLASH_CUDA_GRAPHS_CAPTURE_MODE");
    EXPECT_EQ(env_name_for("a-b.c"), "DFLASH_A_B_C");
    auto r = test::small_registry();
    EXPECT_EQ(r->find_by_env("DFLASH_TRAIN_LR")->key, "train.lr");
    EXPECT_EQ(r->find_by_env("DFLASH_MODEL_ROPE_BASE")->key, "model.rope.base");
    EXPECT_EQ(r->find_by_env("DFLASH_TRAIN"), nullptr);
}

TEST(Registry, SortedAndNamespaces) {
    auto r = test::small_registry();
    for (size_t i = 1; i < r->all().size(); ++i) EXPECT_LT(r->all()[i - 1].key, r->all()[i].key);
    EXPECT_TRUE(r->is_namespace("cuda_graphs"));
    EXPECT_TRUE(r->is_namespace("model"));
    EXPECT_TRUE(r->is_namespace("model.rope"));
    EXPECT_FALSE(r->is_namespace("cuda_graph"));
    EXPECT_FALSE(r->is_namespace("train.lr"));
}

TEST(Registry, EditDistance) {
    EXPECT_EQ(edit_distance("", "abc"), 3u);
    EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
    EXPECT_EQ(edit_distance("cuda_graphs.enabld", "cuda_graphs.enabled"), 1u);
    EXPECT_EQ(edit_distance("same", "same"), 0u);
}

TEST(Registry, NearestKeyOverFullDottedPaths) {
    auto r = test::small_registry();
    EXPECT_EQ(r->nearest_key("cuda_graphs.enabld"), "cuda_graphs.enabled");
    EXPECT_EQ(r->nearest_key("cuda_graph.enabled"), "cuda_graphs.enabled");
    EXPECT_EQ(r->nearest_key("train.epoch"), "train.epochs");
    EXPECT_EQ(r->nearest_key("model.rope.bse"), "model.rope.base");
    EXPECT_EQ(r->nearest_key("completely.unrelated_thing"), std::nullopt);
    const std::string msg = error_of([&] { r->fail_unknown("train.lrr", "somewhere"); });
    EXPECT_NE(msg.find("`train.lrr`"), std::string::npos) << msg;
    EXPECT_NE(msg.find("somewhere"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Did you mean `train.lr`?"), std::string::npos) << msg;
}

TEST(Registry, BadDeclarationsAreInternalErrors) {
    Registry r;
    r.add(D::integer("a.x", 1, "doc"));
    EXPECT_THROW(r.add(D::integer("a.x", 2, "again")), Error);
    EXPECT_THROW(r.add(D::integer("A.Y", 1, "upper case")), Error);
    EXPECT_THROW(r.add(D::integer("a..y", 1, "empty segment")), Error);
    EXPECT_THROW(r.add(D::integer("a_x", 1, "same env name DFLASH_A_X")), Error);
    EXPECT_THROW(r.add(D::integer("a.y", 5, "default out of range").range(0, 4)), Error);
    EXPECT_THROW(r.add(D::enumeration("a.e", "z", {"x", "y"}, "default not a choice")), Error);
    EXPECT_THROW(r.add(D::enumeration("a.f", "", {}, "no choices")), Error);
    EXPECT_EQ(r.size(), 1u);
}

TEST(Registry, ParseTextChecksTypeAndNamesEverything) {
    auto r = test::small_registry();
    const auto& epochs = *r->find("train.epochs");
    EXPECT_EQ(std::get<int64_t>(r->parse_text(epochs, "12", "cli")), 12);
    const std::string msg = error_of([&] { r->parse_text(epochs, "12.5", "env:DFLASH_X"); });
    for (const char* part : {"train.epochs", "12.5", "env:DFLASH_X", "an int", "[1, 100]"})
        EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
}

TEST(Registry, RangesAreInclusiveAndChecked) {
    auto r = test::small_registry();
    const auto& epochs = *r->find("train.epochs");
    EXPECT_NO_THROW(r->parse_text(epochs, "1", "cli"));
    EXPECT_NO_THROW(r->parse_text(epochs, "100", "cli"));
    const std::string msg = error_of([&] { r->parse_text(epochs, "101", "cli"); });
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[1, 100]"), std::string::npos) << msg;
    EXPECT_THROW(r->parse_text(epochs, "0", "cli"), Error);
    EXPECT_THROW(r->parse_text(*r->find("train.lr"), "-1e-3", "cli"), Error);
    EXPECT_THROW(r->parse_text(*r->find("model.rope.base"), "0", "cli"), Error);  // [1, ...)
    EXPECT_NO_THROW(r->parse_text(*r->find("model.rope.base"), "1000000000000", "cli"));
    // A value of the wrong variant is rejected by check() too.
    EXPECT_THROW(r->check(epochs, Value(1.0), "test"), Error);
}

TEST(Registry, EnumsAcceptOnlyTheirChoices) {
    auto r = test::small_registry();
    const auto& mode = *r->find("cuda_graphs.capture_mode");
    EXPECT_EQ(std::get<std::string>(r->parse_text(mode, "global", "cli")), "global");
    const std::string msg = error_of([&] { r->parse_text(mode, "Global", "cli"); });
    EXPECT_NE(msg.find("thread_local|global|relaxed"), std::string::npos) << msg;
    EXPECT_THROW(r->parse_text(mode, "", "cli"), Error);
}

TEST(Registry, ListsParseEveryElementAndCheckItsRange) {
    auto r = test::small_registry();
    const auto& ids = *r->find("drafter.target_layer_ids");
    using VI = std::vector<int64_t>;
    EXPECT_EQ(std::get<VI>(r->parse_text(ids, "1,9,17", "cli")), (VI{1, 9, 17}));
    EXPECT_EQ(std::get<VI>(r->parse_text(ids, "[1,9,17]", "cli")), (VI{1, 9, 17}));
    EXPECT_EQ(std::get<VI>(r->parse_text(ids, "", "cli")), VI{});
    EXPECT_THROW(r->parse_text(ids, "1,x,17", "cli"), Error);
    EXPECT_THROW(r->parse_text(ids, "1,,17", "cli"), Error);
    EXPECT_THROW(r->parse_text(ids, "1,64", "cli"), Error);  // element out of [0, 63]
    using VD = std::vector<double>;
    EXPECT_EQ(std::get<VD>(r->parse_text(*r->find("train.betas"), "0.8, 0.99", "cli")),
              (VD{0.8, 0.99}));
    EXPECT_THROW(r->parse_text(*r->find("train.betas"), "0.8,1.5", "cli"), Error);
    using VS = std::vector<std::string>;
    EXPECT_EQ(std::get<VS>(r->parse_text(*r->find("data.files"), "a.jsonl,b.jsonl", "cli")),
              (VS{"a.jsonl", "b.jsonl"}));
}

}  // namespace
}  // namespace dflash::config
