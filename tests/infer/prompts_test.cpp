// Prompt files: the three layouts give the token ids the engine expects (text = [bos] text without
// eos, chat = template with the generation prompt, ids as given), labels, and errors that name
// FILE:LINE (empty prompts, bad JSON, ids outside the vocabulary, text without a tokenizer).
#include "infer/prompts.h"

#include <sys/stat.h>

#include <fstream>
#include <functional>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::error_of;
using test::has;
using test::write_file;

TEST(Prompts, ReadsTextChatAndIdLayouts) {
    auto tok = make_byte_tokenizer();
    const SpecialTokens& sp = tok->specials();
    test::TempDir dir("prompts");
    const auto path = dir / "p.jsonl";
    write_file(path,
               "{\"prompt\": \"Hi\\nthere\"}\n"
               "\n"
               "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}]}\r\n"
               "{\"prompt_ids\": [5, 7, 9], \"label\": \"mine\"}\n"
               "{\"prompt_ids\": [3]}\n");
    const auto ps = read_prompts(path, tok.get(), tok->vocab_size());
    ASSERT_EQ(ps.size(), 4u);
    // Text: bos then the bytes, and no eos (the model must continue, not stop).
    EXPECT_EQ(ps[0].tokens,
              (std::vector<int32_t>{sp.bos, 'H', 'i', '\n', 't', 'h', 'e', 'r', 'e'}));
    EXPECT_EQ(ps[0].label, "Hi there");
    EXPECT_EQ(ps[1].tokens, tok->encode_chat({{"user", "2+2?"}}, true).tokens);
    EXPECT_EQ(ps[1].tokens.back(), sp.assistant);  // generation prompt
    EXPECT_EQ(ps[1].label, "2+2?");
    EXPECT_EQ(ps[2].tokens, (std::vector<int32_t>{5, 7, 9}));
    EXPECT_EQ(ps[2].label, "mine");
    EXPECT_EQ(ps[3].label, "ids[1]");
}

TEST(Prompts, IdPromptsNeedNoTokenizer) {
    const auto p = parse_prompt_line("{\"prompt_ids\": [0, 36]}", nullptr, 37, "x:1");
    EXPECT_EQ(p.tokens, (std::vector<int32_t>{0, 36}));
    EXPECT_TRUE(has(error_of([] { parse_prompt_line("{\"prompt\": \"hi\"}", nullptr, 37, "x:4"); }),
                    "x:4: a text prompt needs a tokenizer"));
    EXPECT_TRUE(has(error_of([] {
                        parse_prompt_line(
                            "{\"messages\": [{\"role\": \"user\", \"content\": "
                            "\"a\"}]}",
                            nullptr, 37, "x:5");
                    }),
                    "x:5: a chat prompt needs a tokenizer"));
}

TEST(Prompts, EmptyPromptsAreErrorsNamingTheLine) {
    auto tok = make_byte_tokenizer();
    test::TempDir dir("prompts");
    const auto path = dir / "p.jsonl";
    const std::string ok = "{\"prompt\": \"fine\"}\n";
    for (const std::string bad :
         {"{\"prompt\": \"\"}", "{\"prompt_ids\": []}", "{\"messages\": []}"}) {
        write_file(path, ok + "\n" + bad + "\n" + ok);
        const std::string e = error_of([&] { read_prompts(path, tok.get(), 0); });
        EXPECT_TRUE(has(e, path.string() + ":3:")) << e;
        EXPECT_TRUE(has(e, "empty")) << e;
    }
}

TEST(Prompts, MalformedLinesNameFileAndLine) {
    auto tok = make_byte_tokenizer();
    test::TempDir dir("prompts");
    const auto path = dir / "p.jsonl";
    const std::string where = path.string();
    auto err = [&](const std::string& body, int64_t vocab) {
        write_file(path, "{\"prompt\": \"a\"}\n" + body + "\n");
        return error_of([&] { read_prompts(path, tok.get(), vocab); });
    };
    EXPECT_TRUE(has(err("{\"prompt\": ", 0), where + ":2: not valid JSON"));
    EXPECT_TRUE(has(err("[1, 2]", 0), where + ":2: the line is a JSON array"));
    EXPECT_TRUE(has(err("{\"text\": \"a\"}", 0),
                    "expected a \"prompt\", \"messages\" or "
                    "\"prompt_ids\" key; found keys [text]"));
    EXPECT_TRUE(has(err("{\"prompt\": 3}", 0), where + ":2: \"prompt\" is a JSON number"));
    EXPECT_TRUE(has(err("{\"prompt_ids\": [1, \"x\"]}", 0), "\"prompt_ids\"[1] is \"x\""));
    EXPECT_TRUE(has(err("{\"prompt_ids\": [1, -4]}", 0), "\"prompt_ids\"[1]=-4"));
    // Ids outside the target's vocabulary, from any layout (a text prompt starts with bos = 257).
    EXPECT_TRUE(
        has(err("{\"prompt_ids\": [1, 300]}", 264), where + ":2: prompt token 1 has id 300"));
    EXPECT_TRUE(has(err("{\"prompt_ids\": [1]}", 50), where + ":1: prompt token 0 has id 257"));
    EXPECT_TRUE(has(err("{\"prompt_ids\": [1], \"label\": 4}", 0), "\"label\" is a JSON number"));
}

TEST(Prompts, MissingAndEmptyFilesAreErrors) {
    auto tok = make_byte_tokenizer();
    test::TempDir dir("prompts");
    EXPECT_TRUE(has(error_of([&] { read_prompts(dir / "nope.jsonl", tok.get(), 0); }),
                    "cannot open prompts file"));
    // Not regular files: refused at once (a FIFO is not waited on, /dev/zero not read forever).
    ASSERT_EQ(::mkfifo((dir / "fifo.jsonl").c_str(), 0644), 0);
    for (const auto& [p, kind] : std::vector<std::pair<std::filesystem::path, std::string>>{
             {"/dev/zero", "is a character device"},
             {dir / "fifo.jsonl", "is a FIFO"},
             {dir.path(), "is a directory"}}) {
        const std::string e = error_of([&] { read_prompts(p, tok.get(), 0); });
        EXPECT_TRUE(has(e, "prompts file '" + p.string() + "' " + kind)) << e;
    }
    // Lines are capped one by one.
    write_file(dir / "two.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": \"bbbbbbbbbbbbbbbbbbbb\"}\n");
    EXPECT_EQ(read_prompts(dir / "two.jsonl", tok.get(), 0, 40).size(), 2u);
    const std::string e = error_of([&] { read_prompts(dir / "two.jsonl", tok.get(), 0, 20); });
    EXPECT_TRUE(has(e, "two.jsonl': line 2 is longer than the 20 bytes cap")) << e;
    write_file(dir / "empty.jsonl", "\n  \n");
    EXPECT_TRUE(has(error_of([&] { read_prompts(dir / "empty.jsonl", tok.get(), 0); }),
                    "holds no prompts"));
}

TEST(Prompts, IdListParsing) {
    EXPECT_EQ(parse_id_list("1,2, 3"), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(parse_id_list("42"), (std::vector<int32_t>{42}));
    for (const char* bad : {"", "1,,2", "1,2,", "a", "1.5", "-3", "99999999999"}) {
        EXPECT_TRUE(has(error_of([&] { parse_id_list(bad); }), "token id list entry")) << bad;
    }
}

TEST(Prompts, ShortLabelsAreOneLineAndUtf8Safe) {
    EXPECT_EQ(short_label("a\n\n b\tc"), "a b c");
    EXPECT_EQ(short_label(std::string(50, 'x'), 10), "xxxxxxx...");
    // "é" is two bytes: 7 bytes are kept before "...", which would split the fourth one.
    const std::string e = short_label("éééééé", 10);
    EXPECT_EQ(e, "ééé...");
    EXPECT_TRUE(is_valid_utf8(e));
}

}  // namespace
}  // namespace dflash
