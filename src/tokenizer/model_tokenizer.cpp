// Tokenizer description files of model directories. Tested by
// tests/tokenizer/model_tokenizer_test.cpp.
#include "tokenizer/model_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "core/error.h"

namespace dflash {

void save_tokenizer_spec(const std::filesystem::path& dir, const Tokenizer& tok) {
    nlohmann::json j;
    j["type"] = tok.name();
    j["vocab_size"] = tok.vocab_size();
    write_text_atomic(dir / kTokenizerSpecFile, j.dump(2) + "\n");
}

bool has_tokenizer_spec(const std::filesystem::path& dir) {
    return std::filesystem::exists(dir / kTokenizerSpecFile);
}

std::unique_ptr<Tokenizer> load_tokenizer_for_model(const std::filesystem::path& dir) {
    const auto spec = dir / kTokenizerSpecFile;
    if (!std::filesystem::exists(spec)) {
        DF_CHECK(!std::filesystem::exists(dir / "tokenizer.json"),
                 "'{}' has an HF tokenizer.json, which dflash cannot read yet; pass token ids "
                 "(--prompt-ids) instead of text",
                 dir.string());
        DF_FAIL("'{}' names no tokenizer (no {}); pass token ids (--prompt-ids) instead of text",
                dir.string(), kTokenizerSpecFile);
    }
    const nlohmann::json j = read_json_file(spec);
    DF_CHECK(j.contains("type") && j["type"].is_string(), "{}: missing string field \"type\"",
             spec.string());
    return make_tokenizer(j["type"].get<std::string>());
}

}  // namespace dflash
