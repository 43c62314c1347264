"""A DSpark drafter written by dflash, decoded by DeepSpec's own published code (GPU machine).

issue 26 asks that DSpark drafters written here load in the published reference code of the
DeepSpec/SGLang dialect and draft the same tokens step by step. dspark_reference.py is our own
reading of the spec; this script runs the authors' code instead: deepseek-ai/DeepSpec (a source
snapshot given by --deepspec-src, never copied into this repository), its Qwen3DSparkModel
loading the drafter directory with from_pretrained, and its evaluator's decoding loop
(deepspec.eval.base_evaluator.generate_decoding_sample with Qwen3DSparkEvaluator's
_init_context / _propose / _update: forward_dspark_draft_block, build_dspark_proposal,
verify_draft_tokens) over the target in transformers. Everything runs in float32 on the CPU,
greedily (temperature 0), with --confidence-threshold as DeepSpec's confidence_threshold.

dflash decodes the same prompts (`dflash bench --json-steps`, CPU, f32 drafts). Every step's
verified drafts and accepted count, and the output tokens, are compared. The drafter's frozen
embedding and LM head are the target's (dflash does not store them), given to DeepSpec's model
through its own initialize_embeddings_and_head, as its trainer does. Weights the model expects but
the checkpoint lacks (other than those two), or the reverse, are reported and fail the run: they
would otherwise stay at from_pretrained's random init.

Only DeepSpec's Qwen3 DSpark path is needed. Modules of the snapshot this path does not use (the
Gemma 4 and EAGLE-3 models, the training dataset) are imported only where they load; where the
installed transformers lacks Gemma 4, they are replaced by empty stand-ins, which is said.

usage (repo root):
  python3 tools/reference/deepspec_roundtrip.py --deepspec-src DeepSpec/ --dflash build/dflash \
      --target T --drafter D --prompts P.jsonl --out OUT [--confidence-threshold 0.8]
writes OUT/bench.json and OUT/deepspec_roundtrip.json; exits 1 unless every prompt is identical.
"""

import argparse
import importlib
import json
import os
import sys
import types
from types import SimpleNamespace


def package_without_init(name, path):
    """Registers package `name` at `path` without running its __init__.py (whose imports pull in
    models this check does not use)."""
    m = types.ModuleType(name)
    m.__path__ = [path]
    sys.modules[name] = m


def import_deepspec(src):
    sys.path.insert(0, src)
    try:
        import yaml  # noqa: F401  (deepspec.utils reads its training configs with it)
    except ImportError:
        print("note: PyYAML is missing; an empty stand-in replaces it (only DeepSpec's config "
              "loader uses it)")
        sys.modules["yaml"] = types.ModuleType("yaml")
    for pkg in ["deepspec.eval", "deepspec.eval.dspark", "deepspec.modeling",
                "deepspec.modeling.dspark", "deepspec.data"]:
        package_without_init(pkg, os.path.join(src, *pkg.split(".")))
    try:
        importlib.import_module("deepspec.modeling.dspark.gemma4")
    except ImportError as e:
        print(f"note: DeepSpec's Gemma 4 model does not import here ({e}); an empty stand-in "
              "replaces it (the Qwen3 path does not use it)")
        stub = types.ModuleType("deepspec.modeling.dspark.gemma4")
        stub.Gemma4DSparkModel = type("Gemma4DSparkModel", (), {})
        sys.modules["deepspec.modeling.dspark.gemma4"] = stub
    base = importlib.import_module("deepspec.eval.base_evaluator")
    ev = importlib.import_module("deepspec.eval.dspark.evaluator")
    qwen3 = importlib.import_module("deepspec.modeling.dspark.qwen3")
    return base, ev, qwen3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deepspec-src", required=True, help="a deepseek-ai/DeepSpec source tree")
    ap.add_argument("--dflash", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--confidence-threshold", type=float, default=0.0)
    args = ap.parse_args()

    # dflash's side on the CPU in float32, as drafter_roundtrip.py runs it.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from drafter_roundtrip import dflash_bench_steps
    bench = dflash_bench_steps(args, extra=["--runtime.backend", "cpu"])

    import torch
    from transformers import AutoModelForCausalLM

    base, ev_mod, qwen3 = import_deepspec(os.path.abspath(args.deepspec_src))
    torch.backends.cuda.matmul.allow_tf32 = False
    target = AutoModelForCausalLM.from_pretrained(
        args.target, dtype=torch.float32, attn_implementation="sdpa").eval()
    draft, info = qwen3.Qwen3DSparkModel.from_pretrained(
        args.drafter, dtype=torch.float32, attn_implementation="sdpa", output_loading_info=True)
    draft = draft.eval()
    frozen = {"embed_tokens.weight", "lm_head.weight"}
    missing = sorted(set(info.get("missing_keys", [])) - frozen)
    unexpected = sorted(info.get("unexpected_keys", []))
    mismatched = info.get("mismatched_keys", [])
    print(f"DeepSpec Qwen3DSparkModel loaded {args.drafter}: missing {missing or 'none'}, "
          f"unexpected {unexpected or 'none'}, mismatched {mismatched or 'none'} (embed_tokens "
          "and lm_head come from the target)")
    draft.initialize_embeddings_and_head(embed_tokens=target.get_input_embeddings(),
                                         lm_head=target.get_output_embeddings())

    # The evaluator's per-algorithm hooks, on an object built without its __init__ (which loads
    # models and datasets from its command line).
    ev = ev_mod.Qwen3DSparkEvaluator.__new__(ev_mod.Qwen3DSparkEvaluator)
    ev.draft_model = draft
    ev.args = SimpleNamespace(temperature=0.0, confidence_threshold=args.confidence_threshold)
    ev.confidence_head_recorder = None
    block = ev.max_proposal_tokens
    if bench["block_size"] != block:
        sys.exit(f"dflash ran block size {bench['block_size']}; DeepSpec reads {block}")
    stops = list(bench["stop_tokens"]) or None

    rows, same = [], 0
    for i, r in enumerate(bench["requests"]):
        steps = []

        def post_verify(p, v):
            steps.append({"drafted": p.verify_input_ids[0, 1:].tolist(),
                          "accepted": int(v.accepted_draft_tokens),
                          "next": None if v.terminated_by_stop_token
                          else int(v.next_token.reshape(-1)[0].item())})

        ids = torch.tensor([r["prompt_ids"]], dtype=torch.long)
        with torch.no_grad():
            res = base.generate_decoding_sample(
                target_model=target, input_ids=ids, max_new_tokens=bench["max_new_tokens"],
                max_proposal_tokens=block, temperature=0.0, stop_token_ids=stops,
                init_context=ev._init_context, propose=ev._propose, update=ev._update,
                post_verify=post_verify)
        theirs = res.output_ids[0, res.num_input_tokens:].tolist()
        ours_tokens = r["output_tokens"]
        our_steps = r["steps"]
        # DeepSpec's loop runs until the output reaches the budget and may commit a whole last
        # block past it; dflash stops at the budget. The steps dflash took must be DeepSpec's
        # first steps, and the tokens dflash wrote DeepSpec's first tokens.
        n = len(our_steps)
        steps_same = steps[:n] == our_steps and len(steps) in (n, n + 1)
        tokens_same = theirs[:len(ours_tokens)] == ours_tokens
        identical = steps_same and tokens_same
        if not steps_same:
            bad = next((k for k in range(min(n, len(steps))) if steps[k] != our_steps[k]),
                       min(n, len(steps)))
            print(f"    first difference at step {bad}: dflash "
                  f"{our_steps[bad] if bad < n else None} DeepSpec "
                  f"{steps[bad] if bad < len(steps) else None}")
        same += identical
        drafts = sum(len(s["drafted"]) for s in our_steps)
        print(f"{i:3d} {r['label'][:30]:30s} {n} steps ({len(steps)} in DeepSpec), {drafts} drafts "
              f"verified, {len(ours_tokens)} tokens: {'identical' if identical else 'DIFFERENT'}")
        rows.append({"prompt": i, "label": r["label"], "dflash_steps": n,
                     "deepspec_steps": len(steps), "steps_identical": steps_same,
                     "tokens_identical": tokens_same, "identical": identical,
                     "first_steps": {"dflash": our_steps[:3], "deepspec": steps[:3]}})
    summary = {"prompts": len(rows), "identical": same, "rows": rows, "target": args.target,
               "drafter": args.drafter, "confidence_threshold": args.confidence_threshold,
               "missing_keys": missing, "unexpected_keys": unexpected,
               "deepspec_src": os.path.abspath(args.deepspec_src), "torch": torch.__version__}
    with open(os.path.join(args.out, "deepspec_roundtrip.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"DeepSpec's code drafted the same tokens step by step on {same} of {len(rows)} prompts")
    sys.exit(0 if same == len(rows) and not missing and not unexpected else 1)


if __name__ == "__main__":
    main()
