"""Tokenizer and chat-template fixtures from the reference implementations (run on the GPU machine).

Trains four small byte-level BPE tokenizers with HF `tokenizers` (offline, on
tools/reference/tokenizer_corpus.txt), one with Qwen2/Qwen3's pre-tokenizer (split pattern, NFC, no
bos), one with Llama-3's (split pattern, ignore_merges, <|begin_of_text|> added by the
post-processor), one with gpt-oss's (o200k split pattern, ignore_merges, no bos, the harmony
specials at gpt-oss's ids, the chat template in chat_template.jinja) and one with Qwen3.5's
(its own split pattern with \p{M} and single digits, NFC, no bos, ChatML specials at Qwen3.5's ids,
trained on the corpus plus QWEN35_EXTRA_CORPUS), writes them as
tokenizer.json + tokenizer_config.json (+ chat_template.jinja), and records what the reference
gives for the cases of tools/reference/tokenizer_cases.json:
  - texts: `tokenizers` encode (no specials added; and with the post-processor) and decode;
  - chats: transformers' apply_chat_template with the Jinja templates of
    tools/reference/chat_templates/ (text, and ids with tokenize=True).
tests/tokenizer/hf_fixtures_test.cpp compares dflash with every case.

o200k's specials keep gpt-oss's ids (199998 ... 200018), and qwen35's keep Qwen3.5's (248044 ...),
in a vocabulary of a few hundred entries:
`tokenizers` re-numbers, on loading, an added token that the model's vocabulary lacks (from the
vocabulary's size on), so the specials are written into the BPE vocabulary at their ids as well
(gpt-oss's own tokenizer.json lists them only as added tokens; dflash reads both layouts alike, a
test checks). The script stops if any special does not load at its id.

usage (repo root): python3 tools/reference/make_tokenizer_fixtures.py [OUT_DIR] [KIND...]
                   [--kind KIND]... [--out OUT_DIR]
  KIND: qwen2, llama3, o200k, qwen35 (default: all four); OUT_DIR defaults to
  tests/fixtures/tokenizer;
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
# Qwen3.5's split pattern: unlike Qwen2/3's, a word takes combining marks (\p{M}) as letters and
# punctuation runs stop at them; digits still go one at a time.
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5's added tokens at its ids: (id, content, special). The three ChatML ones are from the
# models' configs; <think>/</think> sit at Qwen3's offsets from <|endoftext|> (+24, +25), which
# is a guess (their real ids are not checked) and matters only in that they are far from the
# trained vocabulary and not special (Qwen's tokenizers list them with special=false).
QWEN35_ADDED = [(248044, "<|endoftext|>", True), (248045, "<|im_start|>", True),
                (248046, "<|im_end|>", True), (248068, "<think>", False),
                (248069, "</think>", False)]
# Extra training text for qwen35 only (the shared corpus stays as the other fixtures were made
# from): combining marks after letters, spaces and punctuation, NFC-composable sequences, CRLF
# line ends and upper-case contractions, so that merges exist across the places the pattern
# differs from Qwen2/3's.
QWEN35_EXTRA_CORPUS = "\n".join([
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m man\u0303ana pin\u0303ata",
    "x\u0301\u0301y q\u0307 b\u0323\u0307 a\u0323\u0302 a\u0302\u0323 \u0301abc (\u0301x) !!\u0301?",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e "
    "\u0915\u093c \u0958 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 "
    "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627",
    "\u1100\u1161\u11a8 \uac00\u11a8 \u212b \u2126 \u1e9b\u0323 \ufb01 \u00c5 \u00e9",
    "DON'T YOU'RE I'M IT'S WE'LL THEY'VE SHE'D HE'LL it'S You'Re",
    "line one\r\nline two\r\n\r\n  indented\r\n\tTab\r\nend.\r\n",
    "v1.2.3 2024-06-01 12345 678 90 a1b22c333",
]) + "\n"
# gpt-oss's named special tokens at their ids (the reserved ones between them are left out).
HARMONY_SPECIALS = [(199998, "<|startoftext|>"), (199999, "<|endoftext|>"), (200002, "<|return|>"),
                    (200003, "<|constrain|>"), (200005, "<|channel|>"), (200006, "<|start|>"),
                    (200007, "<|end|>"), (200008, "<|message|>"), (200012, "<|call|>"),
                    (200018, "<|endofprompt|>")]
# Whole pre-tokens given a vocabulary entry that no merge sequence builds, so that the o200k
# fixture tells ignore_merges (one token) from plain BPE (several).
O200K_WHOLE_WORDS = [" JSONParser", " HTTPServer", " Speculative"]
FAMILIES = {"qwen2": ["qwen3"], "llama3": ["llama3", "llama3.1"], "o200k": ["harmony"],
            "qwen35": ["qwen3_5"]}
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
    if kind == "qwen35":
        return train_qwen35(corpus + QWEN35_EXTRA_CORPUS)
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


def train_qwen35(corpus):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus.splitlines(keepends=True), trainer)
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    for tid, content, _ in QWEN35_ADDED:  # see the module docstring
        vocab[content] = tid
    doc["model"]["ignore_merges"] = False  # as Qwen's tokenizer.json files have it
    doc["added_tokens"] = [{"id": tid, "content": content, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": special}
                           for tid, content, special in QWEN35_ADDED]
    loaded = Tokenizer.from_str(json.dumps(doc))
    for tid, content, _ in QWEN35_ADDED:
        if loaded.token_to_id(content) != tid or loaded.encode(
                content, add_special_tokens=False).ids != [tid]:
            sys.exit(f"qwen35: {content} loads as id {loaded.token_to_id(content)}, not {tid}; "
                     f"this tokenizers version numbers added tokens differently")
    if (json.loads(loaded.to_str()).get("normalizer") or {}).get("type") != "NFC":
        sys.exit("qwen35: the NFC normaliser did not survive writing tokenizer.json")
    return loaded, doc


def tokenizer_config(kind):
    if kind == "o200k":  # the chat template goes to chat_template.jinja, as gpt-oss ships it
        return {"bos_token": "<|startoftext|>", "eos_token": "<|return|>",
                "pad_token": "<|endoftext|>", "clean_up_tokenization_spaces": False,
                "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    template_file = {"qwen2": "qwen3.jinja", "qwen35": "qwen3_5.jinja"}.get(kind, "llama3.1.jinja")
    template = read(os.path.join(HERE, "chat_templates", template_file)).rstrip()
    cfg = {"clean_up_tokenization_spaces": False, "model_max_length": 131072,
           "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
    if kind in ("qwen2", "qwen35"):
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


def parse_args(argv):
    """[OUT_DIR] [KIND...] as before, and --kind KIND (repeatable) / --out OUT_DIR as well."""
    if any(a in ("-h", "--help") for a in argv):
        sys.exit(__doc__)
    out_root, kinds, rest = None, [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--kind", "--out"):
            if i + 1 >= len(argv):
                sys.exit(f"{a} needs a value\n{__doc__}")
            if a == "--kind":
                kinds.append(argv[i + 1])
            else:
                out_root = argv[i + 1]
            i += 2
            continue
        if a.startswith("--kind="):
            kinds.append(a.split("=", 1)[1])
        elif a.startswith("--out="):
            out_root = a.split("=", 1)[1]
        elif a.startswith("-"):
            sys.exit(f"unknown option {a}\n{__doc__}")
        else:
            rest.append(a)
        i += 1
    # A positional that names a kind is a kind; the first other one is the output directory.
    for a in rest:
        if a in FAMILIES:
            kinds.append(a)
        elif out_root is None:
            out_root = a
        else:
            sys.exit(f"unknown fixture kind {a!r}; known: {', '.join(FAMILIES)}")
    if out_root is None:
        out_root = os.path.join(HERE, "..", "..", "tests", "fixtures", "tokenizer")
    return out_root, kinds or list(FAMILIES)


def main():
    out_root, kinds = parse_args(sys.argv[1:])
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
