// Encodes strings with tokenizers.js (@huggingface/tokenizers), an implementation independent of
// dflash's, for tests/tokenizer/hf_crosscheck_test.cpp.
//
// usage: node tools/js/encode.mjs TOKENIZER_DIR IN.json OUT.json
//   IN.json:  ["text", ...]
//   OUT.json: [{"ids": [...], "decoded": "..."}, ...]  (no bos/eos added; specials kept on decode)
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, input, output] = process.argv.slice(2);
if (!output) {
  console.error("usage: node tools/js/encode.mjs TOKENIZER_DIR IN.json OUT.json");
  process.exit(2);
}
const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
const cfgPath = join(dir, "tokenizer_config.json");
const tc = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tj, tc);
const out = JSON.parse(readFileSync(input, "utf8")).map((text) => {
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  const decoded = ids.length
    ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false })
    : "";
  return { ids, decoded };
});
writeFileSync(output, JSON.stringify(out));
