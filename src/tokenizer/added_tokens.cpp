// Added-token matching with a byte trie (added_tokens.h). Tested by
// tests/tokenizer/added_tokens_test.cpp.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "core/error.h"
#include "core/json_int.h"

namespace dflash {

namespace {

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

AddedTokens AddedTokens::from_json(const nlohmann::json& list) {
    AddedTokens out;
    if (list.is_null()) return out;
    DF_CHECK(list.is_array(), "tokenizer.json added_tokens is {}; expected a list",
             list.type_name());
    for (const auto& t : list) {
        DF_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                     t.contains("content") && t["content"].is_string(),
                 "tokenizer.json added token {} lacks an integer \"id\" or a string \"content\"",
                 t.dump());
        DF_CHECK(!t.value("single_word", false),
                 "tokenizer.json added token \"{}\" is single_word, which dflash does not support",
                 t["content"].get<std::string>());
        const int32_t id = json_integer<int32_t>(
            t["id"],
            fmt::format("tokenizer.json added token \"{}\"'s id", t["content"].get<std::string>()));
        out.add({t["content"].get<std::string>(), id, t.value("special", false),
                 t.value("lstrip", false), t.value("rstrip", false)});
    }
    return out;
}

void AddedTokens::add(AddedToken t) {
    DF_CHECK(!t.content.empty() && t.id >= 0,
             "added token with id {} has empty content or a "
             "negative id",
             t.id);
    if (find(t.content) != nullptr) return;  // listed twice: the first wins
    int32_t node = 0;
    for (char c : t.content) {
        const auto b = static_cast<uint8_t>(c);
        auto& ch = trie_[node].children;
        const auto it = std::lower_bound(ch.begin(), ch.end(), std::pair<uint8_t, int32_t>{b, -1});
        if (it != ch.end() && it->first == b) {
            node = it->second;
            continue;
        }
        const auto fresh = static_cast<int32_t>(trie_.size());
        ch.insert(it, {b, fresh});
        trie_.emplace_back();  // invalidates `ch` and `it`; neither is used again
        node = fresh;
    }
    trie_[node].token = static_cast<int32_t>(tokens_.size());
    by_id_.emplace(t.id, tokens_.size());
    max_id_ = std::max(max_id_, t.id);
    tokens_.push_back(std::move(t));
}

int32_t AddedTokens::longest_at(std::string_view text, size_t pos) const {
    int32_t node = 0, best = -1;
    for (size_t i = pos; i < text.size(); ++i) {
        const auto& ch = trie_[node].children;
        const auto b = static_cast<uint8_t>(text[i]);
        const auto it = std::lower_bound(ch.begin(), ch.end(), std::pair<uint8_t, int32_t>{b, -1});
        if (it == ch.end() || it->first != b) break;
        node = it->second;
        if (trie_[node].token >= 0) best = trie_[node].token;
    }
    return best;
}

std::vector<TextSegment> AddedTokens::split(std::string_view text) const {
    std::vector<TextSegment> out;
    size_t plain = 0;  // start of the ordinary text not yet emitted
    for (size_t pos = 0; pos < text.size() && !tokens_.empty();) {
        const int32_t k = longest_at(text, pos);
        if (k < 0) {
            ++pos;
            continue;
        }
        const AddedToken& t = tokens_[static_cast<size_t>(k)];
        size_t begin = pos, end = pos + t.content.size();
        if (t.lstrip)
            while (begin > plain && is_ascii_space(text[begin - 1])) --begin;
        if (t.rstrip)
            while (end < text.size() && is_ascii_space(text[end])) ++end;
        if (begin > plain) out.push_back({plain, begin, -1});
        out.push_back({begin, end, t.id});
        plain = pos = end;
    }
    if (plain < text.size()) out.push_back({plain, text.size(), -1});
    return out;
}

const AddedToken* AddedTokens::find(std::string_view content) const {
    for (const auto& t : tokens_)
        if (t.content == content) return &t;
    return nullptr;
}

const AddedToken* AddedTokens::by_id(int32_t id) const {
    const auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace dflash
