// The HF tokenizer.json byte-level BPE tokenizer (Qwen2/Qwen3, Llama-3, gpt-oss, GPT-2 style),
// behind the Tokenizer interface. Encoding: invalid UTF-8 becomes U+FFFD (what Python's
// bytes.decode("utf-8", "replace") gives, the only way such text reaches HF) -> added tokens are
// cut out (never split) -> NFC where the tokenizer asks for it -> the split patterns -> BPE on each
// piece's bytes. Decoding maps each token back to its bytes. The chat template comes from
// tokenizer_config.json (recognised, implied by the model type, or named by ChatOptions) and is
// applied by encode_chat.
// Tested by tests/tokenizer/hf_tokenizer_test.cpp and the fixtures of
// tests/tokenizer/hf_fixtures_test.cpp.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

inline constexpr const char* kHfTokenizerFile = "tokenizer.json";
inline constexpr const char* kHfTokenizerConfigFile = "tokenizer_config.json";
// Newer transformers versions save the chat template in a file of its own, which then wins over
// tokenizer_config.json's "chat_template".
inline constexpr const char* kHfChatTemplateFile = "chat_template.jinja";
// The model's config.json, read here only for its model_type.
inline constexpr const char* kHfModelConfigFile = "config.json";

// The files' contents, as read from a model directory.
struct HfTokenizerFiles {
    std::string tokenizer_json;
    std::string tokenizer_config_json;  // "" when the directory has none
    std::string origin;                 // where they came from, for error messages
    std::string chat_template_jinja;    // "" when the directory has no chat_template.jinja
    // config.json's model_type, "" when unknown. With chat.template = auto it picks the template
    // where the type settles it (chat_template_for_model_type), before the Jinja's marks do.
    std::string model_type;
};

// Throws an Error naming the file and the part dflash cannot read (see hf_tokenizer_json.h).
std::unique_ptr<Tokenizer> make_hf_tokenizer(HfTokenizerFiles files, const ChatOptions& chat);
// dir/tokenizer.json (required), dir/tokenizer_config.json, dir/chat_template.jinja and
// dir/config.json's model_type (optional).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& dir,
                                             const ChatOptions& chat);

}  // namespace dflash
