// Reading the parts of an HF tokenizer.json / tokenizer_config.json pair that surround the BPE
// model: normalizer, pre-tokenizer, post-processor, decoder, and the special tokens and chat
// template of tokenizer_config.json. Each reader accepts exactly what byte-level BPE tokenizers
// (Qwen2/Qwen3, Llama-3, gpt-oss's o200k, GPT-2 style) use and refuses the rest with the
// offending value, so an unsupported tokenizer is an error rather than a silently different
// tokenization.
// Tested by tests/tokenizer/hf_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dflash::hf {

// true for NFC, false for none.
bool read_normalizer(const nlohmann::json& j);

// The split patterns applied in order (each to every piece of the previous one); the last stage
// is always the byte-level mapping (ByteLevel with add_prefix_space false; with use_regex true it
// adds GPT-2's pattern).
std::vector<std::string> read_pre_tokenizer(const nlohmann::json& j);

// Ids the post-processor puts before and after a single sequence (TemplateProcessing), e.g.
// Llama-3's <|begin_of_text|>; ByteLevel and null add none.
struct AddedAround {
    std::vector<int32_t> before, after;
};
AddedAround read_post_processor(const nlohmann::json& j);

// Refuses any decoder but ByteLevel (alone or as the only step of a Sequence).
void check_decoder(const nlohmann::json& j);

// tokenizer_config.json: token strings (a string, or an object with "content") and the chat
// template (a string, or the "default" entry of a list of {name, template}).
struct TokenizerConfig {
    std::string bos_token, eos_token, pad_token;  // "" when absent
    std::string chat_template;                    // "" when absent
    // Why a chat_template that is present could not be read ("is a JSON number, not a string"),
    // reported when a chat is encoded; "" when it was read or is absent.
    std::string chat_template_problem;
};
TokenizerConfig read_tokenizer_config(const nlohmann::json& j);

}  // namespace dflash::hf
