"""Cross-check a dflash-written target against HF transformers (run on the GPU machine).

Loads the target directory with transformers' AutoModelForCausalLM (float32), greedily continues
each prompt, and compares the token ids with `dflash generate --prompt-ids ...` run on the same
directory (plain decoding, no drafter). Prints one line per prompt and exits 1 on any mismatch.

usage: python3 hf_greedy_check.py DFLASH_BINARY TARGET_DIR NEW_TOKENS "1,2,3" ["4,5" ...]
The target directory must not hold dflash_tokenizer.json, so that dflash prints token ids.
"""
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM


def dflash_greedy(binary, target, ids, n):
    out = subprocess.run(
        [binary, "generate", "--target", target, "--prompt-ids", ids,
         "--infer.max_new_tokens", str(n), "--runtime.threads", "1"],
        check=True, capture_output=True, text=True).stdout
    return [int(t) for t in out.replace(",", " ").split()]


def main():
    binary, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    print(f"transformers loaded {type(model).__name__} from {target}")
    bad = 0
    for ids in sys.argv[4:]:
        prompt = [int(t) for t in ids.split(",")]
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                                 pad_token_id=0)
        hf = out[0, len(prompt):].tolist()
        ours = dflash_greedy(binary, target, ids, n)
        m = min(len(hf), len(ours))
        same = hf[:m] == ours[:m]
        first = next((i for i in range(m) if hf[i] != ours[i]), None)
        print(f"prompt {ids[:30]}: hf {len(hf)} tokens, dflash {len(ours)}; "
              f"{'identical' if same else f'first difference at {first}'}")
        bad += not same
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
