// The tokenizer-independent parts: the plain-text and chat templates with their loss masks, the
// factory by name, UTF-8 validation and the streaming decoder.
// Tested by tests/tokenizer/tokenizer_test.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"

namespace dflash {

namespace {

enum class Utf8Status { complete, incomplete, invalid };
struct Utf8Step {
    Utf8Status status;
    size_t len;  // bytes of the sequence when complete
};

// Classifies the UTF-8 sequence starting at s[i] (RFC 3629 table: the second byte's range depends
// on the lead byte, which rules out overlongs, surrogates and code points above U+10FFFF). An
// invalid sequence's len is its maximal subpart: the lead byte and the continuation bytes that
// were still acceptable, so that one U+FFFD replaces it.
Utf8Step utf8_step(std::string_view s, size_t i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) return {Utf8Status::complete, 1};
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return {Utf8Status::invalid, 1};
    }
    for (size_t k = 1; k < len; ++k) {
        if (i + k >= s.size()) return {Utf8Status::incomplete, 0};
        const auto b = static_cast<unsigned char>(s[i + k]);
        const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) return {Utf8Status::invalid, k};
    }
    return {Utf8Status::complete, len};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

void append_marked(Encoded& out, std::span<const int32_t> ids, uint8_t mask) {
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.loss_mask.insert(out.loss_mask.end(), ids.size(), mask);
}

void append_one(Encoded& out, int32_t id, uint8_t mask) {
    out.tokens.push_back(id);
    out.loss_mask.push_back(mask);
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const Utf8Step st = utf8_step(s, i);
        if (st.status != Utf8Status::complete) return false;
        i += st.len;
    }
    return true;
}

size_t utf8_complete_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const Utf8Step st = utf8_step(s, i);
        if (st.status == Utf8Status::incomplete) break;
        i += st.len;
    }
    return i;
}

std::string utf8_lossy(std::string_view s, std::vector<uint32_t>* source) {
    std::string out;
    out.reserve(s.size());
    if (source) source->clear();
    auto emit = [&](std::string_view bytes, size_t from) {
        out.append(bytes);
        if (source) source->insert(source->end(), bytes.size(), static_cast<uint32_t>(from));
    };
    for (size_t i = 0; i < s.size();) {
        const Utf8Step st = utf8_step(s, i);
        if (st.status == Utf8Status::complete) {
            for (size_t k = 0; k < st.len; ++k) emit(s.substr(i + k, 1), i + k);
            i += st.len;
        } else {
            // An unfinished sequence at the end is one maximal subpart: the rest of the input.
            emit(kReplacement, i);
            i = st.status == Utf8Status::invalid ? i + st.len : s.size();
        }
    }
    if (source) source->push_back(static_cast<uint32_t>(s.size()));
    return out;
}

Encoded Tokenizer::encode_text(std::string_view text) const {
    const SpecialTokens& sp = specials();
    Encoded out;
    if (sp.bos >= 0) append_one(out, sp.bos, 0);
    append_marked(out, encode(text), 1);
    if (sp.eos >= 0) append_one(out, sp.eos, 1);
    return out;
}

Encoded Tokenizer::encode_chat(const std::vector<ChatMessage>& msgs,
                               bool add_generation_prompt) const {
    const SpecialTokens& sp = specials();
    Encoded out;
    append_one(out, sp.bos, 0);
    for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        int32_t marker = 0;
        if (m.role == "system") {
            marker = sp.system;
        } else if (m.role == "user") {
            marker = sp.user;
        } else if (m.role == "assistant") {
            marker = sp.assistant;
        } else {
            DF_FAIL("chat message {} has role '{}'; expected system, user or assistant", i, m.role);
        }
        DF_CHECK(marker >= 0, "tokenizer '{}' has no {} marker token for its chat template", name(),
                 m.role);
        DF_CHECK(m.thinking.empty(),
                 "chat message {} has a separate thinking field, which the byte tokenizer's chat "
                 "template does not render; put the reasoning into the content",
                 i);
        // Only the reply is trained on: the drafter learns to predict what the target says,
        // not what the user typed. end_turn is part of the reply (the model must learn to stop).
        const uint8_t mask = marker == sp.assistant ? 1 : 0;
        append_one(out, marker, 0);
        append_marked(out, encode(m.content), mask);
        append_one(out, sp.end_turn, mask);
    }
    if (add_generation_prompt) append_one(out, sp.assistant, 0);
    return out;
}

std::vector<int32_t> Tokenizer::stop_tokens() const {
    std::vector<int32_t> out;
    for (int32_t id : {specials().eos, specials().end_turn})
        if (id >= 0 && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    return out;
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec) {
    if (spec == "byte") return make_byte_tokenizer();
    DF_CHECK(!spec.starts_with("hf-bpe:"),
             "tokenizer '{}' is an HF tokenizer.json, which is read from a model directory, not "
             "made by name; give the model directory (e.g. `dflash data prepare --model DIR`)",
             spec);
    DF_FAIL(
        "unknown tokenizer '{}'; available by name: byte (HF tokenizers come from a model "
        "directory's tokenizer.json)",
        spec);
}

std::string StreamDecoder::push(int32_t id) {
    const int32_t one[1] = {id};
    pending_ += tok_.decode(one);
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
        const Utf8Step st = utf8_step(pending_, i);
        if (st.status == Utf8Status::incomplete) break;
        if (st.status == Utf8Status::invalid) {
            out += kReplacement;
        } else {
            out.append(pending_, i, st.len);
        }
        i += st.len;
    }
    pending_.erase(0, i);
    return out;
}

std::string StreamDecoder::flush() {
    // Whatever is left is a valid but unfinished prefix: one replacement character stands for it.
    std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
    pending_.clear();
    return out;
}

}  // namespace dflash
