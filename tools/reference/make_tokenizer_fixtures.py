"""Tokenizer and chat-template fixtures from the reference implementations (run on the GPU machine).

Trains three small byte-level BPE tokenizers with HF `tokenizers` (offline, on
tools/reference/tokenizer_corpus.txt), one with Qwen2/Qwen3's pre-tokenizer (split pattern, NFC, no
bos), one with Llama-3's (split pattern, ignore_merges, <|begin_of_text|> added by the
post-processor) and one with gpt-oss's (o200k split pattern, ignore_merges, no bos, the harmony
specials at gpt-oss's ids, the chat template in chat_template.jinja), writes them as
tokenizer.json + tokenizer_config.json (+ chat_template.jinja), and records what the reference
gives for the cases of tools/reference/tokenizer_cases.json:
  - texts: `tokenizers` encode (no specials added; and with the post-processor) and decode;
  - chats: transformers' apply_chat_template with the Jinja templates of
    tools/reference/chat_templates/ (text, and ids with tokenize=True).
tests/tokenizer/hf_fixtures_test.cpp compares dflash with every case.

o200k's specials keep gpt-oss's ids (199998 ... 200018) in a vocabulary of a few hundred entries:
`tokenizers` re-numbers, on loading, an added token that the model's vocabulary lacks (from the
vocabulary's size on), so the specials are written into the BPE vocabulary at their ids as well
(gpt-oss's own tokenizer.json lists them only as added tokens; dflash reads both layouts alike, a
test checks). The script stops if any special does not load at its id.

usage (repo root): python3 tools/reference/make_tokenizer_fixtures.py OUT_DIR [KIND...]
  KIND: qwen2, llama3, o200k (default: all three);
  writes OUT_DIR/KIND/{tokenizer.json,tokenizer_config.json,expected.json} (o200k: and
  chat_template.jinja); copy them over tests/fixtures/tokenizer/ and commit.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network

import tokenizers
import transformers
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors, trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])
# gpt-oss's named special tokens at their ids (the reserved ones between them are left out).
HARMONY_SPECIALS = [(199998, "<|startoftext|>"), (199999, "<|endoftext|>"), (200002, "<|return|>"),
                    (200003, "<|constrain|>"), (200005, "<|channel|>"), (200006, "<|start|>"),
                    (200007, "<|end|>"), (200008, "<|message|>"), (200012, "<|call|>"),
                    (200018, "<|endofprompt|>")]
# Whole pre-tokens given a vocabulary entry that no merge sequence builds, so that the o200k
# fixture tells ignore_merges (one token) from plain BPE (several).
O200K_WHOLE_WORDS = [" JSONParser", " HTTPServer", " Speculative"]
FAMILIES = {"qwen2": ["qwen3"], "llama3": ["llama3", "llama3.1"], "o200k": ["harmony"]}
# Chat-template options a case may set, passed to apply_chat_template as they are.
TEMPLATE_OPTIONS = ("enable_thinking", "reasoning_effort", "current_date")
SPECIALS = {
    "qwen2": [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
              ("<think>", False), ("</think>", False)],
    "llama3": [("<|begin_of_text|>", True), ("<|end_of_text|>", True),
               ("<|reserved_special_token_0|>", True), ("<|start_header_id|>", True),
               ("<|end_header_id|>", True), ("<|eot_id|>", True)],
}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def train(kind, corpus):
    if kind == "o200k":
        return train_o200k(corpus)
    tok = Tokenizer(models.BPE())
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2 if kind == "qwen2" else LLAMA3), behavior="isolated",
                             invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer)
    for content, special in SPECIALS[kind]:  # ids after the vocabulary, in this order
        if special:
            tok.add_special_tokens([tokenizers.AddedToken(content, special=True, normalized=False)])
        else:
            tok.add_tokens([tokenizers.AddedToken(content, special=False, normalized=False)])
    byte_level = processors.ByteLevel(trim_offsets=False)
    if kind == "qwen2":
        tok.post_processor = byte_level
    else:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([byte_level, processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    doc = json.loads(tok.to_str())
    doc["model"]["ignore_merges"] = kind == "llama3"  # as Llama-3's tokenizer.json has it
    return Tokenizer.from_str(json.dumps(doc)), doc


def byte_level_chars(text):
    """`text`'s UTF-8 bytes in GPT-2's byte alphabet (how byte-level vocabularies spell them)."""
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    table, nxt = {}, 256
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(nxt)
            nxt += 1
    return "".join(table[b] for b in text.encode("utf-8"))


def train_o200k(corpus):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer)
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    for w in O200K_WHOLE_WORDS:
        vocab.setdefault(byte_level_chars(w), len(vocab))
    for tid, content in HARMONY_SPECIALS:  # see the module docstring
        vocab[content] = tid
    doc["model"]["ignore_merges"] = True  # as gpt-oss's tokenizer.json has it
    doc["added_tokens"] = [{"id": tid, "content": content, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
                           for tid, content in HARMONY_SPECIALS]
    doc["post_processor"] = None
    loaded = Tokenizer.from_str(json.dumps(doc))
    for tid, content in HARMONY_SPECIALS:
        if loaded.token_to_id(content) != tid or loaded.encode(content).ids != [tid]:
            sys.exit(f"o200k: {content} loads as id {loaded.token_to_id(content)}, not {tid}; "
                     f"this tokenizers version numbers added tokens differently")
    return loaded, doc


def tokenizer_config(kind):
    if kind == "o200k":  # the chat template goes to chat_template.jinja, as gpt-oss ships it
        return {"bos_token": "<|startoftext|>", "eos_token": "<|return|>",
                "pad_token": "<|endoftext|>", "clean_up_tokenization_spaces": False,
                "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    template = read(os.path.join(HERE, "chat_templates",
                                 "qwen3.jinja" if kind == "qwen2" else "llama3.1.jinja")).rstrip()
    cfg = {"clean_up_tokenization_spaces": False, "model_max_length": 131072,
           "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
    if kind == "qwen2":
        cfg.update(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    else:
        cfg.update(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    return cfg


def load_transformers_tokenizer(d, cfg):
    """The fixture through transformers, as a user would load a model's tokenizer."""
    try:
        return transformers.AutoTokenizer.from_pretrained(d)
    except Exception as e:  # noqa: BLE001 - fall back to the class behind AutoTokenizer
        print(f"AutoTokenizer failed ({e}); using the tokenizers-backed class directly")
        cls = (getattr(transformers, "PreTrainedTokenizerFast", None)
               or getattr(transformers, "TokenizersBackend"))
        specials = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token") if cfg.get(k)}
        return cls(tokenizer_file=os.path.join(d, "tokenizer.json"), **specials)


def case_text(c):
    return bytes.fromhex(c["text_hex"]).decode("utf-8", "replace") if "text_hex" in c else c["text"]


def as_ids(x):
    """apply_chat_template(tokenize=True) returns a list (transformers 4) or a BatchEncoding (5)."""
    if hasattr(x, "keys") and "input_ids" in x.keys():
        x = x["input_ids"]
    if x and isinstance(x[0], list):
        x = x[0]
    return [int(i) for i in x]


def chat_cases(kind, tok, hf_tok, cases):
    out = []
    for c in cases["chats"]:
        if c["template"] not in FAMILIES[kind]:
            continue
        kwargs = {"add_generation_prompt": c["add_generation_prompt"],
                  "chat_template": read(os.path.join(HERE, "chat_templates",
                                                     c["template"] + ".jinja")).rstrip()}
        kwargs.update({k: c[k] for k in TEMPLATE_OPTIONS if k in c})
        text = hf_tok.apply_chat_template(c["messages"], tokenize=False, **kwargs)
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_hf = as_ids(hf_tok.apply_chat_template(c["messages"], tokenize=True, **kwargs))
        if ids_hf != ids:
            sys.exit(f"{kind} chat {c['name']}: apply_chat_template(tokenize=True) gives {ids_hf}, "
                     f"tokenizers gives {ids} for its text; fix the script before trusting it")
        out.append(dict(c, text=text, ids=ids))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_root = sys.argv[1]
    kinds = sys.argv[2:] or list(FAMILIES)
    for kind in kinds:
        if kind not in FAMILIES:
            sys.exit(f"unknown fixture kind {kind!r}; known: {', '.join(FAMILIES)}")
    cases = json.loads(read(os.path.join(HERE, "tokenizer_cases.json")))
    corpus = read(os.path.join(HERE, "tokenizer_corpus.txt"))
    producer = (f"HF tokenizers {tokenizers.__version__} + transformers {transformers.__version__} "
                f"(tools/reference/make_tokenizer_fixtures.py)")
    for kind in kinds:
        tok, doc = train(kind, corpus)
        cfg = tokenizer_config(kind)
        d = os.path.join(out_root, kind)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
        if kind == "o200k":
            with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(read(os.path.join(HERE, "chat_templates", "harmony.jinja")))
        hf_tok = load_transformers_tokenizer(d, cfg)
        probe = "Hello 12345 \u4f60\u597d<|im_end|><|start|>"
        if hf_tok(probe, add_special_tokens=False)["input_ids"] != tok.encode(
                probe, add_special_tokens=False).ids:
            sys.exit(f"{kind}: transformers did not load tokenizer.json as written")
        texts = []
        for c in cases["texts"]:
            if c.get("only", kind) != kind:
                continue
            text = case_text(c)
            ids = tok.encode(text, add_special_tokens=False).ids
            texts.append(dict(c, ids=ids, prompt_ids=tok.encode(text).ids,
                              decoded=tok.decode(ids, skip_special_tokens=False)))
        expected = {"producer": producer,
                    "tokenizer_json_producer": f"HF tokenizers {tokenizers.__version__} "
                                               f"BpeTrainer (tools/reference/make_tokenizer_fixtures.py)",
                    "texts": texts, "chats": chat_cases(kind, tok, hf_tok, cases)}
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, indent=1)
        print(f"{d}: vocab {tok.get_vocab_size()}, {len(texts)} texts, "
              f"{len(expected['chats'])} chats ({producer})")


if __name__ == "__main__":
    main()
