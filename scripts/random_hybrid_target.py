#!/usr/bin/env python3
"""Random bf16 weights for a Qwen3.5-shaped hybrid target (Gated DeltaNet + gated attention layers).

Writes an HF directory that dflash reads like any Qwen3.5 checkpoint: config.json
(model_type qwen3_5_text), one safetensors shard per layer plus one for the rest, and
model.safetensors.index.json. The vocabulary size, bos/eos and tokenizer files come from the
config.json already in DIR (scripts/online-train-check.sh writes them with `dflash init target`).

Plain Python, no torch or numpy: the weights are tiles of one random pool of bf16 values of
magnitude 2^-7..2^-5 with random signs (about the N(0, 0.02^2) of an initialiser; what a throughput
measurement needs, not a trained model), so 54 GB take as long as writing them. The hybrid
families' zero-centred norms are stored as w = 0 (scale 1 + w = 1), the Gated DeltaNet output norm
as 1, as transformers initialises them.

  random_hybrid_target.py DIR qwen3_5_27b   # Qwen3.5-27B's shape: 64 layers, 26.9B parameters
  random_hybrid_target.py DIR tiny          # the same structure at hidden 64 (for a CPU check)
"""
import json
import os
import random
import struct
import sys

SHAPES = {
    # Qwen3.5-27B (shared/targets-2026-spec.md §3.1): 64 layers of 3 linear + 1 full attention,
    # hidden 5120, 24/4 query/kv heads of 256 (output gate), Gated DeltaNet 16 key / 48 value heads
    # of 128, convolution 4, dense MLP 17408, partial rotary 0.25 with M-RoPE sections [11, 11, 10].
    "qwen3_5_27b": dict(L=64, D=5120, H=24, KV=4, Dh=256, I=17408, Hk=16, Hv=48, dk=128, dv=128,
                        K=4, mrope=[11, 11, 10]),
    # The same structure, tiny: 4 layers (3 linear + 1 full), every dimension distinct.
    "tiny": dict(L=4, D=64, H=4, KV=2, Dh=32, I=96, Hk=2, Hv=4, dk=16, dv=24, K=4, mrope=[2, 1, 1]),
}

POOL_BYTES = 64 << 20


def random_pool(seed):
    """POOL_BYTES of bf16 values: the low byte random (mantissa and the exponent's low bit), the
    high byte a random sign over exponent bits 0x3C (2^-7 or 2^-6 times 1.m)."""
    rng = random.Random(seed)
    b = bytearray(rng.randbytes(POOL_BYTES))
    high = bytes((0x3C | (x & 0x80)) for x in range(256))
    b[1::2] = bytes(b[1::2]).translate(high)
    return bytes(b)


def bf16_const(value, count):
    return struct.pack("<f", value)[2:4] * count  # bf16 = the high half of the f32


class Shard:
    """One safetensors file: (name, shape, filler) entries written in order."""

    def __init__(self, pool, rng):
        self.entries, self.pool, self.rng = [], pool, rng

    def random(self, name, shape):
        self.entries.append((name, shape, None))

    def const(self, name, shape, value):
        self.entries.append((name, shape, value))

    def write(self, path):
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, _ in self.entries:
            n = 2
            for s in shape:
                n *= s
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            view = memoryview(self.pool)
            for name, shape, value in self.entries:
                n = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
                if value is not None:
                    f.write(bf16_const(value, n // 2))
                    continue
                at = self.rng.randrange(POOL_BYTES // 2) * 2  # a random bf16-aligned start
                while n > 0:
                    take = min(n, POOL_BYTES - at)
                    f.write(view[at:at + take])
                    n -= take
                    at = 0
        return [name for name, _, _ in self.entries]


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in SHAPES:
        sys.exit(f"usage: {sys.argv[0]} DIR {{{','.join(SHAPES)}}}")
    d, kind = sys.argv[1], sys.argv[2]
    s = SHAPES[kind]
    cfg = json.load(open(f"{d}/config.json"))
    V = cfg["vocab_size"]
    L, D, H, KV, Dh, I = s["L"], s["D"], s["H"], s["KV"], s["Dh"], s["I"]
    Hk, Hv, dk, dv, K = s["Hk"], s["Hv"], s["dk"], s["dv"], s["K"]
    types = ["full_attention" if l % 4 == 3 else "linear_attention" for l in range(L)]
    keep = {k: cfg[k] for k in ("vocab_size", "bos_token_id", "eos_token_id") if k in cfg}
    cfg = dict(keep, architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text",
               hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
               head_dim=Dh, intermediate_size=I, hidden_act="silu", rms_norm_eps=1e-6,
               max_position_embeddings=262144, attention_bias=False, tie_word_embeddings=False,
               attn_output_gate=True, layer_types=types, full_attention_interval=4,
               linear_num_key_heads=Hk, linear_num_value_heads=Hv, linear_key_head_dim=dk,
               linear_value_head_dim=dv, linear_conv_kernel_dim=K, partial_rotary_factor=0.25,
               rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                "partial_rotary_factor": 0.25, "mrope_section": s["mrope"],
                                "mrope_interleaved": True},
               torch_dtype="bfloat16")
    rng = random.Random(0)
    pool = random_pool(1)
    weight_map, total = {}, 0

    def write(shard, name):
        nonlocal total
        for key in shard.write(f"{d}/{name}"):
            weight_map[key] = name
        for _, shape, _ in shard.entries:
            n = 1
            for x in shape:
                n *= x
            total += n

    rest = Shard(pool, rng)
    rest.random("model.embed_tokens.weight", [V, D])
    rest.const("model.norm.weight", [D], 0.0)
    rest.random("lm_head.weight", [V, D])
    write(rest, "model-rest.safetensors")
    conv = 2 * Hk * dk + Hv * dv
    for l in range(L):
        p = f"model.layers.{l}."
        t = Shard(pool, rng)
        t.const(p + "input_layernorm.weight", [D], 0.0)
        if types[l] == "linear_attention":
            a = p + "linear_attn."
            t.random(a + "in_proj_qkv.weight", [conv, D])
            t.random(a + "in_proj_z.weight", [Hv * dv, D])
            t.random(a + "in_proj_b.weight", [Hv, D])
            t.random(a + "in_proj_a.weight", [Hv, D])
            t.random(a + "conv1d.weight", [conv, 1, K])
            t.const(a + "dt_bias", [Hv], 1.0)
            t.random(a + "A_log", [Hv])
            t.const(a + "norm.weight", [dv], 1.0)
            t.random(a + "out_proj.weight", [D, Hv * dv])
        else:
            a = p + "self_attn."
            t.random(a + "q_proj.weight", [2 * H * Dh, D])  # per head [query | gate]
            t.random(a + "k_proj.weight", [KV * Dh, D])
            t.random(a + "v_proj.weight", [KV * Dh, D])
            t.random(a + "o_proj.weight", [D, H * Dh])
            t.const(a + "q_norm.weight", [Dh], 0.0)
            t.const(a + "k_norm.weight", [Dh], 0.0)
        t.const(p + "post_attention_layernorm.weight", [D], 0.0)
        t.random(p + "mlp.gate_proj.weight", [I, D])
        t.random(p + "mlp.up_proj.weight", [I, D])
        t.random(p + "mlp.down_proj.weight", [D, I])
        write(t, f"model-layer{l:03d}.safetensors")
    if os.path.exists(f"{d}/model.safetensors"):
        os.remove(f"{d}/model.safetensors")
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(f"{d}/model.safetensors.index.json", "w"), indent=1)
    json.dump(cfg, open(f"{d}/config.json", "w"), indent=2)
    print(f"{kind}: {total:,} parameters, {2 * total / 1e9:.1f} GB bf16")


if __name__ == "__main__":
    main()
