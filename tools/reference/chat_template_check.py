"""Is a model's own chat template one that dflash has written as code? (any machine with transformers)

dflash applies chat templates as code (src/tokenizer/chat_template.cpp: qwen3, qwen3_5, llama3,
llama3.1, harmony), checked in CI against the Jinja files of tools/reference/chat_templates/.
This script renders the conversations of tools/reference/tokenizer_cases.json (those of the named
template, with its options) with the model's own template (tokenizer_config.json or
chat_template.jinja) and with dflash's Jinja file, through transformers' apply_chat_template, and
reports every difference. If there is none, `--chat.template NAME` is safe for that model.

usage: python3 tools/reference/chat_template_check.py MODEL_DIR NAME
  (NAME: qwen3, qwen3_5, llama3, llama3.1, harmony)
exits 1 on any difference.

gpt-oss's template dates its system turn with strftime_now("%Y-%m-%d"); for harmony cases the
script pins that function to the case's current_date, which dflash's Jinja takes as a variable.
"""
import datetime
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, name = sys.argv[1], sys.argv[2]
    with open(os.path.join(HERE, "chat_templates", name + ".jinja")) as f:
        ours = f.read().rstrip()
    with open(os.path.join(HERE, "tokenizer_cases.json")) as f:
        chats = [c for c in json.load(f)["chats"] if c["template"] == name]
    tok = AutoTokenizer.from_pretrained(model_dir)
    if not tok.chat_template:
        sys.exit(f"{model_dir} has no chat template")
    bad = 0
    for c in chats:
        kw = {"add_generation_prompt": c["add_generation_prompt"]}
        for k in ("enable_thinking", "reasoning_effort", "current_date"):
            if k in c:
                kw[k] = c[k]
        if "current_date" in c:
            day = datetime.datetime.strptime(c["current_date"], "%Y-%m-%d")
            kw["strftime_now"] = day.strftime  # a template variable shadows the global
        theirs = tok.apply_chat_template(c["messages"], tokenize=False, **kw)
        mine = tok.apply_chat_template(c["messages"], tokenize=False, chat_template=ours, **kw)
        same = theirs == mine
        bad += not same
        print(f"{c['name']}: {'same' if same else 'DIFFERENT'}")
        if not same:
            print(f"  model's: {theirs!r}\n  dflash's: {mine!r}")
    print(f"{len(chats) - bad} of {len(chats)} conversations render the same")
    sys.exit(1 if bad or not chats else 0)


if __name__ == "__main__":
    main()
