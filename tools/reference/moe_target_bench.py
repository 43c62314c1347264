"""transformers' side of bench/cuda/moe_target_bench.cpp (run on the GPU machine, same call).

Random bf16 Qwen3-30B-A3B- and gpt-oss-20b-shaped targets built with transformers 5 on the GPU:
  forward  the online training step's target part: the base model over 3072 tokens with
           output_hidden_states (five of them kept), no LM head
  decode   bs=1 decode steps and 16-token verify steps with a DynamicCache that starts at 1024
           tokens (it grows by the steps' tokens; no crop, which sliding-window layers refuse)
Each case prints one JSON line (bench moe_target_forward / moe_target_decode, impl "transformers")
and a table line on stderr. The experts run with transformers' default experts implementation and,
when that is not grouped_mm, with grouped_mm too.

usage: python3 tools/reference/moe_target_bench.py [--preset qwen3_30b_a3b|gpt_oss_20b|all]
"""
import argparse
import json
import sys
import time

import torch
import transformers


def qwen3_30b_a3b():
    return transformers.Qwen3MoeConfig(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=False), transformers.Qwen3MoeForCausalLM, [1, 12, 23, 34, 45]


def gpt_oss_20b():
    rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
            "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False}
    kw = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
              num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
              num_experts_per_tok=4, sliding_window=128,
              layer_types=["sliding_attention", "full_attention"] * 12, attention_bias=True,
              rms_norm_eps=1e-5, swiglu_limit=7.0, max_position_embeddings=131072,
              tie_word_embeddings=False)
    try:
        cfg = transformers.GptOssConfig(rope_parameters=rope, **kw)
    except TypeError:
        cfg = transformers.GptOssConfig(rope_scaling=rope, rope_theta=150000.0, **kw)
    return cfg, transformers.GptOssForCausalLM, [1, 6, 11, 16, 21]


PRESETS = {"qwen3_30b_a3b": qwen3_30b_a3b, "gpt_oss_20b": gpt_oss_20b}


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


def run(name, seq, ctx, steps):
    cfg, cls, capture = PRESETS[name]()
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        model = cls._from_config(cfg, torch_dtype=torch.bfloat16).eval()
    with torch.no_grad():  # transformers' init may leave some expert tensors uninitialised
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.fill_(1.0)
            else:
                p.normal_(0, 0.02)
    print(f"{name}: built in {time.time() - t0:.0f} s, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B params, attention "
          f"{model.config._attn_implementation}", file=sys.stderr)
    impls = [getattr(model.config, "_experts_implementation", None)]
    if impls[0] not in (None, "grouped_mm") and hasattr(model, "set_experts_implementation"):
        impls.append("grouped_mm")
    g = torch.Generator(device="cuda").manual_seed(1)
    for impl in impls:
        if impl is not None and hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation(impl)
        base = dict(impl="transformers", preset=name, experts=impl,
                    attention=model.config._attn_implementation,
                    transformers=transformers.__version__, torch=torch.__version__)
        ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda", generator=g)

        def fwd():
            with torch.no_grad():
                out = model.model(input_ids=ids, output_hidden_states=True, use_cache=False)
                return [out.hidden_states[i + 1] for i in capture]

        try:
            torch.cuda.reset_peak_memory_stats()
            ms = median_ms(fwd, 2, steps)
            peak = torch.cuda.max_memory_allocated() / 1e9
            print(f"{name:14s} forward {seq} tok [{impl}] {ms:8.2f} ms  peak {peak:.1f} GB",
                  file=sys.stderr)
            emit(dict(base, bench="moe_target_forward", seq=seq, ms=ms, peak_gb=peak))
        except Exception as e:  # noqa: BLE001 - recorded, the other cases still run
            emit(dict(base, bench="moe_target_forward", seq=seq, error=f"{type(e).__name__}: {e}"))
            torch.cuda.empty_cache()
        try:
            prompt = torch.randint(0, cfg.vocab_size, (1, ctx), device="cuda", generator=g)
            with torch.no_grad():
                cache = transformers.DynamicCache(config=model.config)
                out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                tok = out.logits[:, -1:].argmax(-1)
                block = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda", generator=g)

                def step(x):
                    o = model(input_ids=x, past_key_values=cache, use_cache=True)
                    return o.logits.argmax(-1).cpu()

                dec = median_ms(lambda: step(tok), 3, steps * 3)
                ver = median_ms(lambda: step(block), 3, steps)
            print(f"{name:14s} decode ctx {ctx} [{impl}] {dec:7.3f} ms  verify16 {ver:7.3f} ms "
                  f"({ver / dec:.2f}x)", file=sys.stderr)
            emit(dict(base, bench="moe_target_decode", ctx=ctx, decode_ms=dec, verify16_ms=ver,
                      verify_over_decode=ver / dec))
        except Exception as e:  # noqa: BLE001
            emit(dict(base, bench="moe_target_decode", ctx=ctx, error=f"{type(e).__name__}: {e}"))
        torch.cuda.empty_cache()
    del model
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="all")
    ap.add_argument("--seq", type=int, default=3072)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    for name in PRESETS:
        if a.preset in ("all", name):
            run(name, a.seq, a.ctx, a.steps)


if __name__ == "__main__":
    sys.exit(main())
