"""Tokenizer and chat-template fixtures from the reference implementations (run on the GPU machine).

Trains two small byte-level BPE tokenizers with HF `tokenizers` (offline, on
tools/reference/tokenizer_corpus.txt), one with Qwen2/Qwen3's pre-tokenizer (split pattern, NFC, no
bos) and one with Llama-3's (split pattern, ignore_merges, <|begin_of_text|> added by the
post-processor), writes them as tokenizer.json + tokenizer_config.json, and records what the
reference gives for the cases of tools/reference/tokenizer_cases.json:
  - texts: `tokenizers` encode (no specials added; and with the post-processor) and decode;
  - chats: transformers' apply_chat_template with the Jinja templates of
    tools/reference/chat_templates/ (text, and ids with tokenize=True).
tests/tokenizer/hf_fixtures_test.cpp compares dflash with every case.

usage (repo root): python3 tools/reference/make_tokenizer_fixtures.py OUT_DIR
  writes OUT_DIR/{qwen2,llama3}/{tokenizer.json,tokenizer_config.json,expected.json};
  copy them over tests/fixtures/tokenizer/ and commit.
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


def tokenizer_config(kind):
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
    family = ["qwen3"] if kind == "qwen2" else ["llama3", "llama3.1"]
    out = []
    for c in cases["chats"]:
        if c["template"] not in family:
            continue
        kwargs = {"add_generation_prompt": c["add_generation_prompt"],
                  "chat_template": read(os.path.join(HERE, "chat_templates",
                                                     c["template"] + ".jinja")).rstrip()}
        if "enable_thinking" in c:
            kwargs["enable_thinking"] = c["enable_thinking"]
        text = hf_tok.apply_chat_template(c["messages"], tokenize=False, **kwargs)
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_hf = as_ids(hf_tok.apply_chat_template(c["messages"], tokenize=True, **kwargs))
        if ids_hf != ids:
            sys.exit(f"{kind} chat {c['name']}: apply_chat_template(tokenize=True) gives {ids_hf}, "
                     f"tokenizers gives {ids} for its text; fix the script before trusting it")
        out.append(dict(c, text=text, ids=ids))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_root = sys.argv[1]
    cases = json.loads(read(os.path.join(HERE, "tokenizer_cases.json")))
    corpus = read(os.path.join(HERE, "tokenizer_corpus.txt"))
    producer = (f"HF tokenizers {tokenizers.__version__} + transformers {transformers.__version__} "
                f"(tools/reference/make_tokenizer_fixtures.py)")
    for kind in ("qwen2", "llama3"):
        tok, doc = train(kind, corpus)
        cfg = tokenizer_config(kind)
        d = os.path.join(out_root, kind)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
        hf_tok = load_transformers_tokenizer(d, cfg)
        probe = "Hello 12345 \u4f60\u597d<|im_end|>"
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
