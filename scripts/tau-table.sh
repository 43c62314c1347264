#!/usr/bin/env bash
# tau of DFlash, DFlash2 and DSpark drafters, each trained with the old (2025) and the new (2026)
# training semantics, on the demo's target and data (issue 26, "Must show"; docs/training.md
# "Old and new training semantics on the demo's target"). All six runs share the target, the
# regenerated training data, the step count, the seed (hence the data order and the anchors) and
# the demo's drafter settings; they differ only in the architecture and in the settings listed in
# the table. Each drafter is then benched greedily (`dflash bench`) on the demo's held-out prompts,
# and a markdown table is printed (and written to $OUT/tau-table.md).
#
#   scripts/tau-table.sh [--device cpu|cuda]
#   scripts/tau-table.sh --pack-demo DIR   # DIR's target, training data and prompts (~7 MB) into
#                                          # gpu-bundle/tau-demo.tar.xz, for a GPU run on them
#
# Environment:
#   DEMO_DIR  a `dflash demo` output directory (target/, data/regenerated/, corpus/); when unset,
#             gpu-bundle/tau-demo.tar.xz unpacked into $OUT/demo when there is one; otherwise (or
#             when DEMO_DIR has no target/) `dflash demo` makes one first (26 s on an H200, ~7 min
#             on 2 cores), from this checkout's docs/, src/ and tests/, with DEMO_FLAGS added
#   OUT       where the runs, bench reports and the table go (default tau-out)
#   STEPS     optimizer steps per drafter (default 600, the demo's own)
#   THREADS   CPU threads per training worker and for the bench (default 1)
#   WORKERS   training workers (default 2 on the CPU, as the demo; 1 on a GPU); the batch per
#             worker is 4 / WORKERS, so the global batch is always 4 sequences
#   JOBS      trainings run at once (default 1 on the CPU; 6 on a GPU: the drafters are tiny)
#   ARCHS     subset of "dflash dflash2 dspark" (default all three)
#   SEMS      the semantics to train (default "old new"); the new column's two parts alone: for
#             DFlash and DFlash2 "dpace" (new weighting, AdamW) and "muon" (old weighting, Muon),
#             for DSpark "l1" (new loss mix, AdamW) and "muon" (old loss, Muon)
#   MAX_NEW   tokens per bench prompt (default 128, the demo's bench)
#   DFLASH    the dflash binary (default build/dflash; with --device cuda and a
#             gpu-bundle/bundle.tar.xz, the bundle's, through scripts/gpu-env.sh)
#   BACKEND   runtime.backend (default: the --device flag's, else cpu)
set -euo pipefail
cd "$(dirname "$0")/.."

device=${BACKEND:-cpu}
while [[ $# -gt 0 ]]; do
    case $1 in
        --device) device=$2; shift 2 ;;
        --device=*) device=${1#--device=}; shift ;;
        --pack-demo)
            d=${2:?--pack-demo DIR}
            ck=$(cat "$d/target/latest")
            mkdir -p gpu-bundle
            # The model files only: the target's optimizer state (most of a checkpoint) stays out.
            tar -C "$d" -cf - target/latest "target/$ck/config.json" "target/$ck/model.safetensors" \
                "target/$ck/dflash_tokenizer.json" data/regenerated corpus/heldout_prompts.jsonl |
                xz -6 > gpu-bundle/tau-demo.tar.xz
            ls -la gpu-bundle/tau-demo.tar.xz
            exit 0 ;;
        -h | --help) sed -n '2,32p' "$0"; exit 0 ;;
        *) echo "tau-table.sh: unknown argument $1 (expected --device cpu|cuda)" >&2; exit 2 ;;
    esac
done
case $device in
    cpu | cuda) ;;
    *) echo "tau-table.sh: --device $device: expected cpu or cuda" >&2; exit 2 ;;
esac

if [[ -n ${DFLASH:-} ]]; then
    bin=$DFLASH
elif [[ $device == cuda && -f gpu-bundle/bundle.tar.xz ]]; then
    set +u
    # shellcheck source=scripts/gpu-env.sh
    source scripts/gpu-env.sh  # $run: the unpacked bundle; the loader path
    set -u
    bin="$run/bin/dflash"
else
    bin=build/dflash
fi
[[ -x $bin ]] || { echo "tau-table.sh: no dflash binary at $bin (build it, or set DFLASH)" >&2; exit 1; }

out=${OUT:-tau-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=${STEPS:-600}
threads=${THREADS:-1}
if [[ $device == cuda ]]; then workers=${WORKERS:-1}; jobs=${JOBS:-6}; else workers=${WORKERS:-2}; jobs=${JOBS:-1}; fi
((4 % workers == 0)) || { echo "tau-table.sh: WORKERS=$workers must divide 4" >&2; exit 2; }
batch=$((4 / workers))
archs=${ARCHS:-dflash dflash2 dspark}
max_new=${MAX_NEW:-128}

demo=${DEMO_DIR:-$out/demo}
if [[ -z ${DEMO_DIR:-} && -f gpu-bundle/tau-demo.tar.xz ]]; then
    rm -rf "$demo"
    mkdir -p "$demo"
    tar -C "$demo" -xJf gpu-bundle/tau-demo.tar.xz
    echo "== demo directory from gpu-bundle/tau-demo.tar.xz"
fi
if [[ ! -d $demo/target ]]; then
    echo "== dflash demo --output $demo (no demo directory given)"
    t0=$(date +%s)
    # shellcheck disable=SC2086  # DEMO_FLAGS: words on purpose
    "$bin" demo --output "$demo" --runtime.backend "$device" --corpus docs src tests \
        ${DEMO_FLAGS:-} > "$out/demo.txt" 2>&1 ||
        { tail -n 20 "$out/demo.txt"; exit 1; }
    echo "   demo: $(($(date +%s) - t0)) s"
fi
target="$demo/target/$(cat "$demo/target/latest")"
data="$demo/data/regenerated"
prompts="$demo/corpus/heldout_prompts.jsonl"
for p in "$target" "$data" "$prompts"; do
    [[ -e $p ]] || { echo "tau-table.sh: $p is missing: is $demo a dflash demo directory?" >&2; exit 1; }
done

# The demo's drafter settings (src/demo/demo.cpp), shared by all six runs. DSpark gets block 7:
# its anchor slot predicts too, so 7 slots draft 7 tokens and verify 8, as DFlash's block of 8
# does (a tau ceiling of 8 for all three).
common=(--target "$target" --data "$data" --runtime.backend "$device"
    --runtime.devices "$workers" --runtime.threads "$threads" --drafter.num_layers 1
    --drafter.target_layer_ids "1,2" --train.max_steps "$steps" --train.max_length 256
    --train.batch_size "$batch" --train.num_anchors 48 --train.loss_decay_gamma 4 --train.lr 3e-3
    --train.log_every 50 --train.checkpoint_every 100000 --train.eval_every 100000)

# What differs between the old and the new semantics (docs/training.md explains each choice).
# The anchor rule and the window-normalised loss are not settings: the trainer always had them.
settings_of() {  # arch sem -> the settings that differ between old and new
    case $1-$2 in
        dspark-old) echo "--train.dspark_ce_alpha 1 --train.dspark_l1_alpha 0 --train.dspark_confidence_alpha 1 --train.optimizer adamw" ;;
        dspark-new) echo "--train.dspark_ce_alpha 0.1 --train.dspark_l1_alpha 0.9 --train.dspark_confidence_alpha 1 --train.optimizer muon" ;;
        *-old) echo "--train.loss ce --train.loss_weighting decay --train.optimizer adamw" ;;
        *-new) echo "--train.loss ce --train.loss_weighting dpace --train.optimizer muon" ;;
        dspark-l1) echo "--train.dspark_ce_alpha 0.1 --train.dspark_l1_alpha 0.9 --train.dspark_confidence_alpha 1 --train.optimizer adamw" ;;
        dspark-muon) echo "--train.dspark_ce_alpha 1 --train.dspark_l1_alpha 0 --train.dspark_confidence_alpha 1 --train.optimizer muon" ;;
        dflash*-dpace) echo "--train.loss ce --train.loss_weighting dpace --train.optimizer adamw" ;;
        dflash*-muon) echo "--train.loss ce --train.loss_weighting decay --train.optimizer muon" ;;
        *) echo "tau-table.sh: no semantics '$2' for $1 (SEMS: old new; dpace muon for DFlash, DFlash2; l1 muon for DSpark)" >&2
            return 1 ;;
    esac
}

train_one() {  # arch sem
    local arch=$1 sem=$2 dir="$out/$1-$2" t0 rc=0 block=8
    if [[ $arch == dspark ]]; then block=7; fi
    rm -rf "$dir"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2046  # the settings are words on purpose
    "$bin" train "${common[@]}" --output "$dir" --drafter.architecture "$arch" \
        --drafter.block_size "$block" $(settings_of "$arch" "$sem") \
        > "$out/train-$arch-$sem.txt" 2>&1 || rc=$?
    awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f\n", a - b }' \
        > "$out/train-$arch-$sem.seconds"
    echo "$rc" > "$out/train-$arch-$sem.rc"
}

runs=()
for arch in $archs; do for sem in ${SEMS:-old new}; do
    settings_of "$arch" "$sem" > /dev/null || exit 2
    runs+=("$arch $sem")
done; done
echo "== training ${#runs[@]} drafters: $steps steps, $workers worker(s) x $threads thread(s), $jobs at once, backend $device"
t_all=$(date +%s)
load() { cut -d' ' -f1-3 /proc/loadavg 2> /dev/null || echo "?"; }
echo "   load average at the start: $(load)"
for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    train_one $r &
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
done
wait
echo "   trained in $(($(date +%s) - t_all)) s; load average now: $(load)"

# A failed training or bench is reported and left out of the table's numbers; the others go on.
fail=0
echo "== dflash bench (greedy, $max_new new tokens per prompt)"
for r in "${runs[@]}"; do
    set -- $r  # arch sem
    rm -f "$out/bench-$1-$2.json"
    if [[ $(cat "$out/train-$1-$2.rc" 2> /dev/null) != 0 ]]; then
        echo "training $1 $2 failed:"; tail -n 15 "$out/train-$1-$2.txt"; fail=1; continue
    fi
    ck="$out/$1-$2/$(cat "$out/$1-$2/latest")"
    "$bin" bench --target "$target" --drafter "$ck" --prompts "$prompts" \
        --infer.max_new_tokens "$max_new" --infer.temperature 0 --runtime.backend "$device" \
        --runtime.threads "$threads" --json "$out/bench-$1-$2.json" > "$out/bench-$1-$2.txt" 2>&1 ||
        { echo "bench $1 $2 failed:"; tail -n 15 "$out/bench-$1-$2.txt"; fail=1; }
    grep -h "as the reference decoder counts" "$out/bench-$1-$2.txt" | sed "s/^/   $1 $2: /" || true
done

python3 - "$out" "$steps" "$device" "$workers" "$threads" "$max_new" "${runs[@]}" <<'PY' | tee "$out/tau-table.md"
import json, sys
out, steps, device, workers, threads, max_new = sys.argv[1:7]
runs = [r.split() for r in sys.argv[7:]]
names = {"dflash": "DFlash", "dflash2": "DFlash2", "dspark": "DSpark"}
differ = {
    ("dflash", "old"): "loss ce, weighting decay, AdamW",
    ("dflash", "new"): "loss ce, weighting **dpace** (alpha 0.5), **Muon** (lr 3e-2, wd 0.1)",
    ("dflash", "dpace"): "loss ce, weighting **dpace** (alpha 0.5), AdamW",
    ("dflash", "muon"): "loss ce, weighting decay, **Muon** (lr 3e-2, wd 0.1)",
    ("dspark", "old"): "1 CE + 0 L1 + 1 BCE, AdamW",
    ("dspark", "new"): "**0.1** CE + **0.9** L1 + 1 BCE, **Muon** (lr 3e-2, wd 0.1)",
    ("dspark", "l1"): "**0.1** CE + **0.9** L1 + 1 BCE, AdamW",
    ("dspark", "muon"): "1 CE + 0 L1 + 1 BCE, **Muon** (lr 3e-2, wd 0.1)",
}
print("| drafter | semantics | settings that differ | train loss (last step) | train s | tau | "
      "tau, mean of prompts | tau past budget | speed-up | lossless |")
print("|---|---|---|---|---|---|---|---|---|---|")
for arch, sem in runs:
    what = differ[("dspark" if arch == "dspark" else "dflash", sem)]
    try:
        t = json.load(open(f"{out}/bench-{arch}-{sem}.json"))
    except OSError:
        print(f"| {names[arch]} | {sem} | {what} | failed: see train-{arch}-{sem}.txt, "
              f"bench-{arch}-{sem}.txt | | | | | | |")
        continue
    last = None
    for line in open(f"{out}/{arch}-{sem}/metrics.jsonl"):
        rec = json.loads(line)
        if "loss" in rec and not rec.get("eval"):
            last = rec
    secs = float(open(f"{out}/train-{arch}-{sem}.seconds").read())
    tot = t["total"]
    print(f"| {names[arch]} | {sem} | {what} | {last['loss']:.4f} | {secs:.0f} | "
          f"**{tot['tau']:.2f}** | {tot['tau_mean_of_requests']:.2f} | {tot['tau_accepted']:.2f} | "
          f"{tot['speedup']:.2f}x | "
          f"{'yes' if t['lossless'] else 'NO'} |")
print()
print(f"({steps} steps, backend {device}, {workers} worker(s) x {threads} thread(s), global batch 4, "
      f"48 anchors, greedy bench of {max_new} new tokens on the demo's held-out prompts; tau = "
      f"tokens a step commits within the budget, as the reference decoder counts, pooled over "
      f"all steps (bench's total row); 'mean of prompts' = the mean of per-prompt taus, the "
      f"reference benchmark's 'Average Acceptance length'; 'tau past budget' also counts what "
      f"the last step accepted beyond the budget. Losses of different weightings or loss mixes "
      f"are on different scales)")
PY
exit $fail
