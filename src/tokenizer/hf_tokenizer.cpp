// HfTokenizer (hf_tokenizer.h). Tested by tests/tokenizer/hf_tokenizer_test.cpp and
// tests/tokenizer/hf_fixtures_test.cpp.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/input_file.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex_split.h"

namespace dflash {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Where each token came from: bytes [begin, end) of the text given to encode.
struct Span {
    uint32_t begin, end;
};

json parse_json(const std::string& text, const std::string& what) {
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        DF_FAIL("{} is not valid JSON: {}", what, e.what());
    }
}

// A tokenizer file: a regular file (a directory, a FIFO or /dev/zero behind the name is refused
// at once) of at most kMaxTokenizerFileBytes.
std::string read_file(const fs::path& p) {
    return read_input_file(p, kMaxTokenizerFileBytes, "tokenizer file");
}

class HfTokenizer final : public Tokenizer {
  public:
    HfTokenizer(HfTokenizerFiles files, const ChatOptions& chat) : files_(std::move(files)) {
        const json tj = parse_json(files_.tokenizer_json, files_.origin + "/tokenizer.json");
        DF_CHECK(tj.is_object(), "tokenizer.json is a JSON {}; expected an object", tj.type_name());
        bpe_ = BpeModel::from_json(tj.value("model", json()));
        added_ = AddedTokens::from_json(tj.value("added_tokens", json()));
        nfc_ = hf::read_normalizer(tj.value("normalizer", json()));
        for (auto& p : hf::read_pre_tokenizer(tj.value("pre_tokenizer", json())))
            splits_.emplace_back(std::move(p));
        hf::check_decoder(tj.value("decoder", json()));
        const hf::AddedAround around = hf::read_post_processor(tj.value("post_processor", json()));
        hf::TokenizerConfig cfg =
            files_.tokenizer_config_json.empty()
                ? hf::TokenizerConfig{}
                : hf::read_tokenizer_config(parse_json(files_.tokenizer_config_json,
                                                       files_.origin + "/tokenizer_config.json"));
        if (!files_.chat_template_jinja.empty()) {
            cfg.chat_template = files_.chat_template_jinja;
            cfg.chat_template_problem.clear();  // the file wins over the config's entry
        }
        vocab_size_ = std::max(bpe_.max_id(), added_.max_id()) + 1;
        name_ = fmt::format("hf-bpe:{:016x}", fnv1a64(files_.tokenizer_json));
        set_specials(around, cfg);
        set_chat_template(cfg, chat);
    }

    std::string name() const override { return name_; }
    int64_t vocab_size() const override { return vocab_size_; }
    const SpecialTokens& specials() const override { return sp_; }
    std::string chat_template_name() const override { return chat_ ? chat_->name() : "none"; }

    std::vector<int32_t> stop_tokens() const override {
        std::vector<int32_t> out = Tokenizer::stop_tokens();
        for (int32_t id : other_stops_)
            if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
        return out;
    }

    std::vector<int32_t> encode(std::string_view text) const override {
        std::vector<int32_t> ids;
        encode_into(text, ids, nullptr);
        return ids;
    }

    std::string decode(std::span<const int32_t> ids) const override {
        std::string out;
        for (size_t i = 0; i < ids.size(); ++i) out += token_bytes(ids[i], i);
        return out;
    }

    Encoded encode_chat(const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt) const override {
        DF_CHECK(
            chat_ != nullptr,
            "{}: cannot apply a chat template: {}; set chat.template to one of {} if the "
            "model's template is equivalent to it (tools/reference/chat_template_check.py tells)",
            files_.origin, chat_problem_, kChatTemplateNames);
        const std::vector<ChatSegment> segs = chat_->render(msgs, add_generation_prompt);
        std::string text;
        std::vector<uint8_t> byte_mask;
        for (const auto& s : segs) {
            text += s.text;
            byte_mask.insert(byte_mask.end(), s.text.size(), s.mask);
        }
        Encoded out;
        std::vector<Span> spans;
        encode_into(text, out.tokens, &spans);
        out.loss_mask.resize(out.tokens.size(), 0);
        for (size_t t = 0; t < spans.size(); ++t) {
            // A token that straddles two segments is the model's to predict if any byte is.
            const uint32_t end = std::max(spans[t].end, spans[t].begin + 1);
            for (uint32_t b = spans[t].begin; b < end && b < byte_mask.size(); ++b)
                out.loss_mask[t] |= byte_mask[b];
        }
        return out;
    }

    void save_files(const fs::path& dir) const override {
        write_text_atomic(dir / kHfTokenizerFile, files_.tokenizer_json);
        if (!files_.tokenizer_config_json.empty())
            write_text_atomic(dir / kHfTokenizerConfigFile, files_.tokenizer_config_json);
        if (!files_.chat_template_jinja.empty())
            write_text_atomic(dir / kHfChatTemplateFile, files_.chat_template_jinja);
    }

  private:
    int32_t token_id(const std::string& text) const {
        if (text.empty()) return -1;
        if (const AddedToken* t = added_.find(text)) return t->id;
        return bpe_.find(byte_level_encode(text)).value_or(-1);
    }

    void set_specials(const hf::AddedAround& around, const hf::TokenizerConfig& cfg) {
        sp_.bos = around.before.empty() ? -1 : around.before.front();
        bos_text_ = cfg.bos_token;
        if (bos_text_.empty() && sp_.bos >= 0) bos_text_ = token_bytes(sp_.bos, 0);
        sp_.eos = token_id(cfg.eos_token);
        sp_.pad = token_id(cfg.pad_token);
        if (const AddedToken* m = added_.find("<|MASK|>")) sp_.mask = m->id;
        DF_CHECK(cfg.eos_token.empty() || sp_.eos >= 0,
                 "{}: tokenizer_config.json eos_token \"{}\" is not a token of tokenizer.json",
                 files_.origin, cfg.eos_token);
    }

    void set_chat_template(const hf::TokenizerConfig& cfg, const ChatOptions& chat) {
        std::string want = chat.template_name;
        if (want == "auto" && !chat_template_for_model_type(files_.model_type).empty())
            want = chat_template_for_model_type(files_.model_type);
        if (want == "auto") {
            want = detect_chat_template(cfg.chat_template);
            if (!cfg.chat_template_problem.empty()) {
                chat_problem_ = cfg.chat_template_problem;
            } else if (cfg.chat_template.empty()) {
                chat_problem_ = "tokenizer_config.json has no chat_template";
            } else if (want.empty()) {
                chat_problem_ =
                    "tokenizer_config.json's chat_template is none of those dflash has written "
                    "as code";
            }
        }
        if (want.empty()) return;
        chat_ = make_chat_template(want, chat, bos_text_);
        sp_.end_turn = token_id(chat_->end_of_turn());
        DF_CHECK(sp_.end_turn >= 0,
                 "{}: the {} chat template ends turns with {}, which tokenizer.json lacks; is "
                 "chat.template right for this model?",
                 files_.origin, chat_->name(), chat_->end_of_turn());
        for (const std::string& text : chat_->other_stops()) {
            const int32_t id = token_id(text);
            DF_CHECK(id >= 0,
                     "{}: the {} chat template ends replies also at {}, which tokenizer.json "
                     "lacks; is chat.template right for this model?",
                     files_.origin, chat_->name(), text);
            other_stops_.push_back(id);
        }
    }

    std::string token_bytes(int32_t id, size_t pos) const {
        if (const AddedToken* t = added_.by_id(id))
            return byte_level_decode(t->content).value_or(t->content);
        const auto b = bpe_.token_bytes(id);
        DF_CHECK(b.has_value(),
                 "token id {} at position {} is not in the tokenizer's vocabulary (ids 0..{}); "
                 "was the data tokenized with another tokenizer?",
                 id, pos, vocab_size_ - 1);
        return std::string(*b);
    }

    // Ordinary text (no added tokens): normalize, split, BPE. Spans are offset by `base`.
    void encode_plain(std::string_view text, size_t base, std::vector<int32_t>& ids,
                      std::vector<Span>* spans) const {
        NormalizedText norm;
        std::string_view view = text;
        if (nfc_) {
            norm = nfc_normalize(text);
            view = norm.text;
        }
        std::vector<TextPiece> pieces{{0, view.size()}}, next;
        for (const RegexSplitter& s : splits_) {
            next.clear();
            for (const TextPiece& p : pieces)
                s.split(view.substr(p.begin, p.end - p.begin), p.begin, next);
            pieces.swap(next);
        }
        std::vector<uint32_t> lens;
        for (const TextPiece& p : pieces) {
            const size_t first = ids.size();
            lens.clear();
            bpe_.encode_word(view.substr(p.begin, p.end - p.begin), ids, lens);
            if (!spans) continue;
            size_t at = p.begin;
            for (size_t k = 0; k < ids.size() - first; ++k) {
                const size_t b = norm.to_input(at), e = norm.to_input(at + lens[k]);
                spans->push_back(
                    {static_cast<uint32_t>(base + b), static_cast<uint32_t>(base + e)});
                at += lens[k];
            }
        }
    }

    void encode_into(std::string_view input, std::vector<int32_t>& ids,
                     std::vector<Span>* spans) const {
        std::string clean;
        std::vector<uint32_t> source;  // clean byte -> input byte, when the input was not UTF-8
        std::string_view text = input;
        if (!is_valid_utf8(input)) {
            clean = utf8_lossy(input, spans ? &source : nullptr);
            text = clean;
        }
        for (const TextSegment& seg : added_.split(text)) {
            if (seg.id >= 0) {
                ids.push_back(seg.id);
                if (spans)
                    spans->push_back(
                        {static_cast<uint32_t>(seg.begin), static_cast<uint32_t>(seg.end)});
            } else {
                encode_plain(text.substr(seg.begin, seg.end - seg.begin), seg.begin, ids, spans);
            }
        }
        if (spans && !source.empty())
            for (Span& s : *spans) s = {source[s.begin], source[s.end]};
    }

    HfTokenizerFiles files_;
    std::string name_;
    BpeModel bpe_;
    AddedTokens added_;
    bool nfc_ = false;
    std::vector<RegexSplitter> splits_;
    int64_t vocab_size_ = 0;
    SpecialTokens sp_;
    std::string bos_text_;
    std::unique_ptr<ChatTemplate> chat_;
    std::vector<int32_t> other_stops_;  // the template's other_stops() as ids
    std::string chat_problem_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(HfTokenizerFiles files, const ChatOptions& chat) {
    const std::string origin = files.origin;
    try {
        return std::make_unique<HfTokenizer>(std::move(files), chat);
    } catch (const Error& e) {
        const std::string msg = e.what();
        if (msg.starts_with(origin)) throw;
        throw Error(fmt::format("{}: {}", origin, msg));
    }
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const fs::path& dir, const ChatOptions& chat) {
    HfTokenizerFiles f;
    f.origin = dir.string();
    f.tokenizer_json = read_file(dir / kHfTokenizerFile);
    if (fs::exists(dir / kHfTokenizerConfigFile))
        f.tokenizer_config_json = read_file(dir / kHfTokenizerConfigFile);
    if (fs::exists(dir / kHfChatTemplateFile))
        f.chat_template_jinja = read_file(dir / kHfChatTemplateFile);
    if (fs::exists(dir / kHfModelConfigFile)) {
        // Only the type is wanted; a config.json that is not JSON is the model loader's to
        // report, not the tokenizer's.
        const json cfg = json::parse(read_file(dir / kHfModelConfigFile), nullptr, false);
        if (cfg.is_object() && cfg.contains("model_type") && cfg["model_type"].is_string())
            f.model_type = cfg["model_type"].get<std::string>();
    }
    return make_hf_tokenizer(std::move(f), chat);
}

}  // namespace dflash
