// JSONL parsing for `dflash data prepare` (see jsonl.h for the accepted layouts).
// Tested by tests/data/jsonl_test.cpp.
#include "data/jsonl.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"

namespace dflash {

namespace {

using nlohmann::json;

std::string keys_of(const json& obj) {
    std::string out;
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (!out.empty()) out += ", ";
        out += it.key();
    }
    return "[" + out + "]";
}

std::string normalise_role(const std::string& role, std::string_view where, size_t i) {
    if (role == "user" || role == "human") return "user";
    if (role == "assistant" || role == "gpt" || role == "model" || role == "bot") {
        return "assistant";
    }
    if (role == "system") return "system";
    if (role == "developer") return "developer";  // harmony's instructions (gpt-oss)
    DF_FAIL(
        "{}: message {} has role '{}'; expected system, developer, user/human or "
        "assistant/gpt/model (drop or rewrite messages of other roles before preparing the data)",
        where, i, role);
}

std::string content_string(const json& c, std::string_view where, size_t i, const char* key) {
    if (c.is_string()) return c.get<std::string>();
    if (c.is_null()) return "";
    if (c.is_array()) {
        // OpenAI multi-part content: concatenate the text parts; other parts cannot be tokenized.
        std::string out;
        for (size_t k = 0; k < c.size(); ++k) {
            const json& part = c[k];
            DF_CHECK(part.is_object() && part.contains("text") && part["text"].is_string(),
                     "{}: message {} \"{}\" part {} is not a {{\"type\": \"text\", \"text\": "
                     "...}} object (only text content can be tokenized)",
                     where, i, key, k);
            out += part["text"].get<std::string>();
        }
        return out;
    }
    DF_FAIL("{}: message {} \"{}\" is a JSON {}; expected a string", where, i, key, c.type_name());
}

std::vector<ChatMessage> parse_messages(const json& arr, std::string_view where,
                                        const char* list_key, const char* role_key,
                                        const char* content_key) {
    DF_CHECK(arr.is_array(), "{}: \"{}\" is a JSON {}; expected an array of messages", where,
             list_key, arr.type_name());
    std::vector<ChatMessage> out;
    out.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
        const json& m = arr[i];
        DF_CHECK(m.is_object(),
                 "{}: \"{}\"[{}] is a JSON {}; expected an object with \"{}\" and "
                 "\"{}\"",
                 where, list_key, i, m.type_name(), role_key, content_key);
        DF_CHECK(m.contains(role_key) && m[role_key].is_string(),
                 "{}: \"{}\"[{}] has no string \"{}\" (keys: {})", where, list_key, i, role_key,
                 keys_of(m));
        DF_CHECK(m.contains(content_key), "{}: \"{}\"[{}] has no \"{}\" (keys: {})", where,
                 list_key, i, content_key, keys_of(m));
        // "thinking": an assistant turn's reasoning kept apart from its content (the field
        // gpt-oss's template reads; the harmony template renders it, the others refuse it).
        out.push_back({normalise_role(m[role_key].get<std::string>(), where, i),
                       content_string(m[content_key], where, i, content_key),
                       m.contains("thinking") ? content_string(m["thinking"], where, i, "thinking")
                                              : std::string()});
    }
    return out;
}

}  // namespace

JsonlRecord parse_jsonl_line(std::string_view line, std::string_view where) {
    json j;
    try {
        j = json::parse(line.begin(), line.end());
    } catch (const json::parse_error& e) {
        DF_FAIL("{}: not valid JSON ({}); each line must hold one JSON object", where, e.what());
    }
    DF_CHECK(j.is_object(), "{}: the line is a JSON {}; expected an object", where, j.type_name());
    JsonlRecord rec;
    if (j.contains("messages")) {
        rec.kind = JsonlRecord::Kind::chat;
        rec.messages = parse_messages(j["messages"], where, "messages", "role", "content");
    } else if (j.contains("conversations")) {
        rec.kind = JsonlRecord::Kind::chat;
        rec.messages = parse_messages(j["conversations"], where, "conversations", "from", "value");
    } else if (j.contains("prompt") && (j.contains("response") || j.contains("completion"))) {
        // An instruction pair is a one-turn chat: the reply is what the model learns to say.
        const char* reply = j.contains("response") ? "response" : "completion";
        rec.kind = JsonlRecord::Kind::chat;
        rec.messages = {{"user", content_string(j["prompt"], where, 0, "prompt")},
                        {"assistant", content_string(j[reply], where, 1, reply)}};
    } else if (j.contains("text")) {
        DF_CHECK(j["text"].is_string(), "{}: \"text\" is a JSON {}; expected a string", where,
                 j["text"].type_name());
        rec.kind = JsonlRecord::Kind::text;
        rec.text = j["text"].get<std::string>();
    } else {
        DF_FAIL(
            "{}: expected a \"messages\", \"conversations\", \"prompt\" + \"response\" or "
            "\"text\" key; found keys {}",
            where, keys_of(j));
    }
    return rec;
}

void read_jsonl(const std::filesystem::path& path,
                const std::function<void(const JsonlRecord&, const JsonlPosition&)>& fn,
                uint64_t max_line_bytes) {
    // Streamed: a data file may be larger than memory; only one line is held at a time.
    InputLines in(path, max_line_bytes, "JSONL file");
    JsonlPosition pos;
    pos.file_bytes = in.file_bytes();
    std::string line;
    while (in.next(line)) {
        pos.line = in.line_number();
        pos.byte_end = std::min<uint64_t>(in.offset(), pos.file_bytes);
        std::string_view body = line;
        if (pos.line == 1 && body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // BOM
        if (!body.empty() && body.back() == '\r') body.remove_suffix(1);
        if (body.find_first_not_of(" \t") == std::string_view::npos) continue;
        const std::string where = fmt::format("{}:{}", path.string(), pos.line);
        const JsonlRecord rec = parse_jsonl_line(body, where);
        try {
            fn(rec, pos);
        } catch (const Error& e) {
            // What fails while a record is handled (its tokenization, most often) is about that
            // record: the message names the file and the line, unless it already does.
            const std::string msg = e.what();
            if (msg.starts_with(where + ":")) throw;
            throw Error(fmt::format("{}: {}", where, msg), e.where());
        }
    }
}

std::vector<JsonlRecord> read_jsonl_file(const std::filesystem::path& path) {
    std::vector<JsonlRecord> out;
    read_jsonl(path, [&](const JsonlRecord& r, const JsonlPosition&) { out.push_back(r); });
    return out;
}

Encoded encode_record(const Tokenizer& tok, const JsonlRecord& rec) {
    if (rec.kind == JsonlRecord::Kind::text) return tok.encode_text(rec.text);
    return tok.encode_chat(rec.messages, /*add_generation_prompt=*/false);
}

}  // namespace dflash
