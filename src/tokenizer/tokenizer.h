// The tokenizer interface every other layer uses (model, data, inference), plus the chat template
// and a UTF-8-safe streaming decoder. Concrete tokenizers: byte_tokenizer.cpp (ids are bytes);
// the HF byte-level BPE tokenizer will implement the same interface.
// Tested by tests/tokenizer/tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dflash {

// Ids of the special tokens. Every tokenizer has all eight; DFlash needs `mask` for the block
// inputs and the chat template needs the role markers.
struct SpecialTokens {
    int32_t bos, eos, pad, mask;
    int32_t system, user, assistant, end_turn;
};

struct ChatMessage {
    std::string role;  // system | user | assistant
    std::string content;
};

// A tokenized sample: the training loss (and anchor sampling) only looks at positions with
// loss_mask == 1, i.e. the response.
struct Encoded {
    std::vector<int32_t> tokens;     // [S]
    std::vector<uint8_t> loss_mask;  // [S], 0 or 1
};

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;
    virtual std::string name() const = 0;
    virtual int64_t vocab_size() const = 0;
    virtual const SpecialTokens& specials() const = 0;
    // Text to ids; no special tokens are added and none are recognised in `text`.
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    // Ids to text; special tokens are rendered as <|name|>. Throws on an id outside the vocabulary.
    virtual std::string decode(std::span<const int32_t> ids) const = 0;

    // Plain text: [bos] text [eos]; loss mask 1 on every token after bos.
    virtual Encoded encode_text(std::string_view text) const;
    // Chat: [bos], then per message [role marker] content [end_turn]. Loss mask 1 on assistant
    // content tokens and their end_turn, 0 elsewhere. `add_generation_prompt` appends
    // [assistant] so that the model continues with the reply (inference prompts).
    virtual Encoded encode_chat(const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt) const;
};

// The byte-level tokenizer: ids 0..255 are bytes, then pad, bos, eos, mask, system, user,
// assistant, end_turn; the vocabulary is rounded up to a multiple of 8 (unused ids reserved).
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// A tokenizer by name as given on a command line: "byte".
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec);

// Decodes a token stream piece by piece and emits only complete UTF-8 sequences, so a character
// whose bytes span several tokens is never split in a printed stream. Invalid bytes come out as
// U+FFFD. Holds a reference to the tokenizer, which must outlive it.
class StreamDecoder {
  public:
    explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
    // The text that became complete with this token (possibly empty).
    std::string push(int32_t id);
    // Whatever is still pending (an incomplete sequence comes out as U+FFFD); resets the state.
    std::string flush();

  private:
    const Tokenizer& tok_;
    std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

// Length of the longest prefix of `s` made of complete UTF-8 sequences, where `s` may end in the
// middle of one. Invalid bytes count as complete (one byte each). Used by StreamDecoder.
size_t utf8_complete_prefix(std::string_view s);
// True if `s` is valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace dflash
