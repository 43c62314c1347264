#!/usr/bin/env bash
# PyTorch reference benchmarks on the GPU machine, every case in its own process with a timeout.
#   bash tools/reference/run_gpu_bench.sh
# Appends JSON lines to $OUT/torch_bench.jsonl and the human tables and logs to $OUT/torch_bench.txt;
# the console gets one line per result (checks condensed to one line), so that it fits beside the
# C++ results in scripts/test-gpu.sh (full table afterwards: torch_bench.py summary FILE.jsonl).
# Cases run in priority order (check; drafter d1024/d2048/qwen3_4b eager and compiled; decode
# 0.6B/8B eager+graph and compiled; ops; then the rest); once the time budget
# TORCH_BENCH_BUDGET (seconds, default 360) is spent, the remaining cases are skipped and recorded
# as such. TORCH_BENCH_ONLY='regex' keeps only the cases whose name matches (grep -E);
# TORCH_BENCH_ARGS is appended to every call (e.g. '--quick --device cpu' for a smoke test).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
PY=${PYTHON:-python3}
BUDGET=${TORCH_BENCH_BUDGET:-360}
ONLY=${TORCH_BENCH_ONLY:-.}
EXTRA=${TORCH_BENCH_ARGS:-}
mkdir -p "$OUT"
JSONL=$OUT/torch_bench.jsonl
TXT=$OUT/torch_bench.txt
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
# Inductor/Triton cache under a git-ignored build folder: a later call on the same (warm) machine
# reuses compiled kernels, so compile_s drops; step times are unaffected.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$ROOT/build-torchinductor}
START=$(date +%s)
SKIPPED=""
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
printf '{"bench": "meta", "case": "run_gpu_bench", "date": "%s", "commit": "%s", "gpu": "%s", "budget_s": %s}\n' \
    "$(date -u +%FT%TZ)" "$commit" "$gpu" "$BUDGET" >> "$JSONL"
echo "=== torch_bench $(date -u +%FT%TZ) commit $commit gpu '$gpu' budget ${BUDGET}s" >> "$TXT"

# run NAME TIMEOUT BENCH CASE MODE -- torch_bench.py arguments
run() {
    local name=$1 limit=$2 bench=$3 case=$4 mode=$5
    shift 6
    echo "$name" | grep -qE "$ONLY" || return 0
    local attn=sdpa
    case $name in *_flex_*) attn=flex ;; esac
    local left=$((BUDGET - ($(date +%s) - START)))
    if [ "$left" -lt 30 ]; then
        SKIPPED="$SKIPPED $name"
        printf '{"bench": "%s", "case": "%s", "preset": "%s", "mode": "%s", "attn": "%s", "impl": "torch", "error": "skipped: time budget (%ss) spent"}\n' \
            "$bench" "$case" "$case" "$mode" "$attn" "$BUDGET" >> "$JSONL"
        echo "--- $name: skipped (budget)" >> "$TXT"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "--- $name: torch_bench.py $* (timeout ${limit}s)" >> "$TXT"
    local t0 rc=0
    t0=$(date +%s)
    # shellcheck disable=SC2086  # EXTRA is split into arguments on purpose
    timeout -k 10 "$limit" "$PY" "$HERE/torch_bench.py" "$@" $EXTRA > "$TMP/out" 2> "$TMP/err" || rc=$?
    grep '^{' "$TMP/out" >> "$JSONL"
    grep -v '^{' "$TMP/out" >> "$TXT"
    cat "$TMP/err" >> "$TXT"
    if [ "$bench" = check ]; then
        echo "check: $(grep -c ' ok  err' "$TMP/err") ok, $(grep -cE ' (FAIL|ERROR) ' "$TMP/err") failed"
        grep -E '^check .* (FAIL|ERROR) ' "$TMP/err"
    else
        grep -E '^(drafter_train_step|target_decode|ops) ' "$TMP/err"
    fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        printf '{"bench": "%s", "case": "%s", "preset": "%s", "mode": "%s", "attn": "%s", "impl": "torch", "error": "timeout after %ss"}\n' \
            "$bench" "$case" "$case" "$mode" "$attn" "$limit" >> "$JSONL"
        echo "--- $name: TIMEOUT after ${limit}s" | tee -a "$TXT"
    elif [ "$rc" -ne 0 ] && ! grep -q '^{' "$TMP/out"; then
        printf '{"bench": "%s", "case": "%s", "preset": "%s", "mode": "%s", "attn": "%s", "impl": "torch", "error": "exit %s, no JSON (see torch_bench.txt)"}\n' \
            "$bench" "$case" "$case" "$mode" "$attn" "$rc" >> "$JSONL"
        echo "--- $name: exit $rc without a result:"; tail -3 "$TMP/err"
    fi
    echo "--- $name: rc $rc, $(( $(date +%s) - t0 ))s" >> "$TXT"
}

run check               60 check   all        eager    -- check
for p in d1024 d2048 qwen3_4b; do
    run drafter_${p}_eager     90 drafter_train_step $p eager    -- drafter --preset $p --mode eager
    run drafter_${p}_compiled 180 drafter_train_step $p compiled -- drafter --preset $p --mode compiled
done
for p in qwen3_0_6b qwen3_8b; do
    run decode_${p}_eager     90 target_decode $p eager,graph -- decode --preset $p --mode eager,graph
    run decode_${p}_compiled 240 target_decode $p compiled    -- decode --preset $p --mode compiled
done
run ops                120 ops     all        eager    -- ops --mode eager,compiled
for p in d4096 qwen3_8b; do
    run drafter_${p}_eager     90 drafter_train_step $p eager    -- drafter --preset $p --mode eager
    run drafter_${p}_compiled 180 drafter_train_step $p compiled -- drafter --preset $p --mode compiled
done
for p in qwen3_4b qwen3_8b d1024 d2048 d4096; do
    run drafter_${p}_flex_eager     120 drafter_train_step $p eager    -- drafter --preset $p --attn flex --mode eager
    run drafter_${p}_flex_compiled  180 drafter_train_step $p compiled -- drafter --preset $p --attn flex --mode compiled
done

[ -n "$SKIPPED" ] && echo "skipped (time budget ${BUDGET}s):$SKIPPED"
echo "torch reference done in $(( $(date +%s) - START ))s; JSON in $JSONL, tables in $TXT" | tee -a "$TXT"
"$PY" "$HERE/torch_bench.py" summary "$JSONL" >> "$TXT"
