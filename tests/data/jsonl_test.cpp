// JSONL parsing: the four layouts, role mapping, and errors that name file, line and problem; the
// chat templates of an HF tokenizer applied to records; inputs that are not regular files (a
// directory, /dev/zero, a FIFO) refused at once, an overlong line refused with the cap named, and a
// record the callback (the tokenizer) fails on named by file and line.
#include "data/jsonl.h"

#include <sys/stat.h>

#include <fstream>

#include "core/error.h"
#include "support/test_util.h"
#include "tokenizer/hf_tokenizer.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
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
        {"{\"prompt\": \"x\", \"response\": 3}", "\"response\" is a JSON number"},
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

TEST(Jsonl, PromptResponsePairsAreOneTurnChats) {
    test::TempDir dir("jsonl");
    const auto path = dir / "pairs.jsonl";
    write_file(path,
               "{\"prompt\": \"What?\", \"response\": \"That.\"}\n"
               "{\"prompt\": \"p\", \"completion\": \"c\", \"text\": \"ignored\"}\n"
               "{\"messages\": [{\"role\": \"user\", \"content\": \"m\"}], \"prompt\": \"x\", "
               "\"response\": \"y\"}\n");
    const auto recs = read_jsonl_file(path);
    ASSERT_EQ(recs.size(), 3u);
    for (const auto& r : recs) EXPECT_EQ(r.kind, JsonlRecord::Kind::chat);
    ASSERT_EQ(recs[0].messages.size(), 2u);
    EXPECT_EQ(recs[0].messages[0].role, "user");
    EXPECT_EQ(recs[0].messages[0].content, "What?");
    EXPECT_EQ(recs[0].messages[1].role, "assistant");
    EXPECT_EQ(recs[0].messages[1].content, "That.");
    EXPECT_EQ(recs[1].messages[1].content, "c");
    EXPECT_EQ(recs[2].messages.size(), 1u);  // "messages" wins
}

TEST(Jsonl, HfChatTemplateMasksOnlyTheReply) {
    const auto tok = load_hf_tokenizer(DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/llama3", {});
    const JsonlRecord rec = parse_jsonl_line(R"({"conversations": [{"from": "system", "value": "S"},
            {"from": "human", "value": "Q"}, {"from": "gpt", "value": "Answer."}]})",
                                             "t:1");
    const Encoded e = encode_record(*tok, rec);
    std::vector<int32_t> reply;
    for (size_t i = 0; i < e.tokens.size(); ++i)
        if (e.loss_mask[i]) reply.push_back(e.tokens[i]);
    EXPECT_EQ(tok->decode(reply), "Answer.<|eot_id|>");
    EXPECT_EQ(tok->decode(e.tokens).substr(0, 17), "<|begin_of_text|>");
}

// gpt-oss data: a developer message, and the last reply's reasoning in "thinking", which the
// harmony template trains on as the analysis channel.
TEST(Jsonl, HarmonyRecordKeepsThinkingAndDeveloper) {
    const auto tok = load_hf_tokenizer(DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/o200k", {});
    const JsonlRecord rec = parse_jsonl_line(
        R"({"messages": [{"role": "developer", "content": "D"}, {"role": "user", "content": "Q"},
            {"role": "assistant", "thinking": "T", "content": "A"}]})",
        "t:1");
    ASSERT_EQ(rec.messages.size(), 3u);
    EXPECT_EQ(rec.messages[0].role, "developer");
    EXPECT_EQ(rec.messages[2].thinking, "T");
    const Encoded e = encode_record(*tok, rec);
    std::vector<int32_t> reply;
    for (size_t i = 0; i < e.tokens.size(); ++i)
        if (e.loss_mask[i]) reply.push_back(e.tokens[i]);
    EXPECT_EQ(tok->decode(reply),
              "<|channel|>analysis<|message|>T<|end|><|start|>assistant<|channel|>final<|message|>"
              "A<|return|>");
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

TEST(Jsonl, NonRegularFilesAndOverlongLinesAreRefused) {
    test::TempDir dir("jsonl");
    ASSERT_EQ(::mkfifo((dir / "fifo.jsonl").c_str(), 0644), 0);
    fs::create_symlink("/dev/zero", dir / "zero.jsonl");
    const std::pair<fs::path, const char*> cases[] = {{dir.path(), "is a directory"},
                                                      {dir / "zero.jsonl", "character device"},
                                                      {dir / "fifo.jsonl", "is a FIFO"}};
    for (const auto& [p, kind] : cases) {
        const std::string e = error_of([&] { read_jsonl_file(p); });
        EXPECT_TRUE(test::has(e, kind)) << p << ": " << e;
        EXPECT_TRUE(test::has(e, p.string())) << e;
    }
    // Streamed with a cap per line, not per file: many short lines pass a cap smaller than the
    // file; one line past the cap is refused naming the file, the line and the cap.
    std::string lines;
    for (int i = 0; i < 50; ++i) lines += "{\"text\": \"sample\"}\n";  // 19 bytes each
    write_file(dir / "ok.jsonl", lines);
    int n = 0;
    read_jsonl(
        dir / "ok.jsonl", [&](const JsonlRecord&, const JsonlPosition&) { ++n; }, 100);
    EXPECT_EQ(n, 50);
    write_file(dir / "long.jsonl", lines + "{\"text\": \"" + std::string(200, 'x') + "\"}\n");
    const std::string e = error_of([&] {
        read_jsonl(
            dir / "long.jsonl", [](const JsonlRecord&, const JsonlPosition&) {}, 100);
    });
    EXPECT_TRUE(test::has(e, (dir / "long.jsonl").string() + "': line 51 is longer than the 100 "
                                                             "bytes cap"))
        << e;
}

TEST(Jsonl, AnErrorWhileHandlingARecordNamesFileAndLine) {
    test::TempDir dir("jsonl");
    write_file(dir / "d.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"}\n");
    const std::string e = error_of([&] {
        read_jsonl(dir / "d.jsonl", [](const JsonlRecord& r, const JsonlPosition&) {
            DF_CHECK(r.text != "b", "the tokenizer failed");
        });
    });
    EXPECT_EQ(e, (dir / "d.jsonl").string() + ":3: the tokenizer failed");
}

}  // namespace
}  // namespace dflash
