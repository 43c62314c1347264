"""Transformers parity fixtures for the hybrid linear-attention targets (run on the GPU machine).

Builds tiny random Qwen3-Next, Qwen3.5 and Qwen3.5-MoE models with HF transformers, writes each as an
HF directory in the spelling its published checkpoints use, and records what transformers computes
from exactly those weights (float32, CPU, eager attention, the torch fallback of the Gated DeltaNet,
no cache: one full forward per greedy step), in the format of tools/reference/moe_fixture.py:
  - last_logits:   the last position's logits of every prompt
  - greedy:        24 greedy tokens after every prompt
  - hidden_states: transformers' output_hidden_states of prompt 0, every entry, every position
Prompts are 7, 29 and 100 tokens: the last crosses the 64-token chunk of the chunked delta rule and
is not a multiple of it.

Fixtures (tests/fixtures/targets/):
  qwen3_next       fused in_proj_qkvz / in_proj_ba grouped per key head (the Hub layout), experts per
                   expert (the Hub layout), shared expert with its sigmoid gate, a dense layer among the
                   MoE ones (mlp_only_layers [2]), layer_types left out of config.json so the
                   full_attention_interval rule decides (linear, full, linear, full)
  qwen3_5          dense Qwen3.5 (qwen3_5_text, flat): split in_proj_qkv / z / b / a, three linear
                   layers then a full one, M-RoPE section in rope_parameters (text: plain partial RoPE)
  qwen3_5_moe      Qwen3.5-MoE (qwen3_5_moe_text, flat): fused experts [E, 2I, D], shared expert, every
                   layer MoE
  qwen3_5_wrapper  the published multimodal wrapper: Qwen3_5ForConditionalGeneration with text_config
                   and vision_config, keys model.language_model.*, model.visual.*, plus mtp.* tensors
                   (random; transformers ignores them, so must the engine)
Every model: head_dim 32 with partial_rotary_factor 0.25 (RoPE on 8 of 32 dims), Hk 2 / Hv 4, dk 16
!= dv 24, conv kernel 4, attention output gate, zero-centred (1 + w) norms with w != 0.

And tests/fixtures/gdn/gdn_cases.safetensors: the delta rule alone, from transformers' own
torch_recurrent_gated_delta_rule (checked against its torch_chunk_gated_delta_rule), for T in
{1, 63, 64, 65, 130}: case{i}.conv_out [T, 2*Hk*dk + Hv*dv] (q | k | v, before the L2 norm),
case{i}.b / .a [T, Hv], .a_log / .dt_bias [Hv], .initial_state [Hv, dk, dv], expected .o [T, Hv, dv]
and .final_state [Hv, dk, dv]; g = -exp(a_log) * softplus(a + dt_bias), beta = sigmoid(b), value
head h reads key head h // (Hv / Hk).

usage (repo root, GPU machine): python3 tools/reference/hybrid_fixture.py --out tests/fixtures
"""
import argparse
import importlib
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

NEW_TOKENS = 24
PROMPT_LENGTHS = (7, 29, 100)
VOCAB = 128
HK, HV, DK, DV = 2, 4, 16, 24


def prompts(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def reinit(model, seed):
    """Random weights with useful magnitudes, rounded to bf16: matrices ~ N(0, 1/fan_in); the
    zero-centred norms' w ~ 0.1 N (scale 1 + w); the GDN output norm (plain scale) 1 + 0.1 N;
    A_log ~ -1 + 0.5 N (decays exp(g) mostly in 0.5..0.95); other vectors 0.1 N."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith("A_log"):
                v = -1.0 + 0.5 * torch.randn(p.shape, generator=g)
            elif p.dim() == 1:
                v = 0.1 * torch.randn(p.shape, generator=g)
            else:
                fan_in = p.shape[-1]
                v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def full_forward(model, ids, hidden=False):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=hidden)


def reference(model, ps):
    last, greedy = [], []
    for p in ps:
        last.append(full_forward(model, p).logits[0, -1].tolist())
        ids, gen = list(p), []
        for _ in range(NEW_TOKENS):
            nxt = int(full_forward(model, ids).logits[0, -1].argmax())
            gen.append(nxt)
            ids.append(nxt)
        greedy.append(gen)
    hs = full_forward(model, ps[0], hidden=True).hidden_states
    return {"prompts": ps, "last_logits": last, "greedy": greedy,
            "hidden_states": [h[0].tolist() for h in hs]}


def bf16_state(sd):
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}


def config_dict(model):
    d = model.config.to_dict()
    d.pop("transformers_version", None)
    d.pop("dtype", None)
    d["torch_dtype"] = "bfloat16"
    return d


def write_dir(path, config_json, tensors, expected, notes):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2, sort_keys=True)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    expected = dict(expected)
    expected["made_by"] = {"script": "tools/reference/hybrid_fixture.py",
                           "transformers": transformers.__version__, "torch": torch.__version__,
                           "notes": notes}
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump(expected, f)
    size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    print(f"wrote {path} ({size / 1024:.0f} KiB)")


def text_kwargs(layer_types):
    return dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=len(layer_types),
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=HK,
        linear_num_value_heads=HV, linear_key_head_dim=DK, linear_value_head_dim=DV,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=512,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        layer_types=layer_types)


def build(cls_cfg, cls_model, seed, **kw):
    cfg = cls_cfg(**kw)
    torch.manual_seed(seed)
    model = cls_model(cfg).float().eval()
    model.config._attn_implementation = "eager"
    reinit(model, seed)
    return model


def split_experts(sd, num_experts):
    """transformers-5 fused experts [E, 2I, D] / [E, D, I] -> the Hub's per-expert tensors."""
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre, half = k[: -len("gate_up_proj")], v.shape[1] // 2
            for e in range(num_experts):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :half].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = v[e, half:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(num_experts):
                out[f"{pre}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v
    return out


def check_features(model, names):
    keys = list(model.state_dict())
    for n in names:
        if not any(n in k for k in keys):
            raise SystemExit(f"{type(model).__name__}: no parameter named like {n!r}: {keys[:40]}")


# ---- Qwen3-Next ---------------------------------------------------------------------------------
def qwen3_next(out, seed):
    lt = ["linear_attention", "full_attention"] * 2
    model = build(transformers.Qwen3NextConfig, transformers.Qwen3NextForCausalLM, seed,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                   "partial_rotary_factor": 0.25},
                  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                  shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
                  mlp_only_layers=[2], full_attention_interval=2, **text_kwargs(lt))
    check_features(model, ["in_proj_qkvz", "in_proj_ba", "shared_expert_gate", "A_log"])
    expected = reference(model, prompts(seed + 1))
    tensors = split_experts(bf16_state(model.state_dict()), 4)
    c = config_dict(model)
    c.pop("layer_types", None)  # the published config.json has none: full_attention_interval rules
    c["architectures"] = ["Qwen3NextForCausalLM"]
    write_dir(out, c, tensors, expected,
              "qwen3_next: fused qkvz/ba grouped per key head, per-expert experts, shared expert, "
              "mlp_only_layers [2], layer_types from full_attention_interval 2")


# ---- Qwen3.5 (dense and MoE, flat) -----------------------------------------------------------------
QWEN35_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
               "mrope_section": [2, 1, 1], "mrope_interleaved": True}


def qwen3_5(out, seed):
    lt = ["linear_attention"] * 3 + ["full_attention"]
    model = build(transformers.Qwen3_5TextConfig, transformers.Qwen3_5ForCausalLM, seed,
                  rope_parameters=dict(QWEN35_ROPE), **text_kwargs(lt))
    check_features(model, ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "A_log"])
    expected = reference(model, prompts(seed + 1))
    c = config_dict(model)
    c["architectures"] = ["Qwen3_5ForCausalLM"]
    write_dir(out, c, bf16_state(model.state_dict()), expected,
              "qwen3_5 (flat qwen3_5_text): split in_proj_qkv/z/b/a, layer_types 3 linear + 1 full, "
              "M-RoPE section [2,1,1] (text: plain partial RoPE)")


def qwen3_5_moe(out, seed):
    lt = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
    model = build(transformers.Qwen3_5MoeTextConfig, transformers.Qwen3_5MoeForCausalLM, seed,
                  rope_parameters=dict(QWEN35_ROPE), num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=24, shared_expert_intermediate_size=48, **text_kwargs(lt))
    check_features(model, ["experts.gate_up_proj", "shared_expert_gate"])
    expected = reference(model, prompts(seed + 1))
    c = config_dict(model)
    c["architectures"] = ["Qwen3_5MoeForCausalLM"]
    write_dir(out, c, bf16_state(model.state_dict()), expected,
              "qwen3_5_moe (flat qwen3_5_moe_text): fused experts [E,2I,D], shared expert, "
              "every layer MoE")


def qwen3_5_wrapper(out, seed):
    lt = ["linear_attention"] * 3 + ["full_attention"]
    text = dict(text_kwargs(lt), rope_parameters=dict(QWEN35_ROPE))
    text.pop("tie_word_embeddings")
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
              "out_hidden_size": 64, "patch_size": 4, "spatial_merge_size": 1,
              "num_position_embeddings": 16}
    cfg = transformers.Qwen3_5Config(text_config=text, vision_config=vision,
                                     tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForConditionalGeneration(cfg).float().eval()
    model.config._attn_implementation = "eager"
    for sub in ("text_config", "vision_config"):
        getattr(model.config, sub)._attn_implementation = "eager"
    reinit(model, seed)
    expected = reference(model, prompts(seed + 1))
    tensors = bf16_state(model.state_dict())
    if not any(k.startswith("model.language_model.") for k in tensors):
        raise SystemExit(f"unexpected wrapper keys: {list(tensors)[:20]}")
    g = torch.Generator().manual_seed(seed + 7)  # an MTP head as published (never read)
    for name, shape in [("mtp.fc.weight", (64, 128)), ("mtp.norm.weight", (64,)),
                        ("mtp.pre_fc_norm_embedding.weight", (64,)),
                        ("mtp.layers.0.input_layernorm.weight", (64,))]:
        tensors[name] = torch.randn(shape, generator=g).to(torch.bfloat16)
    c = config_dict(model)
    c["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    write_dir(out, c, tensors, expected,
              "qwen3_5 multimodal wrapper: text_config + vision_config, model.language_model.*, "
              "model.visual.* and mtp.* present and ignored")


# ---- the delta rule alone -----------------------------------------------------------------------
def delta_rule_functions():
    for mod in ("qwen3_next", "qwen3_5"):
        try:
            m = importlib.import_module(f"transformers.models.{mod}.modeling_{mod}")
        except ImportError:
            continue
        chunk = getattr(m, "torch_chunk_gated_delta_rule", None)
        rec = getattr(m, "torch_recurrent_gated_delta_rule", None)
        if chunk and rec:
            return chunk, rec
    raise SystemExit("transformers has no torch_{chunk,recurrent}_gated_delta_rule")


def gdn_cases(out, seed):
    chunk, rec = delta_rule_functions()
    g = torch.Generator().manual_seed(seed)
    r = HV // HK
    C = 2 * HK * DK + HV * DV
    tensors, worst_chunk = {}, 0.0
    lengths = (1, 63, 64, 65, 130)
    for i, T in enumerate(lengths):
        conv_out = torch.randn(T, C, generator=g)
        b = torch.randn(T, HV, generator=g)
        a = torch.randn(T, HV, generator=g)
        a_log = -1.0 + 0.5 * torch.randn(HV, generator=g)
        dt_bias = 0.1 * torch.randn(HV, generator=g)
        init = (0.3 * torch.randn(HV, DK, DV, generator=g) if i % 2 == 1
                else torch.zeros(HV, DK, DV))
        q = conv_out[:, : HK * DK].reshape(T, HK, DK)
        k = conv_out[:, HK * DK: 2 * HK * DK].reshape(T, HK, DK)
        v = conv_out[:, 2 * HK * DK:].reshape(T, HV, DV)
        q, k = q.repeat_interleave(r, dim=1), k.repeat_interleave(r, dim=1)
        beta = b.sigmoid()
        gg = -a_log.exp() * F.softplus(a + dt_bias)
        args = [x.unsqueeze(0) for x in (q, k, v, gg, beta)]
        o_r, s_r = rec(*args, initial_state=init.unsqueeze(0).clone(), output_final_state=True,
                       use_qk_l2norm_in_kernel=True)
        o_c, s_c = chunk(*args, initial_state=init.unsqueeze(0).clone(), output_final_state=True,
                         use_qk_l2norm_in_kernel=True)
        worst_chunk = max(worst_chunk, float((o_r - o_c).abs().max()),
                          float((s_r - s_c).abs().max()))
        for name, t in [("conv_out", conv_out), ("b", b), ("a", a), ("a_log", a_log),
                        ("dt_bias", dt_bias), ("initial_state", init), ("o", o_r[0]),
                        ("final_state", s_r[0])]:
            tensors[f"case{i}.{name}"] = t.float().contiguous()
    if worst_chunk > 1e-3:
        raise SystemExit(f"transformers' chunked and recurrent rules disagree by {worst_chunk}")
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "gdn_cases.safetensors"),
              metadata={"cases": str(len(lengths)), "Hk": str(HK), "Hv": str(HV), "dk": str(DK),
                        "dv": str(DV), "lengths": json.dumps(lengths),
                        "made_by": f"tools/reference/hybrid_fixture.py, transformers "
                                   f"{transformers.__version__}, torch {torch.__version__}",
                        "chunk_vs_recurrent_max_diff": f"{worst_chunk:.3g}"})
    print(f"wrote {out}/gdn_cases.safetensors (chunk vs recurrent max diff {worst_chunk:.3g})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", default="", help="comma-separated subset of fixture names")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    jobs = {
        "gdn": lambda: gdn_cases(os.path.join(a.out, "gdn"), 21),
        "qwen3_next": lambda: qwen3_next(os.path.join(a.out, "targets", "qwen3_next"), 22),
        "qwen3_5": lambda: qwen3_5(os.path.join(a.out, "targets", "qwen3_5"), 23),
        "qwen3_5_moe": lambda: qwen3_5_moe(os.path.join(a.out, "targets", "qwen3_5_moe"), 24),
        "qwen3_5_wrapper": lambda: qwen3_5_wrapper(os.path.join(a.out, "targets",
                                                                "qwen3_5_wrapper"), 25),
    }
    chosen = [n for n in a.only.split(",") if n] or list(jobs)
    failed = []
    for n in chosen:
        try:
            jobs[n]()
        except SystemExit as e:
            print(f"{n}: FAILED: {e}")
            failed.append(n)
        except Exception as e:  # noqa: BLE001 - report every fixture, fail at the end
            import traceback
            traceback.print_exc()
            print(f"{n}: FAILED: {type(e).__name__}: {e}")
            failed.append(n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
