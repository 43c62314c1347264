// What ends a generated reply by default, from the target's config and its tokenizer. Used by
// `dflash generate`, `bench`, `data regenerate`, the demo and the trainer's decode evaluation.
// Tested by tests/infer/stop_tokens_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "model/hf_config.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

// Every eos id of the target's config.json and generation_config.json
// (TargetConfig::stop_token_ids) and, with a tokenizer, Tokenizer::stop_tokens (eos, end_turn and
// the chat template's other stops, e.g. harmony's <|call|> and <|endoftext|>); ids outside the
// vocabulary and duplicates removed.
std::vector<int32_t> default_stop_tokens(const TargetConfig& target, const Tokenizer* tok);

}  // namespace dflash
