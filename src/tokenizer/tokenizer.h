// The tokenizer interface every other layer uses (model, data, inference), plus the byte
// tokenizer's chat template and a UTF-8-safe streaming decoder. Concrete tokenizers:
// byte_tokenizer.cpp (ids are bytes) and hf_tokenizer.cpp (HF tokenizer.json byte-level BPE, whose
// chat templates are in chat_template.h). Tested by tests/tokenizer/tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dflash {

// Ids of the special tokens; -1 where a tokenizer has none. The byte tokenizer has all eight (its
// chat template is made of the role markers); an HF tokenizer has bos only when its
// post-processor adds one (Llama-3, not Qwen), eos from tokenizer_config.json, mask when its
// vocabulary holds <|MASK|>, end_turn from its chat template (<|im_end|>, <|eot_id|>) and no role
// markers (its templates write roles as text).
struct SpecialTokens {
    int32_t bos = -1, eos = -1, pad = -1, mask = -1;
    int32_t system = -1, user = -1, assistant = -1, end_turn = -1;
};

struct ChatMessage {
    std::string role;  // system | user | assistant (| developer, harmony only)
    std::string content;
    // An assistant turn's reasoning where a template keeps it apart from the content (harmony's
    // analysis channel, the `thinking` field of gpt-oss's template); "" for none. Templates that
    // keep reasoning inside the content (Qwen3's <think>) refuse a non-empty one.
    std::string thinking = {};
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
    // Text to ids; no bos/eos are added. The byte tokenizer recognises no special tokens in
    // `text`; an HF tokenizer recognises its added tokens (as HF `encode` does by default).
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    // Ids to the bytes they stand for (possibly ending inside a UTF-8 character); special tokens
    // are rendered as their text (<|name|>). Throws on an id outside the vocabulary.
    virtual std::string decode(std::span<const int32_t> ids) const = 0;

    // Plain text: [bos] text [eos] (bos/eos left out where the tokenizer has none); loss mask 1 on
    // every token after bos.
    virtual Encoded encode_text(std::string_view text) const;
    // Chat, the byte tokenizer's template: [bos], then per message [role marker] content
    // [end_turn]. Loss mask 1 on assistant content tokens and their end_turn, 0 elsewhere.
    // `add_generation_prompt` appends [assistant] so that the model continues with the reply
    // (inference prompts). HF tokenizers override this with their model's template.
    virtual Encoded encode_chat(const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt) const;
    // The chat template encode_chat applies ("byte", "qwen3", "llama3", "harmony", ...; "none"
    // when the tokenizer has none and encode_chat throws).
    virtual std::string chat_template_name() const { return "byte"; }
    // The ids at which a generated reply ends, as far as the tokenizer and its chat template
    // know: eos, end_turn, and whatever else the template ends replies with (harmony: <|call|>
    // and <|endoftext|> besides <|return|>); no -1, no duplicates.
    virtual std::vector<int32_t> stop_tokens() const;
    // Writes whatever files reproduce this tokenizer into `dir` (HF: tokenizer.json and
    // tokenizer_config.json); the byte tokenizer needs none. See save_tokenizer_spec.
    virtual void save_files(const std::filesystem::path& dir) const {}
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
// middle of one. Invalid bytes count as complete. Used by StreamDecoder.
size_t utf8_complete_prefix(std::string_view s);
// True if `s` is valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` with every ill-formed part replaced by U+FFFD, one per maximal subpart (the Unicode
// recommendation that Python's errors="replace", Rust's from_utf8_lossy and WHATWG decoders
// follow). When `source` is given it receives, for each output byte and one past the end, the
// offset of the input byte it came from.
std::string utf8_lossy(std::string_view s, std::vector<uint32_t>* source = nullptr);

}  // namespace dflash
