// The chat templates as code: exact text of Qwen3 and Qwen3.5 (thinking on and off, reasoning in
// content, multi-turn; Qwen3.5's trimming, open think block and refusals), Llama-3/3.1 and harmony
// (reasoning levels, analysis kept only in the last turn, instructions, refusals) conversations,
// which segments carry the loss mask, recognition of the Jinja templates, and Python's strip. The
// comparison with transformers/Jinja output is in hf_fixtures_test.cpp.
#include "tokenizer/chat_template.h"
#include "support/test_util.h"

namespace dflash {
namespace {

std::string masked(const std::vector<ChatSegment>& segs) {
    std::string out;
    for (const auto& s : segs)
        if (s.mask) out += s.text;
    return out;
}

std::unique_ptr<ChatTemplate> qwen3(bool thinking) {
    ChatOptions o;
    o.enable_thinking = thinking;
    return make_chat_template("qwen3", o, "");
}

TEST(ChatTemplate, Qwen3TrainingTurn) {
    const std::vector<ChatMessage> chat = {{"user", "Hi"}, {"assistant", "Hello"}};
    const auto on = qwen3(true)->render(chat, false);
    EXPECT_EQ(chat_text(on),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
              "Hello<|im_end|>\n");
    EXPECT_EQ(masked(on), "<think>\n\n</think>\n\nHello<|im_end|>");
    // Thinking off: the same text, but the empty think block is the generation prompt's.
    const auto off = qwen3(false)->render(chat, false);
    EXPECT_EQ(chat_text(off), chat_text(on));
    EXPECT_EQ(masked(off), "Hello<|im_end|>");
}

TEST(ChatTemplate, Qwen3GenerationPrompt) {
    const std::vector<ChatMessage> chat = {{"system", "S"}, {"user", "Q"}};
    EXPECT_EQ(chat_text(qwen3(true)->render(chat, true)),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
              "<|im_start|>assistant\n");
    EXPECT_EQ(chat_text(qwen3(false)->render(chat, true)),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    EXPECT_EQ(masked(qwen3(false)->render(chat, true)), "");
}

TEST(ChatTemplate, Qwen3ReasoningAndHistory) {
    const std::vector<ChatMessage> chat = {{"user", "A"},
                                           {"assistant", "<think>\nr1\n</think>\n\nB"},
                                           {"user", "C"},
                                           {"assistant", "<think>\n\nr2\n\n</think>\n\n\nD"}};
    // Turns before the last user message drop their reasoning; the last keeps it.
    EXPECT_EQ(chat_text(qwen3(true)->render(chat, false)),
              "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n"
              "<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\n"
              "D<|im_end|>\n");
    EXPECT_EQ(masked(qwen3(false)->render(chat, false)),
              "B<|im_end|><think>\nr2\n</think>\n\nD<|im_end|>");
    // Newlines around the answer: only newlines are stripped, spaces stay.
    EXPECT_EQ(chat_text(qwen3(true)->render({{"user", "x"}, {"assistant", "\n\n  y\n"}}, false)),
              "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
              "  y\n<|im_end|>\n");
    // A later system message is an ordinary turn.
    EXPECT_EQ(chat_text(qwen3(true)->render({{"user", "x"}, {"system", "s"}}, false)),
              "<|im_start|>user\nx<|im_end|>\n<|im_start|>system\ns<|im_end|>\n");
}

std::unique_ptr<ChatTemplate> qwen35(bool thinking) {
    ChatOptions o;
    o.enable_thinking = thinking;
    return make_chat_template("qwen3_5", o, "");
}

// Qwen3.5 thinks by default: its generation prompt opens the think block, which is then the
// prompt's (mask 0) in a training turn, and the rest of the block is the model's.
TEST(ChatTemplate, Qwen35GenerationPromptOpensTheThinkBlock) {
    const std::vector<ChatMessage> chat = {{"system", "  S\n"}, {"user", "Q"}};
    const auto on = qwen35(true)->render(chat, true);
    EXPECT_EQ(chat_text(on),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n");
    EXPECT_EQ(masked(on), "");
    EXPECT_EQ(chat_text(qwen35(false)->render(chat, true)),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    EXPECT_EQ(qwen35(true)->end_of_turn(), "<|im_end|>");
    EXPECT_EQ(qwen35(true)->name(), "qwen3_5");
    // Qwen3's prompt leaves the think block to the model.
    EXPECT_TRUE(chat_text(qwen3(true)->render(chat, true)).ends_with("assistant\n"));
}

TEST(ChatTemplate, Qwen35TrainingTurn) {
    const std::vector<ChatMessage> chat = {{"user", "Add 17 and 25."},
                                           {"assistant", "<think>\n17 + 25 = 42.\n</think>\n\n42"}};
    const auto on = qwen35(true)->render(chat, false);
    EXPECT_EQ(chat_text(on),
              "<|im_start|>user\nAdd 17 and 25.<|im_end|>\n<|im_start|>assistant\n<think>\n"
              "17 + 25 = 42.\n</think>\n\n42<|im_end|>\n");
    EXPECT_EQ(masked(on), "17 + 25 = 42.\n</think>\n\n42<|im_end|>");
    // A turn without reasoning gets the empty block; with thinking off all of it is the prompt's.
    const std::vector<ChatMessage> plain = {{"user", "2+2?"}, {"assistant", "4"}};
    const auto off = qwen35(false)->render(plain, false);
    EXPECT_EQ(chat_text(off),
              "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
              "4<|im_end|>\n");
    EXPECT_EQ(masked(off), "4<|im_end|>");
    EXPECT_EQ(chat_text(qwen35(true)->render(plain, false)), chat_text(off));
    EXPECT_EQ(masked(qwen35(true)->render(plain, false)), "\n</think>\n\n4<|im_end|>");
}

// Turns before the last user query lose their reasoning (and get no empty block); a user message
// that is a tool's answer is not a query, so the turns around it keep theirs. Every message's text
// is trimmed by Python's rules (U+3000 and NBSP are whitespace), reasoning too; a reasoning block
// without "<think>" is read from the start.
TEST(ChatTemplate, Qwen35HistoryAndTrimming) {
    const std::vector<ChatMessage> chat = {
        {"user", "\u3000 Name a color.\u00a0\n"},
        {"assistant", "<think>\nEasy.\n</think>\n\nBlue."},
        {"user", "Another?"},
        {"assistant", "<think>\n\n  Again. \n\n</think>\n\n\nRed \n"}};
    EXPECT_EQ(chat_text(qwen35(true)->render(chat, false)),
              "<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\nBlue.<|im_end|>\n"
              "<|im_start|>user\nAnother?<|im_end|>\n<|im_start|>assistant\n<think>\nAgain.\n"
              "</think>\n\nRed<|im_end|>\n");
    const std::vector<ChatMessage> tools = {
        {"user", "6*7?"},
        {"assistant", "<think>\nUse the tool.\n</think>\n\nCalling."},
        {"user", " <tool_response>\n42\n</tool_response>\n"},
        {"assistant", "no open tag</think>\n\nIt is 42."}};
    EXPECT_EQ(chat_text(qwen35(false)->render(tools, false)),
              "<|im_start|>user\n6*7?<|im_end|>\n<|im_start|>assistant\n<think>\nUse the tool.\n"
              "</think>\n\nCalling.<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n"
              "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nno open tag\n"
              "</think>\n\nIt is 42.<|im_end|>\n");
}

TEST(ChatTemplate, Qwen35Refusals) {
    const auto t = qwen35(true);
    const auto err = [&](const std::vector<ChatMessage>& chat) {
        return test::error_of([&] { t->render(chat, true); });
    };
    EXPECT_TRUE(test::has(err({}), "at least one message"));
    EXPECT_TRUE(test::has(err({{"system", "s"}, {"assistant", "a"}}), "needs a user message"));
    EXPECT_TRUE(test::has(err({{"user", "<tool_response>x</tool_response>"}}), "user message"));
    EXPECT_TRUE(test::has(err({{"user", "a"}, {"system", "late"}}), "after the first"));
    EXPECT_TRUE(test::has(err({{"user", "a"}, {"tool", "x"}}), "no role 'tool'"));
    EXPECT_TRUE(test::has(err({{"user", "q"}, {"assistant", "a", "why"}}), "thinking field"));
}

TEST(ChatTemplate, Llama31) {
    const auto t = make_chat_template("llama3.1", ChatOptions{}, "<|begin_of_text|>");
    const std::vector<ChatMessage> chat = {
        {"system", "  Be kind.\n"}, {"user", " Hi \n"}, {"assistant", "Hello!  "}};
    const auto segs = t->render(chat, false);
    EXPECT_EQ(chat_text(segs),
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
              "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe kind.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
    EXPECT_EQ(masked(segs), "Hello!<|eot_id|>");
    ChatOptions o;
    o.date_string = "01 Jan 2026";
    EXPECT_TRUE(test::has(
        chat_text(make_chat_template("llama3.1", o, "<s>")->render({{"user", "x"}}, true)),
        "Today Date: 01 Jan "
        "2026\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"));
}

TEST(ChatTemplate, Llama3) {
    const auto t = make_chat_template("llama3", ChatOptions{}, "<|begin_of_text|>");
    EXPECT_EQ(chat_text(t->render({{"system", "S"}, {"user", "\tU\n"}}, true)),
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    EXPECT_EQ(t->end_of_turn(), "<|eot_id|>");
    EXPECT_TRUE(test::has(test::error_of([] { make_chat_template("llama3", {}, ""); }), "bos"));
    EXPECT_TRUE(test::has(test::error_of([] { make_chat_template("chatml", {}, ""); }), "qwen3"));
}

std::unique_ptr<ChatTemplate> harmony(const std::string& effort = "medium") {
    ChatOptions o;
    o.reasoning_effort = effort;
    o.current_date = "2025-08-05";
    return make_chat_template("harmony", o, "");
}

std::string harmony_system(const std::string& effort) {
    return "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
           "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: " +
           effort +
           "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
           "every message.<|end|>";
}

TEST(ChatTemplate, HarmonyPromptAtEachReasoningLevel) {
    for (const std::string effort : {"low", "medium", "high"}) {
        const auto segs = harmony(effort)->render({{"user", "Hi"}}, true);
        EXPECT_EQ(chat_text(segs),
                  harmony_system(effort) + "<|start|>user<|message|>Hi<|end|><|start|>assistant");
        EXPECT_EQ(masked(segs), "");
    }
    EXPECT_EQ(ChatOptions{}.reasoning_effort, "medium");  // the template's default
}

TEST(ChatTemplate, HarmonyTrainingKeepsOnlyTheLastAnalysis) {
    const std::vector<ChatMessage> chat = {{"system", "Be brief."},
                                           {"user", "A"},
                                           {"assistant", "one", "first thought"},
                                           {"user", "B"},
                                           {"assistant", "two", "second thought"}};
    const auto segs = harmony()->render(chat, false);
    EXPECT_EQ(chat_text(segs),
              harmony_system("medium") +
                  "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                  "<|start|>user<|message|>A<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>one<|end|>"
                  "<|start|>user<|message|>B<|end|>"
                  "<|start|>assistant<|channel|>analysis<|message|>second thought<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>two<|return|>");
    EXPECT_EQ(masked(segs),
              "<|channel|>final<|message|>one<|end|>"
              "<|channel|>analysis<|message|>second thought<|end|>"
              "<|start|>assistant<|channel|>final<|message|>two<|return|>");
    // With a generation prompt the last reply is history too: no analysis, <|end|>.
    const std::vector<ChatMessage> history(chat.begin(), chat.end());
    const std::string prompt = chat_text(harmony()->render(history, true));
    EXPECT_FALSE(test::has(prompt, "thought")) << prompt;
    EXPECT_TRUE(prompt.ends_with("two<|end|><|start|>assistant")) << prompt;
}

TEST(ChatTemplate, HarmonyDeveloperAndEmptyInstructions) {
    EXPECT_EQ(chat_text(harmony()->render({{"developer", "D"}, {"user", "U"}}, true)),
              harmony_system("medium") +
                  "<|start|>developer<|message|># Instructions\n\nD\n\n<|end|>"
                  "<|start|>user<|message|>U<|end|><|start|>assistant");
    // An empty first system message writes no developer turn.
    EXPECT_EQ(chat_text(harmony()->render({{"system", ""}, {"user", "U"}}, true)),
              harmony_system("medium") + "<|start|>user<|message|>U<|end|><|start|>assistant");
}

TEST(ChatTemplate, HarmonyStopsAndRefusals) {
    const auto t = harmony();
    EXPECT_EQ(t->end_of_turn(), "<|return|>");
    EXPECT_EQ(t->other_stops(), (std::vector<std::string>{"<|call|>", "<|endoftext|>"}));
    const std::string bad_effort = test::error_of([] { harmony("extreme"); });
    EXPECT_TRUE(test::has(bad_effort, "'extreme'")) << bad_effort;
    EXPECT_TRUE(test::has(bad_effort, "low, medium or high")) << bad_effort;
    const auto err = [&](const std::vector<ChatMessage>& chat) {
        return test::error_of([&] { t->render(chat, false); });
    };
    EXPECT_TRUE(test::has(err({{"user", "a"}, {"system", "late"}}), "after the first"));
    EXPECT_TRUE(test::has(err({{"tool", "x"}}), "no role 'tool'"));
    EXPECT_TRUE(test::has(err({{"user", "q"}, {"user", "x", "why"}}), "only assistant"));
    EXPECT_TRUE(test::has(err({{"user", "q"}, {"assistant", "<|channel|>final<|message|>x"}}),
                          "channel markup"));
    // A user may quote the markup.
    EXPECT_NO_THROW(t->render({{"user", "what is <|channel|>final<|message|>?"}}, true));
    // Templates that keep reasoning in the content refuse a separate one.
    const std::string q = test::error_of([] {
        qwen3(true)->render({{"user", "q"}, {"assistant", "a", "why"}}, false);
    });
    EXPECT_TRUE(test::has(q, "thinking field")) << q;
}

TEST(ChatTemplate, RecognisesTheJinjaTemplates) {
    const std::string dir = DFLASH_SOURCE_DIR "/tools/reference/chat_templates/";
    EXPECT_EQ(detect_chat_template(test::read_file(dir + "qwen3.jinja")), "qwen3");
    EXPECT_EQ(detect_chat_template(test::read_file(dir + "qwen3_5.jinja")), "qwen3_5");
    // Qwen3.5's mark is a generation prompt that prints the open block alone, in either quote
    // and either output-tag end; Qwen3's template prints "<think>\n" only with more after it.
    EXPECT_EQ(detect_chat_template("<|im_start|> enable_thinking {{- \"<think>\\n\" -}}"),
              "qwen3_5");
    EXPECT_EQ(detect_chat_template(
                  "<|im_start|> enable_thinking last_query_index "
                  "{{- '<think>\\n' + reasoning }} {{- '<think>\\n\\n</think>\\n\\n' }}"),
              "qwen3");
    EXPECT_EQ(detect_chat_template(test::read_file(dir + "llama3.jinja")), "llama3");
    EXPECT_EQ(detect_chat_template(test::read_file(dir + "llama3.1.jinja")), "llama3.1");
    // Qwen2.5's ChatML (no think blocks) and Llama-3.2 (today's date) are not these templates.
    EXPECT_EQ(detect_chat_template(test::read_file(dir + "harmony.jinja")), "harmony");
    // gpt-oss's own template, by its markers (it is not available offline).
    EXPECT_EQ(detect_chat_template("{{- \"<|start|>system<|message|>\" }}{{- \"<|end|>\" }}"
                                   "{{- \"<|start|>assistant<|channel|>final<|message|>\" }}"),
              "harmony");
    EXPECT_EQ(detect_chat_template("{{'<|im_start|>' + message['role']}}"), "");
    EXPECT_EQ(detect_chat_template("<|start_header_id|><|eot_id|>Cutting Knowledge Date "
                                   "strftime_now"),
              "");
    EXPECT_EQ(detect_chat_template(""), "");
}

TEST(ChatTemplate, ModelTypeImpliesQwen35) {
    for (const char* t : {"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
        EXPECT_EQ(chat_template_for_model_type(t), "qwen3_5") << t;
    for (const char* t : {"qwen3", "qwen3_next", "qwen3_moe", "gpt_oss", "", "qwen3_5x"})
        EXPECT_EQ(chat_template_for_model_type(t), "") << t;
}

TEST(ChatTemplate, PythonStrip) {
    EXPECT_EQ(python_strip("  a b \t\n"), "a b");
    EXPECT_EQ(python_strip("\u3000\u00a0x\u2028\u0085\x1f"), "x");
    EXPECT_EQ(python_strip("\ufeffx"), "\ufeffx");  // BOM is not whitespace to Python
    EXPECT_EQ(python_strip("   "), "");
    EXPECT_EQ(python_strip("\u4e2d"), "\u4e2d");
}

}  // namespace
}  // namespace dflash
