// JSONL parsing: the three layouts, role mapping, and errors that name file, line and problem.
#include "data/jsonl.h"

#include <fstream>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::error_of;
using test::write_file;

TEST(Jsonl, ReadsAllThreeLayoutsAndSkipsEmptyLines) {
    test::TempDir dir("jsonl");
    const auto path = dir / "d.jsonl";
    write_file(path,
               "\xEF\xBB\xBF{\"text\": \"hello\"}\n"
               "\n   \n"
               "{\"messages\": [{\"role\": \"system\", \"content\": \"be nice\"}, "
               "{\"role\": \"user\", \"content\": \"hi\"}, "
               "{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"he\"}, "
               "{\"type\": \"text\", \"text\": \"llo\"}]}]}\r\n"
               "{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, "
               "{\"from\": \"gpt\", \"value\": \"a\"}, {\"from\": \"model\", \"value\": \"b\"}]}");
    std::vector<int64_t> lines;
    std::vector<JsonlRecord> recs;
    read_jsonl(path, [&](const JsonlRecord& r, const JsonlPosition& p) {
        recs.push_back(r);
        lines.push_back(p.line);
        EXPECT_LE(p.byte_end, p.file_bytes);
    });
    ASSERT_EQ(recs.size(), 3u);
    EXPECT_EQ(lines, (std::vector<int64_t>{1, 4, 5}));
    EXPECT_EQ(recs[0].kind, JsonlRecord::Kind::text);
    EXPECT_EQ(recs[0].text, "hello");
    ASSERT_EQ(recs[1].messages.size(), 3u);
    EXPECT_EQ(recs[1].messages[2].role, "assistant");
    EXPECT_EQ(recs[1].messages[2].content, "hello");
    ASSERT_EQ(recs[2].messages.size(), 3u);
    EXPECT_EQ(recs[2].messages[0].role, "user");
    EXPECT_EQ(recs[2].messages[1].role, "assistant");
    EXPECT_EQ(recs[2].messages[2].role, "assistant");
    EXPECT_EQ(recs[2].messages[1].content, "a");
}

TEST(Jsonl, MalformedLinesNameFileLineAndProblem) {
    test::TempDir dir("jsonl");
    struct Case {
        std::string line, needle;
    };
    const std::vector<Case> cases = {
        {"{\"text\": \"unterminated}", "not valid JSON"},
        {"[1, 2]", "expected an object"},
        {"{\"prompt\": \"x\"}", "found keys [prompt]"},
        {"{\"text\": 5}", "\"text\" is a JSON number"},
        {"{\"messages\": {}}", "expected an array"},
        {"{\"messages\": [{\"content\": \"x\"}]}", "no string \"role\""},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "role 'tool'"},
        {"{\"conversations\": [{\"from\": \"human\"}]}", "no \"value\""},
    };
    for (const auto& c : cases) {
        const auto path = dir / "bad.jsonl";
        write_file(path, "{\"text\": \"fine\"}\n\n" + c.line + "\n");
        const std::string msg = error_of([&] { read_jsonl_file(path); });
        EXPECT_NE(msg.find(path.string() + ":3"), std::string::npos) << c.line << " -> " << msg;
        EXPECT_NE(msg.find(c.needle), std::string::npos) << c.line << " -> " << msg;
    }
    const std::string missing = error_of([&] { read_jsonl_file(dir / "nope.jsonl"); });
    EXPECT_NE(missing.find("nope.jsonl"), std::string::npos) << missing;
}

TEST(Jsonl, EncodeRecordUsesTheRightTemplate) {
    const auto tok = make_byte_tokenizer();
    JsonlRecord text;
    text.text = "ab";
    EXPECT_EQ(encode_record(*tok, text).tokens, tok->encode_text("ab").tokens);
    JsonlRecord chat;
    chat.kind = JsonlRecord::Kind::chat;
    chat.messages = {{"user", "u"}, {"assistant", "a"}};
    EXPECT_EQ(encode_record(*tok, chat).loss_mask,
              tok->encode_chat(chat.messages, false).loss_mask);
}

}  // namespace
}  // namespace dflash
