// Prompt files for `dflash bench` / `dflash generate` (layouts in prompts.h).
// Tested by tests/infer/prompts_test.cpp.
#include "infer/prompts.h"

#include <charconv>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/jsonl.h"

namespace dflash {

namespace {

using nlohmann::json;

std::vector<int32_t> ids_from_json(const json& arr, std::string_view where) {
    DF_CHECK(arr.is_array(), "{}: \"prompt_ids\" is a JSON {}; expected an array of token ids",
             where, arr.type_name());
    std::vector<int32_t> ids;
    ids.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
        const json& v = arr[i];
        DF_CHECK(v.is_number_integer(), "{}: \"prompt_ids\"[{}] is {}; expected an integer id",
                 where, i, v.dump());
        const int64_t id = v.get<int64_t>();
        DF_CHECK(id >= 0 && id <= INT32_MAX, "{}: \"prompt_ids\"[{}]={} is not a valid token id",
                 where, i, id);
        ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
}

const Tokenizer& need_tokenizer(const Tokenizer* tok, std::string_view where,
                                std::string_view what) {
    DF_CHECK(tok != nullptr,
             "{}: a {} prompt needs a tokenizer, but the target directory names none; give the "
             "prompt as {{\"prompt_ids\": [...]}} instead",
             where, what);
    return *tok;
}

// The last user message, else the last message: what a person recognises the chat by.
std::string chat_label(const std::vector<ChatMessage>& msgs) {
    for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
        if (it->role == "user") return short_label(it->content);
    return msgs.empty() ? std::string() : short_label(msgs.back().content);
}

void check_ids(const std::vector<int32_t>& ids, int64_t vocab_size, std::string_view where) {
    DF_CHECK(!ids.empty(), "{}: the prompt is empty; every prompt needs at least one token", where);
    if (vocab_size <= 0) return;
    for (size_t i = 0; i < ids.size(); ++i) {
        DF_CHECK(ids[i] < vocab_size,
                 "{}: prompt token {} has id {}, outside the target's vocabulary (ids 0..{}); "
                 "was the prompt made for another model?",
                 where, i, ids[i], vocab_size - 1);
    }
}

}  // namespace

std::vector<int32_t> encode_text_prompt(const Tokenizer& tok, std::string_view text) {
    std::vector<int32_t> ids;
    if (tok.specials().bos >= 0) ids.push_back(tok.specials().bos);  // Qwen adds none
    const auto body = tok.encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

Prompt parse_prompt_line(std::string_view line, const Tokenizer* tok, int64_t vocab_size,
                         std::string_view where) {
    json j;
    try {
        j = json::parse(line.begin(), line.end());
    } catch (const json::parse_error& e) {
        DF_FAIL("{}: not valid JSON ({}); each line must hold one JSON object", where, e.what());
    }
    DF_CHECK(j.is_object(),
             "{}: the line is a JSON {}; expected an object such as "
             "{{\"prompt\": \"...\"}}",
             where, j.type_name());
    Prompt p;
    if (j.contains("prompt_ids")) {
        p.tokens = ids_from_json(j["prompt_ids"], where);
        p.label = fmt::format("ids[{}]", p.tokens.size());
    } else if (j.contains("messages") || j.contains("conversations")) {
        const Tokenizer& t = need_tokenizer(tok, where, "chat");
        const JsonlRecord rec = parse_jsonl_line(line, where);
        DF_CHECK(!rec.messages.empty(), "{}: the prompt is empty: the chat has no messages", where);
        p.tokens = t.encode_chat(rec.messages, /*add_generation_prompt=*/true).tokens;
        p.label = chat_label(rec.messages);
    } else if (j.contains("prompt")) {
        DF_CHECK(j["prompt"].is_string(), "{}: \"prompt\" is a JSON {}; expected a string", where,
                 j["prompt"].type_name());
        const std::string text = j["prompt"].get<std::string>();
        DF_CHECK(!text.empty(), "{}: the prompt is empty (\"prompt\": \"\")", where);
        p.tokens = encode_text_prompt(need_tokenizer(tok, where, "text"), text);
        p.label = short_label(text);
    } else {
        std::string keys;
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (!keys.empty()) keys += ", ";
            keys += it.key();
        }
        DF_FAIL("{}: expected a \"prompt\", \"messages\" or \"prompt_ids\" key; found keys [{}]",
                where, keys);
    }
    if (j.contains("label")) {
        DF_CHECK(j["label"].is_string(), "{}: \"label\" is a JSON {}; expected a string", where,
                 j["label"].type_name());
        p.label = short_label(j["label"].get<std::string>());
    }
    check_ids(p.tokens, vocab_size, where);
    return p;
}

std::vector<Prompt> read_prompts(const std::filesystem::path& path, const Tokenizer* tok,
                                 int64_t vocab_size, uint64_t max_line_bytes) {
    InputLines in(path, max_line_bytes, "prompts file");
    std::vector<Prompt> out;
    std::string line;
    while (in.next(line)) {
        const int64_t lineno = in.line_number();
        std::string_view body = line;
        if (lineno == 1 && body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // BOM
        if (!body.empty() && body.back() == '\r') body.remove_suffix(1);
        if (body.find_first_not_of(" \t") == std::string_view::npos) continue;
        const std::string where = fmt::format("{}:{}", path.string(), lineno);
        try {
            out.push_back(parse_prompt_line(body, tok, vocab_size, where));
        } catch (const Error& e) {
            // The tokenizer's own errors (a text it cannot encode) name the prompt's line too.
            const std::string msg = e.what();
            if (msg.starts_with(where + ":")) throw;
            throw Error(fmt::format("{}: {}", where, msg), e.where());
        }
    }
    DF_CHECK(!out.empty(),
             "prompts file '{}' holds no prompts; expected one JSON object per line such as "
             "{{\"prompt\": \"Hello\"}}",
             path.string());
    return out;
}

std::vector<int32_t> parse_id_list(std::string_view text) {
    std::vector<int32_t> ids;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t end = text.find(',', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view item = text.substr(pos, end - pos);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        int64_t v = -1;
        const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        DF_CHECK(!item.empty() && ec == std::errc() && ptr == item.data() + item.size() && v >= 0 &&
                     v <= INT32_MAX,
                 "token id list entry {} is '{}'; expected comma-separated non-negative integers "
                 "such as 1,2,3",
                 ids.size(), item);
        ids.push_back(static_cast<int32_t>(v));
        pos = end + 1;
    }
    return ids;
}

std::string short_label(std::string_view text, size_t max_chars) {
    std::string flat;
    for (char c : text) {
        const bool space = c == ' ' || c == '\n' || c == '\r' || c == '\t';
        if (space && (flat.empty() || flat.back() == ' ')) continue;
        flat += space ? ' ' : c;
    }
    while (!flat.empty() && flat.back() == ' ') flat.pop_back();
    if (flat.size() <= max_chars) return flat;
    const size_t keep = max_chars > 3 ? max_chars - 3 : 0;
    return flat.substr(0, utf8_complete_prefix(std::string_view(flat).substr(0, keep))) + "...";
}

}  // namespace dflash
