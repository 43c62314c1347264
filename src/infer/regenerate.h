// Regenerating training responses with the target itself (docs/data.md "Regenerating responses":
// drafters learn from the target's own outputs, not from the corpus): for each prompt, the target's
// continuation, as a sample whose loss mask covers the response only. Several CPU workers, one
// prompt at a time each; the result does not depend on the worker count. Tested by
// tests/infer/regenerate_test.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/logging.h"
#include "infer/spec_decode.h"
#include "model/target.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

struct RegenerateOptions {
    GenerateOptions generate;  // sampling, max_new_tokens, stop tokens; seed is offset per prompt
    int workers = 1;           // threads decoding prompts in parallel
    int threads_per_worker = 1;
    double progress_interval_s = 5.0;
};

struct RegenerateStats {
    int64_t samples = 0;
    int64_t prompt_tokens = 0;
    int64_t response_tokens = 0;
    double seconds = 0;
};

// samples[i] = prompts[i] followed by the target's response, loss mask 1 on the response only.
std::vector<Encoded> regenerate_responses(const TargetModel& target,
                                          const std::vector<std::vector<int32_t>>& prompts,
                                          const RegenerateOptions& opt, const Logger& log,
                                          RegenerateStats* stats = nullptr);

// Writes samples as one shard file `dir/regenerated-00000.dfshard` plus its manifest.json
// (data/manifest.h; `inputs` names what the samples came from); dir is created if missing.
void write_samples_shard(const std::filesystem::path& dir, const std::vector<Encoded>& samples,
                         const Tokenizer& tok, const std::vector<std::string>& inputs = {});

}  // namespace dflash
