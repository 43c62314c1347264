"""DSpark drafters for drafter_roundtrip.py, written from the spec (the DSpark paper's layout as
docs/formats.md "DSpark drafter directory" and docs/speculative-sampling.md "DSpark drafters"
describe it), not from dflash's code.

A DSpark drafter is the DFlash backbone unchanged (drafter_roundtrip.Drafter runs it) plus two
heads read from the same safetensors:
- the block [x0, MASK x (B - 1)] drafts with every slot: slot k (0-based) proposes the token after
  position s + k, so one forward gives B drafts and the verify forward sees B + 1 tokens;
- Markov logit-bias head, applied slot by slot before the argmax: e_k = W1[prev_k] (prev_0 = the
  anchor x0, prev_k = the draft chosen at slot k - 1), h_k = the slot's row after the final norm,
  logits_k = lm_head(h_k) + W2 b_k with
    vanilla  b_k = e_k
    gated    b_k = sigmoid(Wg [h_k; e_k] + bg) * e_k
    rnn      [gate | cand | out] = J [s_{k-1}; e_k; h_k] + bJ (three chunks of r, in that order),
             s_k = sigmoid(gate) * s_{k-1} + (1 - sigmoid(gate)) * tanh(cand), s_{-1} = 0 at every
             block, b_k = tanh(out);
- confidence head: c_k = sigmoid(w [h_k; e_k] + b) (or of h_k alone without the Markov input), the
  probability that slot k survives given that every earlier slot did; with a threshold t > 0 only
  the drafts before the first slot with c_k < t are verified (drafting itself never stops).

Config dialects read (docs/formats.md): DeepSpec / SGLang (`Qwen3DSparkModel`, the DSpark keys at
the top level, SpecForge's `DSparkDraftModel` with them inside `dflash_config`: the top level wins
where both hold one) and speculators (`speculators_model_type "dspark"`: the layers' config in
`transformer_layer_config`, `aux_hidden_state_layer_ids` = target layer ids + 1,
`sample_from_anchor` must be true).

Where SGLang's published loader (python/sglang/srt/models/dspark.py and
speculative/dspark_components/dspark_config.py, read for the semantics only) differs from this:
- it looks the Markov keys up in a `dspark_config` sub-dict, then the top level, never inside
  `dflash_config` (SpecForge exports need its normaliser script, which copies them up); here the
  top level, then `dflash_config`;
- it refuses the speculators dialect outright (its slot convention: slot j predicts anchor + j);
  dflash writes speculators configs only with `sample_from_anchor true`, the DeepSpec layout, so
  they are read here with the same slot convention;
- a missing `enable_confidence_head` means enabled there (with a warning), here too; and in its
  default `static` verify mode the confidence head is not even built: every draft is verified,
  which is threshold 0 here;
- it skips `embed_tokens.*` / `lm_head.*` in the drafter's checkpoint (the target's are used), as
  here.
"""
import sys

import torch

ARCHITECTURES = ("Qwen3DSparkModel", "DSparkDraftModel", "DSparkSpeculator")
HEAD_TYPES = ("vanilla", "gated", "rnn")


def is_dspark(cfg):
    return (cfg.get("speculators_model_type") == "dspark"
            or any(a in ARCHITECTURES for a in cfg.get("architectures", [])))


def flatten_config(cfg):
    """Either dialect -> (a DFlash-style config the backbone reads, the DSpark head keys)."""
    dc = cfg.get("dflash_config") or {}

    def key(name, default=None):
        v = cfg.get(name)
        if v is None:
            v = dc.get(name)
        return default if v is None else v

    if cfg.get("speculators_model_type") == "dspark":
        if not cfg.get("sample_from_anchor", False):
            sys.exit("speculators DSpark config with sample_from_anchor false (slot j predicts "
                     "anchor + j): not the DSpark layout this reference decodes")
        if cfg.get("d2t") is not None or cfg.get("t2d") is not None:
            sys.exit("a pruned draft vocabulary (d2t / t2d) is not supported here")
        flat = dict(cfg["transformer_layer_config"])
        layer_ids = [int(i) - 1 for i in cfg["aux_hidden_state_layer_ids"]]
    else:
        flat = {k: v for k, v in cfg.items() if k != "dflash_config"}
        layer_ids = [int(i) for i in key("target_layer_ids")]
    flat["architectures"] = list(cfg.get("architectures", []))
    flat["block_size"] = int(key("block_size"))
    flat["dflash_config"] = {"block_size": flat["block_size"],
                             "mask_token_id": int(key("mask_token_id")),
                             "target_layer_ids": layer_ids}
    rank = int(key("markov_rank", 0))
    if rank <= 0:
        sys.exit(f"DSpark needs markov_rank > 0 (got {rank})")
    head = key("markov_head_type")
    if head is None or str(head).lower() not in HEAD_TYPES:
        sys.exit(f"DSpark markov_head_type {head!r}: expected one of {HEAD_TYPES}")
    spec = {"markov_rank": rank, "markov_head_type": str(head).lower(),
            "confidence_head": bool(key("enable_confidence_head", True)),
            "confidence_head_with_markov": bool(key("confidence_head_with_markov", True))}
    return flat, spec


class DsparkHeads:
    """The Markov and confidence heads of one drafter; `choose` drafts a block slot by slot."""

    def __init__(self, spec, w, D, V):
        self.kind, r = spec["markov_head_type"], spec["markov_rank"]
        self.r = r

        def get(name, shape):
            if name not in w:
                sys.exit(f"DSpark drafter lacks {name}")
            t = w[name]
            if list(t.shape) != list(shape):
                sys.exit(f"{name} has shape {list(t.shape)}, expected {list(shape)}")
            return t

        self.W1 = get("markov_head.markov_w1.weight", [V, r])
        self.W2 = get("markov_head.markov_w2.weight", [V, r])
        if self.kind == "gated":
            self.Wg = get("markov_head.gate_proj.weight", [r, D + r])
            self.bg = get("markov_head.gate_proj.bias", [r])
        elif self.kind == "rnn":
            self.J = get("markov_head.joint_proj.weight", [3 * r, 2 * r + D])
            self.bJ = get("markov_head.joint_proj.bias", [3 * r])
        self.conf_markov = spec["confidence_head_with_markov"]
        self.Wc = self.bc = None
        if spec["confidence_head"]:
            self.Wc = get("confidence_head.proj.weight", [1, D + (r if self.conf_markov else 0)])
            self.bc = get("confidence_head.proj.bias", [1])

    def bias_input(self, h, e, state):
        """b_k (rank r) and the next recurrent state for one slot."""
        if self.kind == "vanilla":
            return e, state
        if self.kind == "gated":
            g = torch.sigmoid(self.Wg @ torch.cat([h, e]) + self.bg)
            return g * e, state
        gate, cand, out = (self.J @ torch.cat([state, e, h]) + self.bJ).split(self.r)
        keep = torch.sigmoid(gate)
        return torch.tanh(out), keep * state + (1 - keep) * torch.tanh(cand)

    def confidence(self, h, e):
        x = torch.cat([h, e]) if self.conf_markov else h
        return float(torch.sigmoid(self.Wc @ x + self.bc)[0])

    def choose(self, hn, U, anchor, threshold=0.0):
        """hn [B, D] rows after the final norm, U [B, V] their LM-head logits. Returns the drafts
        to verify: all B, or with threshold > 0 those before the first slot whose confidence is
        below it."""
        if threshold > 0 and self.Wc is None:
            sys.exit("a confidence threshold needs a drafter with a confidence head")
        prev, state, drafts, verify = anchor, torch.zeros(self.r), [], hn.shape[0]
        for k in range(hn.shape[0]):
            e = self.W1[prev]
            b, state = self.bias_input(hn[k], e, state)
            logits = U[k] + self.W2 @ b
            if threshold > 0 and verify == hn.shape[0] and self.confidence(hn[k], e) < threshold:
                verify = k
            prev = int(torch.argmax(logits))  # the first maximum: the lowest id
            drafts.append(prev)
        return drafts[:verify]
