// Interim tokenizer fixtures for tests/tokenizer/hf_fixtures_test.cpp, made on the development
// machine with independent JavaScript implementations: a small byte-level BPE is trained here (any
// valid vocabulary will do; the split patterns are Qwen2's, Llama-3's and o200k's), written as
// tokenizer.json in the layout HF `tokenizers` writes, and the expected ids of
// tools/reference/tokenizer_cases.json come from tokenizers.js (@huggingface/tokenizers) and
// @huggingface/jinja (with Python's strip semantics, see py_jinja.mjs). tools/reference/make_tokenizer_fixtures.py makes the same files with HF
// `tokenizers` + transformers on the GPU machine; whichever ran last is named in expected.json.
//
// The o200k fixture keeps gpt-oss's special-token ids (199998 <|startoftext|> ... 200018) in a
// vocabulary of a few hundred entries. HF `tokenizers` re-numbers added tokens that the model's
// vocabulary lacks (from the vocabulary's size on), so the specials are also written into the
// BPE vocabulary at their ids; the real tokenizer.json lists them only as added tokens, which
// dflash reads the same way (tests/tokenizer/hf_fixtures_test.cpp checks both).
//
// usage (repo root): node tools/js/make_tokenizer_fixtures.mjs [OUT_DIR=tests/fixtures/tokenizer] [KIND...]
//   KIND: qwen2, llama3, o200k (default: all three)
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";
import { loadPythonLikeJinja } from "./py_jinja.mjs";

const { Template } = await loadPythonLikeJinja();
const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, "..", "..");
const ref = join(repo, "tools", "reference");
const outRoot = process.argv[2] ?? join(repo, "tests", "fixtures", "tokenizer");

const QWEN2 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const O200K = [
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`, String.raw` ?[^\s\p{L}\p{N}]+[\r\n/]*`, String.raw`\s*[\r\n]+`, String.raw`\s+(?!\S)`, String.raw`\s+`,
].join("|");
// gpt-oss's named special tokens at their ids (the reserved ones between them are left out).
const HARMONY_SPECIALS = [[199998, "<|startoftext|>"], [199999, "<|endoftext|>"], [200002, "<|return|>"],
  [200003, "<|constrain|>"], [200005, "<|channel|>"], [200006, "<|start|>"], [200007, "<|end|>"],
  [200008, "<|message|>"], [200012, "<|call|>"], [200018, "<|endofprompt|>"]];
// Whole pre-tokens given a vocabulary entry that no merge sequence builds, so that the o200k
// fixture tells `ignore_merges` (the pre-token is one token) from plain BPE (several).
const O200K_WHOLE_WORDS = [" JSONParser", " HTTPServer", " Speculative"];
const LLAMA3 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
// For training only (JavaScript has no (?i:...)); any segmentation gives a valid vocabulary.
const TRAIN_SPLIT = /'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;
const CONTRACTION = String.raw`(?:'[sStTmMdD]|'[rR][eE]|'[vV][eE]|'[lL][lL])?`;
const O200K_TRAIN_SPLIT = new RegExp(String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+` + CONTRACTION +
  String.raw`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*` + CONTRACTION +
  String.raw`|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`, "gu");

// GPT-2's byte-to-unicode table.
function byteChars() {
  const keep = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const out = [];
  let next = 256;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(keep(b) ? b : next++));
  return out;
}

function trainBpe(corpus, numMerges, split) {
  const chars = byteChars();
  const counts = new Map();
  for (const m of corpus.matchAll(split)) counts.set(m[0], (counts.get(m[0]) ?? 0) + 1);
  let words = [...counts].map(([w, c]) => ({ syms: [...Buffer.from(w, "utf8")].map((b) => chars[b]), c }));
  const vocab = new Map(chars.map((ch, i) => [ch, i]));
  const merges = [];
  for (let n = 0; n < numMerges; n++) {
    const pairs = new Map();
    for (const w of words)
      for (let i = 0; i + 1 < w.syms.length; i++) {
        const k = w.syms[i] + "\u0000" + w.syms[i + 1];
        pairs.set(k, (pairs.get(k) ?? 0) + w.c);
      }
    let best = null, bestCount = 1;  // a pair must occur at least twice
    for (const [k, c] of pairs) if (c > bestCount || (c === bestCount && best !== null && k < best)) [best, bestCount] = [k, c];
    if (best === null) break;
    const [a, b] = best.split("\u0000");
    merges.push([a, b]);
    if (!vocab.has(a + b)) vocab.set(a + b, vocab.size);
    for (const w of words) {
      const s = [];
      for (let i = 0; i < w.syms.length; i++) {
        if (i + 1 < w.syms.length && w.syms[i] === a && w.syms[i + 1] === b) { s.push(a + b); i++; } else s.push(w.syms[i]);
      }
      w.syms = s;
    }
  }
  return { vocab: Object.fromEntries(vocab), merges };
}

function added(id, content, special) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special };
}

const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };

function makeTokenizerJson(kind, bpe) {
  if (kind === "o200k") return makeO200kJson(bpe);
  const base = Object.keys(bpe.vocab).length;
  const specials = kind === "qwen2"
    ? [["<|endoftext|>", true], ["<|im_start|>", true], ["<|im_end|>", true], ["<think>", false], ["</think>", false]]
    : [["<|begin_of_text|>", true], ["<|end_of_text|>", true], ["<|reserved_special_token_0|>", true],
       ["<|start_header_id|>", true], ["<|end_header_id|>", true], ["<|eot_id|>", true]];
  const addedTokens = specials.map(([c, s], i) => added(base + i, c, s));
  const bos = addedTokens[0];
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: addedTokens,
    normalizer: kind === "qwen2" ? { type: "NFC" } : null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: kind === "qwen2" ? QWEN2 : LLAMA3 }, behavior: "Isolated", invert: false },
      byteLevel] },
    post_processor: kind === "qwen2" ? byteLevel : { type: "Sequence", processors: [byteLevel, {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
             { SpecialToken: { id: bos.content, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { [bos.content]: { id: bos.content, ids: [bos.id], tokens: [bos.content] } } }] },
    decoder: byteLevel,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
             ignore_merges: kind === "llama3", vocab: bpe.vocab, merges: bpe.merges },
  };
}

// gpt-oss's layout: no normalizer, the o200k split then ByteLevel without its own regex, ByteLevel
// decoding, no bos added, ignore_merges, the harmony specials as added tokens at their ids.
function makeO200kJson(bpe) {
  const chars = byteChars();
  const vocab = { ...bpe.vocab };
  for (const w of O200K_WHOLE_WORDS) {
    const key = [...Buffer.from(w, "utf8")].map((b) => chars[b]).join("");
    if (!(key in vocab)) vocab[key] = Object.keys(vocab).length;
  }
  for (const [id, content] of HARMONY_SPECIALS) vocab[content] = id;  // see the note at the top
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: HARMONY_SPECIALS.map(([id, content]) => added(id, content, true)),
    normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: O200K }, behavior: "Isolated", invert: false },
      byteLevel] },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
             ignore_merges: true, vocab, merges: bpe.merges },
  };
}

function makeTokenizerConfig(kind) {
  if (kind === "o200k")  // the chat template is in chat_template.jinja, as gpt-oss ships it
    return { bos_token: "<|startoftext|>", eos_token: "<|return|>", pad_token: "<|endoftext|>",
             clean_up_tokenization_spaces: false, model_max_length: 131072,
             tokenizer_class: "PreTrainedTokenizerFast" };
  const template = readFileSync(join(ref, "chat_templates", kind === "qwen2" ? "qwen3.jinja" : "llama3.1.jinja"), "utf8").trimEnd();
  return kind === "qwen2"
    ? { bos_token: null, eos_token: "<|im_end|>", pad_token: "<|endoftext|>", clean_up_tokenization_spaces: false,
        model_max_length: 131072, tokenizer_class: "PreTrainedTokenizerFast", chat_template: template }
    : { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>", clean_up_tokenization_spaces: false,
        model_max_length: 131072, tokenizer_class: "PreTrainedTokenizerFast", chat_template: template };
}

function caseText(c) {
  return c.text_hex !== undefined ? Buffer.from(c.text_hex, "hex").toString("utf8") : c.text;  // invalid -> U+FFFD
}

function render(templateName, chat, bosToken) {
  const source = readFileSync(join(ref, "chat_templates", templateName + ".jinja"), "utf8").trimEnd();
  const vars = { messages: chat.messages, add_generation_prompt: chat.add_generation_prompt, bos_token: bosToken ?? "" };
  for (const k of ["enable_thinking", "reasoning_effort", "current_date"])
    if (chat[k] !== undefined) vars[k] = chat[k];
  return new Template(source).render(vars);
}

const cases = JSON.parse(readFileSync(join(ref, "tokenizer_cases.json"), "utf8"));
const corpus = readFileSync(join(ref, "tokenizer_corpus.txt"), "utf8");
const pkg = JSON.parse(readFileSync(join(here, "package.json"), "utf8")).dependencies;
const FAMILIES = { qwen2: ["qwen3"], llama3: ["llama3", "llama3.1"], o200k: ["harmony"] };
const kinds = process.argv.length > 3 ? process.argv.slice(3) : Object.keys(FAMILIES);
for (const kind of kinds) {
  if (!FAMILIES[kind]) throw new Error(`unknown fixture kind '${kind}'; known: ${Object.keys(FAMILIES).join(", ")}`);
  const tj = makeTokenizerJson(kind, trainBpe(corpus, 400, kind === "o200k" ? O200K_TRAIN_SPLIT : TRAIN_SPLIT));
  const tc = makeTokenizerConfig(kind);
  const tok = new Tokenizer(tj, tc);
  const texts = cases.texts.filter((c) => (!c.only || c.only === kind) && !c.skip_js).map((c) => {
    const text = caseText(c);
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    return { ...c, ids, prompt_ids: tok.encode(text).ids,
             decoded: ids.length ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "" };
  });
  const chats = cases.chats.filter((c) => FAMILIES[kind].includes(c.template)).map((c) => {
    const text = render(c.template, c, tc.bos_token);
    return { ...c, text, ids: tok.encode(text, { add_special_tokens: false }).ids };
  });
  const dir = join(outRoot, kind);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tj, null, 1) + "\n");
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(tc, null, 1) + "\n");
  if (kind === "o200k")
    writeFileSync(join(dir, "chat_template.jinja"), readFileSync(join(ref, "chat_templates", "harmony.jinja"), "utf8"));
  const expected = {
    producer: `tokenizers.js ${pkg["@huggingface/tokenizers"]} + @huggingface/jinja ${pkg["@huggingface/jinja"]} (tools/js/make_tokenizer_fixtures.mjs)`,
    tokenizer_json_producer: "a byte-level BPE trained by tools/js/make_tokenizer_fixtures.mjs",
    texts, chats };
  writeFileSync(join(dir, "expected.json"), JSON.stringify(expected, null, 1) + "\n");
  console.log(`${dir}: vocab ${Object.keys(tj.model.vocab).length} + ${tj.added_tokens.length} added, ${texts.length} texts, ${chats.length} chats`);
}
