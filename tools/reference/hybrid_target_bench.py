"""transformers' side of bench/cuda/hybrid_target_bench.cpp (run on the GPU machine, same call).

Random bf16 Qwen3.5-27B- and Qwen3.5-35B-A3B-shaped targets built with transformers 5 on the GPU
(Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM: every fourth layer gated full attention, head dim 256,
the others Gated DeltaNet layers). flash-linear-attention and causal-conv1d are not installed on the
GPU machine, so the delta rule and the short convolution run transformers' torch fallbacks (chunked
delta rule for the forward, the recurrent one for cached steps); each record says which ran.
  forward   the online training step's target part: the base model over 3072 and 8192 tokens with
            output_hidden_states (five of them kept), no LM head
  decode    bs=1 decode steps over a cache that starts at 1024 tokens (it grows by the steps)
  verify16  16-token steps on the same cache, accepted in full (the cache grows by 16)
  rollback  a 16-token verify rolled back to `accept` tokens: transformers' linear-attention cache
            cannot drop rows, so the cache is copied before the verify (copy.deepcopy) and the
            accepted tokens are fed again to the copy (what a transformers user has to do)
Each case prints one JSON line (bench hybrid_target_forward / hybrid_target_decode, impl
"transformers") and a table line on stderr. --layers N builds the first N layers only (as the C++
bench's --layers).

usage: python3 tools/reference/hybrid_target_bench.py [--preset qwen3_5_27b|qwen3_5_35b_a3b|all]
       [--seq 3072,8192] [--ctx 1024] [--steps 3] [--accept 7] [--layers N]
"""
import argparse
import copy
import json
import sys
import time

import torch
import transformers

ROPE = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10], "mrope_interleaved": True}


def text_kwargs(layers, hidden, heads, kv_heads, hv):
    return dict(vocab_size=248320, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=256,
                linear_num_key_heads=16, linear_num_value_heads=hv, linear_key_head_dim=128,
                linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
                max_position_embeddings=262144, tie_word_embeddings=False,
                layer_types=["full_attention" if i % 4 == 3 else "linear_attention"
                             for i in range(layers)],
                rope_parameters=dict(ROPE))


def qwen3_5_27b(layers):
    cfg = transformers.Qwen3_5TextConfig(intermediate_size=17408,
                                         **text_kwargs(layers, 5120, 24, 4, 48))
    return cfg, transformers.Qwen3_5ForCausalLM, [1, 16, 31, 46, 61]


def qwen3_5_35b_a3b(layers):
    cfg = transformers.Qwen3_5MoeTextConfig(num_experts=256, num_experts_per_tok=8,
                                            moe_intermediate_size=512,
                                            shared_expert_intermediate_size=512,
                                            **text_kwargs(layers, 2048, 16, 2, 32))
    return cfg, transformers.Qwen3_5MoeForCausalLM, [1, 10, 19, 28, 37]


PRESETS = {"qwen3_5_27b": (qwen3_5_27b, 64), "qwen3_5_35b_a3b": (qwen3_5_35b_a3b, 40)}


def median_ms(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def emit(rec):
    print(json.dumps(rec), flush=True)


def fast_path(model):
    """Whether the linear-attention layers found flash-linear-attention / causal-conv1d."""
    for layer in model.model.layers:
        mixer = getattr(layer, "linear_attn", None)
        if mixer is not None:
            mod = sys.modules.get(type(mixer).__module__)
            return bool(getattr(mod, "is_fast_path_available", False))
    return None


def run(name, seqs, ctx, steps, accept, layers):
    make, full_layers = PRESETS[name]
    n = layers if 0 < layers < full_layers else full_layers
    cfg, cls, capture = make(n)
    capture = [i for i in capture if i < n] or [n - 1]
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        model = cls._from_config(cfg, torch_dtype=torch.bfloat16).eval()
    with torch.no_grad():  # norm scales 1: the zero-centred norms' w = 0, the DeltaNet's w = 1
        for pname, p in model.named_parameters():
            if pname.endswith("linear_attn.norm.weight"):
                p.fill_(1.0)
            elif "norm" in pname:
                p.zero_()
            else:
                p.normal_(0, 0.02)
    print(f"{name}: built in {time.time() - t0:.0f} s, {n} of {full_layers} layers, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B params, attention "
          f"{model.config._attn_implementation}, fast path {fast_path(model)}", file=sys.stderr)
    base = dict(impl="transformers", preset=name, layers=n, model_layers=full_layers,
                attention=model.config._attn_implementation, fla_fast_path=fast_path(model),
                transformers=transformers.__version__, torch=torch.__version__)
    g = torch.Generator(device="cuda").manual_seed(1)
    for seq in seqs:
        ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda", generator=g)

        def fwd():
            with torch.no_grad():
                out = model.model(input_ids=ids, output_hidden_states=True, use_cache=False)
                return [out.hidden_states[i + 1] for i in capture]

        try:
            torch.cuda.reset_peak_memory_stats()
            ms = median_ms(fwd, 1, steps)
            peak = torch.cuda.max_memory_allocated() / 1e9
            print(f"{name:16s} forward {seq:5d} tok {ms:9.2f} ms  peak {peak:.1f} GB",
                  file=sys.stderr)
            emit(dict(base, bench="hybrid_target_forward", seq=seq, ms=ms, peak_gb=peak))
        except Exception as e:  # noqa: BLE001 - recorded, the other cases still run
            emit(dict(base, bench="hybrid_target_forward", seq=seq,
                      error=f"{type(e).__name__}: {e}"))
        torch.cuda.empty_cache()
    try:
        prompt = torch.randint(0, cfg.vocab_size, (1, ctx), device="cuda", generator=g)
        block = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda", generator=g)
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            state = {"cache": out.past_key_values}
            tok = out.logits[:, -1:].argmax(-1)

            def step(x):
                o = model(input_ids=x, past_key_values=state["cache"], use_cache=True)
                return o.logits.argmax(-1).cpu()

            def verify_rollback():
                kept = copy.deepcopy(state["cache"])
                step(block)
                state["cache"] = kept
                if accept > 0:
                    step(block[:, :accept])

            dec = median_ms(lambda: step(tok), 3, 3 * steps)
            ver = median_ms(lambda: step(block), 3, 3 * steps)
            rb = median_ms(verify_rollback, 3, 3 * steps)
        print(f"{name:16s} decode ctx {ctx} {dec:7.3f} ms  verify16 {ver:7.3f} ms "
              f"({ver / dec:.2f}x)  verify16 + rollback to {accept} {rb:7.3f} ms", file=sys.stderr)
        emit(dict(base, bench="hybrid_target_decode", ctx=ctx, decode_ms=dec, verify16_ms=ver,
                  accepted=accept, verify16_rollback_ms=rb, verify_over_decode=ver / dec))
    except Exception as e:  # noqa: BLE001
        emit(dict(base, bench="hybrid_target_decode", ctx=ctx, error=f"{type(e).__name__}: {e}"))
    del model
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="all")
    ap.add_argument("--seq", default="3072,8192")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--accept", type=int, default=7)
    ap.add_argument("--layers", type=int, default=0)
    a = ap.parse_args()
    seqs = [int(s) for s in a.seq.split(",") if s]
    for name in PRESETS:
        if a.preset in ("all", name):
            run(name, seqs, a.ctx, a.steps, a.accept, a.layers)


if __name__ == "__main__":
    sys.exit(main())
