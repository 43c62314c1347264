"""A DSpark drafter whose heads matter, for cross-checks (runs anywhere with torch).

Copies the DSpark drafter --drafter into --out with its Markov and confidence heads drawn at random
(seeded, N(0, std^2), biases too): fresh heads (N(0, 0.02^2)) add a bias far below the logits'
spread, so the slot-by-slot Markov correction would seldom change a draft and a wrong one would go
unseen. With --head vanilla|gated|rnn the Markov head becomes that type (its tensors drawn at
random, `markov_head_type` rewritten wherever the config holds it). Writes f32 safetensors.

usage: python3 tools/reference/dspark_fixture.py --drafter DIR --out DIR [--seed 1] [--std 0.5]
           [--confidence-std S] [--head vanilla|gated|rnn]
then:  python3 tools/reference/drafter_roundtrip.py --dflash build/dflash --target T --drafter OUT
           --prompts P.jsonl --out RES --plain-target [--confidence-threshold 0.5]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dspark_reference import HEAD_TYPES, flatten_config, is_dspark  # noqa: E402
from plain_torch import load_dir, write_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--std", type=float, default=0.5)
    ap.add_argument("--confidence-std", type=float,
                    help="std of the confidence head's weights (default --std): smaller spreads "
                    "the confidences over (0, 1), so a threshold cuts at varied slots")
    ap.add_argument("--head", choices=HEAD_TYPES)
    args = ap.parse_args()
    with open(os.path.join(args.drafter, "config.json")) as f:
        cfg = json.load(f)
    if not is_dspark(cfg):
        sys.exit(f"{args.drafter} is not a DSpark drafter")
    flat, spec = flatten_config(cfg)
    w = load_dir(args.drafter)
    D, r = flat["hidden_size"], spec["markov_rank"]
    if args.head and args.head != spec["markov_head_type"]:
        for name in [n for n in w if n.startswith(("markov_head.gate_proj.",
                                                   "markov_head.joint_proj."))]:
            del w[name]
        if args.head == "gated":
            w["markov_head.gate_proj.weight"] = torch.zeros(r, D + r)
            w["markov_head.gate_proj.bias"] = torch.zeros(r)
        elif args.head == "rnn":
            w["markov_head.joint_proj.weight"] = torch.zeros(3 * r, 2 * r + D)
            w["markov_head.joint_proj.bias"] = torch.zeros(3 * r)
        for holder in (cfg, cfg.get("dflash_config") or {}):
            if "markov_head_type" in holder:
                holder["markov_head_type"] = args.head
    g = torch.Generator().manual_seed(args.seed)
    for name in sorted(w):
        if name.startswith(("markov_head.", "confidence_head.")):
            std = args.std
            if name.startswith("confidence_head.") and args.confidence_std is not None:
                std = args.confidence_std
            w[name] = torch.randn(w[name].shape, generator=g) * std
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "model.safetensors"), w)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for extra in ("dflash_tokenizer.json", "tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(args.drafter, extra)
        if os.path.exists(src):
            with open(src, "rb") as a, open(os.path.join(args.out, extra), "wb") as b:
                b.write(a.read())
    print(f"wrote {args.out}: {len(w)} tensors, Markov head "
          f"{args.head or spec['markov_head_type']} rank {r}, heads N(0, {args.std}^2)")


if __name__ == "__main__":
    main()
