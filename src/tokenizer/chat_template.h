// Chat templates of HF models, written as code: each renders a conversation into the text that
// transformers' apply_chat_template produces with the model's Jinja template, cut into segments
// that carry the loss mask. Qwen3 and Qwen3.5 (thinking on and off), Llama-3, Llama-3.1 and
// harmony (gpt-oss).
//
// Loss mask: 1 on what the model says in an assistant turn, i.e. everything after the text that
// add_generation_prompt would have emitted for it, through the turn's end token; 0 on system and
// user turns, role headers and the newline between turns. (With Qwen3 thinking off, the empty
// "<think>\n\n</think>\n\n" that the generation prompt supplies is therefore 0; so is Qwen3.5's
// "<think>\n" with thinking on, which its generation prompt opens. In harmony the
// generation prompt is "<|start|>assistant"; the channel headers, the analysis the last turn keeps
// and the "<|start|>assistant" between analysis and final are the model's, so 1.)
// Tested by tests/tokenizer/chat_template_test.cpp (fixtures from transformers/Jinja).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dflash {

// How to pick and parametrise a model's template (the chat.* settings).
struct ChatOptions {
    // "auto": recognise the template in tokenizer_config.json; or one of kChatTemplateNames.
    std::string template_name = "auto";
    // Qwen3 / Qwen3.5: the template's enable_thinking (their default is on)
    bool enable_thinking = true;
    std::string date_string = "26 Jul 2024";  // Llama-3.1: the template's default date_string
    // Harmony: the system turn's "Reasoning:" (low | medium | high; the template's default is
    // medium), its "Current date:" (the model's template writes today's; a fixed date keeps
    // prepared data reproducible) and its first line.
    std::string reasoning_effort = "medium";
    std::string current_date = "2025-08-05";
    std::string model_identity = "You are ChatGPT, a large language model trained by OpenAI.";
};

// A piece of rendered chat text and the loss mask of the tokens that come from it.
struct ChatSegment {
    std::string text;
    uint8_t mask = 0;
};

class ChatTemplate {
  public:
    virtual ~ChatTemplate() = default;
    virtual std::string name() const = 0;
    // The conversation as text (special tokens written out), in segments.
    virtual std::vector<ChatSegment> render(const std::vector<ChatMessage>& msgs,
                                            bool add_generation_prompt) const = 0;
    // The special token that ends a turn (what generation stops at).
    virtual std::string end_of_turn() const = 0;
    // Other special tokens at which a reply ends (harmony: a tool call, end of text).
    virtual std::vector<std::string> other_stops() const { return {}; }
};

// The names make_chat_template accepts.
inline constexpr std::string_view kChatTemplateNames = "qwen3, qwen3_5, llama3, llama3.1, harmony";

// `bos_token` is the tokenizer's bos text (Llama templates start with it).
std::unique_ptr<ChatTemplate> make_chat_template(std::string_view name, const ChatOptions& opt,
                                                 std::string bos_token);

// The template whose output a Jinja chat template (tokenizer_config.json "chat_template") gives,
// recognised by its marks; "" when it is none of those dflash has written as code.
std::string detect_chat_template(std::string_view jinja);

// The template a model's config.json model_type implies ("qwen3_5" for Qwen3.5/3.6, whose
// template shares its marks with Qwen3's), or "" when the type does not settle it.
std::string chat_template_for_model_type(std::string_view model_type);

// All segments' text joined: what apply_chat_template(tokenize=False) returns.
std::string chat_text(const std::vector<ChatSegment>& segments);

// Python's str.strip() with no argument (Unicode whitespace), which Jinja's `trim` filter calls.
std::string_view python_strip(std::string_view s);

}  // namespace dflash
