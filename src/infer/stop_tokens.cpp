// Default stop tokens. Tested by tests/infer/stop_tokens_test.cpp.
#include "infer/stop_tokens.h"

#include <algorithm>

namespace dflash {

std::vector<int32_t> default_stop_tokens(const TargetConfig& target, const Tokenizer* tok) {
    std::vector<int32_t> out;
    auto add = [&](int64_t id) {
        if (id >= 0 && id < target.vocab_size && std::find(out.begin(), out.end(), id) == out.end())
            out.push_back(static_cast<int32_t>(id));
    };
    for (int64_t id : target.stop_token_ids()) add(id);
    if (tok)
        for (int32_t id : tok->stop_tokens()) add(id);
    return out;
}

}  // namespace dflash
