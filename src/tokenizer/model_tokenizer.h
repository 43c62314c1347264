// Which tokenizer a model directory uses. Models written by dflash carry `dflash_tokenizer.json`
// ({"type": "byte"}); the HF tokenizer.json reader comes later, behind the same Tokenizer
// interface. Tested by tests/tokenizer/model_tokenizer_test.cpp.
#pragma once

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace dflash {

inline constexpr const char* kTokenizerSpecFile = "dflash_tokenizer.json";

// Writes dir/dflash_tokenizer.json naming `tok` (atomically).
void save_tokenizer_spec(const std::filesystem::path& dir, const Tokenizer& tok);
// The tokenizer of a model directory; a clear error when the directory names none we can read.
std::unique_ptr<Tokenizer> load_tokenizer_for_model(const std::filesystem::path& dir);
bool has_tokenizer_spec(const std::filesystem::path& dir);

}  // namespace dflash
