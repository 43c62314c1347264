// The target's feature-only forward (no final_hidden) stops after the deepest captured layer:
// counted through a backend that counts the ops it forwards, it runs the ops of that many layers
// and no final norm; its features are bit-identical to the full forward's, and stay so (finite)
// with NaN weights in the skipped layers and the final norm, which the full forward does run.
// What the online training step relies on for CE-only losses (docs/training.md "Target layers
// per loss").
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "support/forwarding_backend.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

// Forwards everything to the CPU backend and counts the ops of backend/op_list.h it is given.
class CountingBackend final : public test::ForwardingBackend {
  public:
    using ForwardingBackend::ForwardingBackend;

    int64_t total() const {
        int64_t n = 0;
        for (const auto& [op, count] : ops_) n += count;
        return n;
    }
    int64_t count(const std::string& op) const {
        const auto it = ops_.find(op);
        return it == ops_.end() ? 0 : it->second;
    }
    void reset() { ops_.clear(); }

  private:
    void seen(const char* op) override { ++ops_[op]; }
    std::map<std::string, int64_t> ops_;
};

bool all_finite(const HostTensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i)
        if (!std::isfinite(t.f32()[i])) return false;
    return true;
}

// Every weight of layers `from`.. and the final norm set to NaN.
void poison_from_layer(TargetModel& m, int64_t from) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t l = from; l < m.config().num_hidden_layers; ++l) {
        const std::string prefix = "model.layers." + std::to_string(l) + ".";
        for (const Param& p : m.params().params())
            if (p.name.starts_with(prefix)) fill_f32(p.value, nan);
    }
    fill_f32(m.params().value("model.norm.weight"), nan);
}

// Qwen3 and Llama layouts; the captured ids out of order, as drafters may list them.
class TargetEarlyStop : public ::testing::TestWithParam<bool> {};

TEST_P(TargetEarlyStop, FeaturesEqualTheFullForwardsAndLaterLayersDoNotRun) {
    auto be = make_cpu_backend(1);
    const auto cfg = test::tiny_target_config(GetParam(), 5);
    TargetModel m = TargetModel::random(*be, cfg, 21, 0.2f);
    const int64_t S = 7, D = cfg.hidden_size;
    const auto toks = test::random_tokens(S, cfg.vocab_size, 4);
    const std::vector<int64_t> capture = {2, 0};  // deepest captured: layer 2 of 0..4
    Workspace ws = test::test_workspace(*be);

    HostTensor full({S, 2 * D}), hidden({S, D}), early({S, 2 * D});
    m.forward(*be, ws, toks, capture, full, hidden);
    m.forward(*be, ws, toks, capture, early, Tensor());
    EXPECT_EQ(test::max_abs_diff(full, early), 0.0);
    ASSERT_TRUE(all_finite(full));

    poison_from_layer(m, 3);
    HostTensor poisoned({S, 2 * D});
    m.forward(*be, ws, toks, capture, poisoned, Tensor());
    EXPECT_TRUE(all_finite(poisoned));
    EXPECT_EQ(test::max_abs_diff(poisoned, full), 0.0);
    // Per document as well (the online step's documents mode).
    const std::vector<int32_t> starts = {0, 3};
    HostTensor docs({S, 2 * D});
    m.forward_documents(*be, ws, toks, starts, capture, docs, Tensor());
    EXPECT_TRUE(all_finite(docs));
    // The poison is real: the full forward runs the poisoned layers.
    HostTensor poisoned_hidden({S, D});
    m.forward(*be, ws, toks, capture, poisoned, poisoned_hidden);
    EXPECT_FALSE(all_finite(poisoned_hidden));
    // Capturing the last layer runs them all, as before.
    const std::vector<int64_t> last = {cfg.num_hidden_layers - 1};
    HostTensor last_features({S, D});
    m.forward(*be, ws, toks, last, last_features, Tensor());
    EXPECT_FALSE(all_finite(last_features));
}

// Ops per forward: the embedding, then the same ops for every layer run, a feature copy per
// captured id, and the final norm only with final_hidden. Capturing layer k without
// final_hidden therefore costs k + 1 layers' ops; the full forward costs all 5 and the norm.
TEST_P(TargetEarlyStop, LayersAfterTheDeepestCapturedOneAreNotRun) {
    auto cpu = make_cpu_backend(1);
    CountingBackend be(*cpu);
    const auto cfg = test::tiny_target_config(GetParam(), 5);
    const TargetModel m = TargetModel::random(*cpu, cfg, 22, 0.2f);
    const int64_t S = 4, D = cfg.hidden_size;
    const auto toks = test::random_tokens(S, cfg.vocab_size, 5);
    Workspace ws = test::test_workspace(be);
    HostTensor features({S, D}), hidden({S, D});
    const auto ops = [&](int64_t layer, bool final_hidden) {
        const std::vector<int64_t> capture = {layer};
        be.reset();
        m.forward(be, ws, toks, capture, features, final_hidden ? Tensor(hidden) : Tensor());
        return std::pair(be.total(), be.count("rmsnorm_fwd"));
    };
    const auto [first, first_norms] = ops(0, false);
    const auto [second, second_norms] = ops(1, false);
    const int64_t per_layer = second - first, norms_per_layer = second_norms - first_norms;
    ASSERT_GT(per_layer, 0);
    ASSERT_GT(norms_per_layer, 0);
    for (int64_t k = 0; k < cfg.num_hidden_layers; ++k) {
        const auto [n, norms] = ops(k, false);
        EXPECT_EQ(n, first + k * per_layer) << "capture {" << k << "}";
        EXPECT_EQ(norms, first_norms + k * norms_per_layer) << "capture {" << k << "}";
    }
    // With final_hidden: every layer and the final norm, whatever is captured.
    for (int64_t k : {0, 2, 4}) {
        const auto [n, norms] = ops(k, true);
        EXPECT_EQ(n, first + (cfg.num_hidden_layers - 1) * per_layer + 1) << k;
        EXPECT_EQ(norms, first_norms + (cfg.num_hidden_layers - 1) * norms_per_layer + 1) << k;
    }
    // Nothing captured and no final_hidden: only the embedding.
    be.reset();
    m.forward(be, ws, toks, {}, Tensor(), Tensor());
    EXPECT_EQ(be.count("rmsnorm_fwd"), 0);
}

INSTANTIATE_TEST_SUITE_P(Qwen3AndLlama, TargetEarlyStop, ::testing::Values(true, false),
                         [](const auto& test_case) { return test_case.param ? "qwen3" : "llama"; });

}  // namespace
}  // namespace dflash
