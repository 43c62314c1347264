"""A drafter written by `dflash train`, served by other code (run on the GPU machine).

The target runs in HF transformers (AutoModelForCausalLM, float32), or with --plain-target in the
plain PyTorch Qwen3/Llama of plain_torch.py (no transformers needed); the drafter runs in the
straightforward PyTorch re-implementation of the DFlash drafter forward below, written from
docs/formats.md (not from dflash's code): per draft layer, queries from the block only, keys and
values from [context features ; block], non-causal attention over both, Qwen3-style layer, the
target's frozen embedding and lm_head. Greedy decoding (docs/speculative-sampling.md) uses the
options `dflash bench --json` reports (block size, max new tokens, stop tokens, the prompts' ids),
and each prompt's acceptance histogram is compared with dflash's.

DFlash2 drafters (architectures DFlash2DraftModel) are decoded from docs/formats.md, also written
here from the spec: the grouped dynamic causal convolution around every attention and MLP sublayer,
the layers' causality and sliding window, the unary logits times output_multiplier
and soft-capped, and the candidate selector's greedy walk from the verified anchor over the
unary top-K (ties to the first candidate; candidates in descending order, equal logits by
ascending id).

DSpark drafters (Qwen3DSparkModel / DSparkDraftModel, or a speculators config with
speculators_model_type dspark) are decoded by dspark_reference.py, also written from the spec: every
slot of the block drafts (B drafts, B + 1 tokens verified), the Markov head (vanilla, gated or rnn)
applied slot by slot before the argmax, and with --confidence-threshold T the confidence head's cut
(`--infer.dspark_confidence_threshold T` on dflash's side).

Besides the histograms, every step is compared: `dflash bench --json-steps` writes each step's
verified drafts, the count the target accepted and the token it added, and the reference's own
steps must be the same (a random or weak drafter whose drafts are mostly rejected would otherwise
go unchecked).

A target layer id l is the output of target decoder layer l, i.e. transformers' hidden_states[l+1].
The last layer is refused: transformers' last hidden_states entry is taken after the final norm
(docs/formats.md), which is why dflash never lets a drafter read it.

usage (repo root, with the demo's pair or any trained pair):
  python3 tools/reference/drafter_roundtrip.py --dflash build/dflash --demo DEMO_DIR --out OUT_DIR
  python3 tools/reference/drafter_roundtrip.py --dflash build/dflash --target TARGET_DIR \
      --drafter DRAFTER_DIR --prompts PROMPTS.jsonl --out OUT_DIR [--max-new-tokens 128] [--limit 16]
(--demo DIR takes DIR/target/<latest>, DIR/drafter/<latest> and DIR/corpus/heldout_prompts.jsonl.)
writes OUT_DIR/bench.json (dflash bench --json) and OUT_DIR/roundtrip.json (per prompt: both
histograms, token counts, step-by-step drafts identical or not); prints a table; exits 1 unless
every prompt's histogram and steps are identical.
"""
import argparse
import json
import math
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dspark_reference import DsparkHeads, flatten_config, is_dspark  # noqa: E402
from plain_torch import PlainTarget, load_dir, rms_norm, rope  # noqa: E402


def inv_freq(cfg, head_dim):
    """RoPE frequencies with the scalings dflash supports (default, linear, llama3)."""
    params = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    f = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    s = cfg.get("rope_scaling") or (params if "rope_type" in params else None)
    kind = (s or {}).get("rope_type", (s or {}).get("type", "default"))
    if kind == "linear":
        f = f / s["factor"]
    elif kind == "llama3":
        lo = s["original_max_position_embeddings"] / s["low_freq_factor"]
        hi = s["original_max_position_embeddings"] / s["high_freq_factor"]
        wavelen = 2 * math.pi / f
        smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
            s["high_freq_factor"] - s["low_freq_factor"])
        scaled = torch.where(wavelen > lo, f / s["factor"], f)
        mid = (wavelen <= lo) & (wavelen >= hi)
        f = torch.where(mid, (1 - smooth) * f / s["factor"] + smooth * f, scaled)
    elif kind != "default":
        sys.exit(f"rope scaling {kind} is not implemented here")
    return f.float()


class Drafter:
    def __init__(self, path, embed, lm_head):
        with open(os.path.join(path, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = load_dir(path)
        spec = None
        if is_dspark(self.cfg):
            self.cfg, spec = flatten_config(self.cfg)
        c = self.cfg
        dc = c.get("dflash_config", {})
        self.block = c.get("block_size", dc.get("block_size"))
        self.mask = dc["mask_token_id"]
        self.layer_ids = dc["target_layer_ids"]
        self.L = c["num_hidden_layers"]
        self.H, self.Hkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim", c["hidden_size"] // self.H)
        self.eps = c["rms_norm_eps"]
        self.freq = inv_freq(c, self.hd)
        self.embed, self.lm_head = embed, lm_head
        self.v2 = "DFlash2DraftModel" in c.get("architectures", [])
        if self.v2:
            self.read_dflash2(c, dc)
        self.ds = DsparkHeads(spec, self.w, c["hidden_size"], lm_head.shape[0]) if spec else None
        self.n_drafts = self.block if self.ds else self.block - 1  # DSpark's anchor slot drafts too

    def read_dflash2(self, c, dc):
        """dflash_config first, then the top level, then the default (docs/formats.md)."""
        def key(name, default=None):
            v = dc.get(name)
            return c.get(name, default) if v is None else v
        self.taps, self.group = int(key("conv_kernel_size")), int(key("conv_group_size"))
        self.top_k = int(key("selector_top_k"))
        self.mult = float(key("output_multiplier", 1.0))
        cap = key("final_logit_softcapping")
        self.cap = float(cap) if cap is not None and float(cap) > 0 else 0.0
        self.emb_scale = float(key("input_embedding_scale", 1.0))
        types = c.get("layer_types") or ["full_attention"] * self.L
        self.sliding = [t == "sliding_attention" for t in types]
        self.window = c.get("sliding_window") or 0
        causal = c.get("is_causal", dc.get("causal"))
        self.causal = [bool(causal) if causal is not None else s for s in self.sliding]

    def conv(self, prefix, y, delta, half):
        """Conv over one block: y [B, D], delta [B, 2*k*G] (the sublayer input's projection)."""
        B, D = y.shape
        k, G = self.taps, D // self.group
        base = self.w[prefix + ".base_kernel"]  # [2, k, D]
        d = delta.view(B, 2, k, G)[:, half].repeat_interleave(self.group, dim=-1)  # [B, k, D]
        out = torch.zeros_like(y)
        for t in range(k):
            shifted = torch.zeros_like(y)
            shifted[t:] = y[:B - t]  # rows before the block start read zeros
            out = out + (base[half, t] + d[:, t]) * shifted
        return out

    def visible(self, layer, start, B):
        """[B, start + B] mask of the keys each block query sees (docs/formats.md)."""
        q = torch.arange(start, start + B)[:, None]
        kp = torch.arange(0, start + B)[None, :]
        vis = torch.ones(B, start + B, dtype=torch.bool)
        if self.causal[layer]:
            vis &= kp <= q
        if self.sliding[layer] and self.window > 0:
            vis &= (q - kp) < self.window
            if not self.causal[layer]:
                vis &= (kp - q) < self.window
        return vis

    def select(self, raw, hn, anchor):
        """Selector: unary top-K of the raw logits [B-1, V], the greedy walk from the anchor."""
        vals, idx = torch.sort(raw, dim=-1, descending=True, stable=True)
        vals, idx = vals[:, :self.top_k], idx[:, :self.top_k]
        u = vals * self.mult
        if self.cap > 0:
            u = self.cap * torch.tanh(u / self.cap)
        z = self.lin("candidate_selector.hidden_projection.weight", hn)  # [B-1, r]
        A = self.w["candidate_selector.predecessor_codebook"]
        Bc = self.w["candidate_selector.successor_codebook"]
        prev, out = anchor, []
        for p in range(raw.shape[0]):
            s = u[p] + ((A[prev] * z[p])[None, :] * Bc[idx[p]]).sum(-1)
            prev = int(idx[p][int(torch.argmax(s))])  # the first maximum: the lowest index
            out.append(prev)
        return out

    def lin(self, name, x):
        return x @ self.w[name].T

    def draft(self, features, anchor, start, threshold=0.0):
        """features [start, K*D] of positions 0..start-1; returns the greedy drafts to verify
        (B - 1; DSpark: B, or fewer with a confidence threshold)."""
        B, H, Hkv, hd = self.block, self.H, self.Hkv, self.hd
        ctx = rms_norm(self.lin("fc.weight", features), self.w["hidden_norm.weight"], self.eps)
        ids = torch.tensor([anchor] + [self.mask] * (B - 1))
        x = self.embed[ids] * (self.emb_scale if self.v2 else 1.0)
        ctx_pos = torch.arange(0, start)
        blk_pos = torch.arange(start, start + B)
        for i in range(self.L):
            p = f"layers.{i}."
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            if self.v2:
                delta = self.lin(p + "attention_conv.kernel_projection.weight", h)
                h = self.conv(p + "attention_conv", h, delta, 0)
            q = self.lin(p + "self_attn.q_proj.weight", h).view(B, H, hd)
            q = rope(rms_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps), blk_pos, self.freq)
            kv_in = torch.cat([ctx, h], 0)  # context rows skip input_layernorm
            k = self.lin(p + "self_attn.k_proj.weight", kv_in).view(-1, Hkv, hd)
            v = self.lin(p + "self_attn.v_proj.weight", kv_in).view(-1, Hkv, hd)
            k = rope(rms_norm(k, self.w[p + "self_attn.k_norm.weight"], self.eps),
                     torch.cat([ctx_pos, blk_pos]), self.freq)
            rep = H // Hkv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            att = torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5  # DFlash: no mask, non-causal
            if self.v2:
                att = att.masked_fill(~self.visible(i, start, B)[None], float("-inf"))
            o = torch.einsum("hqk,khd->qhd", att.softmax(-1), v).reshape(B, H * hd)
            o = self.lin(p + "self_attn.o_proj.weight", o)
            x = x + (self.conv(p + "attention_conv", o, delta, 1) if self.v2 else o)
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], self.eps)
            if self.v2:
                e2 = self.lin(p + "mlp_conv.kernel_projection.weight", h)
                h = self.conv(p + "mlp_conv", h, e2, 0)
            gate = torch.nn.functional.silu(self.lin(p + "mlp.gate_proj.weight", h))
            m = self.lin(p + "mlp.down_proj.weight", gate * self.lin(p + "mlp.up_proj.weight", h))
            x = x + (self.conv(p + "mlp_conv", m, e2, 1) if self.v2 else m)
        hn = rms_norm(x, self.w["norm.weight"], self.eps)
        if self.ds:
            return self.ds.choose(hn, hn @ self.lm_head.T, anchor, threshold)
        hn = hn[1:]
        logits = hn @ self.lm_head.T
        return self.select(logits, hn, anchor) if self.v2 else logits.argmax(-1).tolist()


def target_pass(model, ids, layer_ids):
    """Logits [T, V] and features [T, K*D] (outputs of the decoder layers `layer_ids`)."""
    if isinstance(model, PlainTarget):
        with torch.no_grad():
            logits, outs = model(ids)
        return logits.float(), torch.cat([outs[l] for l in layer_ids], -1).float()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    hs = out.hidden_states  # hs[0] = embeddings, hs[l+1] = output of layer l (the last: normed)
    feats = torch.cat([hs[l + 1][0] for l in layer_ids], -1)
    return out.logits[0].float(), feats.float()


def speculative_greedy(model, drafter, prompt, max_new, stops, steps=None, threshold=0.0):
    """The decoding step, greedy. Returns (new tokens, histogram [drafts + 2] of a + 1 per step,
    a the drafts accepted); each step (verified drafts, accepted, next token) is appended to
    `steps` when given."""
    hist = [0] * (drafter.n_drafts + 2)
    logits, feats = target_pass(model, prompt, drafter.layer_ids)
    new = [int(logits[-1].argmax())]
    seq = list(prompt)

    def done():
        return len(new) >= max_new or new[-1] in stops

    while not done():
        start = len(seq)  # position of the anchor new[-1]
        drafts = drafter.draft(feats[:start], new[-1], start, threshold)
        n = len(drafts)
        logits, feats = target_pass(model, seq + [new[-1]] + drafts, drafter.layer_ids)
        target = logits[start:start + n + 1].argmax(-1).tolist()
        a = 0
        while a < n and drafts[a] == target[a]:
            a += 1
        hist[a + 1] += 1
        if steps is not None:
            steps.append({"drafted": drafts, "accepted": a, "next": target[a]})
        seq += [new[-1]] + drafts[:a]  # positions start..start+a; the next anchor is target[a]
        for t in drafts[:a] + [target[a]]:  # commit, honouring the budget and stop tokens
            if len(new) >= max_new:
                break
            new.append(t)
            if t in stops:
                break
    return new, hist


def dflash_bench_steps(args, extra=()):
    """`dflash bench --json --json-steps` of args.target / args.drafter on args.prompts into
    args.out/bench.json (args.limit prompts, args.max_new_tokens, args.confidence_threshold), with
    float32 drafts; returns the report. Shared with deepspec_roundtrip.py."""
    os.makedirs(args.out, exist_ok=True)
    bench_json = os.path.join(args.out, "bench.json")
    cmd = [args.dflash, "bench", "--target", args.target, "--drafter", args.drafter, "--prompts",
           args.prompts, "--json", bench_json, "--limit", str(args.limit),
           "--infer.max_new_tokens", str(args.max_new_tokens), "--json-steps",
           # The reference drafts in float32: so must dflash (on AMX CPUs it drafts in bf16).
           "--infer.cpu_draft_precision", "f32", *extra]
    if args.confidence_threshold > 0:
        cmd += ["--infer.dspark_confidence_threshold", str(args.confidence_threshold)]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        sys.exit(f"dflash bench failed (exit {rc}); its error is above")
    with open(bench_json) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dflash", required=True)
    ap.add_argument("--demo", help="a `dflash demo` output directory: its pair and prompts")
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--prompts")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--confidence-threshold", type=float, default=0.0,
                    help="DSpark drafters: verify only the drafts before the first slot whose "
                    "confidence is below this (infer.dspark_confidence_threshold); 0 = all")
    ap.add_argument("--plain-target", action="store_true",
                    help="run the target in plain PyTorch (plain_torch.py) instead of transformers")
    args = ap.parse_args()
    if args.demo:
        latest = lambda run: os.path.join(run, open(os.path.join(run, "latest")).read().strip())  # noqa: E731
        args.target = args.target or latest(os.path.join(args.demo, "target"))
        args.drafter = args.drafter or latest(os.path.join(args.demo, "drafter"))
        args.prompts = args.prompts or os.path.join(args.demo, "corpus", "heldout_prompts.jsonl")
    if not (args.target and args.drafter and args.prompts):
        sys.exit("give --demo DIR, or --target, --drafter and --prompts")
    bench = dflash_bench_steps(args)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if args.plain_target:
        model = PlainTarget(args.target, inv_freq)
        n_layers, embed, lm_head = model.L, model.embed, model.lm_head
    else:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
        n_layers = model.config.num_hidden_layers
        embed = model.get_input_embeddings().weight.detach().float()
        lm_head = model.get_output_embeddings().weight.detach().float()
    drafter = Drafter(args.drafter, embed, lm_head)
    if any(l == n_layers - 1 for l in drafter.layer_ids):
        sys.exit(f"target_layer_ids {drafter.layer_ids} name the last layer ({n_layers - 1}); "
                 "transformers only has its normed output, so no comparison is meaningful")
    # bench's block_size is the drafter's B; max_step_tokens is B, or B + 1 for a DSpark drafter
    # (its verify forward sees the anchor and B drafts).
    if bench["block_size"] != drafter.block or bench["max_step_tokens"] != drafter.n_drafts + 1:
        sys.exit(f"bench ran with block size {bench['block_size']} (at most "
                 f"{bench['max_step_tokens']} tokens a step); the drafter has {drafter.block} "
                 f"({drafter.n_drafts} drafts)")
    if args.confidence_threshold > 0 and not drafter.ds:
        sys.exit("--confidence-threshold applies to DSpark drafters only")
    stops = set(bench["stop_tokens"])
    rows, same = [], 0
    for i, r in enumerate(bench["requests"]):
        ref_steps = []
        toks, hist = speculative_greedy(model, drafter, r["prompt_ids"], bench["max_new_tokens"],
                                        stops, ref_steps, args.confidence_threshold)
        # The reference loop counts a + 1 per step in full, as dflash's accepted_hist does
        # (accept_hist counts what a step committed within the budget; older reports lack it).
        ours = r["speculative"].get("accepted_hist", r["speculative"]["accept_hist"])
        our_steps = r.get("steps")
        if our_steps is None:
            sys.exit("bench.json has no per-step drafts: this dflash predates `bench --json-steps`")
        steps_same = our_steps == ref_steps
        identical = hist == ours and steps_same
        print(f"    {len(ref_steps)} steps, {sum(len(s['drafted']) for s in ref_steps)} drafts: "
              f"{'identical' if steps_same else 'DIFFERENT'}")
        if not steps_same:
            bad = next(k for k in range(max(len(our_steps), len(ref_steps)))
                       if k >= min(len(our_steps), len(ref_steps)) or our_steps[k] != ref_steps[k])
            print(f"    first difference at step {bad}: dflash "
                  f"{our_steps[bad] if bad < len(our_steps) else None} reference "
                  f"{ref_steps[bad] if bad < len(ref_steps) else None}")
        same += identical
        rows.append({"prompt": i, "label": r["label"], "dflash_hist": ours, "reference_hist": hist,
                     "dflash_tokens": r["output_tokens"], "reference_tokens": toks,
                     "tokens_identical": toks == r["output_tokens"], "steps": len(ref_steps),
                     "steps_identical": steps_same, "identical": identical})
        tau = lambda h: sum(n * c for n, c in enumerate(h)) / max(1, sum(h))  # noqa: E731
        print(f"{i:3d} {r['label'][:30]:30s} dflash tau {tau(ours):5.2f} {ours}  "
              f"reference tau {tau(hist):5.2f} {hist}  {'identical' if identical else 'DIFFERENT'}")
    tot = lambda key: [sum(x) for x in zip(*[row[key] for row in rows])]  # noqa: E731
    summary = {"prompts": len(rows), "identical": same, "dflash_total_hist": tot("dflash_hist"),
               "reference_total_hist": tot("reference_hist"), "rows": rows,
               "target": args.target, "drafter": args.drafter,
               "target_layer_ids": drafter.layer_ids, "block_size": drafter.block,
               "architecture": drafter.cfg.get("architectures", []),
               "markov_head_type": drafter.ds.kind if drafter.ds else None,
               "confidence_threshold": args.confidence_threshold,
               "max_new_tokens": bench["max_new_tokens"], "torch": torch.__version__}
    with open(os.path.join(args.out, "roundtrip.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"identical acceptance histograms and step-by-step drafts on {same} of {len(rows)} "
          "prompts")
    sys.exit(0 if same == len(rows) else 1)


if __name__ == "__main__":
    main()
