// Which tokenizer a model directory uses. Models written by dflash with the byte tokenizer carry
// `dflash_tokenizer.json` ({"type": "byte"}); HF models carry `tokenizer.json` (+
// `tokenizer_config.json`), read by hf_tokenizer.h. Tested by
// tests/tokenizer/model_tokenizer_test.cpp.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

inline constexpr const char* kTokenizerSpecFile = "dflash_tokenizer.json";

// Writes what reloads `tok` into `dir`: dflash_tokenizer.json for the byte tokenizer, the HF
// files for an HF tokenizer (atomically).
void save_tokenizer_spec(const std::filesystem::path& dir, const Tokenizer& tok);
// The tokenizer of a model directory: dflash_tokenizer.json if present, else tokenizer.json with
// the chat template `chat` picks. A clear error when the directory names none, or names one
// dflash cannot read (never a silent fallback to another tokenizer).
std::unique_ptr<Tokenizer> load_tokenizer_for_model(const std::filesystem::path& dir,
                                                    const ChatOptions& chat = {});
// make_tokenizer(name) for a tokenizer chosen by name, with the chat options the command was
// given: a chat.template other than "auto" is an error here, since a tokenizer made by name (the
// byte tokenizer) has its own fixed chat format and would silently ignore the request.
std::unique_ptr<Tokenizer> make_tokenizer_with_chat(std::string_view name, const ChatOptions& chat,
                                                    std::string_view origin);
// True if the directory names a tokenizer (dflash_tokenizer.json or tokenizer.json).
bool has_tokenizer_spec(const std::filesystem::path& dir);

}  // namespace dflash
