// `dflash generate --target DIR [--drafter DIR] (--prompt TEXT | --prompt-ids 1,2,3) [--chat]
// [--print-ids] [--trace]`:
// decodes one prompt, speculatively with a drafter or plainly without one, streaming the text to
// stdout as each step commits tokens; a summary (tokens, tau, tokens/s, stop reason) goes to
// stderr. Sampling comes from the infer.* settings. Tested by tests/cli/generate_cli_test.cpp.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "backend/backend.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "config/settings.h"
#include "core/error.h"
#include "infer/bench.h"
#include "infer/prompts.h"
#include "infer/spec_decode.h"
#include "infer/stop_tokens.h"
#include "model/drafter.h"
#include "model/target.h"
#include "options/chat_options.h"
#include "options/infer_options.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash::cli {

namespace {

struct GenerateArgs {
    std::string target, drafter, prompt, prompt_ids;
    bool chat = false;
    bool print_ids = false;
    bool trace = false;
};

// --trace: one stderr line per speculative step, so a user sees where the drafter goes wrong.
void print_step(const StepTrace& t) {
    std::string drafted;
    for (int32_t id : t.drafted) drafted += fmt::format("{}{}", drafted.empty() ? "" : " ", id);
    std::fprintf(stderr, "trace step %lld: drafted [%s] accepted %lld next %d (%s)\n",
                 static_cast<long long>(t.step), drafted.c_str(),
                 static_cast<long long>(t.accepted), t.next, t.bonus() ? "bonus" : "correction");
}

std::vector<int32_t> prompt_tokens(const GenerateArgs& a, const Tokenizer* tok) {
    DF_CHECK(a.prompt.empty() != a.prompt_ids.empty(),
             "give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
    if (!a.prompt_ids.empty()) {
        DF_CHECK(!a.chat,
                 "--chat wraps a text prompt in the chat template; it cannot be used "
                 "with --prompt-ids (give the templated ids instead)");
        return parse_id_list(a.prompt_ids);
    }
    DF_CHECK(tok != nullptr,
             "'{}' names no tokenizer, so a text --prompt cannot be encoded; pass --prompt-ids",
             a.target);
    if (a.chat) return tok->encode_chat({{"user", a.prompt}}, true).tokens;
    return encode_text_prompt(*tok, a.prompt);
}

// Writes each committed token's text to stdout at once (stop tokens are not printed).
class StdoutStream {
  public:
    // Without a tokenizer the ids are printed, space-separated.
    StdoutStream(const Tokenizer* tok, const std::vector<int32_t>& stop) : stop_(stop) {
        if (tok) decoder_.emplace(*tok);
    }
    void push(std::span<const int32_t> toks) {
        std::string text;
        for (int32_t t : toks) {
            if (std::find(stop_.begin(), stop_.end(), t) != stop_.end()) continue;
            text += decoder_ ? decoder_->push(t) : fmt::format("{} ", t);
        }
        std::fputs(text.c_str(), stdout);
        std::fflush(stdout);
    }
    void finish() {
        std::string text = decoder_ ? decoder_->flush() : std::string();
        text += "\n";
        std::fputs(text.c_str(), stdout);
        std::fflush(stdout);
    }

  private:
    std::vector<int32_t> stop_;
    std::optional<StreamDecoder> decoder_;
};

}  // namespace

int cmd_generate(CommandContext& ctx) {
    CLI::App app{
        "Decode one prompt with the target (and a DFlash drafter when given), streaming "
        "the text to stdout; sampling follows the infer.* settings.",
        "dflash generate"};
    GenerateArgs a;
    app.add_option("--target", a.target, "target model directory")->required();
    app.add_option("--drafter", a.drafter, "DFlash drafter directory (none: plain decoding)");
    app.add_option("--prompt", a.prompt, "prompt text (encoded as [bos] text)");
    app.add_option("--prompt-ids", a.prompt_ids, "prompt token ids, comma-separated");
    app.add_flag("--chat", a.chat,
                 "wrap --prompt as a user message in the model's chat template (chat.* settings)");
    app.add_flag("--print-ids", a.print_ids, "print the generated token ids instead of text");
    app.add_flag("--trace", a.trace,
                 "print each speculative step to stderr: the drafted token ids, how many the "
                 "target accepted and the token it added (bonus or correction)");
    if (!parse_command_args(app, ctx, "generate")) return 0;
    auto be = make_backend_from_settings(ctx);
    const TargetModel target = TargetModel::load(*be, a.target);
    std::unique_ptr<Tokenizer> tok;
    if (has_tokenizer_spec(a.target))
        tok = load_tokenizer_for_model(a.target, chat_options_from_settings(ctx.settings));
    const std::vector<int32_t> prompt = prompt_tokens(a, tok.get());
    for (size_t i = 0; i < prompt.size(); ++i) {
        DF_CHECK(prompt[i] < target.config().vocab_size,
                 "prompt token {} has id {}, outside the target's vocabulary (ids 0..{})", i,
                 prompt[i], target.config().vocab_size - 1);
    }
    std::optional<DrafterModel> drafter;
    if (!a.drafter.empty()) drafter.emplace(DrafterModel::load(*be, a.drafter));
    SpeculativeEngine engine(target, drafter ? &*drafter : nullptr, *be);
    GenerateOptions opt = generate_options_from_settings(ctx.settings);
    opt.stop_tokens = default_stop_tokens(target.config(), tok.get());
    if (a.trace) opt.trace = print_step;
    ctx.log.debug("prompt: {} tokens; {} decoding, max {} new tokens", prompt.size(),
                  drafter ? "speculative" : "plain", opt.max_new_tokens);

    StdoutStream out(a.print_ids ? nullptr : tok.get(), opt.stop_tokens);
    const GenerateResult res =
        engine.generate(prompt, opt, [&](std::span<const int32_t> t) { out.push(t); });
    out.finish();
    const GenerateStats& s = res.stats;
    std::fprintf(stderr,
                 "tokens %lld (prompt %lld), tau %.2f over %lld steps, %.1f tokens/s after the "
                 "prefill (%.1f ms), stop %s, on %s\n",
                 static_cast<long long>(s.new_tokens), static_cast<long long>(s.prompt_tokens),
                 drafter ? s.tau() : 1.0, static_cast<long long>(s.steps),
                 s.decode_s > 0 ? static_cast<double>(s.new_tokens) / s.decode_s : 0.0,
                 s.prefill_s * 1e3, to_string(res.stop).c_str(), be->name().c_str());
    return 0;
}

}  // namespace dflash::cli
