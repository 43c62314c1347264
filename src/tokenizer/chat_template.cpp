// Qwen3, Qwen3.5, Llama-3 and harmony (gpt-oss) chat templates as code (chat_template.h). Each
// mirrors the public Jinja template of its model family step by step; the Jinja each is checked
// against lives in tools/reference/chat_templates/. Tested by
// tests/tokenizer/chat_template_test.cpp.
#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace dflash {

namespace {

// Python's str.isspace() for one code point.
bool python_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

// Decodes the code point at s[i] (valid UTF-8 assumed; a stray byte decodes as itself).
char32_t code_point_at(std::string_view s, size_t i, size_t& len) {
    const auto b = static_cast<unsigned char>(s[i]);
    len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (len == 1 || i + len > s.size()) {
        len = 1;
        return b;
    }
    char32_t c = b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    return c;
}

std::string_view strip_newlines(std::string_view s, bool left, bool right) {
    while (left && !s.empty() && s.front() == '\n') s.remove_prefix(1);
    while (right && !s.empty() && s.back() == '\n') s.remove_suffix(1);
    return s;
}

// Python's s.split(sep)[0] and s.split(sep)[-1].
std::string_view before_first(std::string_view s, std::string_view sep) {
    return s.substr(0, s.find(sep));
}
std::string_view after_last(std::string_view s, std::string_view sep) {
    const size_t p = s.rfind(sep);
    return p == std::string_view::npos ? s : s.substr(p + sep.size());
}

void emit(std::vector<ChatSegment>& out, std::string text, uint8_t mask) {
    if (!text.empty()) out.push_back({std::move(text), mask});
}

// Templates that keep reasoning in the content have nowhere to put a separate one; dropping it
// would train on a different conversation than the data holds.
void refuse_thinking(const ChatMessage& m, size_t i, const std::string& tmpl, const char* where) {
    DF_CHECK(m.thinking.empty(),
             "chat message {} has a separate thinking field, which the {} chat template does not "
             "render; put the reasoning {}",
             i, tmpl, where);
}

// The index of the last user message that is not a tool's answer (<tool_response>...), the
// query the assistant turns after it reply to; msgs.size() when there is none. Qwen3.5's template
// looks at the trimmed text, Qwen3's at the text as it is.
size_t last_user_query(const std::vector<ChatMessage>& msgs, bool trimmed) {
    for (size_t k = msgs.size(); k-- > 0;) {
        const std::string_view c =
            trimmed ? python_strip(msgs[k].content) : std::string_view(msgs[k].content);
        const bool tool_response =
            c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
        if (msgs[k].role == "user" && !tool_response) return k;
    }
    return msgs.size();
}

// Qwen3 (Qwen3-0.6B ... Qwen3-235B-A22B). Tool calls and tool roles are not supported.
class Qwen3Template final : public ChatTemplate {
  public:
    explicit Qwen3Template(bool enable_thinking) : thinking_(enable_thinking) {}
    std::string name() const override { return "qwen3"; }
    std::string end_of_turn() const override { return "<|im_end|>"; }

    std::vector<ChatSegment> render(const std::vector<ChatMessage>& msgs,
                                    bool add_generation_prompt) const override {
        std::vector<ChatSegment> out;
        // Assistant turns after the last query show their reasoning block; without a query the
        // template's default is the last message.
        size_t last_query = last_user_query(msgs, false);
        if (last_query == msgs.size()) last_query = msgs.empty() ? 0 : msgs.size() - 1;
        for (size_t i = 0; i < msgs.size(); ++i) {
            const ChatMessage& m = msgs[i];
            refuse_thinking(m, i, name(), "inside the content, in <think>...</think>");
            if (m.role == "user" || m.role == "system") {
                emit(out, "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n", 0);
            } else if (m.role == "assistant") {
                assistant_turn(out, m.content, i > last_query, i + 1 == msgs.size());
            } else {
                DF_FAIL("the qwen3 chat template has no role '{}'", m.role);
            }
        }
        if (add_generation_prompt) emit(out, generation_prompt(), 0);
        return out;
    }

  private:
    std::string generation_prompt() const {
        return thinking_ ? "<|im_start|>assistant\n"
                         : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    }

    void assistant_turn(std::vector<ChatSegment>& out, std::string_view content, bool after_query,
                        bool last) const {
        std::string_view reasoning;
        if (content.find("</think>") != std::string_view::npos) {
            reasoning = strip_newlines(
                after_last(strip_newlines(before_first(content, "</think>"), false, true),
                           "<think>"),
                true, false);
            content = strip_newlines(after_last(content, "</think>"), true, false);
        }
        std::string body(content);
        if (after_query && (last || !reasoning.empty())) {
            body = "<think>\n" + std::string(strip_newlines(reasoning, true, true)) +
                   "\n</think>\n\n" + std::string(strip_newlines(content, true, false));
        }
        // What the generation prompt supplies is not the model's to predict.
        const std::string head = "<|im_start|>assistant\n";
        const std::string prompt_part = generation_prompt().substr(head.size());
        emit(out, head, 0);
        if (!prompt_part.empty() && body.starts_with(prompt_part)) {
            emit(out, prompt_part, 0);
            body.erase(0, prompt_part.size());
        }
        emit(out, body + "<|im_end|>", 1);
        emit(out, "\n", 0);
    }

    bool thinking_;
};

// Qwen3.5 / Qwen3.6 (dense and MoE). ChatML as Qwen3, but every message's text is trimmed
// (Python's strip, the Jinja `trim` filter), a system message may only come first, and the model
// thinks by default: the generation prompt opens a think block (with thinking off it writes an
// empty closed one), and every assistant turn after the last user query carries a think block,
// an empty one when the turn has no reasoning. Turns before that query lose theirs, as the model
// sees history at inference. Tool calls, tool roles and images are not supported.
class Qwen35Template final : public ChatTemplate {
  public:
    explicit Qwen35Template(bool enable_thinking) : thinking_(enable_thinking) {}
    std::string name() const override { return "qwen3_5"; }
    std::string end_of_turn() const override { return "<|im_end|>"; }

    std::vector<ChatSegment> render(const std::vector<ChatMessage>& msgs,
                                    bool add_generation_prompt) const override {
        DF_CHECK(!msgs.empty(), "the qwen3_5 chat template needs at least one message");
        const size_t last_query = last_user_query(msgs, true);
        DF_CHECK(last_query < msgs.size(),
                 "the qwen3_5 chat template needs a user message (one that is not a "
                 "<tool_response>) in the conversation");
        std::vector<ChatSegment> out;
        for (size_t i = 0; i < msgs.size(); ++i) {
            const ChatMessage& m = msgs[i];
            refuse_thinking(m, i, name(), "inside the content, in <think>...</think>");
            const std::string text(python_strip(m.content));
            if (m.role == "system") {
                DF_CHECK(i == 0,
                         "chat message {} is a system message after the first message; the "
                         "qwen3_5 chat template takes one, as the first message",
                         i);
                emit(out, "<|im_start|>system\n" + text + "<|im_end|>\n", 0);
            } else if (m.role == "user") {
                emit(out, "<|im_start|>user\n" + text + "<|im_end|>\n", 0);
            } else if (m.role == "assistant") {
                assistant_turn(out, text, i > last_query);
            } else {
                DF_FAIL("the qwen3_5 chat template has no role '{}' (tool calls are not supported)",
                        m.role);
            }
        }
        if (add_generation_prompt) emit(out, "<|im_start|>assistant\n" + prompt_think(), 0);
        return out;
    }

  private:
    // What the generation prompt writes after "<|im_start|>assistant\n".
    std::string prompt_think() const { return thinking_ ? "<think>\n" : "<think>\n\n</think>\n\n"; }

    void assistant_turn(std::vector<ChatSegment>& out, std::string_view text,
                        bool after_query) const {
        std::string_view answer = text, reasoning;
        if (text.find("</think>") != std::string_view::npos) {
            reasoning = strip_newlines(
                after_last(strip_newlines(before_first(text, "</think>"), false, true), "<think>"),
                true, false);
            answer = strip_newlines(after_last(text, "</think>"), true, false);
        }
        std::string body(answer);
        if (after_query)
            body = "<think>\n" + std::string(python_strip(reasoning)) + "\n</think>\n\n" + body;
        // What the generation prompt supplies is not the model's to predict.
        const std::string prompt_part = prompt_think();
        emit(out, "<|im_start|>assistant\n", 0);
        if (body.starts_with(prompt_part)) {
            emit(out, prompt_part, 0);
            body.erase(0, prompt_part.size());
        }
        emit(out, body + "<|im_end|>", 1);
        emit(out, "\n", 0);
    }

    bool thinking_;
};

// Llama-3 (Meta-Llama-3-8B-Instruct) and Llama-3.1 (Llama-3.1-8B-Instruct; a system turn with the
// knowledge cutoff and date always comes first). Tool calls and ipython roles are not supported.
class Llama3Template final : public ChatTemplate {
  public:
    Llama3Template(bool v31, std::string date, std::string bos)
        : v31_(v31), date_(std::move(date)), bos_(std::move(bos)) {}
    std::string name() const override { return v31_ ? "llama3.1" : "llama3"; }
    std::string end_of_turn() const override { return "<|eot_id|>"; }

    std::vector<ChatSegment> render(const std::vector<ChatMessage>& msgs,
                                    bool add_generation_prompt) const override {
        std::vector<ChatSegment> out;
        size_t first = 0;
        if (v31_) {
            std::string_view system;
            if (!msgs.empty() && msgs[0].role == "system") {
                system = python_strip(msgs[0].content);
                first = 1;
            }
            emit(out,
                 bos_ + "<|start_header_id|>system<|end_header_id|>\n\n" +
                     "Cutting Knowledge Date: December 2023\nToday Date: " + date_ + "\n\n" +
                     std::string(system) + "<|eot_id|>",
                 0);
        }
        for (size_t i = 0; i < msgs.size(); ++i)
            refuse_thinking(msgs[i], i, name(), "into the content");
        for (size_t i = first; i < msgs.size(); ++i) {
            const ChatMessage& m = msgs[i];
            DF_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant",
                     "the {} chat template has no role '{}'", name(), m.role);
            const std::string lead = !v31_ && i == 0 ? bos_ : std::string();
            const uint8_t mask = m.role == "assistant" ? 1 : 0;
            emit(out, lead + header(m.role), 0);
            emit(out, std::string(python_strip(m.content)) + "<|eot_id|>", mask);
        }
        if (add_generation_prompt) emit(out, header("assistant"), 0);
        return out;
    }

  private:
    static std::string header(const std::string& role) {
        return "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
    }

    bool v31_;
    std::string date_, bos_;
};

// Harmony, gpt-oss's format. A system turn (identity, knowledge cutoff, date, reasoning effort,
// channels) always comes first; a leading system or developer message becomes the developer turn's
// instructions. Replies go to the final channel. Only the last assistant message of a training
// conversation (no generation prompt) keeps its analysis and ends with <|return|>, which the model
// writes when it is done; earlier replies end with <|end|> without their analysis, as the model
// sees history at inference. Tools (function calls, the tool role, commentary) are not supported.
class HarmonyTemplate final : public ChatTemplate {
  public:
    explicit HarmonyTemplate(const ChatOptions& o)
        : effort_(o.reasoning_effort), date_(o.current_date), identity_(o.model_identity) {
        DF_CHECK(effort_ == "low" || effort_ == "medium" || effort_ == "high",
                 "chat.reasoning_effort is '{}'; the harmony template takes low, medium or high",
                 effort_);
    }
    std::string name() const override { return "harmony"; }
    std::string end_of_turn() const override { return "<|return|>"; }
    std::vector<std::string> other_stops() const override { return {"<|call|>", "<|endoftext|>"}; }

    std::vector<ChatSegment> render(const std::vector<ChatMessage>& msgs,
                                    bool add_generation_prompt) const override {
        std::vector<ChatSegment> out;
        emit(out,
             "<|start|>system<|message|>" + identity_ + "\nKnowledge cutoff: 2024-06\n" +
                 "Current date: " + date_ + "\n\nReasoning: " + effort_ + "\n\n" +
                 "# Valid channels: analysis, commentary, final. Channel must be included for "
                 "every message.<|end|>",
             0);
        size_t first = 0;
        if (!msgs.empty() && (msgs[0].role == "system" || msgs[0].role == "developer")) {
            check_text(msgs[0], 0);
            if (!msgs[0].content.empty())
                emit(out,
                     "<|start|>developer<|message|># Instructions\n\n" + msgs[0].content +
                         "\n\n<|end|>",
                     0);
            first = 1;
        }
        for (size_t i = first; i < msgs.size(); ++i) {
            const ChatMessage& m = msgs[i];
            check_text(m, i);
            if (m.role == "user") {
                emit(out, "<|start|>user<|message|>" + m.content + "<|end|>", 0);
            } else if (m.role == "assistant") {
                const bool last = i + 1 == msgs.size() && !add_generation_prompt;
                emit(out, "<|start|>assistant", 0);
                std::string reply;
                if (last && !m.thinking.empty())
                    reply =
                        "<|channel|>analysis<|message|>" + m.thinking + "<|end|><|start|>assistant";
                reply +=
                    "<|channel|>final<|message|>" + m.content + (last ? "<|return|>" : "<|end|>");
                emit(out, std::move(reply), 1);
            } else {
                // gpt-oss's template drops a later system message without a word; refusing keeps
                // a conversation from being trained on without part of it.
                DF_CHECK(m.role != "system" && m.role != "developer",
                         "chat message {} is a {} message after the first; the harmony template "
                         "takes one, as the first message",
                         i, m.role);
                DF_FAIL("the harmony chat template has no role '{}' (tool calls are not supported)",
                        m.role);
            }
        }
        if (add_generation_prompt) emit(out, "<|start|>assistant", 0);
        return out;
    }

  private:
    // gpt-oss's template refuses channel markup in an assistant message: analysis and final text
    // go in their own fields, not written out. (Other roles may quote it.)
    static void check_text(const ChatMessage& m, size_t i) {
        if (m.role == "assistant")
            for (const std::string* text : {&m.content, &m.thinking})
                for (std::string_view mark :
                     {"<|channel|>analysis<|message|>", "<|channel|>final<|message|>"})
                    DF_CHECK(text->find(mark) == std::string::npos,
                             "chat message {} holds '{}' in its {}; give the analysis as the "
                             "message's thinking and the final answer as its content, without "
                             "channel markup",
                             i, mark, text == &m.content ? "content" : "thinking");
        DF_CHECK(m.thinking.empty() || m.role == "assistant",
                 "chat message {} ({}) has a thinking field; only assistant messages have one", i,
                 m.role);
    }

    std::string effort_, date_, identity_;
};

// Whether the Jinja source prints the string literal `text` (as written in the source, escapes
// and all) by itself: '...' or "..." followed by the end of an output tag, `}}` or `-}}`.
bool outputs_alone(std::string_view jinja, std::string_view text) {
    for (const char quote : {'\'', '"'}) {
        const std::string literal = quote + std::string(text) + quote;
        for (size_t at = jinja.find(literal); at != std::string_view::npos;
             at = jinja.find(literal, at + 1)) {
            std::string_view rest = jinja.substr(at + literal.size());
            while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
                rest.remove_prefix(1);
            if (rest.starts_with("}}") || rest.starts_with("-}}")) return true;
        }
    }
    return false;
}

}  // namespace

std::string_view python_strip(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e) {
        size_t len = 0;
        if (!python_space(code_point_at(s, b, len))) break;
        b += len;
    }
    while (e > b) {
        size_t start = e - 1;  // back up to the first byte of the last character
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t len = 0;
        if (!python_space(code_point_at(s, start, len))) break;
        e = start;
    }
    return s.substr(b, e - b);
}

std::string chat_template_for_model_type(std::string_view model_type) {
    for (std::string_view t : {"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
        if (model_type == t) return "qwen3_5";
    return "";
}

std::string chat_text(const std::vector<ChatSegment>& segments) {
    std::string out;
    for (const auto& s : segments) out += s.text;
    return out;
}

std::unique_ptr<ChatTemplate> make_chat_template(std::string_view name, const ChatOptions& opt,
                                                 std::string bos_token) {
    if (name == "qwen3") return std::make_unique<Qwen3Template>(opt.enable_thinking);
    if (name == "qwen3_5") return std::make_unique<Qwen35Template>(opt.enable_thinking);
    if (name == "llama3" || name == "llama3.1") {
        DF_CHECK(!bos_token.empty(),
                 "the {} chat template starts with the bos token, but the tokenizer has none "
                 "(tokenizer_config.json bos_token)",
                 name);
        return std::make_unique<Llama3Template>(name == "llama3.1", opt.date_string,
                                                std::move(bos_token));
    }
    if (name == "harmony") return std::make_unique<HarmonyTemplate>(opt);
    DF_FAIL("unknown chat template '{}'; dflash has: {}", name, kChatTemplateNames);
}

std::string detect_chat_template(std::string_view jinja) {
    auto has = [&](std::string_view mark) { return jinja.find(mark) != std::string_view::npos; };
    // gpt-oss's: messages framed by <|start|>role<|message|>...<|end|>, replies in channels.
    if (has("<|start|>") && has("<|message|>") && has("<|channel|>") && has("<|end|>"))
        return "harmony";
    // Qwen3.5's: ChatML with enable_thinking whose generation prompt opens a think block on its
    // own; Qwen3's has the other marks but writes "<think>\n" only followed by the reasoning or
    // as part of the empty block. Checked first.
    if (has("<|im_start|>") && has("enable_thinking") && outputs_alone(jinja, "<think>\\n"))
        return "qwen3_5";
    if (has("<|im_start|>") && has("<think>") && has("enable_thinking") && has("last_query_index"))
        return "qwen3";
    if (has("<|start_header_id|>") && has("<|eot_id|>")) {
        if (!has("Cutting Knowledge Date")) return "llama3";
        if (!has("strftime_now")) return "llama3.1";  // Llama-3.2 dates the prompt with today
    }
    return "";
}

}  // namespace dflash
