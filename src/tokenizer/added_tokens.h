// Added tokens of an HF tokenizer (special ones such as <|im_end|> and <|eot_id|>, and plain ones
// such as Qwen3's <think>): they are found in the text before anything else and are never split
// or merged. Matching is leftmost-longest, as HF `tokenizers` does. Tested by
// tests/tokenizer/added_tokens_test.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dflash {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool lstrip = false, rstrip = false;  // the match also takes the ASCII whitespace left/right
};

// A stretch of text: an added token (id >= 0) or ordinary text to pre-tokenize (id == -1).
struct TextSegment {
    size_t begin = 0, end = 0;
    int32_t id = -1;
};

class AddedTokens {
  public:
    // From tokenizer.json's "added_tokens" list (null or absent: none). Refuses single_word
    // tokens (not supported) and empty contents.
    static AddedTokens from_json(const nlohmann::json& list);
    void add(AddedToken t);

    // Cuts `text` into segments covering it, in order.
    std::vector<TextSegment> split(std::string_view text) const;
    const AddedToken* find(std::string_view content) const;
    const AddedToken* by_id(int32_t id) const;
    int32_t max_id() const { return max_id_; }
    const std::vector<AddedToken>& all() const { return tokens_; }

  private:
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
        int32_t token = -1;                                 // index into tokens_
    };
    // Index of the longest token matching at text[pos], or -1.
    int32_t longest_at(std::string_view text, size_t pos) const;

    std::vector<AddedToken> tokens_;
    std::vector<Node> trie_ = std::vector<Node>(1);  // node 0 is the root
    std::unordered_map<int32_t, size_t> by_id_;
    int32_t max_id_ = -1;
};

}  // namespace dflash
