// DFlash2 through the binary: `dflash init drafter` makes one (drafter.architecture=dflash2) or
// converts a DFlash drafter (--from-drafter); `dflash inspect` describes it without problems;
// `dflash generate --trace` prints one line per step that agrees with the summary, and the
// converted drafter drafts step for step what the DFlash drafter drafts.
#include <regex>
#include <sstream>

#include "model/drafter.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

using test::has;

struct Trace {
    std::vector<std::string> lines;
    int64_t committed = 1;  // the prefill's token, then accepted + 1 per step
};

Trace parse_trace(const std::string& out) {
    Trace t;
    std::istringstream in(out);
    const std::regex re(R"(trace step (\d+): drafted \[([0-9 ]*)\] accepted (\d+) next (\d+) )"
                        R"(\((bonus|correction)\))");
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, re)) continue;
        EXPECT_EQ(std::stoll(m[1]), static_cast<long long>(t.lines.size())) << line;
        t.lines.push_back(m[0]);
        t.committed += std::stoll(m[3]) + 1;
    }
    return t;
}

// A number of the summary line ("tokens N (prompt P), tau T over S steps, ...").
int64_t summary_value(const std::string& out, const char* pattern) {
    std::smatch m;
    return std::regex_search(out, m, std::regex(pattern)) ? std::stoll(m[1]) : -1;
}

TEST(Dflash2Cli, InitInspectAndTracedGenerate) {
    test::TempDir dir("dflash2_cli");
    const auto t = dir / "t", v1 = dir / "v1", v2 = dir / "v2", fresh = dir / "fresh";
    auto r = test::run_dflash("init target --output " + t.string() +
                              " --pretrain.hidden_size 48 --pretrain.num_layers 3"
                              " --pretrain.num_heads 3 --pretrain.num_kv_heads 1"
                              " --pretrain.head_dim 16 --pretrain.intermediate_size 72");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_dflash("init drafter --target " + t.string() + " --output " + v1.string() +
                         " --drafter.block_size 5 --dtype f32");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // Converting needs the architecture setting, and says so.
    r = test::run_dflash("init drafter --target " + t.string() + " --output " + v2.string() +
                         " --from-drafter " + v1.string());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "drafter.architecture=dflash2")) << r.output;
    r = test::run_dflash("init drafter --target " + t.string() + " --output " + v2.string() +
                         " --from-drafter " + v1.string() +
                         " --set drafter.architecture=dflash2 --drafter.selector_top_k 8"
                         " --dtype f32");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "DFlash2")) << r.output;
    const DrafterModel d2 = DrafterModel::load(test::host_backend(), v2);
    EXPECT_TRUE(d2.config().dflash2());
    EXPECT_EQ(d2.block_size(), 5);
    EXPECT_EQ(d2.config().d2.selector_top_k, 8);

    r = test::run_dflash("inspect " + v2.string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "drafter (DFlash2DraftModel)")) << r.output;
    EXPECT_TRUE(has(r.output, "dflash2:       conv 2 taps, groups of 16 channels (3 groups)"))
        << r.output;
    EXPECT_TRUE(has(r.output, "attention per layer: bidirectional")) << r.output;

    r = test::run_dflash("init drafter --target " + t.string() + " --output " + fresh.string() +
                         " --set drafter.architecture=dflash2 --drafter.conv_group_size 7");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "conv_group_size=7 must divide hidden_size=48")) << r.output;

    const std::string gen = "generate --target " + t.string() +
                            " --prompt-ids 257,72,105,33 --infer.max_new_tokens 24"
                            " --runtime.threads 1 --trace --drafter ";
    const auto a = test::run_dflash(gen + v1.string());
    const auto b = test::run_dflash(gen + v2.string());
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(b.exit_code, 0) << b.output;
    const Trace ta = parse_trace(a.output), tb = parse_trace(b.output);
    ASSERT_FALSE(ta.lines.empty()) << a.output;
    EXPECT_EQ(static_cast<int64_t>(ta.lines.size()), summary_value(a.output, R"(over (\d+) steps)"))
        << a.output;
    // Every committed token is in the trace; the last step may commit past a stop token or the
    // budget (at most a block's worth).
    const int64_t tokens = summary_value(a.output, R"(tokens (\d+) \(prompt)");
    EXPECT_GE(ta.committed, tokens) << a.output;
    EXPECT_LT(ta.committed - tokens, 5) << a.output;
    // Identity convolutions and a neutral selector: the same drafts, step for step.
    EXPECT_EQ(ta.lines, tb.lines);
}

}  // namespace
}  // namespace dflash
