"""dflash's greedy decoding against HF transformers on the same target (run on the GPU machine).

For each prompt, transformers (float32, CPU, no KV cache: one full forward per token, argmax) and
`dflash generate --prompt-ids ... --print-ids` continue greedily for N tokens, both stopping at the
stop tokens dflash uses (every eos id of config.json and generation_config.json). The WHOLE
sequences are compared: same length, same ids, stop token handled alike (dflash does not print it;
it is dropped from transformers' output before comparing). An empty comparison fails too.

Two modes:
  --model DIR --prompts 1,2,3 4,5,6   a target directory that exists (e.g. a dflash-trained one)
  --make KIND[,KIND...] --work DIR    tiny random targets built here with transformers:
      qwen3   Qwen3ForCausalLM (q/k norm), untied
      llama3  LlamaForCausalLM with llama3 RoPE scaling, tied embeddings, eos list +
              generation_config.json, saved as a sharded checkpoint (index + several files)
      qwen2   Qwen2ForCausalLM (q/k/v biases, Qwen2.5 style): fails until dflash's model code
              supports attention biases
      all     the three

usage (repo root):
  python3 tools/reference/hf_greedy_check.py --dflash build/dflash --make all --work $OUT/greedy \
      --new-tokens 64 --report $OUT/greedy/report.json
exits 1 if any prompt differs (or dflash refuses a model); the report lists every prompt.
"""
import argparse
import json
import os
import random
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers


def stop_ids(model_dir):
    """What dflash stops at: every eos id of both files, and the byte tokenizer's eos (258) and
    end_turn (263) when the directory uses it (docs/data.md)."""
    ids = []
    spec = os.path.join(model_dir, "dflash_tokenizer.json")
    if os.path.exists(spec):
        with open(spec) as f:
            if json.load(f).get("type") == "byte":
                ids += [258, 263]
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            eos = json.load(f).get("eos_token_id")
        for i in (eos if isinstance(eos, list) else [eos] if eos is not None else []):
            if i not in ids:
                ids.append(int(i))
    return ids


def hf_greedy(model, prompt, n, stops):
    ids = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n):
            t = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            if t in stops:
                break  # dflash stops here and does not print the stop token
            out.append(t)
            ids.append(t)
    return out


def dflash_greedy(binary, model_dir, prompt, n):
    r = subprocess.run([binary, "generate", "--target", model_dir, "--prompt-ids",
                        ",".join(map(str, prompt)), "--print-ids", "--infer.max_new_tokens", str(n),
                        "--runtime.threads", "4"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [int(t) for t in r.stdout.split()], ""


def make_model(kind, d, seed):
    """A tiny random target of `kind`, with weights large enough for decisive argmaxes."""
    torch.manual_seed(seed)
    common = dict(vocab_size=384, hidden_size=64, intermediate_size=160, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  rms_norm_eps=1e-6, initializer_range=0.08, bos_token_id=1)
    if kind == "qwen3":
        cfg = transformers.Qwen3Config(head_dim=16, rope_theta=1000000.0, tie_word_embeddings=False,
                                       eos_token_id=2, **common)
        cls = transformers.Qwen3ForCausalLM
    elif kind == "qwen2":
        cfg = transformers.Qwen2Config(rope_theta=1000000.0, tie_word_embeddings=False,
                                       eos_token_id=2, **common)
        cls = transformers.Qwen2ForCausalLM
    elif kind == "llama3":
        cfg = transformers.LlamaConfig(
            rope_theta=500000.0, tie_word_embeddings=True, eos_token_id=[2, 3, 4],
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
            **common)
        cls = transformers.LlamaForCausalLM
    else:
        sys.exit(f"unknown kind {kind}")
    model = cls(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))  # exercise the norm weights
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
    shard = "40KB" if kind == "llama3" else "50MB"
    model.save_pretrained(d, max_shard_size=shard)
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    rope = saved.get("rope_scaling") or saved.get("rope_parameters") or {}
    if kind == "llama3" and rope.get("rope_type", rope.get("type")) != "llama3":
        sys.exit(f"{d}/config.json lost the llama3 rope scaling: {rope}; adapt make_model")
    if kind == "llama3":
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": [3, 5], "do_sample": False}, f)
        shards = [f for f in os.listdir(d) if f.endswith(".safetensors")]
        if len(shards) < 2 or not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
            sys.exit(f"{d}: expected a sharded checkpoint, got {shards}")
    return d


def check(binary, model_dir, prompts, n):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    stops = stop_ids(model_dir)
    rows = []
    for p in prompts:
        hf = hf_greedy(model, p, n, stops)
        ours, err = dflash_greedy(binary, model_dir, p, n)
        if ours is None:
            ok, what = False, f"dflash failed: {err}"
        elif not hf and not ours:
            ok, what = False, "both outputs are empty: nothing was compared (pick other prompts)"
        elif hf == ours:
            ok, what = True, f"identical ({len(ours)} tokens)"
        else:
            first = next((i for i in range(min(len(hf), len(ours))) if hf[i] != ours[i]),
                         min(len(hf), len(ours)))
            ok, what = False, (f"differ: hf {len(hf)} tokens, dflash {len(ours)}, first difference "
                               f"at {first}")
        print(f"  {type(model).__name__} prompt {p[:8]}{'...' if len(p) > 8 else ''}: {what}")
        rows.append({"prompt": p, "hf": hf, "dflash": ours, "ok": ok, "what": what})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dflash", required=True)
    ap.add_argument("--model")
    ap.add_argument("--prompts", nargs="*", default=[])
    ap.add_argument("--make")
    ap.add_argument("--work")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--report")
    args = ap.parse_args()
    report = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
    if args.model:
        prompts = [[int(t) for t in p.split(",")] for p in args.prompts]
        if not prompts:
            sys.exit("--model needs --prompts 1,2,3 [4,5 ...]")
        report["models"][args.model] = check(args.dflash, args.model, prompts, args.new_tokens)
    if args.make:
        if not args.work:
            sys.exit("--make needs --work DIR")
        kinds = ["qwen3", "llama3", "qwen2"] if args.make == "all" else args.make.split(",")
        rng = random.Random(7)
        prompts = [[rng.randrange(5, 384) for _ in range(k)] for k in (1, 6, 23, 57)]
        for i, kind in enumerate(kinds):
            d = make_model(kind, os.path.join(args.work, kind), seed=100 + i)
            print(f"{kind}: {d}")
            report["models"][kind] = check(args.dflash, d, prompts, args.new_tokens)
    if not report["models"]:
        sys.exit("give --model DIR --prompts ... and/or --make KIND --work DIR")
    bad = sum(not r["ok"] for rows in report["models"].values() for r in rows)
    report["failed_prompts"] = bad
    if args.report:
        os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    print(f"{'all identical' if not bad else f'{bad} prompt(s) failed'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
