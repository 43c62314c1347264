"""Transformers parity fixtures for the mixture-of-experts targets (run on the GPU machine).

Builds tiny random Qwen3-MoE and gpt-oss models with HF transformers, writes each as an HF
directory in one of the spellings published checkpoints use, and records what transformers
computes from exactly those weights (float32, CPU, no cache: one full forward per greedy step):
  - last_logits:   the last position's logits of every prompt
  - greedy:        24 greedy tokens after every prompt (argmax of a full forward each step)
  - hidden_states: transformers' output_hidden_states of prompt 0, every entry, every position
tests/model/hf_parity_test.cpp loads each directory with dflash and compares. The fixtures are
committed (tests/fixtures/targets/); this script is how they were made.

Fixtures (every one exercises something the others do not):
  qwen3_moe_fused    transformers-5 fused experts (gate_up_proj [E,2I,D]); a dense layer among the
                     MoE ones (mlp_only_layers); norm_topk_prob true
  qwen3_moe_experts  the Hub's per-expert tensors and config.json spelling (num_experts,
                     rope_theta); norm_topk_prob false; decoder_sparse_step 2
  gpt_oss            bf16 experts in transformers' in-memory layout ([E,D,2I], gate/up interleaved),
                     biases, sinks, sliding window 4 (shorter than every prompt), YaRN (prompts run
                     past original_max_position_embeddings), H*Dh != D, clamped SwiGLU hit;
                     config in the legacy spelling of the published config.json (rope_scaling)
  gpt_oss_mxfp4      the same family with MXFP4 expert blocks/scales (as published); the weights
                     transformers runs are the exact dequantised values
Weights are stored bf16 and the reference runs on the bf16-rounded values in float32, so a loader
that widens bf16 exactly must reproduce the reference to float32 rounding.

usage (repo root, GPU machine): python3 tools/reference/moe_fixture.py --out tests/fixtures/targets
"""
import argparse
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from safetensors.torch import save_file

NEW_TOKENS = 24
PROMPT_LENGTHS = (7, 29, 45)
VOCAB = 128


def prompts(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def reinit(model, seed, expert_gate_up_std=None):
    """Random weights with useful magnitudes (transformers' 0.02 init makes every logit a near-tie):
    matrices ~ N(0, 1/fan_in), norms 1 + 0.1 N, biases 0.1 N, sinks N(0, 1), all rounded to bf16."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "layernorm" in name):
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith("sinks"):
                v = torch.randn(p.shape, generator=g)
            elif p.dim() == 1 or name.endswith("_bias"):
                v = 0.1 * torch.randn(p.shape, generator=g)
            elif "experts.gate_up_proj" in name and expert_gate_up_std is not None:
                v = expert_gate_up_std * torch.randn(p.shape, generator=g)
            else:
                fan_in = p.shape[-1]
                if "experts" in name and "gpt" in type(model).__name__.lower():
                    fan_in = p.shape[-2]  # gpt-oss keeps experts as x @ W: [E, in, out]
                v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def full_forward(model, ids, hidden=False):
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False, output_hidden_states=hidden)
    return out


def reference(model, ps):
    last, greedy = [], []
    for p in ps:
        out = full_forward(model, p)
        last.append(out.logits[0, -1].tolist())
        ids = list(p)
        gen = []
        for _ in range(NEW_TOKENS):
            nxt = int(full_forward(model, ids).logits[0, -1].argmax())
            gen.append(nxt)
            ids.append(nxt)
        greedy.append(gen)
    hs = full_forward(model, ps[0], hidden=True).hidden_states
    return {
        "prompts": ps,
        "last_logits": last,
        "greedy": greedy,
        "hidden_states": [h[0].tolist() for h in hs],
    }


def bf16_state(sd):
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}


def write_dir(path, config_json, tensors, expected, notes):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2, sort_keys=True)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    expected = dict(expected)
    expected["made_by"] = {
        "script": "tools/reference/moe_fixture.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "notes": notes,
    }
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump(expected, f)
    size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    print(f"wrote {path} ({size / 1024:.0f} KiB)")


def config_dict(model):
    d = model.config.to_dict()
    d.pop("transformers_version", None)
    d["torch_dtype"] = "bfloat16"
    d.pop("dtype", None)
    return d


# ---- Qwen3-MoE ------------------------------------------------------------------------------
def qwen3_moe(out, seed, fused, norm_topk, sparse_step, mlp_only):
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=6, num_experts_per_tok=2, norm_topk_prob=norm_topk,
        decoder_sparse_step=sparse_step, mlp_only_layers=mlp_only, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None)
    torch.manual_seed(seed)
    model = transformers.Qwen3MoeForCausalLM(cfg).float().eval()
    model.config._attn_implementation = "eager"
    reinit(model, seed)
    expected = reference(model, prompts(seed + 1))
    sd = bf16_state(model.state_dict())
    tensors = {}
    E = cfg.num_experts
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj") and not fused:  # [E, 2I, D] -> per expert
            pre = k[: -len("gate_up_proj")]
            half = v.shape[1] // 2
            for e in range(E):
                tensors[f"{pre}{e}.gate_proj.weight"] = v[e, :half].contiguous()
                tensors[f"{pre}{e}.up_proj.weight"] = v[e, half:].contiguous()
        elif k.endswith("mlp.experts.down_proj") and not fused:  # [E, D, I]
            pre = k[: -len("down_proj")]
            for e in range(E):
                tensors[f"{pre}{e}.down_proj.weight"] = v[e].contiguous()
        elif ".mlp.experts." in k and k.endswith(".weight") and fused:
            raise SystemExit(f"transformers {transformers.__version__} keeps per-expert tensors "
                             f"({k}); this script expects transformers 5's fused experts")
        else:
            tensors[k] = v
    if not any("experts" in k for k in tensors):
        raise SystemExit("no expert tensors found in the state dict")
    c = config_dict(model)
    if not fused:  # the published config.json spelling (transformers 5 writes the other one)
        c["num_experts"] = c.pop("num_local_experts", E)
        rp = c.pop("rope_parameters", None) or {}
        c["rope_theta"] = rp.get("rope_theta", 10000.0)
        c["rope_scaling"] = None
        c["architectures"] = ["Qwen3MoeForCausalLM"]
    notes = (f"qwen3_moe, {'fused' if fused else 'per-expert'} experts, norm_topk_prob "
             f"{norm_topk}, decoder_sparse_step {sparse_step}, mlp_only_layers {mlp_only}")
    write_dir(out, c, tensors, expected, notes)


# ---- gpt-oss --------------------------------------------------------------------------------
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4_encode(w):
    """w [..., out, in] (in % 32 == 0) -> (blocks u8 [..., out, in/32, 16], scales u8 [..., out,
    in/32], the exactly representable values [..., out, in])."""
    *lead, rows, cols = w.shape
    g = w.reshape(*lead, rows, cols // 32, 32).float()
    amax = g.abs().amax(-1, keepdim=True).clamp_min(2.0 ** -100)
    exp = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scaled = g / torch.pow(2.0, exp)
    mag = scaled.abs().unsqueeze(-1)
    code = (mag - E2M1).abs().argmin(-1)  # nearest e2m1 magnitude
    code = code | ((scaled < 0) & (code > 0)).long() << 3
    vals = E2M1[code & 7] * torch.where(code >= 8, -1.0, 1.0) * torch.pow(2.0, exp)
    lo, hi = code[..., 0::2], code[..., 1::2]
    blocks = (lo | (hi << 4)).to(torch.uint8)
    scales = (exp.squeeze(-1) + 127).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous(), vals.reshape(*lead, rows, cols)


def gpt_oss(out, seed, mxfp4):
    D, I, E = 96, 32, 4  # D and I multiples of 32 (MXFP4 groups); 2I != D keeps orientations apart
    rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0,
            "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False}
    kwargs = dict(
        vocab_size=VOCAB, hidden_size=D, intermediate_size=I, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=16, num_local_experts=E,
        num_experts_per_tok=2, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"] * 2, attention_bias=True,
        rms_norm_eps=1e-5, swiglu_limit=7.0, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    try:
        cfg = transformers.GptOssConfig(rope_parameters=rope, **kwargs)
    except TypeError:
        cfg = transformers.GptOssConfig(rope_scaling=rope, rope_theta=150000.0, **kwargs)
    rp = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None)
    if not rp or rp.get("rope_type", rp.get("type")) != "yarn":
        raise SystemExit(f"YaRN did not reach the config: {rp}")
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(cfg).float().eval()
    model.config._attn_implementation = "eager"
    reinit(model, seed, expert_gate_up_std=4.0 / math.sqrt(D))
    sd = model.state_dict()
    blocks = {}
    if mxfp4:  # the model runs the exactly representable values the blocks hold
        with torch.no_grad():
            for k, p in model.named_parameters():
                if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
                    lin = p.transpose(1, 2)  # [E, in, out] -> Linear orientation [E, out, in]
                    b, s, vals = mxfp4_encode(lin)
                    p.copy_(vals.transpose(1, 2))
                    blocks[k + "_blocks"] = b
                    blocks[k + "_scales"] = s
        sd = model.state_dict()
    # The clamp must be exercised: some gate pre-activations beyond the limit.
    h = []
    layer0 = model.model.layers[0]
    hook = layer0.post_attention_layernorm.register_forward_hook(lambda m, i, o: h.append(o))
    full_forward(model, prompts(seed + 1)[1])
    hook.remove()
    x = h[0].reshape(-1, D)  # the MoE block's input
    pre = torch.einsum("td,edf->etf", x, model.model.layers[0].mlp.experts.gate_up_proj)
    pre = pre + model.model.layers[0].mlp.experts.gate_up_proj_bias[:, None, :]
    beyond = int((pre.abs() > 7.0).sum())
    print(f"layer 0 expert pre-activations beyond the swiglu limit: {beyond} of {pre.numel()}")
    if beyond == 0:
        raise SystemExit("the clamp is not exercised; raise expert_gate_up_std")
    expected = reference(model, prompts(seed + 1))
    tensors = bf16_state(sd)
    if mxfp4:
        for k in list(tensors):
            if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
                del tensors[k]
        tensors.update(blocks)
        expected["mxfp4_check"] = transformers_mxfp4_check(blocks, sd)
    c = config_dict(model)
    # The published config.json spelling: legacy rope_theta + rope_scaling, experts_per_token too.
    rp = dict(c.pop("rope_parameters", None) or c.get("rope_scaling") or {})
    c["rope_theta"] = rp.pop("rope_theta", 150000.0)
    c["rope_scaling"] = rp
    c["experts_per_token"] = c.get("num_experts_per_tok", 2)
    if mxfp4:
        c["quantization_config"] = {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"]}
    notes = ("gpt_oss, " + ("MXFP4 experts (Hub layout)" if mxfp4 else "bf16 experts (transformers "
             "in-memory layout)") + ", sinks, sliding window 4, YaRN factor 8 from 32 positions, "
             f"attention biases, H*Dh 128 != D 96, clamp hit {beyond} times in layer 0")
    write_dir(out, c, tensors, expected, notes)


def transformers_mxfp4_check(blocks, sd):
    """transformers' own MXFP4 decoder on our blocks must give the values the model ran."""
    try:
        from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    except Exception as e:  # noqa: BLE001 - reported, not fatal: the exact values are in the file
        return f"not checked: {type(e).__name__}: {e}"
    worst = 0.0
    for k, ref in sd.items():
        if not (k.endswith("gate_up_proj") or k.endswith("down_proj")) or k + "_blocks" not in blocks:
            continue
        got = convert_moe_packed_tensors(blocks[k + "_blocks"], blocks[k + "_scales"],
                                         dtype=torch.float32)
        if got.shape != ref.shape:  # [E, out, in] or [E, in, out]: shapes tell them apart here
            got = got.transpose(1, 2)
        if got.shape != ref.shape:
            return f"shape differs for {k}: {tuple(got.shape)} vs {tuple(ref.shape)}"
        worst = max(worst, float((got.float() - ref.float()).abs().max()))
    if worst != 0.0:
        raise SystemExit(f"transformers decodes our MXFP4 blocks differently (max diff {worst})")
    return "transformers.integrations.mxfp4 decodes the blocks to exactly the values run"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/targets")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    qwen3_moe(os.path.join(a.out, "qwen3_moe_fused"), 11, fused=True, norm_topk=True,
              sparse_step=1, mlp_only=[1])
    qwen3_moe(os.path.join(a.out, "qwen3_moe_experts"), 12, fused=False, norm_topk=False,
              sparse_step=2, mlp_only=[])
    gpt_oss(os.path.join(a.out, "gpt_oss"), 13, mxfp4=False)
    gpt_oss(os.path.join(a.out, "gpt_oss_mxfp4"), 14, mxfp4=True)


if __name__ == "__main__":
    sys.exit(main())
