// The BPE model of an HF byte-level tokenizer: a vocabulary of byte-level strings and a ranked
// merge list. A pre-token's bytes start as one symbol each; the adjacent pair with the lowest
// merge rank (leftmost on ties) is merged until no ranked pair is left, as HF `tokenizers` does.
// With `ignore_merges` (Llama-3, gpt-oss) a pre-token that is itself in the vocabulary is one
// token. Tested by tests/tokenizer/bpe_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dflash {

class BpeModel {
  public:
    // From tokenizer.json's "model" object (type BPE). Refuses what byte-level BPE does not use
    // (byte_fallback, dropout, subword prefixes/suffixes), a vocabulary that lacks one of the 256
    // byte characters, and merges whose parts or result are not in the vocabulary.
    static BpeModel from_json(const nlohmann::json& model);

    // Appends the ids of one pre-token given as raw bytes, and the byte length of each id.
    void encode_word(std::string_view bytes, std::vector<int32_t>& ids,
                     std::vector<uint32_t>& lens) const;
    // The bytes a vocabulary id stands for; nullopt for an id the vocabulary does not have.
    std::optional<std::string_view> token_bytes(int32_t id) const;
    // The id of a vocabulary string (byte-level characters); nullopt if absent.
    std::optional<int32_t> find(std::string_view chars) const;
    int32_t max_id() const { return static_cast<int32_t>(id_bytes_.size()) - 1; }
    int64_t num_merges() const { return static_cast<int64_t>(merges_.size()); }
    bool ignore_merges() const { return ignore_merges_; }

  private:
    struct Merge {
        int32_t rank, result;
    };
    struct StringHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    void merge_symbols(std::vector<int32_t>& sym, std::vector<uint32_t>& len) const;

    std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
    std::vector<std::string> id_bytes_;  // [max id + 1] raw bytes of each id ("" if absent)
    std::vector<uint8_t> id_present_;    // [max id + 1]
    std::array<int32_t, 256> byte_ids_{};
    std::unordered_map<uint64_t, Merge> merges_;
    bool ignore_merges_ = false;
};

}  // namespace dflash
