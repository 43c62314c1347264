// Tokenizer description files of model directories. Tested by
// tests/tokenizer/model_tokenizer_test.cpp.
#include "tokenizer/model_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"

namespace dflash {

namespace fs = std::filesystem;

void save_tokenizer_spec(const fs::path& dir, const Tokenizer& tok) {
    if (tok.name() != "byte") {
        tok.save_files(dir);
        return;
    }
    nlohmann::json j;
    j["type"] = tok.name();
    j["vocab_size"] = tok.vocab_size();
    write_text_atomic(dir / kTokenizerSpecFile, j.dump(2) + "\n");
}

bool has_tokenizer_spec(const fs::path& dir) {
    return fs::exists(dir / kTokenizerSpecFile) || fs::exists(dir / kHfTokenizerFile);
}

std::unique_ptr<Tokenizer> load_tokenizer_for_model(const fs::path& dir, const ChatOptions& chat) {
    const auto spec = dir / kTokenizerSpecFile;
    if (!fs::exists(spec)) {
        if (fs::exists(dir / kHfTokenizerFile)) return load_hf_tokenizer(dir, chat);
        DF_FAIL(
            "'{}' names no tokenizer (no {} or {}); pass token ids (--prompt-ids) instead of "
            "text, or copy the model's tokenizer files into it",
            dir.string(), kHfTokenizerFile, kTokenizerSpecFile);
    }
    const nlohmann::json j = read_json_file(spec);
    DF_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
             "{}: missing string field \"type\"", spec.string());
    return make_tokenizer_with_chat(j["type"].get<std::string>(), chat, spec.string());
}

std::unique_ptr<Tokenizer> make_tokenizer_with_chat(std::string_view name, const ChatOptions& chat,
                                                    std::string_view origin) {
    auto tok = make_tokenizer(name);
    // An error, not a warning: data prepared "with the qwen3 template" that is in fact in the
    // byte tokenizer's format would train a drafter on the wrong text without a word.
    DF_CHECK(chat.template_name == "auto",
             "chat.template = {} cannot apply: the tokenizer ({}) is the {} tokenizer, whose chat "
             "format is its own and fixed; leave chat.template at auto, or use a model directory "
             "with an HF tokenizer.json for the {} template",
             chat.template_name, origin, tok->name(), chat.template_name);
    return tok;
}

}  // namespace dflash
