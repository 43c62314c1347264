// Byte-level BPE (bpe.h). The merge loop follows HF `tokenizers` (models/bpe/word.rs): a min-heap
// of candidate merges ordered by (rank, position); a popped candidate is applied only if the pair
// at its position still merges into the same token. Tested by tests/tokenizer/bpe_test.cpp.
#include "tokenizer/bpe.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace dflash {

namespace {

using nlohmann::json;

bool empty_or_null(const json& model, const char* key) {
    if (!model.contains(key) || model[key].is_null()) return true;
    return model[key].is_string() && model[key].get<std::string>().empty();
}

// One merge rule as its two parts; tokenizer.json writes "a b" (older) or ["a", "b"] (newer).
std::pair<std::string, std::string> merge_parts(const json& m, size_t rank) {
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        return {m[0].get<std::string>(), m[1].get<std::string>()};
    DF_CHECK(m.is_string(), "tokenizer.json merge {} is {}; expected \"a b\" or [\"a\", \"b\"]",
             rank, m.dump());
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    DF_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
             "tokenizer.json merge {} is \"{}\"; expected two parts separated by one space", rank,
             s);
    return {s.substr(0, sp), s.substr(sp + 1)};
}

}  // namespace

BpeModel BpeModel::from_json(const json& model) {
    DF_CHECK(model.is_object() && model.value("type", std::string()) == "BPE",
             "tokenizer.json model is not {{\"type\": \"BPE\"}} (got {}); only byte-level BPE "
             "tokenizers (Qwen2/Qwen3, Llama-3, GPT-2 style) are supported",
             model.is_object() ? model.value("type", std::string("?")) : model.type_name());
    DF_CHECK(!model.contains("dropout") || model["dropout"].is_null(),
             "tokenizer.json BPE dropout is {}; only deterministic BPE (null) is supported",
             model.contains("dropout") ? model["dropout"].dump() : "");
    DF_CHECK(!model.value("byte_fallback", false),
             "tokenizer.json BPE has byte_fallback (a SentencePiece-style tokenizer); only "
             "byte-level BPE is supported");
    DF_CHECK(empty_or_null(model, "continuing_subword_prefix") &&
                 empty_or_null(model, "end_of_word_suffix"),
             "tokenizer.json BPE uses a subword prefix or word suffix; byte-level BPE has neither");
    DF_CHECK(model.contains("vocab") && model["vocab"].is_object(),
             "tokenizer.json model has no \"vocab\" object");
    DF_CHECK(model.contains("merges") && model["merges"].is_array(),
             "tokenizer.json model has no \"merges\" list");
    BpeModel m;
    m.ignore_merges_ = model.value("ignore_merges", false);
    const json& vocab = model["vocab"];
    m.vocab_.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        DF_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                     it.value().get<int64_t>() < (int64_t{1} << 31),
                 "tokenizer.json vocab entry \"{}\" has id {}; expected a non-negative integer",
                 it.key(), it.value().dump());
        const auto id = static_cast<int32_t>(it.value().get<int64_t>());
        if (static_cast<size_t>(id) >= m.id_bytes_.size()) {
            m.id_bytes_.resize(static_cast<size_t>(id) + 1);
            m.id_present_.resize(static_cast<size_t>(id) + 1, 0);
        }
        DF_CHECK(!m.id_present_[id], "tokenizer.json vocab gives id {} to two strings", id);
        m.id_present_[id] = 1;
        // A string outside the byte alphabet stands for its own UTF-8 (HF's ByteLevel decoder).
        m.id_bytes_[id] = byte_level_decode(it.key()).value_or(it.key());
        m.vocab_.emplace(it.key(), id);
    }
    for (int b = 0; b < 256; ++b) {
        const std::string ch = byte_level_encode(std::string(1, static_cast<char>(b)));
        const auto id = m.find(ch);
        DF_CHECK(id.has_value(),
                 "tokenizer.json vocab lacks the byte-level character for byte 0x{:02X} ('{}'); "
                 "a byte-level BPE vocabulary has all 256",
                 b, ch);
        m.byte_ids_[b] = *id;
    }
    const json& merges = model["merges"];
    m.merges_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
        const auto [a, b] = merge_parts(merges[r], r);
        const auto ia = m.find(a), ib = m.find(b), ic = m.find(a + b);
        DF_CHECK(ia && ib && ic,
                 "tokenizer.json merge {} (\"{}\" + \"{}\"): {} is not in the vocab", r, a, b,
                 !ia   ? a
                 : !ib ? b
                       : a + b);
        // A repeated pair keeps its last rank, as HF's map does.
        m.merges_.insert_or_assign(pair_key(*ia, *ib), Merge{static_cast<int32_t>(r), *ic});
    }
    return m;
}

std::optional<int32_t> BpeModel::find(std::string_view chars) const {
    const auto it = vocab_.find(chars);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

std::optional<std::string_view> BpeModel::token_bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size() || !id_present_[id])
        return std::nullopt;
    return std::string_view(id_bytes_[id]);
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& ids,
                           std::vector<uint32_t>& lens) const {
    if (bytes.empty()) return;
    if (ignore_merges_) {
        if (const auto whole = find(byte_level_encode(bytes))) {
            ids.push_back(*whole);
            lens.push_back(static_cast<uint32_t>(bytes.size()));
            return;
        }
    }
    std::vector<int32_t> sym(bytes.size());
    std::vector<uint32_t> len(bytes.size(), 1);
    for (size_t i = 0; i < bytes.size(); ++i) sym[i] = byte_ids_[static_cast<uint8_t>(bytes[i])];
    merge_symbols(sym, len);
    ids.insert(ids.end(), sym.begin(), sym.end());
    lens.insert(lens.end(), len.begin(), len.end());
}

void BpeModel::merge_symbols(std::vector<int32_t>& sym, std::vector<uint32_t>& len) const {
    const auto n = static_cast<int32_t>(sym.size());
    if (n < 2) return;
    std::vector<int32_t> prev(n), next(n);
    for (int32_t i = 0; i < n; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
        int32_t rank, pos, result;
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto offer = [&](int32_t pos) {  // the pair starting at `pos`, if it merges
        if (pos < 0 || next[pos] < 0) return;
        const auto it = merges_.find(pair_key(sym[pos], sym[next[pos]]));
        if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.result});
    };
    for (int32_t i = 0; i + 1 < n; ++i) offer(i);
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        if (len[c.pos] == 0 || next[c.pos] < 0) continue;
        const int32_t right = next[c.pos];
        const auto it = merges_.find(pair_key(sym[c.pos], sym[right]));
        if (it == merges_.end() || it->second.result != c.result) continue;  // stale
        sym[c.pos] = c.result;
        len[c.pos] += len[right];
        len[right] = 0;
        next[c.pos] = next[right];
        if (next[c.pos] >= 0) prev[next[c.pos]] = c.pos;
        offer(prev[c.pos]);
        offer(c.pos);
    }
    size_t w = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) {
        sym[w] = sym[i];
        len[w] = len[i];
        ++w;
    }
    sym.resize(w);
    len.resize(w);
}

}  // namespace dflash
