"""flash-linear-attention's Triton `chunk_gated_delta_rule` at the shapes of bench/cuda/gdn_bench.cpp
(run on the GPU machine, in the same call as gdn_bench, so the two tables compare).

One linear-attention layer's chunked delta rule of T tokens: Qwen3.5-27B (16 key heads, 48 value
heads) and Qwen3.5-35B-A3B (16 / 32), head dims 128, the state starting at zero and written back
(what a prefill or the online step's target forward does), q and k already L2-normalised (the
engine normalises them in its own prepare op, so neither side's timing includes it). fla takes the
grouped value heads as they are (its GVA: HV a multiple of H), so no head is repeated. Both input
precisions are timed: bf16 (what serving engines feed it) and f32 (what dflash's kernel reads).
The FLOP count is gdn_bench's: T Hv (7 C d + 6 d^2), C = 64, so the TFLOP/s columns compare.

fla is not installed on the GPU machine and PyPI is out of reach from it: point PYTHONPATH at a
source checkout of flash-linear-attention (pure Python + Triton; it needs only torch and the
triton that torch ships with). The version used is printed.

usage: PYTHONPATH=FLA_SRC python3 tools/reference/gdn_fla_bench.py [--tokens 3072,8192] [--steps 20]
prints a table on stderr and one JSON object per case on stdout.
"""
import argparse
import json
import sys

import torch

MODELS = [("qwen3.5-27b", 16, 48), ("qwen3.5-35b-a3b", 16, 32)]
DIM = 128
CHUNK = 64
DTYPES = {"bf16": (torch.bfloat16,), "f32": (torch.float32,), "both": (torch.bfloat16, torch.float32)}


def time_ms(fn, steps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="3072,8192")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtypes", choices=sorted(DTYPES), default="bf16")
    args = ap.parse_args()
    import fla
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    print(f"flash-linear-attention {fla.__version__} from {fla.__file__}, torch {torch.__version__}",
          file=sys.stderr)
    print(f"{'model':16s} {'dtype':6s} {'tokens':>6s} {'ms':>10s} {'TFLOP/s':>9s}", file=sys.stderr)
    gen = torch.Generator(device="cuda").manual_seed(7)
    for name, hk, hv in MODELS:
        for T in (int(t) for t in args.tokens.split(",")):
            for dtype in DTYPES[args.dtypes]:
                def rnd(*shape):
                    return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float32)

                q = torch.nn.functional.normalize(rnd(1, T, hk, DIM), dim=-1).to(dtype)
                k = torch.nn.functional.normalize(rnd(1, T, hk, DIM), dim=-1).to(dtype)
                v = rnd(1, T, hv, DIM).to(dtype)
                # log of the decay in (0, 1] as the models' -exp(A) softplus(a + dt_bias) gives it
                g = (-torch.nn.functional.softplus(rnd(1, T, hv)) * 0.5).to(dtype)
                beta = torch.sigmoid(rnd(1, T, hv)).to(dtype)
                h0 = torch.zeros(1, hv, DIM, DIM, device="cuda", dtype=torch.float32)

                def run():
                    return chunk_gated_delta_rule(q, k, v, g, beta, scale=DIM ** -0.5,
                                                  initial_state=h0, output_final_state=True)

                ms = time_ms(run, args.steps)
                flops = T * hv * (7.0 * CHUNK * DIM + 6.0 * DIM * DIM)
                rec = {"bench": "gdn_fla", "model": name, "dtype": str(dtype).split(".")[-1],
                       "tokens": T, "Hk": hk, "Hv": hv, "ms": ms, "tflops": flops / ms / 1e9,
                       "fla_version": fla.__version__}
                print(json.dumps(rec), flush=True)
                print(f"{name:16s} {rec['dtype']:6s} {T:6d} {ms:10.4f} {rec['tflops']:9.2f}",
                      file=sys.stderr)


if __name__ == "__main__":
    main()
