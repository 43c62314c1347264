// Issue 9: the prefill of generate/bench needs the logits of the prompt's last row only. A
// 4096-token prompt on a 152,000-token vocabulary must not materialise [P, V] logits (2.5 GB),
// nor a [prefill piece, V] block (512 x V = 311 MB): the process's peak memory may grow by far
// less than either. Its own test binary, so that nothing else has raised the peak before.
#include <sys/resource.h>

#include "backend/backend.h"
#include "infer/spec_decode.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

double peak_rss_mb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

TEST(PrefillMemory, LongPromptLargeVocabularyKeepsOnlyTheLastRowOfLogits) {
    constexpr int64_t kVocab = 152000, kPrompt = 4096;
    auto tc = test::tiny_target_config(true, 2);
    tc.vocab_size = kVocab;
    tc.max_position_embeddings = 8192;
    auto be = make_cpu_backend(1);
    const TargetModel target = TargetModel::random(*be, tc, 3, 0.5f);
    std::vector<int32_t> prompt(kPrompt);
    Rng rng(4);
    for (auto& t : prompt) t = static_cast<int32_t>(rng.below(kVocab));
    SpeculativeEngine engine(target, nullptr, *be);
    GenerateOptions o;
    o.max_new_tokens = 2;
    const double before = peak_rss_mb();
    const GenerateResult r = engine.generate(prompt, o);
    const double grown = peak_rss_mb() - before;
    EXPECT_EQ(r.tokens.size(), 2u);
    const double full_mb = kPrompt * kVocab * 4.0 / (1 << 20),
                 piece_mb = 512 * kVocab * 4.0 / (1 << 20);
    std::printf("peak memory grew by %.0f MB ([P, V] logits would be %.0f MB, [512, V] %.0f MB)\n",
                grown, full_mb, piece_mb);
    EXPECT_LT(grown, 0.5 * piece_mb);
}

}  // namespace
}  // namespace dflash
