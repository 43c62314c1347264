// Replayable steps without a GPU (backend/step_graph.h): keys differ whenever owner, phase or any
// dim does; capture modes parse from their setting values; the CPU backend runs every step's
// record eagerly and reports no graph cache; counters print what they count. The CUDA graph
// cache itself is tested by tests/cuda/graph_cuda_test.cpp.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/step_graph.h"
#include "core/error.h"

namespace dflash {
namespace {

TEST(StepGraph, KeysDifferInOwnerPhaseAndEveryDim) {
    const StepKey k{3, "target.forward", {1, 16, 4096}};
    const StepKeyHash h;
    EXPECT_EQ(k, (StepKey{3, "target.forward", {1, 16, 4096}}));
    EXPECT_EQ(h(k), h(StepKey{3, "target.forward", {1, 16, 4096}}));
    for (const StepKey& other :
         {StepKey{4, "target.forward", {1, 16, 4096}}, StepKey{3, "drafter.draft", {1, 16, 4096}},
          StepKey{3, "target.forward", {2, 16, 4096}}, StepKey{3, "target.forward", {1, 16, 4097}},
          StepKey{3, "target.forward", {1, 16}}}) {
        EXPECT_FALSE(k == other);
        EXPECT_NE(h(k), h(other));
    }
}

TEST(StepGraph, CaptureModesParseFromTheirSettingValues) {
    for (const char* m : {"thread_local", "global", "relaxed"})
        EXPECT_EQ(to_string(parse_capture_mode(m)), m);
    EXPECT_EQ(parse_capture_mode("thread_local"), CaptureMode::this_thread);
    EXPECT_THROW(parse_capture_mode("threadlocal"), Error);
}

TEST(StepGraph, TheCpuBackendRunsEveryStepAndHasNoGraphCache) {
    const auto be = make_cpu_backend(1);
    const StepOwner owner(*be);
    int runs = 0;
    for (int i = 0; i < 5; ++i) be->run_step(StepKey{owner.id(), "p", {1}}, [&] { ++runs; });
    EXPECT_EQ(runs, 5);
    const GraphStats s = be->graph_stats();
    EXPECT_FALSE(s.enabled);
    EXPECT_EQ(s.replays, 0);
    EXPECT_NE(s.summary().find("off"), std::string::npos);
}

TEST(StepGraph, CountersPrintWhatTheyCountAndEveryFallbackReason) {
    GraphStats s;
    s.enabled = true;
    s.captures = 3;
    s.replays = 120;
    s.eager_runs = 7;
    s.fallback_reasons["operation not permitted when stream is capturing"] = 2;
    const std::string text = s.summary();
    EXPECT_NE(text.find("3 captured"), std::string::npos) << text;
    EXPECT_NE(text.find("120 replays"), std::string::npos) << text;
    EXPECT_NE(text.find("2 fallbacks"), std::string::npos) << text;
    EXPECT_NE(text.find("operation not permitted"), std::string::npos) << text;
    const auto j = s.to_json();
    EXPECT_EQ(j["replays"], 120);
    EXPECT_EQ(j["fallback_reasons"]["operation not permitted when stream is capturing"], 2);
}

}  // namespace
}  // namespace dflash
