// Reading JSONL training data: one JSON object per line, in any of the layouts users have:
//   {"text": "..."}                                                     plain text
//   {"messages": [{"role": "user", "content": "..."}, ...]}             OpenAI-style chat
//   {"conversations": [{"from": "human", "value": "..."}, ...]}         ShareGPT-style chat
//   {"prompt": "...", "response": "..."} (or "completion")              a one-turn chat
// Tested by tests/data/jsonl_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/input_file.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

struct JsonlRecord {
    enum class Kind { text, chat };
    Kind kind = Kind::text;
    std::string text;                   // kind == text
    std::vector<ChatMessage> messages;  // kind == chat; roles normalised (see parse_jsonl_line)
};

// Where a record came from, for progress and error messages.
struct JsonlPosition {
    int64_t line = 0;         // 1-based line number
    uint64_t byte_end = 0;    // file offset just past this line
    uint64_t file_bytes = 0;  // size of the whole file
};

// Parses one line. `where` ("data.jsonl:17") prefixes every error. Chat roles are mapped:
// human|user -> user, gpt|assistant|model|bot -> assistant, system -> system, developer ->
// developer (harmony only); other roles are an error. A message's "thinking" becomes
// ChatMessage::thinking. Content may be a string or a list of {"type": "text", "text": ...} parts.
// When a line has several layouts, "messages" wins over "conversations" over "prompt" +
// "response" over "text".
JsonlRecord parse_jsonl_line(std::string_view line, std::string_view where);

// Calls `fn` for every non-empty line of `path`, in order, reading one line at a time. `path`
// must be a regular file (a FIFO or /dev/zero is refused at once) whose lines are at most
// `max_line_bytes` long. A malformed or overlong line, and an Error thrown by `fn` (a record the
// tokenizer cannot encode), throw an Error naming the file, the line number and what is wrong.
void read_jsonl(const std::filesystem::path& path,
                const std::function<void(const JsonlRecord&, const JsonlPosition&)>& fn,
                uint64_t max_line_bytes = kMaxJsonlLineBytes);

// Convenience: all records of a file.
std::vector<JsonlRecord> read_jsonl_file(const std::filesystem::path& path);

// The record tokenized with the tokenizer's plain-text or chat template.
Encoded encode_record(const Tokenizer& tok, const JsonlRecord& rec);

}  // namespace dflash
