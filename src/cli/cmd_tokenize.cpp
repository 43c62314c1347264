// `dflash tokenize --model DIR [--chat] TEXT` prints the ids the model sees for TEXT (one line,
// space-separated: the prompt as `dflash generate --prompt` encodes it, or with --chat as a user
// message in the chat template with the generation prompt); `--decode 1,2,3` prints the text of
// ids. Tested by tests/cli/tokenize_cli_test.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "infer/prompts.h"
#include "options/chat_options.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash::cli {

namespace {

// "1,2,3", "1 2 3" or "1, 2, 3" -> ids (what tokenize prints can be pasted back).
std::vector<int32_t> parse_ids(std::string text) {
    std::string joined;
    bool gap = false;
    for (char c : text) {
        const bool sep = c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (sep) {
            gap = !joined.empty();
            continue;
        }
        if (gap) joined += ',';
        gap = false;
        joined += c;
    }
    DF_CHECK(!joined.empty(), "--decode got no ids (\"{}\"); give them as 1,2,3", text);
    return parse_id_list(joined);
}

}  // namespace

int cmd_tokenize(CommandContext& ctx) {
    CLI::App app{"Show the token ids a model sees for a text, or the text of token ids.",
                 "dflash tokenize"};
    std::string model, text, decode;
    bool chat = false;
    app.add_option("--model", model, "model directory (its tokenizer.json or the byte tokenizer)")
        ->required();
    app.add_option("text", text, "the text to encode");
    app.add_option("--decode", decode, "token ids to decode, e.g. 1,2,3");
    app.add_flag("--chat", chat,
                 "encode TEXT as a user message in the chat template, ready for the reply");
    if (!parse_command_args(app, ctx, "tokenize")) return 0;
    DF_CHECK(app.count("text") + app.count("--decode") == 1,
             "give exactly one of TEXT (to encode) or --decode IDS");
    // Whether --decode was given, not whether its value is empty: `--decode ""` is a request to
    // decode no ids (an error), not a request to encode an empty TEXT.
    const bool decoding = app.count("--decode") > 0;
    DF_CHECK(!chat || !decoding, "--chat applies to TEXT, not to --decode");
    const auto tok = load_tokenizer_for_model(model, chat_options_from_settings(ctx.settings));
    if (decoding) {
        const std::vector<int32_t> ids = parse_ids(decode);
        std::printf("%s\n", utf8_lossy(tok->decode(ids)).c_str());
        return 0;
    }
    const std::vector<int32_t> ids =
        chat ? tok->encode_chat({{"user", text}}, /*add_generation_prompt=*/true).tokens
             : encode_text_prompt(*tok, text);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
}

}  // namespace dflash::cli
