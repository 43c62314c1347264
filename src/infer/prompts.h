// Benchmark and generation prompts: a JSONL file with one prompt per line, in any of three layouts:
//   {"prompt": "text"}                          plain text: [bos] text (no eos: the model goes on)
//   {"messages": [{"role": ..., "content": ...}]}  chat template with the generation prompt
//   {"prompt_ids": [1, 2, 3]}                   token ids as they are
// Any line may carry {"label": "..."} to name the prompt in reports; otherwise the label is a short
// excerpt of the prompt. Tested by tests/infer/prompts_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/input_file.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

struct Prompt {
    std::vector<int32_t> tokens;  // [P], P >= 1
    std::string label;            // short, one line, for tables and logs
};

// Parses one line. `tok` may be null when only prompt_ids lines are expected (a text or chat line
// is then an error saying a tokenizer is needed). When vocab_size > 0 every id must lie in
// [0, vocab_size). `where` ("prompts.jsonl:3") prefixes every error.
Prompt parse_prompt_line(std::string_view line, const Tokenizer* tok, int64_t vocab_size,
                         std::string_view where);

// Every prompt of a JSONL file, in order; blank lines are skipped. Errors name FILE:LINE. A file
// without any prompt is an error. The file must be a regular file (`--prompts /dev/zero` or a FIFO
// is refused at once); it is read a line at a time, each line at most `max_line_bytes`.
std::vector<Prompt> read_prompts(const std::filesystem::path& path, const Tokenizer* tok,
                                 int64_t vocab_size, uint64_t max_line_bytes = kMaxJsonlLineBytes);

// Plain-text prompt tokens: [bos] text (bos where the tokenizer adds one), no eos.
std::vector<int32_t> encode_text_prompt(const Tokenizer& tok, std::string_view text);

// "1,2, 3" -> {1, 2, 3}; an empty list or a non-integer entry is an error naming it.
std::vector<int32_t> parse_id_list(std::string_view text);

// A one-line excerpt of `text` of at most max_chars bytes (UTF-8 safe; newlines and tabs become
// spaces; "..." marks a cut).
std::string short_label(std::string_view text, size_t max_chars = 32);

}  // namespace dflash
