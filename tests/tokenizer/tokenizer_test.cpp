// ByteTokenizer, the text/chat templates and their loss masks, and the UTF-8 stream decoder.
#include "tokenizer/tokenizer.h"

#include <string>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

TEST(ByteTokenizer, VocabularyAndSpecials) {
    const auto tok = make_byte_tokenizer();
    EXPECT_EQ(tok->name(), "byte");
    EXPECT_EQ(tok->vocab_size() % 8, 0);
    EXPECT_GE(tok->vocab_size(), 264);
    const SpecialTokens& sp = tok->specials();
    const int32_t ids[] = {sp.pad,    sp.bos,  sp.eos,       sp.mask,
                           sp.system, sp.user, sp.assistant, sp.end_turn};
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(ids[i], 256 + static_cast<int32_t>(i));
    EXPECT_EQ(tok->decode(ids),
              "<|pad|><|bos|><|eos|><|mask|><|system|><|user|><|assistant|><|end_turn|>");
}

TEST(ByteTokenizer, RoundTripsArbitraryBytes) {
    const auto tok = make_byte_tokenizer();
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    const std::string text = "héllo, 世界 🙂\n" + all;
    const auto ids = tok->encode(text);
    ASSERT_EQ(ids.size(), text.size());
    for (int32_t id : ids) EXPECT_LT(id, 256);
    EXPECT_EQ(tok->decode(ids), text);
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideVocab) {
    const auto tok = make_byte_tokenizer();
    const int32_t bad[] = {65, static_cast<int32_t>(tok->vocab_size())};
    EXPECT_THROW(tok->decode(bad), Error);
    const int32_t neg[] = {-1};
    EXPECT_THROW(tok->decode(neg), Error);
}

TEST(Tokenizer, EncodeTextMasksEverythingAfterBos) {
    const auto tok = make_byte_tokenizer();
    const SpecialTokens& sp = tok->specials();
    const Encoded e = tok->encode_text("abc");
    EXPECT_EQ(e.tokens, (std::vector<int32_t>{sp.bos, 'a', 'b', 'c', sp.eos}));
    EXPECT_EQ(e.loss_mask, (std::vector<uint8_t>{0, 1, 1, 1, 1}));
}

TEST(Tokenizer, EncodeChatMasksOnlyAssistantContentAndEndTurn) {
    const auto tok = make_byte_tokenizer();
    const SpecialTokens& sp = tok->specials();
    const std::vector<ChatMessage> msgs = {
        {"system", "S"}, {"user", "hi"}, {"assistant", "yo"}, {"user", "q"}, {"assistant", "a"}};
    const Encoded e = tok->encode_chat(msgs, false);
    const std::vector<int32_t> want_t = {
        sp.bos,  sp.system,   'S',          sp.end_turn,  sp.user, 'h',
        'i',     sp.end_turn, sp.assistant, 'y',          'o',     sp.end_turn,
        sp.user, 'q',         sp.end_turn,  sp.assistant, 'a',     sp.end_turn};
    const std::vector<uint8_t> want_m = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1};
    EXPECT_EQ(e.tokens, want_t);
    EXPECT_EQ(e.loss_mask, want_m);

    const Encoded p = tok->encode_chat({{"user", "hi"}}, true);
    EXPECT_EQ(p.tokens,
              (std::vector<int32_t>{sp.bos, sp.user, 'h', 'i', sp.end_turn, sp.assistant}));
    EXPECT_EQ(p.loss_mask, (std::vector<uint8_t>(6, 0)));
    EXPECT_THROW(tok->encode_chat({{"tool", "x"}}, false), Error);
}

TEST(Utf8, Validation) {
    EXPECT_TRUE(is_valid_utf8("plain ascii"));
    EXPECT_TRUE(is_valid_utf8("é世🙂"));
    EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
    EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
    EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
    EXPECT_FALSE(is_valid_utf8("\xE4\xB8"));          // truncated
    EXPECT_FALSE(is_valid_utf8("\x80"));              // lone continuation
}

TEST(StreamDecoder, NeverSplitsACharacter) {
    const auto tok = make_byte_tokenizer();
    const std::string text = "a é 世界 🙂!";
    StreamDecoder dec(*tok);
    std::string joined;
    for (int32_t id : tok->encode(text)) {
        const std::string piece = dec.push(id);
        EXPECT_TRUE(is_valid_utf8(piece)) << "piece after id " << id;
        joined += piece;
    }
    joined += dec.flush();
    EXPECT_EQ(joined, text);

    // The four bytes of U+1F642 come out together, on the last one.
    StreamDecoder d2(*tok);
    EXPECT_EQ(d2.push(0xF0), "");
    EXPECT_EQ(d2.push(0x9F), "");
    EXPECT_EQ(d2.push(0x99), "");
    EXPECT_EQ(d2.push(0x82), "🙂");
}

TEST(StreamDecoder, InvalidAndUnfinishedBytesBecomeReplacementChars) {
    const auto tok = make_byte_tokenizer();
    StreamDecoder dec(*tok);
    EXPECT_EQ(dec.push(0x80), "\xEF\xBF\xBD");  // lone continuation byte
    EXPECT_EQ(dec.push(0xE4), "");              // start of a 3-byte sequence...
    EXPECT_EQ(dec.push('x'), "\xEF\xBF\xBDx");  // ...broken by ASCII
    EXPECT_EQ(dec.push(0xE4), "");
    EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");  // unfinished at the end
    EXPECT_EQ(dec.flush(), "");
    EXPECT_EQ(dec.push(tok->specials().eos), "<|eos|>");
}

TEST(Tokenizer, FactoryByName) {
    EXPECT_EQ(make_tokenizer("byte")->name(), "byte");
    try {
        make_tokenizer("gpt9");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("gpt9"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace dflash
