"""Plain-PyTorch pieces for the reference scripts when transformers / safetensors are not installed.

read_safetensors / write_safetensors: the safetensors file format (8-byte little-endian header
length, a JSON header of {name: {dtype, shape, data_offsets}}, then the raw little-endian data).
PlainTarget: a Qwen3 / Llama causal LM (pre-norm layers, RMSNorm, q/k norm for qwen3, NeoX RoPE,
SwiGLU) read from an HF directory, giving logits and every layer's output like transformers'
hidden_states[1:] (raw layer outputs: the last one is NOT normed here, so a drafter may not read
it — dflash refuses that layer anyway). Written from the architecture's definition, not copied.
"""
import json
import math
import os
import struct

import torch

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = bytearray(data[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=_DTYPES[info["dtype"]]) if buf else torch.empty(0)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_dir(path):
    """Every tensor of an HF directory (model.safetensors or its shards), as float32."""
    files = sorted(p for p in os.listdir(path) if p.endswith(".safetensors"))
    w = {}
    for p in files:
        w.update({k: v.float() for k, v in read_safetensors(os.path.join(path, p)).items()})
    return w


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, positions, freq):
    """x [T, heads, hd]; rotate-half (NeoX) rotary embedding at absolute positions, angles in f32
    (as the HF reference and dflash compute them)."""
    ang = positions.float()[:, None] * freq[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


class PlainTarget:
    def __init__(self, path, inv_freq_fn):
        with open(os.path.join(path, "config.json")) as f:
            self.cfg = c = json.load(f)
        if c.get("attention_bias"):
            raise SystemExit("PlainTarget: attention biases are not implemented")
        self.w = load_dir(path)
        self.L = c["num_hidden_layers"]
        self.H, self.Hkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        self.hd = c.get("head_dim") or c["hidden_size"] // self.H
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.qk_norm = c.get("model_type") == "qwen3"
        self.freq = inv_freq_fn(c, self.hd)
        self.embed = self.w["model.embed_tokens.weight"]
        self.lm_head = self.w.get("lm_head.weight", self.embed)

    def __call__(self, ids):
        """ids: list of ints. Returns (logits [T, V], [output of layer l for l in 0..L-1])."""
        T = len(ids)
        x = self.embed[torch.tensor(ids)]
        pos = torch.arange(T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        outs = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            lin = lambda n, v: v @ self.w[p + n].T  # noqa: E731
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            q = lin("self_attn.q_proj.weight", h).view(T, self.H, self.hd)
            k = lin("self_attn.k_proj.weight", h).view(T, self.Hkv, self.hd)
            v = lin("self_attn.v_proj.weight", h).view(T, self.Hkv, self.hd)
            if self.qk_norm:
                q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, self.w[p + "self_attn.k_norm.weight"], self.eps)
            q, k = rope(q, pos, self.freq), rope(k, pos, self.freq)
            rep = self.H // self.Hkv
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            att = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.hd)
            att = att.masked_fill(~causal[None], float("-inf")).softmax(-1)
            o = torch.einsum("hqk,khd->qhd", att, v).reshape(T, self.H * self.hd)
            x = x + lin("self_attn.o_proj.weight", o)
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], self.eps)
            g = torch.nn.functional.silu(lin("mlp.gate_proj.weight", h))
            x = x + lin("mlp.down_proj.weight", g * lin("mlp.up_proj.weight", h))
            outs.append(x)
        logits = rms_norm(x, self.w["model.norm.weight"], self.eps) @ self.lm_head.T
        return logits, outs
