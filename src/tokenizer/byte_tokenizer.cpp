// ByteTokenizer: every byte is a token (ids 0..255), followed by the special tokens. Needs no
// files, so the demo and the tests run anywhere. Tested by tests/tokenizer/tokenizer_test.cpp.
#include <array>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

namespace {

constexpr int32_t kNumBytes = 256;
// Special tokens in id order after the bytes; the chat markers follow the four basic ones.
constexpr std::array<std::string_view, 8> kSpecialNames = {
    "pad", "bos", "eos", "mask", "system", "user", "assistant", "end_turn"};
constexpr int64_t kByteVocab = (kNumBytes + static_cast<int64_t>(kSpecialNames.size()) + 7) / 8 * 8;

class ByteTokenizer final : public Tokenizer {
  public:
    ByteTokenizer() {
        sp_.pad = kNumBytes + 0;
        sp_.bos = kNumBytes + 1;
        sp_.eos = kNumBytes + 2;
        sp_.mask = kNumBytes + 3;
        sp_.system = kNumBytes + 4;
        sp_.user = kNumBytes + 5;
        sp_.assistant = kNumBytes + 6;
        sp_.end_turn = kNumBytes + 7;
    }

    std::string name() const override { return "byte"; }
    int64_t vocab_size() const override { return kByteVocab; }
    const SpecialTokens& specials() const override { return sp_; }

    std::vector<int32_t> encode(std::string_view text) const override {
        std::vector<int32_t> ids(text.size());
        for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
        return ids;
    }

    std::string decode(std::span<const int32_t> ids) const override {
        std::string out;
        out.reserve(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) {
            const int32_t id = ids[i];
            DF_CHECK(id >= 0 && id < kByteVocab,
                     "token id {} at position {} is outside the byte tokenizer's vocabulary "
                     "(0..{}); was the data tokenized with another tokenizer?",
                     id, i, kByteVocab - 1);
            if (id < kNumBytes) {
                out.push_back(static_cast<char>(id));
            } else if (id < kNumBytes + static_cast<int32_t>(kSpecialNames.size())) {
                out += "<|";
                out += kSpecialNames[static_cast<size_t>(id - kNumBytes)];
                out += "|>";
            } else {
                out += "<|reserved_" + std::to_string(id) + "|>";
            }
        }
        return out;
    }

  private:
    SpecialTokens sp_{};
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
    return std::make_unique<ByteTokenizer>();
}

}  // namespace dflash
