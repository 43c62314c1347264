#!/usr/bin/env bash
# Per-kernel GPU times of one benchmark under Nsight Compute, on the GPU machine, from the bundle
# of scripts/gpu-bundle.sh: `scripts/ncu-profile.sh SKIP COUNT BENCH [ARGS...]` profiles kernel
# launches SKIP+1 .. SKIP+COUNT of bench/BENCH and writes $OUT/ncu_<BENCH>.csv (raw) and
# $OUT/ncu_<BENCH>.txt (time per kernel name, largest first). Clocks are left alone
# (--clock-control none), as the device notes ask.
set -uo pipefail
cd "$(dirname "$0")/.."
skip=$1 count=$2 bench=$3
shift 3
dest=${OUT:-gpu-out}
mkdir -p "$dest"
run=$(mktemp -d)
tar -C "$run" -xJf gpu-bundle/bundle.tar.xz
pylibs=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${pylibs}:${LD_LIBRARY_PATH:-}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
"$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip "$skip" \
    --launch-count "$count" "$run/bench/$bench" "$@" > "$dest/ncu_$bench.csv" 2> "$dest/ncu_$bench.err"
echo "ncu exit status $?"
python3 - "$dest/ncu_$bench.csv" > "$dest/ncu_$bench.txt" <<'PY'
import csv, sys, collections
# The benchmark's own stdout (JSON lines) comes before ncu's CSV: start at its header.
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
rows = rows[next(i for i, r in enumerate(rows) if "Kernel Name" in r):]
head = rows[0]
name, value = head.index("Kernel Name"), head.index("Metric Value")
total, count = collections.Counter(), collections.Counter()
for r in rows[1:]:
    try:
        v = float(r[value].replace(",", ""))
    except ValueError:
        continue
    total[r[name][:90]] += v
    count[r[name][:90]] += 1
all_ns = sum(total.values())
print(f"{sum(count.values())} kernels, {all_ns / 1e3:.1f} us in all")
for k, v in total.most_common(40):
    print(f"{v / 1e3:10.1f} us {100 * v / all_ns:5.1f}% {count[k]:6d}x {v / count[k] / 1e3:8.2f} us  {k}")
PY
head -n 45 "$dest/ncu_$bench.txt"
