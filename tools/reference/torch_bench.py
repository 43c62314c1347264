#!/usr/bin/env python3
"""PyTorch reference benchmarks for dflash.cpp (run on the GPU machine beside the C++ benches).

Subcommands (each prints one JSON object per measured case on stdout, a table line on stderr):
  drafter  DFlash drafter training step, target features given (docs/training.md); JSON bench
           "drafter_train_step", the same workload, presets and FLOP count as bench/train_step_bench
  decode   bs=1 greedy decode step (and a --verify N-token verify) of a Qwen3 target, static KV cache;
           JSON bench "target_decode", as bench/decode_bench
  ops      single-op ceilings: bf16 GEMM, SDPA causal fwd / fwd+bwd, RMSNorm, D2D copy
  check    small correctness checks of the pieces above (mask, attention, CE, KV cache)
  summary  FILE.jsonl -> compact table
Modes: --mode eager | compiled (drafter: torch.compile of forward+loss; decode: reduce-overhead)
       | graph (decode only: the eager step captured in one torch.cuda.CUDAGraph); comma lists work.
Timing: CUDA events around each step, warm-up (>= 3 eager, >= 5 compiled, the first call is the
compile and is reported as compile_s), then the median of --steps steps. Inputs are random, never zero.
Only torch and the standard library are needed. --device cpu runs (slowly) for smoke tests.
"""
import argparse, contextlib, gc, inspect, json, math, statistics, sys, time, traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK_FLOPS = 989.4e12  # H200 dense bf16
HBM_BPS = 4.24e12      # measured D2D copy on the H200 (docs/performance.md)
MASK_ID = 151669
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
HAS_RMS = hasattr(F, "rms_norm")
HAS_COMPILE = hasattr(torch, "compile")
try:
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    HAS_FLEX = True
except Exception:  # old torch
    HAS_FLEX = False

DRAFTER_PRESETS = {
    "d1024": dict(hidden=1024, layers=4, heads=16, kv_heads=8, inter=3072, seq=4096, anchors=1024),
    "d2048": dict(hidden=2048, layers=4, heads=16, kv_heads=8, inter=6144, seq=4096, anchors=1024),
    "d4096": dict(hidden=4096, layers=5, heads=32, kv_heads=8, inter=12288, seq=4096, anchors=1024),
    "qwen3_4b": dict(hidden=2560, layers=5, heads=32, kv_heads=8, inter=9728, seq=4096, anchors=512),
    "qwen3_8b": dict(hidden=4096, layers=5, heads=32, kv_heads=8, inter=12288, seq=3072, anchors=512),
}
DRAFTER_DEFAULTS = dict(head_dim=128, vocab=151936, block=16, features=5)
DRAFTER_QUICK = dict(hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64, inter=512, vocab=4096,
                     seq=256, anchors=8, block=16, features=5)
DECODE_PRESETS = {
    "qwen3_0_6b": dict(layers=28, hidden=1024, heads=16, kv_heads=8, head_dim=128, inter=3072,
                       vocab=151936, tied=True),
    "qwen3_8b": dict(layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=12288,
                     vocab=151936, tied=False),
}
DECODE_QUICK = dict(layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64, inter=512, vocab=4096,
                    tied=True)
FLOPS_FORMULA = ("fc 4*S*(K*D)*D + L*[6*R*(q,o,gate,up,down params) + 6*(S+R)*(k,v params)"
                 " + attention 4*Dh*H*pairs*(1 fwd + 2.5 bwd)] + LM head 4*R*V*D (fwd + dh, frozen);"
                 " R = N*B, pairs = sum_n B*(anchor_n + B)")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(rec):
    print(json.dumps(rec), flush=True)
    log(table_line(rec))


def table_line(r):
    name = f"{r.get('bench', '?'):8s} {str(r.get('case', '')):11s} {str(r.get('mode', '')):9s}"
    if r.get("bench") == "drafter_train_step":
        name += f" {r.get('attn', 'sdpa'):5s}"
    if r.get("error"):
        return f"{name} ERROR {str(r['error']).splitlines()[0][:150]}"
    b = r.get("bench")
    if b == "drafter_train_step":
        return (f"{name} {r['ms']:9.2f} ms  {r['draft_positions_per_s'] / 1e3:8.1f}K "
                f"draft pos/s  {r['tflops']:6.1f} TFLOP/s  MFU {100 * r['mfu']:5.1f}%  "
                f"peak {r['peak_mem_gib']:.1f} GiB  loss {r['loss']:.3f}")
    if b == "target_decode":
        s = f"{name} decode {r['decode_ms']:7.3f} ms (floor {r['weight_floor_ms']:.3f})"
        if r.get("verify_over_decode") is not None:
            vms = r[f"verify{r['verify']}_ms"]
            s += f"  verify{r['verify']} {vms:7.3f} ms  ratio {r['verify_over_decode']:.2f}"
        return s + f"  peak {r['peak_mem_gib']:.1f} GiB"
    if b == "ops":
        return f"{name} {r['ms']:9.3f} ms  {r['value']:9.1f} {r['unit']}"
    if b == "check":
        return f"{name} {'ok' if r['ok'] else 'FAIL'}  err {r['err']:.2e} (tol {r['tol']:.0e})"
    return name + " " + json.dumps(r)[:150]


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_steps(fn, dev, warmup, steps):
    """Per-step milliseconds (CUDA events on the GPU, host clock around a sync on the CPU)."""
    for _ in range(warmup):
        fn()
    sync(dev)
    ts = []
    if dev.type == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(steps)]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize(dev)
        ts = [a.elapsed_time(b) for a, b in ev]
    else:
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def stats(ts):
    return dict(ms=statistics.median(ts), ms_min=min(ts), ms_max=max(ts), steps=len(ts))


def base_rec(bench, case, mode, dev):
    r = dict(bench=bench, case=case, mode=mode, impl="torch", torch=torch.__version__, error=None)
    if bench in ("drafter_train_step", "target_decode"):
        r["preset"] = case  # the C++ benches' key
    r["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return r


def peak_gib(dev):
    return torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0


def reset_mem(dev):
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    if HAS_COMPILE:
        torch._dynamo.reset()


def err_str(e):
    return (f"{type(e).__name__}: {e}")[:3000]


def foreach_copy(dst, src):
    try:
        torch._foreach_copy_(dst, src)
    except Exception:
        for d, s in zip(dst, src):
            d.copy_(s)


def foreach_zero(ts):
    try:
        torch._foreach_zero_(ts)
    except Exception:
        for t in ts:
            t.zero_()


def dynamo_counters():
    """Graph breaks and CUDA-graph skips seen by torch.compile so far (diagnostics)."""
    try:
        from torch._dynamo.utils import counters
        return dict(graph_breaks=sum(counters["graph_break"].values()),
                    cudagraph_skips=sum(counters["inductor"].get(k, 0) for k in counters["inductor"]
                                        if "cudagraph_skip" in k))
    except Exception as e:
        return dict(dynamo_counters_error=type(e).__name__)


def clip_grads(ps, max_norm):
    """Global-norm clipping on the fp32 master grads, without a host sync (as the trainers do)."""
    try:
        torch.nn.utils.clip_grad_norm_(ps, max_norm, foreach=True)
    except TypeError:  # old torch
        torch.nn.utils.clip_grad_norm_(ps, max_norm)


def mark_step():
    if HAS_COMPILE and hasattr(torch, "compiler") and hasattr(torch.compiler, "cudagraph_mark_step_begin"):
        torch.compiler.cudagraph_mark_step_begin()


# ----------------------------------------------------------------------------------- model pieces
def rms(x, w, eps=1e-6):
    if HAS_RMS:  # one kernel on recent torch (fp32 accumulation)
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def sdpa(q, k, v, mask):
    """q [..., Lq, Dh], k/v [..., Lk, Dh] (same head count), mask bool or additive, [Lq, Lk]."""
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def rope_tables(pos, inv_freq, dtype):
    """NeoX rotate-half RoPE tables for int positions [n] -> cos, sin [n, 1, Dh]."""
    f = pos.to(torch.float32)[:, None] * inv_freq[None, :]
    e = torch.cat([f, f], -1)
    return e.cos().to(dtype)[:, None, :], e.sin().to(dtype)[:, None, :]


def rope(x, cs):
    cos, sin = cs
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def inv_freq_of(dh, dev, theta=1e6):
    return 1.0 / theta ** (torch.arange(0, dh, 2, device=dev, dtype=torch.float32) / dh)


def rand_w(dev, dt, *shape, std=0.02):
    return nn.Parameter(torch.randn(*shape, device=dev, dtype=dt) * std)


def rand_norm(dev, dt, n):
    return nn.Parameter(1.0 + 0.05 * torch.randn(n, device=dev, dtype=dt))


class Layer(nn.Module):
    """Qwen3 decoder layer (pre-norm, q/k RMSNorm, NeoX RoPE, GQA, SwiGLU, no biases)."""

    def __init__(self, g, dev, dt):
        super().__init__()
        D, H, Hkv, Dh, I = g["hidden"], g["heads"], g["kv_heads"], g["head_dim"], g["inter"]
        self.H, self.Hkv, self.Dh = H, Hkv, Dh
        self.ln1, self.ln2 = rand_norm(dev, dt, D), rand_norm(dev, dt, D)
        self.qn, self.kn = rand_norm(dev, dt, Dh), rand_norm(dev, dt, Dh)
        self.wq, self.wo = rand_w(dev, dt, H * Dh, D), rand_w(dev, dt, D, H * Dh)
        self.wk, self.wv = rand_w(dev, dt, Hkv * Dh, D), rand_w(dev, dt, Hkv * Dh, D)
        self.wg, self.wu = rand_w(dev, dt, I, D), rand_w(dev, dt, I, D)
        self.wd = rand_w(dev, dt, D, I)

    def mlp_residual(self, x):
        h2 = rms(x, self.ln2)
        return x + F.linear(F.silu(F.linear(h2, self.wg)) * F.linear(h2, self.wu), self.wd)

    def train_fwd(self, x, ctx, rq, rkv, attend, attn):
        """DFlash KV injection: K/V from [ctx ; norm(x)], Q from norm(x) only (spec 1.3)."""
        R, S = x.shape[0], ctx.shape[0]
        h = rms(x, self.ln1)
        q = rope(rms(F.linear(h, self.wq).view(R, self.H, self.Dh), self.qn), rq)
        k = torch.cat([F.linear(ctx, self.wk), F.linear(h, self.wk)]).view(S + R, self.Hkv, self.Dh)
        k = rope(rms(k, self.kn), rkv)
        v = torch.cat([F.linear(ctx, self.wv), F.linear(h, self.wv)]).view(S + R, self.Hkv, self.Dh)
        x = x + F.linear(attend(q, k, v, attn), self.wo)
        return self.mlp_residual(x)

    def decode_fwd(self, x, cs, positions, kc, vc, mask):
        """x [T, D]; kc/vc [Hkv, cap, Dh] static cache; mask [g*T, cap] additive."""
        T, H, Hkv, Dh = x.shape[0], self.H, self.Hkv, self.Dh
        g = H // Hkv
        h = rms(x, self.ln1)
        q = rope(rms(F.linear(h, self.wq).view(T, H, Dh), self.qn), cs)
        k = rope(rms(F.linear(h, self.wk).view(T, Hkv, Dh), self.kn), cs)
        v = F.linear(h, self.wv).view(T, Hkv, Dh)
        kc.index_copy_(1, positions, k.transpose(0, 1))
        vc.index_copy_(1, positions, v.transpose(0, 1))
        # GQA without copying K/V: the g query heads of a kv head become g*T query rows.
        qg = q.view(T, Hkv, g, Dh).permute(1, 2, 0, 3).reshape(1, Hkv, g * T, Dh)
        o = sdpa(qg, kc.unsqueeze(0), vc.unsqueeze(0), mask)
        o = o[0].view(Hkv, g, T, Dh).permute(2, 0, 1, 3).reshape(T, H * Dh)
        return self.mlp_residual(x + F.linear(o, self.wo))


class LinearCE(torch.autograd.Function):
    """Weighted CE through a frozen LM head without keeping [R, V] logits.

    Row chunks: bf16 logits GEMM, fp32 softmax, loss = sum w_r * -log p[label], and the gradient
    dh = w_r * (p - onehot) @ W computed right there (the head is frozen: no dW), saved for the
    backward. 4*R*V*D FLOPs, no recomputation; weights arrive normalised (w / sum w)."""

    @staticmethod
    def forward(ctx, h, w, labels, wn, chunk):
        R = h.shape[0]
        dh = torch.empty_like(h)
        total = torch.zeros((), device=h.device, dtype=torch.float32)
        for r0 in range(0, R, chunk):
            r1 = min(R, r0 + chunk)
            lab = labels[r0:r1, None]
            p = torch.softmax(F.linear(h[r0:r1], w), dim=-1, dtype=torch.float32)
            pl = p.gather(1, lab).squeeze(1)
            total = total + (-torch.log(pl.clamp_min(1e-37)) * wn[r0:r1]).sum()
            p.scatter_add_(1, lab, torch.full_like(pl[:, None], -1.0))
            dh[r0:r1] = (p.to(h.dtype) @ w) * wn[r0:r1, None].to(h.dtype)
        ctx.save_for_backward(dh)
        return total

    @staticmethod
    def backward(ctx, gout):
        (dh,) = ctx.saved_tensors
        return dh * gout.to(dh.dtype), None, None, None, None


def attend(q, k, v, attn, flex_fn=None):
    """q [R, H, Dh], k/v [Sk, Hkv, Dh] -> [R, H*Dh]. attn: additive [R, Sk] mask (SDPA) or a
    flex BlockMask (flex_fn = flex_attention, compiled or inside a compiled region)."""
    R, H, Dh = q.shape
    g = H // k.shape[1]
    qh = q.transpose(0, 1).unsqueeze(0)
    if flex_fn is not None:
        o = flex_fn(qh, k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0),
                    block_mask=attn, enable_gqa=g > 1)
    else:  # repeat K/V heads: SDPA's fused kernels take a mask only without enable_gqa
        if g > 1:
            Sk = k.shape[0]
            k = k[:, :, None, :].expand(Sk, H // g, g, Dh).reshape(Sk, H, Dh)
            v = v[:, :, None, :].expand(Sk, H // g, g, Dh).reshape(Sk, H, Dh)
        o = sdpa(qh, k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0), attn)
    return o[0].transpose(0, 1).reshape(R, H * Dh)


class Drafter(nn.Module):
    def __init__(self, g, dev, dt, attn_kind):
        super().__init__()
        D, K, V = g["hidden"], g["features"], g["vocab"]
        self.fc = rand_w(dev, dt, D, K * D)
        self.hidden_norm, self.norm = rand_norm(dev, dt, D), rand_norm(dev, dt, D)
        self.layers = nn.ModuleList([Layer(g, dev, dt) for _ in range(g["layers"])])
        # Frozen target embedding and (untied) LM head: buffers, so the optimizer never sees them.
        self.register_buffer("embed", torch.randn(V, D, device=dev, dtype=dt) * 0.02)
        self.register_buffer("lm_head", torch.randn(V, D, device=dev, dtype=dt) * 0.02)
        self.register_buffer("inv_freq", inv_freq_of(g["head_dim"], dev))
        self.attn_kind, self.flex_fn, self.chunk = attn_kind, None, g["ce_chunk"]

    def attend(self, q, k, v, attn):
        return attend(q, k, v, attn, self.flex_fn if self.attn_kind == "flex" else None)

    def body(self, feats, ids, q_pos, kv_pos, attn):
        ctx = rms(F.linear(feats, self.fc), self.hidden_norm)  # [S, D]
        x = F.embedding(ids, self.embed)                        # [R, D]
        rq = rope_tables(q_pos, self.inv_freq, x.dtype)
        rkv = rope_tables(kv_pos, self.inv_freq, x.dtype)
        for layer in self.layers:
            x = layer.train_fwd(x, ctx, rq, rkv, self.attend, attn)
        return rms(x, self.norm)

    def loss(self, h, labels, wn):
        return LinearCE.apply(h, self.lm_head, labels, wn, self.chunk)

    def forward(self, feats, ids, q_pos, kv_pos, attn, labels, wn):
        return self.loss(self.body(feats, ids, q_pos, kv_pos, attn), labels, wn)


def block_inputs(tokens, anchors, S, B, mask_id, gamma, dense=True):
    """Per-step block rows (vectorised on the device): ids, positions, labels, normalised weights,
    and (dense) the DFlash visibility mask [R, S+R]: block n sees context j < anchor_n and its own
    B rows (bidirectional), nothing else."""
    dev, N = tokens.device, anchors.shape[0]
    R = N * B
    koff = torch.arange(B, device=dev)
    pos = anchors[:, None] + koff[None, :]                                   # [N, B]
    ids = torch.full((N, B), mask_id, device=dev, dtype=torch.long)
    ids[:, 0] = tokens[anchors]
    valid = (koff[None, :] > 0) & (pos < S)
    labels = torch.where(valid, tokens[pos.clamp(max=S - 1)], torch.zeros_like(pos))
    w = torch.where(valid, torch.exp(-(koff - 1).clamp(min=0).float() / gamma)[None, :],
                    torch.zeros((), device=dev))
    wn = (w / w.sum()).reshape(R)
    kv_pos = torch.cat([torch.arange(S, device=dev), pos.reshape(R)])
    mask = None
    if dense:
        qblk = torch.arange(R, device=dev) // B
        kv = torch.arange(S + R, device=dev)[None, :]
        mask = (kv < anchors[qblk][:, None]) | ((kv >= S) & ((kv - S) // B == qblk[:, None]))
    return ids.reshape(R), pos.reshape(R), kv_pos, labels.reshape(R), wn, mask


def flex_mask_mod(anchors, S, B):
    """Made once per case: a new function object each step would make torch.compile recompile."""
    N = anchors.shape[0]

    def mask_mod(b, h, q, kv):
        n = q // B
        return (kv < anchors[n.clamp(max=N - 1)]) | ((kv >= S) & ((kv - S) // B == n))
    return mask_mod


def flex_block_mask(mask_mod, S, R, dev):
    kw = {}
    if "_compile" in inspect.signature(create_block_mask).parameters:
        kw["_compile"] = True
    try:
        return create_block_mask(mask_mod, None, None, R, S + R, device=dev, **kw)
    except Exception:
        if not kw:
            raise
        return create_block_mask(mask_mod, None, None, R, S + R, device=dev)


def drafter_flops(g, pairs):
    S, N, B, D, K = g["seq"], g["anchors"], g["block"], g["hidden"], g["features"]
    H, Hkv, Dh, I, V, L = g["heads"], g["kv_heads"], g["head_dim"], g["inter"], g["vocab"], g["layers"]
    R = N * B
    per_layer = (6 * R * (2 * D * H * Dh + 3 * D * I) + 6 * (S + R) * (2 * D * Hkv * Dh)
                 + 3.5 * 4 * Dh * H * pairs)
    return 4 * S * K * D * D + L * per_layer + 4 * R * V * D


def sdpa_choice(q, k, v, mask):
    try:
        c = torch._fused_sdp_choice(q, k, v, mask, 0.0, False)
        try:
            from torch.nn.attention import SDPBackend
            return SDPBackend(c).name
        except Exception:
            return str(c)
    except Exception as e:
        return "unknown (" + type(e).__name__ + ")"


def drafter_case(args, g, dev, input_seed=None):
    """The drafter bench's model and inputs (shared with ddp_bench.py): the model seeded with
    args.seed, then the fixed random inputs from the same stream (or from input_seed), and prep(),
    the per-step input preparation (inside the timed step). Returns a dict."""
    dt = torch.bfloat16
    S, N, B, D, K, V = g["seq"], g["anchors"], g["block"], g["hidden"], g["features"], g["vocab"]
    R = N * B
    if N > S - B:
        raise ValueError(f"{N} anchors do not fit below S-B = {S - B}")
    torch.manual_seed(args.seed)
    model = Drafter(g, dev, dt, args.attn)
    if input_seed is not None:
        torch.manual_seed(input_seed)
    feats = torch.randn(S, K * D, device=dev, dtype=dt)
    tokens = torch.randint(0, V, (S,), device=dev)
    anchors = torch.randperm(S - B, device=dev)[:N].sort().values
    pairs = sum(B * (a + B) for a in anchors.tolist())
    mask_id = MASK_ID if MASK_ID < V else V - 1
    mm = flex_mask_mod(anchors, S, B) if args.attn == "flex" else None

    def prep():
        ids, q_pos, kv_pos, labels, wn, mask = block_inputs(tokens, anchors, S, B, mask_id,
                                                            args.gamma, dense=mm is None)
        if mm is not None:
            attn = flex_block_mask(mm, S, R, dev)
        else:  # additive bf16 mask, built once per step instead of once per layer call
            attn = torch.full((R, S + R), float("-inf"), device=dev, dtype=dt).masked_fill_(mask, 0.0)
        return feats, ids, q_pos, kv_pos, attn, labels, wn
    return dict(model=model, prep=prep, pairs=pairs, R=R, dt=dt)


def drafter_optimizer(params, dev):
    """fp32 master copies of the bf16 weights (grads preallocated) and AdamW over them."""
    masters = [p.detach().float().clone() for p in params]
    for m in masters:
        m.grad = torch.zeros_like(m)
    okw = dict(fused=True) if dev.type == "cuda" else {}
    return masters, torch.optim.AdamW(masters, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0, **okw)


def drafter_step(fwd, prep, params, masters, opt, keep_grads=False):
    """One training step: loss = fwd(*prep()), backward, grads into the fp32 masters, clipping,
    AdamW, masters back into the bf16 weights. keep_grads: zero the weights' grads in place instead
    of dropping them (DDP with gradient_as_bucket_view, whose grads are views of its buckets)."""
    def step():
        loss = fwd(*prep())
        loss.backward()
        with torch.no_grad():
            foreach_copy([m.grad for m in masters], [p.grad for p in params])
            clip_grads(masters, 1.0)
            opt.step()
            foreach_copy([p.data for p in params], masters)
            if keep_grads:
                foreach_zero([p.grad for p in params if p.grad is not None])
        if not keep_grads:
            for p in params:
                p.grad = None
        return loss
    return step


def run_drafter(args, g, mode, dev):
    rec = base_rec("drafter_train_step", g["name"], mode, dev)
    rec.update(attn=args.attn, shapes={k: v for k, v in g.items() if k != "name"})
    reset_mem(dev)
    try:
        if args.attn == "flex" and not HAS_FLEX:
            raise RuntimeError("flex_attention does not import in this torch")
        if mode not in ("eager", "compiled"):
            raise ValueError(f"mode {mode} is not a drafter mode")
        S = g["seq"]
        c = drafter_case(args, g, dev)
        model, prep, pairs, R, dt = c["model"], c["prep"], c["pairs"], c["R"], c["dt"]
        params = list(model.parameters())
        masters, opt = drafter_optimizer(params, dev)
        rec["params"] = sum(p.numel() for p in params)

        if args.attn == "flex":  # eager flex = the compiled flex kernel alone (as SpecForge runs it)
            model.flex_fn = (flex_attention if mode == "compiled"
                             else torch.compile(flex_attention, dynamic=False))
        else:
            qs = torch.empty(R, g["heads"], g["head_dim"], device=dev, dtype=dt,
                             requires_grad=True).transpose(0, 1)[None]
            ks = torch.empty(S + R, g["heads"], g["head_dim"], device=dev, dtype=dt,
                             requires_grad=True).transpose(0, 1)[None]
            rec["sdpa_backend"] = sdpa_choice(qs, ks, ks, torch.zeros(R, S + R, device=dev, dtype=dt))
            del qs, ks

        def make_step(fwd):
            return drafter_step(fwd, prep, params, masters, opt)

        if mode == "eager":
            step, warm = make_step(model), max(3, args.warmup)
            t0 = time.perf_counter()
            last = step()
            sync(dev)
            rec["first_step_s"] = time.perf_counter() - t0
        else:
            if not HAS_COMPILE:
                raise RuntimeError("torch.compile is not available in this torch")
            errors = []
            for scope in ("forward+loss", "forward (loss eager)"):
                try:
                    torch._dynamo.reset()
                    if scope == "forward+loss":
                        fwd = torch.compile(model, dynamic=False)
                    else:  # fallback: only the layers compiled, the chunked CE eager
                        bc = torch.compile(model.body, dynamic=False)

                        def fwd(f, i, qp, kp, at, lb, w, bc=bc):
                            return model.loss(bc(f, i, qp, kp, at), lb, w)
                    step = make_step(fwd)
                    t0 = time.perf_counter()
                    last = step()
                    sync(dev)
                    rec["compile_s"], rec["compile_scope"] = time.perf_counter() - t0, scope
                    break
                except Exception as e:
                    errors.append(f"{scope}: {err_str(e)}")
                    log(f"compile scope '{scope}' failed: {err_str(e)[:400]}")
                    for p in params:
                        p.grad = None
            if errors:
                rec["compile_errors"] = errors
            if "compile_scope" not in rec:
                raise RuntimeError("torch.compile failed in every scope: " + " | ".join(errors))
            warm = max(5, args.warmup) - 1
        ts = time_steps(lambda: step(), dev, warm, args.steps)
        if mode == "compiled":
            rec.update(dynamo_counters())
        last = step()
        rec["loss"] = float(last)
        rec["prep_ms"] = statistics.median(time_steps(prep, dev, 1, 5))
        rec.update(stats(ts))
        flops = drafter_flops(g, pairs)
        sec = rec["ms"] / 1e3
        rec.update(flops_per_step=flops, flops_formula=FLOPS_FORMULA, pairs=pairs, peak_flops=PEAK_FLOPS,
                   tflops=flops / sec / 1e12, mfu=flops / sec / PEAK_FLOPS,
                   draft_positions_per_s=R / sec, tokens_per_s=S / sec, peak_mem_gib=peak_gib(dev))
        if not math.isfinite(rec["loss"]):
            rec["warning"] = "loss is not finite"
    except Exception as e:
        rec["error"] = err_str(e)
        log(traceback.format_exc())
    emit(rec)
    return rec["error"] is None


# ------------------------------------------------------------------------------------- decode
class Target(nn.Module):
    def __init__(self, g, cap, dev, dt):
        super().__init__()
        D, V, L = g["hidden"], g["vocab"], g["layers"]
        self.layers = nn.ModuleList([Layer(g, dev, dt) for _ in range(L)])
        self.embed = rand_w(dev, dt, V, D)
        self.lm_head = self.embed if g["tied"] else rand_w(dev, dt, V, D)
        self.norm = rand_norm(dev, dt, D)
        self.g = g["heads"] // g["kv_heads"]
        shape = (L, g["kv_heads"], cap, g["head_dim"])
        self.register_buffer("kc", torch.randn(shape, device=dev, dtype=dt))  # "prefilled"
        self.register_buffer("vc", torch.randn(shape, device=dev, dtype=dt))
        self.register_buffer("inv_freq", inv_freq_of(g["head_dim"], dev))
        self.register_buffer("ar", torch.arange(cap, device=dev))
        self.requires_grad_(False)
        if HAS_COMPILE and hasattr(torch._dynamo, "mark_static_address"):
            torch._dynamo.mark_static_address(self.kc)
            torch._dynamo.mark_static_address(self.vc)

    def logits(self, ids, pos):
        """ids [T] at positions pos..pos+T-1 (pos: 0-dim device tensor), causal over the cache."""
        T = ids.shape[0]
        positions = pos + self.ar[:T]
        x = F.embedding(ids, self.embed)
        cs = rope_tables(positions, self.inv_freq, x.dtype)
        vis = self.ar[None, :] <= positions.repeat(self.g)[:, None]  # [g*T, cap]
        mask = torch.zeros(vis.shape, device=x.device, dtype=x.dtype).masked_fill(~vis, float("-inf"))
        for i, layer in enumerate(self.layers):
            x = layer.decode_fwd(x, cs, positions, self.kc[i], self.vc[i], mask)
        return F.linear(rms(x, self.norm), self.lm_head)

    def forward(self, ids, pos):  # greedy: next token per row
        return self.logits(ids, pos).argmax(-1)


def capture_graph(fn, dev):
    """fn captured in one CUDA graph; returns a replay function giving fn's (static) output."""
    s = torch.cuda.Stream(dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(dev).wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        out = fn()

    def replay():
        gr.replay()
        return out
    return replay


def run_decode(args, g, mode, dev):
    rec = base_rec("target_decode", g["name"], mode, dev)
    rec.update(ctx=args.ctx, verify=args.verify, shapes={k: v for k, v in g.items() if k != "name"})
    reset_mem(dev)
    try:
        torch.manual_seed(args.seed)
        dt = torch.bfloat16
        Tv = max(args.verify, 1)
        cap = -(-(args.ctx + Tv + 1) // 128) * 128
        model = Target(g, cap, dev, dt)
        n_all = sum(p.numel() for p in model.parameters())  # a tied head counts once
        n_read = n_all - (0 if g["tied"] else model.embed.numel())  # one embedding row is read
        rec.update(params=n_all, weight_bytes=2 * n_all, weight_floor_ms=2 * n_all / HBM_BPS * 1e3,
                   read_floor_ms=2 * n_read / HBM_BPS * 1e3, cache_len=cap,
                   floor_formula="weight_floor_ms: bf16 bytes of all parameters / 4.24e12 B/s (as "
                   "decode_bench); read_floor_ms: without the untied input embedding")
        pos = torch.tensor(args.ctx, device=dev)
        ids1 = torch.randint(0, g["vocab"], (1,), device=dev)
        idsv = torch.randint(0, g["vocab"], (Tv,), device=dev)
        steps = max(args.steps, 50)
        with torch.no_grad():
            if mode == "eager":
                fns = [lambda: model(ids1, pos), lambda: model(idsv, pos)]
            elif mode == "graph":
                if dev.type != "cuda":
                    raise RuntimeError("graph mode needs a CUDA device")
                fns = [capture_graph(lambda: model(ids1, pos), dev),
                       capture_graph(lambda: model(idsv, pos), dev)]
            elif mode == "compiled":
                if not HAS_COMPILE:
                    raise RuntimeError("torch.compile is not available in this torch")
                errors, fns = [], None
                for cmode in ("reduce-overhead", "max-autotune-no-cudagraphs"):
                    try:
                        torch._dynamo.reset()
                        cf = torch.compile(model, mode=cmode, dynamic=False)

                        def f1(cf=cf):
                            mark_step()
                            return cf(ids1, pos)

                        def fv(cf=cf):
                            mark_step()
                            return cf(idsv, pos)
                        t0 = time.perf_counter()
                        for f in (f1, fv) if args.verify > 0 else (f1,):
                            for _ in range(3):  # compile, cudagraph warm-up, record
                                f()
                        sync(dev)
                        rec["compile_s"], rec["compile_mode"] = time.perf_counter() - t0, cmode
                        fns = [f1, fv]
                        break
                    except Exception as e:
                        errors.append(f"{cmode}: {err_str(e)}")
                        log(f"compile mode {cmode} failed: {err_str(e)[:400]}")
                if errors:
                    rec["compile_errors"] = errors
                if fns is None:
                    raise RuntimeError("torch.compile failed: " + " | ".join(errors))
                rec.update(dynamo_counters())
            else:
                raise ValueError(f"mode {mode} is not a decode mode")
            # A step ends with the greedy ids on the host (a sync), as the engine needs them.
            warm = max(5, args.warmup)
            rec.update(stats(time_steps(lambda: fns[0]().cpu(), dev, warm, steps)))
            rec.update(decode_ms=rec["ms"], tokens_per_s=1e3 / rec["ms"])
            if args.verify > 0:
                tv = time_steps(lambda: fns[1]().cpu(), dev, warm, steps)
                rec.update({f"verify{args.verify}_ms": statistics.median(tv),
                            f"verify{args.verify}_ms_min": min(tv),
                            "verify_over_decode": statistics.median(tv) / rec["ms"]})
            out = model.logits(idsv, pos)
            rec["logits_finite"] = bool(torch.isfinite(out.float()).all())
        rec["peak_mem_gib"] = peak_gib(dev)
    except Exception as e:
        rec["error"] = err_str(e)
        log(traceback.format_exc())
    emit(rec)
    return rec["error"] is None


# ---------------------------------------------------------------------------------------- ops
def run_ops(args, compiled, dev):
    q, mode = args.quick, "eager"
    ok = True
    dt = torch.bfloat16

    def one(case, fn, value_of, unit, extra=None, warm=3, steps=None, optional=False):
        nonlocal ok
        rec = base_rec("ops", case, mode, dev)
        try:
            ts = time_steps(fn, dev, warm, steps or max(args.steps, 10))
            rec.update(stats(ts))
            rec.update(value=value_of(rec["ms"] / 1e3), unit=unit, **(extra or {}))
        except Exception as e:
            rec["error"] = err_str(e)
            ok = ok and optional
        emit(rec)

    reset_mem(dev)
    n = 1024 if q else 8192
    a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
    one(f"gemm_{n}", lambda: a @ b, lambda s: 2 * n ** 3 / s / 1e12, "TFLOP/s")
    a = b = None  # free (closures above hold the names)
    S, H, Dh = (512, 4, 64) if q else (4096, 32, 128)
    qkv = [torch.randn(1, H, S, Dh, device=dev, dtype=dt, requires_grad=True) for _ in range(3)]
    do = torch.randn(1, H, S, Dh, device=dev, dtype=dt)
    fwd_flops = 4 * S * S * H * Dh / 2  # causal half

    def fb():
        for t in qkv:
            t.grad = None
        F.scaled_dot_product_attention(*qkv, is_causal=True).backward(do)
    backends = [("auto", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends += [(nm.lower(), getattr(SDPBackend, nm)) for nm in
                     ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION") if hasattr(SDPBackend, nm)]
    except Exception:
        pass
    if HAS_SDPA:
        for name, be in backends:
            cm = (lambda: sdpa_kernel(be)) if be is not None else contextlib.nullcontext
            with cm():
                with torch.no_grad():
                    one(f"sdpa_fwd_{name}", lambda: F.scaled_dot_product_attention(*qkv, is_causal=True),
                        lambda s: fwd_flops / s / 1e12, "TFLOP/s", dict(S=S, H=H, Dh=Dh),
                        optional=be is not None)
                one(f"sdpa_fwdbwd_{name}", fb, lambda s: 3.5 * fwd_flops / s / 1e12, "TFLOP/s",
                    dict(S=S, H=H, Dh=Dh), optional=be is not None)
    qkv = do = None
    rows, d = (1024, 256) if q else (16384, 4096)
    x, w = torch.randn(rows, d, device=dev, dtype=dt), 1 + 0.05 * torch.randn(d, device=dev, dtype=dt)
    one("rmsnorm", lambda: rms(x, w), lambda s: 2 * rows * d * 2 / s / 1e9, "GB/s (read+write)",
        dict(rows=rows, dim=d))
    if compiled:
        mode = "compiled"
        try:
            crms = torch.compile(rms, dynamic=False)
            crms(x, w)
            one("rmsnorm", lambda: crms(x, w), lambda s: 2 * rows * d * 2 / s / 1e9,
                "GB/s (read+write)", dict(rows=rows, dim=d), optional=True)
        except Exception as e:
            emit(dict(base_rec("ops", "rmsnorm", mode, dev), error=err_str(e)))
        mode = "eager"
    x = None
    nbytes = (16 << 20) if q else (4 << 30)
    src = torch.randint(0, 256, (nbytes,), device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    one(f"copy_{nbytes >> 20}MiB", lambda: dst.copy_(src), lambda s: 2 * nbytes / s / 1e9,
        "GB/s (read+write)")
    src = dst = None
    # DFlash block-sparse attention at the Qwen3-4B drafter geometry; effective TFLOP/s count only
    # visible (query, key) pairs: 4*Dh*H*pairs forward, 2.5x that backward.
    S, N, B, H, Hkv, Dh = (256, 8, 16, 4, 2, 64) if q else (4096, 512, 16, 32, 8, 128)
    R = N * B
    anchors = torch.randperm(S - B, device=dev)[:N].sort().values
    pairs = sum(B * (a + B) for a in anchors.tolist())
    mask = block_inputs(torch.randint(0, 100, (S,), device=dev), anchors, S, B, 0, 7.0)[5]
    addm = torch.full((R, S + R), float("-inf"), device=dev, dtype=dt).masked_fill_(mask, 0.0)
    qa = torch.randn(R, H, Dh, device=dev, dtype=dt, requires_grad=True)
    ka, va = (torch.randn(S + R, Hkv, Dh, device=dev, dtype=dt, requires_grad=True) for _ in range(2))
    doa = torch.randn(R, H * Dh, device=dev, dtype=dt)
    ext = dict(S=S, N=N, B=B, H=H, Hkv=Hkv, Dh=Dh, pairs=pairs)
    variants = [("sdpa", addm, None)]
    if HAS_FLEX and dev.type == "cuda":
        try:
            variants.append(("flex", flex_block_mask(flex_mask_mod(anchors, S, B), S, R, dev),
                             torch.compile(flex_attention, dynamic=False)))
        except Exception as e:
            emit(dict(base_rec("ops", "dflash_attn_flex", mode, dev), error=err_str(e)))
    for name, at, ff in variants:
        def fwdbwd(at=at, ff=ff):
            for t in (qa, ka, va):
                t.grad = None
            attend(qa, ka, va, at, ff).backward(doa)
        with torch.no_grad():
            one(f"dflash_attn_fwd_{name}", lambda at=at, ff=ff: attend(qa, ka, va, at, ff),
                lambda s: 4 * Dh * H * pairs / s / 1e12, "TFLOP/s", ext, optional=True)
        one(f"dflash_attn_fwdbwd_{name}", fwdbwd, lambda s: 3.5 * 4 * Dh * H * pairs / s / 1e12,
            "TFLOP/s", ext, optional=True)
    return ok


# -------------------------------------------------------------------------------------- checks
def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def ref_layer(L, x, kin, qpos, kpos, vis):
    """fp32 reference of one layer, written independently of Layer: explicit GQA attention of
    norm(x) queries over keys from kin (kin = [ctx ; norm(x)] or norm(x)), vis [Lq, Lk] bool."""
    f = lambda t: t.float()
    H, Hkv, Dh = L.H, L.Hkv, L.Dh
    h = rms(x, f(L.ln1))
    kin = h if kin is None else torch.cat([kin, h])
    iv = 1.0 / 1e6 ** (torch.arange(0, Dh, 2, device=x.device).float() / Dh)
    q = rope(rms(F.linear(h, f(L.wq)).view(-1, H, Dh), f(L.qn)), rope_tables(qpos, iv, torch.float32))
    k = rope(rms(F.linear(kin, f(L.wk)).view(-1, Hkv, Dh), f(L.kn)), rope_tables(kpos, iv, torch.float32))
    v = F.linear(kin, f(L.wv)).view(-1, Hkv, Dh)
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    sc = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(Dh)
    pr = sc.masked_fill(~vis, float("-inf")).softmax(-1)
    x = x + F.linear(torch.einsum("hqk,khd->qhd", pr, v).reshape(x.shape[0], H * Dh), f(L.wo))
    h2 = rms(x, f(L.ln2))
    return x + F.linear(F.silu(F.linear(h2, f(L.wg))) * F.linear(h2, f(L.wu)), f(L.wd))


def run_check(args, dev):
    ok = True

    def report(case, err, tol):
        nonlocal ok
        good = math.isfinite(err) and err <= tol
        ok &= good
        emit(dict(base_rec("check", case, "eager", dev), err=err, tol=tol, ok=good))

    torch.manual_seed(args.seed)
    g = dict(DRAFTER_QUICK, name="quick", ce_chunk=48)
    S, N, B, H, Hkv, Dh, V = (g[k] for k in ("seq", "anchors", "block", "heads", "kv_heads",
                                             "head_dim", "vocab"))
    R, dt = N * B, torch.bfloat16
    tokens = torch.randint(0, V, (S,), device=dev)
    anchors = torch.randperm(S - B, device=dev)[:N].sort().values
    anc = anchors.tolist()
    ids, q_pos, kv_pos, labels, wn, mask = block_inputs(tokens, anchors, S, B, MASK_ID % V, 7.0)
    ref = torch.zeros(R, S + R, dtype=torch.bool)
    for n, a in enumerate(anc):
        ref[n * B:(n + 1) * B, :a] = True
        ref[n * B:(n + 1) * B, S + n * B:S + (n + 1) * B] = True
    report("block_mask_mismatches", float((mask.cpu() != ref).sum()), 0)
    lab_ref = [tokens[a + k].item() if k > 0 else 0 for a in anc for k in range(B)]
    ids_ref = [tokens[a].item() if k == 0 else MASK_ID % V for a in anc for k in range(B)]
    bad = (labels.cpu() != torch.tensor(lab_ref)).sum() + (ids.cpu() != torch.tensor(ids_ref)).sum()
    bad += (q_pos.cpu() != torch.tensor([a + k for a in anc for k in range(B)])).sum()
    report("block_ids_labels_positions_mismatches", float(bad), 0)
    w_ref = torch.tensor([math.exp(-(k - 1) / 7.0) if k else 0.0 for a in anc for k in range(B)])
    report("loss_weights", rel(wn, w_ref / w_ref.sum()), 1e-6)
    # RoPE (NeoX halves) against the complex-number rotation z * exp(i * pos * inv_freq).
    xr, pr = torch.randn(5, 3, 64, device=dev), torch.randint(0, 4000, (5,), device=dev)
    ivr = inv_freq_of(64, dev)
    z = torch.complex(xr[..., :32].double(), xr[..., 32:].double()) * torch.polar(
        torch.ones(5, 1, 32, dtype=torch.float64, device=dev), (pr.double()[:, None] * ivr.double())[:, None, :])
    report("rope_vs_complex", rel(rope(xr, rope_tables(pr, ivr, torch.float32)),
                                  torch.cat([z.real, z.imag], -1)), 1e-4)
    # Attention alone against a per-block loop in float64.
    model = Drafter(g, dev, dt, "sdpa")
    q = torch.randn(R, H, Dh, device=dev, dtype=dt)
    k, v = (torch.randn(S + R, Hkv, Dh, device=dev, dtype=dt) for _ in range(2))
    addm = torch.zeros(R, S + R, device=dev, dtype=dt).masked_fill_(~mask, float("-inf"))
    out = model.attend(q, k, v, addm).float().view(R, H, Dh)
    exp = torch.empty(R, H, Dh, dtype=torch.float64)
    for n, a in enumerate(anc):
        idx = torch.cat([torch.arange(a), torch.arange(S + n * B, S + (n + 1) * B)]).to(dev)
        for h in range(H):
            qq = q[n * B:(n + 1) * B, h].double()
            kk, vv = k[idx, h // (H // Hkv)].double(), v[idx, h // (H // Hkv)].double()
            exp[n * B:(n + 1) * B, h] = (((qq @ kk.T) / math.sqrt(Dh)).softmax(-1) @ vv).cpu()
    report("attention_sdpa_vs_loop", rel(out, exp), 2e-2)
    if HAS_FLEX and dev.type == "cuda":
        try:
            model.attn_kind, model.flex_fn = "flex", torch.compile(flex_attention, dynamic=False)
            bm = flex_block_mask(flex_mask_mod(anchors, S, B), S, R, dev)
            report("attention_flex_vs_loop", rel(model.attend(q, k, v, bm).float().view(R, H, Dh), exp),
                   2e-2)
        except Exception as e:
            emit(dict(base_rec("check", "attention_flex_vs_loop", "eager", dev), error=err_str(e)))
            ok = False
        model.attn_kind = "sdpa"
    # Chunked LM-head CE (loss and dh) against autograd through full float64 logits.
    h = torch.randn(R, g["hidden"], device=dev, dtype=dt, requires_grad=True)
    loss = model.loss(h, labels, wn)
    loss.backward()
    h64 = h.detach().double().requires_grad_(True)
    lref = (F.cross_entropy(h64 @ model.lm_head.double().T, labels, reduction="none") * wn.double()).sum()
    lref.backward()
    report("linear_ce_loss", abs(float(loss) - float(lref)) / abs(float(lref)), 1e-2)
    report("linear_ce_dh", rel(h.grad, h64.grad), 2e-2)
    # Training forward == drafting each block from its context (spec 1.3, fp32, no mask tensor).
    feats = torch.randn(S, g["features"] * g["hidden"], device=dev, dtype=dt)
    with torch.no_grad():
        hb = model.body(feats, ids, q_pos, kv_pos, addm).float()
        ctx = rms(F.linear(feats.float(), model.fc.float()), model.hidden_norm.float())
        hr = torch.empty_like(hb)
        for n, a in enumerate(anc):
            x = F.embedding(ids[n * B:(n + 1) * B], model.embed).float()
            qp = torch.arange(a, a + B, device=dev)
            kp = torch.cat([torch.arange(a, device=dev), qp])
            for L in model.layers:
                x = ref_layer(L, x, ctx[:a], qp, kp, torch.ones(B, a + B, dtype=torch.bool, device=dev))
            hr[n * B:(n + 1) * B] = rms(x, model.norm.float())
    report("drafter_forward_vs_per_block_drafting", rel(hb, hr), 3e-2)
    lo = model(feats, ids, q_pos, kv_pos, addm, labels, wn)
    lo.backward()
    gfin = all(p.grad is not None and bool(torch.isfinite(p.grad).all()) and bool(p.grad.abs().sum() > 0)
               for p in model.parameters())
    report("drafter_loss_vs_lnV_grads_finite", abs(float(lo) - math.log(V)) / math.log(V)
           if gfin else float("nan"), 0.1)
    # Decode: prefill + verify, and token-by-token decode, against a cache-free fp32 forward.
    gd = dict(DECODE_QUICK, name="quick")
    T, c0 = 16, 48
    tgt = Target(gd, 128, dev, dt)
    seq = torch.randint(0, gd["vocab"], (c0 + T,), device=dev)
    with torch.no_grad():
        x = F.embedding(seq, tgt.embed).float()
        pos = torch.arange(c0 + T, device=dev)
        causal = torch.ones(c0 + T, c0 + T, dtype=torch.bool, device=dev).tril()
        for L in tgt.layers:
            x = ref_layer(L, x, None, pos, pos, causal)
        lref = F.linear(rms(x, tgt.norm.float()), tgt.lm_head.float())[c0:]
        tgt.logits(seq[:c0], torch.tensor(0, device=dev))
        lv = tgt.logits(seq[c0:], torch.tensor(c0, device=dev)).float()
        ls = torch.cat([tgt.logits(seq[c0 + i:c0 + i + 1], torch.tensor(c0 + i, device=dev)).float()
                        for i in range(T)])
    report("decode_verify_vs_reference", rel(lv, lref), 3e-2)
    report("decode_stepwise_vs_reference", rel(ls, lref), 3e-2)
    return ok


# ---------------------------------------------------------------------------------------- main
def summary(path):
    """Table of the latest run in a .jsonl file (the lines after its last "meta" record)."""
    with open(path) as f:
        lines = [ln.strip() for ln in f if ln.startswith("{")]
    starts = [i for i, ln in enumerate(lines) if '"bench": "meta"' in ln]
    for line in lines[starts[-1] if starts else 0:]:
        try:
            r = json.loads(line)
            print(table_line(r) if r.get("bench") != "meta" else
                  f"# {r.get('date')} commit {r.get('commit')} {r.get('gpu')}")
        except Exception:
            print(line[:200])
    return True


def drafter_geoms(args):
    if args.quick:
        names = ["quick"]
    elif args.preset == "all":
        names = list(DRAFTER_PRESETS)
    else:
        names = (args.preset or "d1024").split(",")
    out = []
    for nm in names:
        g = dict(DRAFTER_DEFAULTS)
        g.update(DRAFTER_QUICK if nm == "quick" else DRAFTER_PRESETS[nm])
        for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "inter", "vocab", "seq",
                  "anchors", "block", "features"):
            if getattr(args, k, None) is not None:
                g[k] = getattr(args, k)
        g["ce_chunk"] = args.ce_chunk
        g["name"] = nm
        out.append(g)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["drafter", "decode", "ops", "check", "summary"])
    p.add_argument("file", nargs="?", help="summary: the .jsonl file")
    p.add_argument("--mode", default="eager", help="eager | compiled | graph (decode), comma list")
    p.add_argument("--preset", help="drafter: d1024 d2048 d4096 qwen3_4b qwen3_8b all; "
                                    "decode: qwen3_0_6b qwen3_8b all (comma lists work)")
    p.add_argument("--quick", action="store_true", help="tiny shapes, seconds (smoke test)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "flex"], help="drafter attention")
    p.add_argument("--flex", action="store_true", help="drafter: also run the flex variant")
    p.add_argument("--gamma", type=float, default=7.0)
    p.add_argument("--ce-chunk", type=int, default=4096, help="LM-head CE rows per chunk")
    for k, t in (("hidden", int), ("layers", int), ("heads", int), ("kv-heads", int),
                 ("head-dim", int), ("inter", int), ("vocab", int), ("seq", int),
                 ("anchors", int), ("block", int), ("features", int)):
        p.add_argument("--" + k, type=t)
    p.add_argument("--ctx", type=int, default=1024, help="decode: tokens already in the cache")
    p.add_argument("--verify", type=int, default=16, help="decode: verify rows (0: none)")
    args = p.parse_args()
    if args.cmd == "summary":
        return 0 if summary(args.file) else 1
    dev = torch.device(args.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", 0)  # set_device and the memory counters want an index
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    log(f"torch {torch.__version__} on {dev} "
        f"({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}); "
        f"sdpa={HAS_SDPA} rms_norm={HAS_RMS} compile={HAS_COMPILE} flex={HAS_FLEX}")
    modes = args.mode.split(",")
    ok = True
    if args.cmd == "check":
        ok = run_check(args, dev)
    elif args.cmd == "ops":  # eager ops; --mode compiled adds a torch.compile'd RMSNorm
        ok = run_ops(args, "compiled" in modes, dev)
    elif args.cmd == "drafter":
        attns = [args.attn] + (["flex"] if args.flex and args.attn != "flex" else [])
        for g in drafter_geoms(args):
            for m in modes:
                for a in attns:
                    args.attn = a
                    ok &= run_drafter(args, g, m, dev)
    elif args.cmd == "decode":
        if args.quick:
            gs = [dict(DECODE_QUICK, name="quick")]
            args.ctx = min(args.ctx, 64)
        else:
            names = list(DECODE_PRESETS) if args.preset in (None, "all") else args.preset.split(",")
            gs = [dict(DECODE_PRESETS[n], name=n) for n in names]
        for g in gs:
            for m in modes:
                ok &= run_decode(args, g, m, dev)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
