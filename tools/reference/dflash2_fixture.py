"""A DFlash2 drafter whose new modules are not neutral, for cross-checks (runs anywhere with torch).

Copies the DFlash2 drafter --drafter into --out with its convolutions and candidate selector drawn
at random (seeded): base kernels 0.7 + N(0, 0.3^2), kernel projections N(0, 0.3^2), selector
tensors N(0, 0.5^2), so that drafting exercises every part of the DFlash2 drafter; optionally makes
every layer sliding with --window W and causal with --causal. Writes f32 safetensors.

usage: python3 tools/reference/dflash2_fixture.py --drafter DIR --out DIR [--seed 1]
           [--window W] [--causal] [--softcap S] [--multiplier M] [--embedding-scale E]
then:  python3 tools/reference/drafter_roundtrip.py --dflash build/dflash --target T --drafter OUT
           --prompts P.jsonl --out RES --plain-target
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plain_torch import load_dir, write_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--softcap", type=float, default=0.0)
    ap.add_argument("--multiplier", type=float, default=1.0)
    ap.add_argument("--embedding-scale", type=float, default=1.0)
    args = ap.parse_args()
    with open(os.path.join(args.drafter, "config.json")) as f:
        cfg = json.load(f)
    if "DFlash2DraftModel" not in cfg.get("architectures", []):
        sys.exit(f"{args.drafter} is not a DFlash2 drafter")
    w = load_dir(args.drafter)
    g = torch.Generator().manual_seed(args.seed)
    for name, t in w.items():
        if "_conv." in name:
            w[name] = torch.randn(t.shape, generator=g) * 0.3 + (0.7 if "base_kernel" in name else 0)
        elif name.startswith("candidate_selector."):
            w[name] = torch.randn(t.shape, generator=g) * 0.5
    L = cfg["num_hidden_layers"]
    if args.window > 0:
        cfg["layer_types"] = ["sliding_attention"] * L
        cfg["sliding_window"] = args.window
        cfg["use_sliding_window"] = True
    cfg["is_causal"] = bool(args.causal)
    dc = cfg["dflash_config"]
    if args.softcap > 0:
        dc["final_logit_softcapping"] = args.softcap
    if args.multiplier != 1.0:
        dc["output_multiplier"] = args.multiplier
    if args.embedding_scale != 1.0:
        dc["input_embedding_scale"] = args.embedding_scale
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "model.safetensors"), w)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for extra in ("dflash_tokenizer.json", "tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(args.drafter, extra)
        if os.path.exists(src):
            with open(src, "rb") as a, open(os.path.join(args.out, extra), "wb") as b:
                b.write(a.read())
    print(f"wrote {args.out}: {len(w)} tensors, window {args.window}, causal {args.causal}")


if __name__ == "__main__":
    main()
