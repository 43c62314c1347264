#!/usr/bin/env python3
"""PyTorch DDP reference for dflash.cpp's data-parallel drafter training (issue 11's scaling table).

    torchrun --standalone --nproc-per-node N tools/reference/ddp_bench.py [--preset d2048] [--mode eager]
    tools/reference/run_ddp_bench.sh     # N = 1..GPUs, JSON to $OUT/ddp_bench.jsonl, scaling table

One process per GPU (LOCAL_RANK picks it), NCCL (gloo with --device cpu; --quick is a tiny shape for
a CPU smoke test). NCCL_NVLS_ENABLE=0 (NVLink multicast off) is set before the process group starts
unless already set. Without torchrun's variables it runs as a world of one.

What is measured, per --preset (d1024 d2048 d4096 qwen3_4b qwen3_8b, comma lists, all):
- The drafter training step of `torch_bench.py drafter`, imported from it, not rewritten: the same
  model, presets and FLOP formula, bf16 weights with fp32 masters, global-norm clipping (1.0) and
  AdamW(fused=True), the per-step input preparation inside the step. Every rank has its own random
  inputs of the same shape (rank 0: torch_bench's stream after the weights; rank r > 0: seeded with
  --seed + r) and the same weights (seeded alike; DDP also broadcasts rank 0's at construction).
  The drafter is wrapped in DistributedDataParallel: its gradients are averaged by NCCL all-reduces
  of buckets (default 25 MiB, --bucket-mb) overlapped with the backward pass, in the gradients'
  dtype, which is bf16 here (the weights are bf16; fp32 only in the masters, after the reduction).
  gradient_as_bucket_view=True, so the grads are zeroed in place each step rather than dropped
  (they stay views of the buckets); broadcast_buffers=False, since the frozen target embedding and
  LM head are buffers (seeded alike on every rank, and checked; broadcasting them every step would
  move ~1.2 GB).
  --mode compiled: torch.compile of the DDP module (dynamo's DDPOptimizer splits the graph at the
  bucket boundaries); should that fail, of the layers alone (Drafter.body) inside DDP's forward
  (compile_scope and compile_errors say which).
- Timing: --warmup full steps (forward, backward with DDP's all-reduces, optimizer; the first is
  timed on the host: first_step_s or compile_s), a barrier, then --steps steps, each between two
  CUDA events on rank 0 (host clock with --device cpu): median, min, max. World throughput =
  seq tokens x world / median step; draft positions = anchors x block x world / median step;
  per_gpu = those / world. TFLOP/s: torch_bench's formula summed over the ranks' own anchors.
  DDP samples its runtime stats (the host waits on its timing events) in its first 10 iterations,
  so with the default --warmup 5 the timed steps 6-10 include that (a launch gap per step);
  --warmup 10 keeps it out.
- Checks after the timed steps: the fp32 masters and the buffers agree on every rank (float64
  checksum, max and min over ranks; weights_spread must be ~0) and the loss is finite.
- All-reduce bandwidth in the same run (world > 1): torch.distributed.all_reduce (sum) of a flat
  fp32 tensor with as many elements as the drafter's trainable parameters (the top-level
  allreduce_* / busbw_GBps fields), the same in bf16 (the dtype DDP reduces in), and one bf16 DDP
  bucket; each 5 warm-ups, a barrier, then the median of --ar-iters calls, events around each.
  algbw = bytes / t, busbw = algbw x 2(n-1)/n (nccl-tests' definition), GB = 1e9 bytes. With
  world 1 only the step is measured (busbw n/a: null).
Output: rank 0 prints one JSON object per case on stdout (bench "ddp_drafter_train_step") and a
table line on stderr. Any failure: the failing rank prints its traceback and the process exits 1
(rank 0 also prints the case's JSON with "error"); the process group is destroyed after success.
Only torch and the standard library are needed.
"""
import argparse, datetime, inspect, json, math, os, statistics, sys, time, traceback

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench as tb  # noqa: E402

BENCH = "ddp_drafter_train_step"
DDP_DEFAULT_BUCKET_MB = 25  # DistributedDataParallel's bucket_cap_mb default (MiB)
AR_WARMUP = 5


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def nccl_version():
    try:
        v = torch.cuda.nccl.version()
        return ".".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)
    except Exception as e:
        return f"unknown ({type(e).__name__})"


def init_dist(args):
    if "RANK" not in os.environ:  # plain python: a world of one
        for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                     ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29531")):
            os.environ.setdefault(k, v)
    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    if args.device == "cpu":
        dev, backend = torch.device("cpu"), "gloo"
    else:
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available (--device cpu runs over gloo)")
        if local >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local}, but only {torch.cuda.device_count()} GPUs are visible")
        dev, backend = torch.device("cuda", local), "nccl"
        torch.cuda.set_device(dev)
    kw = dict(backend=backend, timeout=datetime.timedelta(seconds=args.timeout))
    if dev.type == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kw["device_id"] = dev  # binds the communicator to this GPU (torch >= 2.3)
    dist.init_process_group(**kw)
    if dist.get_world_size() != world or dist.get_rank() != rank:
        raise RuntimeError("process group rank/world differ from RANK/WORLD_SIZE")
    return rank, world, dev


def barrier(dev):
    if dev.type == "cuda":
        dist.barrier(device_ids=[dev.index])
    else:
        dist.barrier()


def allreduce_bw(name, numel, dtype, dev, world, iters):
    """Median time of dist.all_reduce(sum) of a flat tensor; algbw and nccl-tests' busbw."""
    buf = torch.zeros(numel, device=dev, dtype=dtype)  # zeros: the sums stay finite
    fn = lambda: dist.all_reduce(buf)  # noqa: E731
    tb.time_steps(fn, dev, AR_WARMUP, 0)
    barrier(dev)
    ts = tb.time_steps(fn, dev, 0, iters)
    nbytes = numel * buf.element_size()
    ms = statistics.median(ts)
    alg = nbytes / (ms / 1e3) / 1e9
    return dict(name=name, dtype=str(dtype).replace("torch.", ""), bytes=nbytes, ms=ms,
                ms_min=min(ts), ms_max=max(ts), iters=iters, algbw_GBps=alg,
                busbw_GBps=alg * 2 * (world - 1) / world)


def run_case(args, g, rank, world, dev):
    rec = dict(bench=BENCH, case=g["name"], preset=g["name"], impl="torch-ddp", world=world,
               mode=args.mode, attn=args.attn, torch=torch.__version__,
               nccl=nccl_version() if dev.type == "cuda" else None, backend=dist.get_backend(),
               device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
               NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE"), error=None,
               shapes={k: v for k, v in g.items() if k != "name"})
    tb.reset_mem(dev)
    try:
        if args.attn == "flex" and not tb.HAS_FLEX:
            raise RuntimeError("flex_attention does not import in this torch")
        S = g["seq"]
        c = tb.drafter_case(args, g, dev, input_seed=None if rank == 0 else args.seed + rank)
        model, prep, R = c["model"], c["prep"], c["R"]
        if args.attn == "flex":  # as torch_bench: eager = the compiled flex kernel alone
            model.flex_fn = (tb.flex_attention if args.mode == "compiled"
                             else torch.compile(tb.flex_attention, dynamic=False))
        kw = dict(gradient_as_bucket_view=True, broadcast_buffers=False)
        if args.bucket_mb is not None:
            kw["bucket_cap_mb"] = args.bucket_mb
        if dev.type == "cuda":
            kw.update(device_ids=[dev.index], output_device=dev.index)
        ddp = DDP(model, **kw)
        params = list(model.parameters())  # rank 0's values now, on every rank
        masters, opt = tb.drafter_optimizer(params, dev)  # after DDP's broadcast
        numel = sum(p.numel() for p in params)
        bucket_mb = args.bucket_mb if args.bucket_mb is not None else DDP_DEFAULT_BUCKET_MB
        rec.update(params=numel, ddp=dict(bucket_cap_mb=bucket_mb, gradient_as_bucket_view=True,
                                          broadcast_buffers=False))

        def first(fwd):
            s = tb.drafter_step(fwd, prep, params, masters, opt, keep_grads=True)
            t0 = time.perf_counter()
            s()
            tb.sync(dev)
            return s, time.perf_counter() - t0

        if args.mode == "eager":
            step, rec["first_step_s"] = first(ddp)
            warm = max(1, args.warmup) - 1
        else:
            if not tb.HAS_COMPILE:
                raise RuntimeError("torch.compile is not available in this torch")
            errors = []
            for scope in ("ddp forward+loss", "layers in ddp (loss eager)"):
                try:
                    torch._dynamo.reset()
                    if scope == "ddp forward+loss":
                        fwd = torch.compile(ddp, dynamic=False)
                    else:  # Drafter.forward (run by DDP's forward) calls the compiled body
                        model.body = torch.compile(model.body, dynamic=False)
                        fwd = ddp
                    step, rec["compile_s"] = first(fwd)
                    rec["compile_scope"] = scope
                    break
                except Exception as e:
                    errors.append(f"{scope}: {tb.err_str(e)}")
                    log(f"[rank {rank}] compile scope '{scope}' failed: {tb.err_str(e)[:400]}")
            if errors:
                rec["compile_errors"] = errors
            if "compile_scope" not in rec:
                raise RuntimeError("torch.compile failed in every scope: " + " | ".join(errors))
            warm = max(5, args.warmup) - 1
        for _ in range(warm):
            step()
        tb.sync(dev)
        barrier(dev)
        ts = tb.time_steps(step, dev, 0, args.steps)
        if args.mode == "compiled":
            rec.update(tb.dynamo_counters())
        loss = float(step())
        rec["peak_mem_gib"] = tb.peak_gib(dev)
        grads = [p.grad for p in params if p.grad is not None]
        rec["ddp"]["reduce_dtype"] = str(grads[0].dtype).replace("torch.", "") if grads else None
        with torch.no_grad():  # weights in sync, and the world's FLOPs (each rank its own anchors)
            ts64 = list(masters) + list(model.buffers())  # buffers: seeded alike, never broadcast
            cs = torch.stack([t.sum(dtype=torch.float64) for t in ts64]).sum()
            mm = torch.stack([cs, -cs])
            dist.all_reduce(mm, op=dist.ReduceOp.MAX)
            fl = torch.tensor([float(tb.drafter_flops(g, c["pairs"]))], device=dev, dtype=torch.float64)
            dist.all_reduce(fl)
        spread, cs, wflops = float(mm[0] + mm[1]), float(cs), float(fl[0])
        med = statistics.median(ts)
        sec = med / 1e3
        rec.update(loss=loss, weights_checksum=cs, weights_spread=spread, steps=len(ts),
                   warmup=warm + 1, step_ms_median=med, step_ms_min=min(ts), step_ms_max=max(ts),
                   tokens_per_s=S * world / sec, positions_per_s=R * world / sec,
                   draft_positions_per_s=R * world / sec,
                   per_gpu=dict(tokens_per_s=S / sec, positions_per_s=R / sec),
                   flops_per_step_world=wflops, flops_formula=tb.FLOPS_FORMULA,
                   tflops=wflops / sec / 1e12, mfu=wflops / sec / (tb.PEAK_FLOPS * world),
                   grad_bytes_per_step=sum(t.numel() * t.element_size() for t in grads))
        if not math.isfinite(loss):
            raise RuntimeError(f"loss is not finite ({loss})")
        if not spread <= 1e-9 * max(1.0, abs(cs)):
            raise RuntimeError(f"weights differ between ranks after the steps (checksum spread {spread})")
        ars = []
        if world > 1:
            pdt = params[0].dtype
            ars = [allreduce_bw("grads_fp32", numel, torch.float32, dev, world, args.ar_iters),
                   allreduce_bw(f"grads_{str(pdt).replace('torch.', '')}", numel, pdt, dev, world,
                                args.ar_iters),
                   allreduce_bw("one_bucket", int(bucket_mb * 2**20) // params[0].element_size(),
                                pdt, dev, world, args.ar_iters)]
        top = ars[0] if ars else {}
        rec.update(allreduce=ars, allreduce_dtype="float32", allreduce_bytes=4 * numel,
                   allreduce_ms=top.get("ms"), algbw_GBps=top.get("algbw_GBps"),
                   busbw_GBps=top.get("busbw_GBps"),
                   busbw_bf16_GBps=ars[1]["busbw_GBps"] if ars else None,
                   busbw_note=None if ars else "n/a: world 1, no all-reduce measured")
    except Exception as e:
        rec["error"] = tb.err_str(e)
        log(f"[rank {rank}] " + traceback.format_exc())
    return rec


def table_line(r):
    head = f"ddp {r['preset']:9s} world {r['world']} {r['mode']:8s}"
    if r.get("error"):
        return f"{head} ERROR {str(r['error']).splitlines()[0][:150]}"
    bw = "busbw n/a (world 1)"
    if r.get("busbw_GBps") is not None:
        bw = (f"busbw {r['busbw_GBps']:.1f} GB/s fp32, {r['busbw_bf16_GBps']:.1f} bf16 "
              f"({r['allreduce_bytes'] / 1e6:.0f} MB fp32)")
    return (f"{head} {r['step_ms_median']:8.2f} ms [{r['step_ms_min']:.2f}, {r['step_ms_max']:.2f}]  "
            f"{r['tokens_per_s'] / 1e3:8.1f}K tok/s ({r['per_gpu']['tokens_per_s'] / 1e3:.1f}K/GPU)  "
            f"{r['positions_per_s'] / 1e3:8.1f}K pos/s  {r['tflops']:6.1f} TFLOP/s  "
            f"peak {r['peak_mem_gib']:.1f} GiB  loss {r['loss']:.3f}  {bw}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="d2048", help="d1024 d2048 d4096 qwen3_4b qwen3_8b all (comma lists)")
    p.add_argument("--quick", action="store_true", help="tiny shape (CPU smoke test)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--mode", default="eager", choices=["eager", "compiled"])
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "flex"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gamma", type=float, default=7.0)
    p.add_argument("--ce-chunk", type=int, default=4096, help="LM-head CE rows per chunk")
    p.add_argument("--bucket-mb", type=float, help=f"DDP bucket_cap_mb (default {DDP_DEFAULT_BUCKET_MB})")
    p.add_argument("--ar-iters", type=int, default=20, help="timed all-reduce calls per size")
    p.add_argument("--timeout", type=int, default=600, help="process-group timeout, seconds")
    args = p.parse_args()
    if args.steps < 1 or args.ar_iters < 1:
        p.error("--steps and --ar-iters must be >= 1")
    try:
        rank, world, dev = init_dist(args)
    except Exception:
        log(f"ddp_bench: rank {os.environ.get('RANK', '?')}: process group init failed:\n"
            + traceback.format_exc())
        return 1
    if rank == 0:
        log(f"ddp_bench: torch {torch.__version__}, {dist.get_backend()} "
            f"{nccl_version() if dev.type == 'cuda' else ''}, world {world}, "
            f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}")
    for g in tb.drafter_geoms(args):
        rec = run_case(args, g, rank, world, dev)
        if rank == 0:
            print(json.dumps(rec), flush=True)
            log(table_line(rec))
        if rec["error"]:
            # A peer may be waiting inside a collective, where destroying the group could hang:
            # leave at once (torchrun then ends the other ranks).
            log(f"ddp_bench: FAILED on rank {rank} ({g['name']}): {rec['error'].splitlines()[0][:300]}")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
    barrier(dev)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
