#!/usr/bin/env bash
# The GPU machine's whole round in one call (design §9): unpacks gpu-bundle/bundle.tar.xz
# (scripts/gpu-bundle.sh), runs every CUDA test binary, then (unless --tests-only) the benchmarks
# and the PyTorch reference of the same workloads (tools/reference/run_gpu_bench.sh), and a quick
# demo on the GPU. Logs and JSON go to $OUT (the device tool's output folder) or ./gpu-out.
# Flags: --tests-only (tests, nothing else), --no-reference (skip the PyTorch reference), --no-demo.
# Exit status: non-zero when any test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
run=$(mktemp -d)
tar -C "$run" -xJf gpu-bundle/bundle.tar.xz
# cuBLASLt comes with the CUDA toolkit or the Python environment; libgomp with the bundle.
pylibs=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH="$run/lib:/usr/local/cuda/lib64:${pylibs}:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"

failed=()
for t in "$run"/bin/*_test; do
    name=$(basename "$t")
    if ! timeout 300 "$t" --gtest_brief=1 > "$out/$name.log" 2>&1; then
        failed+=("$name")
        tail -n 60 "$out/$name.log"
    fi
    echo "$name: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.log" | tr '\n' ' ')"
done
echo "tests failed: ${#failed[@]} ${failed[*]:-}"
flags=" $* "
[[ $flags == *" --tests-only "* ]] && exit "${#failed[@]}"

for b in "$run"/bench/*_bench; do
    name=$(basename "$b")
    echo "== $name"
    timeout 240 "$b" > "$out/$name.jsonl" 2> "$out/$name.txt"
    echo "exit status $?" >> "$out/$name.txt"
    cat "$out/$name.txt"
    grep -v '^{' "$out/$name.jsonl" || true
done
if [[ $flags != *" --no-reference "* && -x tools/reference/run_gpu_bench.sh ]]; then
    echo "== PyTorch reference"
    timeout 420 tools/reference/run_gpu_bench.sh || echo "torch reference: exit $?"
fi
if [[ $flags != *" --no-demo "* ]]; then
    echo "== demo --quick on the GPU"
    timeout 300 "$run/bin/dflash" demo --quick --output "$run/demo" > "$out/demo.txt" 2>&1
    tail -n 25 "$out/demo.txt"
fi
# Everything in one file: the device tool returns at most 8 files.
logs=$(mktemp -d)/gpu-logs.tgz
tar -C "$out" -czf "$logs" . && mv "$logs" "$out/gpu-logs.tgz"
exit "${#failed[@]}"
