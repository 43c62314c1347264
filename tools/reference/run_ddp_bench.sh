#!/usr/bin/env bash
# PyTorch DDP scaling reference on the GPU machine: tools/reference/ddp_bench.py under torchrun for
# N = 1 .. the visible GPUs, one process per GPU, then a scaling table (Markdown) on stdout.
#   PRESET=d2048 MODE=eager OUT=gpu-out bash tools/reference/run_ddp_bench.sh
# PRESET (default d2048; a comma list runs each in every call), MODE (eager | compiled), NGPUS (the
# largest N; default: torch's visible device count, else nvidia-smi -L), DDP_BENCH_ARGS (appended to
# every call, e.g. '--steps 30 --warmup 10'), DDP_BENCH_TIMEOUT (seconds per N, default 300),
# PYTHON (default python3; torchrun is run as "$PYTHON -m torch.distributed.run" when that python
# has torch, else the torchrun on PATH). Appends a meta line and one JSON line per case to
# $OUT/ddp_bench.jsonl (OUT defaults to .), logs to $OUT/ddp_bench.txt. Exit 1 if any N failed.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-.}
PY=${PYTHON:-python3}
PRESET=${PRESET:-d2048}
MODE=${MODE:-eager}
LIMIT=${DDP_BENCH_TIMEOUT:-300}
EXTRA=${DDP_BENCH_ARGS:-}
# NVLink multicast must stay off on these machines (NCCL, PyTorch's symmetric memory, NVSHMEM).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
JSONL=$OUT/ddp_bench.jsonl
TXT=$OUT/ddp_bench.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
    LAUNCH=("$PY" -m torch.distributed.run)
elif command -v torchrun >/dev/null 2>&1; then
    LAUNCH=(torchrun)
else
    echo "run_ddp_bench: neither '$PY -m torch.distributed.run' nor torchrun works" >&2
    exit 1
fi
G=${NGPUS:-$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null)}
if [ -z "$G" ] || [ "$G" = 0 ]; then
    G=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
if ! [ "$G" -ge 1 ] 2>/dev/null; then
    echo "run_ddp_bench: no GPU visible (torch and nvidia-smi -L found none)" >&2
    exit 1
fi

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
printf '{"bench": "meta", "case": "run_ddp_bench", "date": "%s", "commit": "%s", "gpu": "%s", "gpus": %s, "preset": "%s", "mode": "%s"}\n' \
    "$(date -u +%FT%TZ)" "$commit" "$gpu" "$G" "$PRESET" "$MODE" >> "$JSONL"
echo "=== ddp_bench $(date -u +%FT%TZ) commit $commit gpu '$gpu' x $G, preset $PRESET, mode $MODE" | tee -a "$TXT"

failed=0
for N in $(seq 1 "$G"); do
    echo "--- N=$N: ${LAUNCH[*]} --standalone --nproc-per-node $N ddp_bench.py --preset $PRESET --mode $MODE $EXTRA (timeout ${LIMIT}s)" >> "$TXT"
    rc=0
    t0=$(date +%s)
    # shellcheck disable=SC2086  # EXTRA is split into arguments on purpose
    timeout -k 20 "$LIMIT" "${LAUNCH[@]}" --standalone --nproc-per-node "$N" "$HERE/ddp_bench.py" \
        --preset "$PRESET" --mode "$MODE" $EXTRA > "$TMP/out" 2> "$TMP/err" || rc=$?
    grep '^{' "$TMP/out" >> "$TMP/run.jsonl"
    grep '^{' "$TMP/out" >> "$JSONL"
    grep -v '^{' "$TMP/out" >> "$TXT"
    cat "$TMP/err" >> "$TXT"
    grep -E '^ddp ' "$TMP/err"
    if [ "$rc" -ne 0 ]; then
        failed=1
        why="exit $rc"
        { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && why="timeout after ${LIMIT}s"
        printf '{"bench": "ddp_drafter_train_step", "case": "%s", "preset": "%s", "world": %s, "mode": "%s", "impl": "torch-ddp", "error": "%s (see ddp_bench.txt)"}\n' \
            "$PRESET" "$PRESET" "$N" "$MODE" "$why" | tee -a "$JSONL" >> "$TMP/run.jsonl"
        echo "--- N=$N: $why:"
        grep -E 'FAILED|Error|error' "$TMP/err" | tail -5
    fi
    echo "--- N=$N: rc $rc, $(( $(date +%s) - t0 ))s" >> "$TXT"
done

touch "$TMP/run.jsonl"
"$PY" - "$TMP/run.jsonl" <<'EOF' | tee -a "$TXT"
import json, sys
recs = [json.loads(ln) for ln in open(sys.argv[1]) if ln.startswith("{")]
groups = {}
for r in recs:
    groups.setdefault((r.get("preset"), r.get("mode")), []).append(r)
for (preset, mode), rs in groups.items():
    ok1 = [r for r in rs if r.get("world") == 1 and not r.get("error")]
    base = ok1[0]["tokens_per_s"] if ok1 else None
    dev = next((r.get("device") for r in rs if r.get("device")), "?")
    nccl = next((r.get("nccl") for r in rs if r.get("nccl")), "?")
    print(f"\nPyTorch DDP, drafter {preset}, {mode}, {dev}, torch {rs[0].get('torch', '?')}, NCCL {nccl}"
          " (efficiency = tokens/s / (N x the 1-GPU tokens/s); busbw of a gradient-sized all-reduce)")
    print("| N | step ms (median [min, max]) | tokens/s | tokens/s per GPU | efficiency "
          "| busbw fp32 GB/s | busbw bf16 GB/s |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rs, key=lambda r: r.get("world", 0)):
        if r.get("error"):
            print(f"| {r.get('world')} | ERROR: {str(r['error']).splitlines()[0][:120]} | | | | | |")
            continue
        eff = f"{r['tokens_per_s'] / (r['world'] * base):.3f}" if base else "n/a"
        bw = lambda k: "n/a" if r.get(k) is None else f"{r[k]:.1f}"  # noqa: E731
        print(f"| {r['world']} | {r['step_ms_median']:.2f} [{r['step_ms_min']:.2f}, {r['step_ms_max']:.2f}] "
              f"| {r['tokens_per_s'] / 1e3:.1f}K | {r['per_gpu']['tokens_per_s'] / 1e3:.1f}K | {eff} "
              f"| {bw('busbw_GBps')} | {bw('busbw_bf16_GBps')} |")
EOF
echo "ddp reference: JSON in $JSONL, logs in $TXT"
exit "$failed"
