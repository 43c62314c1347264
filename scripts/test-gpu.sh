#!/usr/bin/env bash
# The GPU machine's whole round in one call (design §9): unpacks gpu-bundle/bundle.tar.xz
# (scripts/gpu-bundle.sh), runs every CUDA test binary, then (unless --tests-only) the benchmarks
# and the PyTorch reference of the same workloads (tools/reference/run_gpu_bench.sh), and a quick
# demo on the GPU. Logs and JSON go to $OUT (the device tool's output folder) or ./gpu-out.
# Flags: --tests-only (tests, nothing else), --no-bench (skip the C++ benchmarks), --no-reference
# (skip the PyTorch reference), --no-demo, --crosscheck (the ecosystem cross-checks of
# tools/reference: tokenizers fixtures, transformers greedy decoding, the drafter round trip;
# dflash runs on the CPU there, against float32 transformers).
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

[[ $flags == *" --no-bench "* ]] || for b in "$run"/bench/*_bench; do
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
if [[ $flags == *" --crosscheck "* ]]; then
    bin="$run/bin/dflash"
    echo "== tokenizer fixtures (tokenizers)"
    python3 tools/reference/make_tokenizer_fixtures.py "$out/tokenizer_fixtures" 2>&1 | tail -n 5
    echo "== transformers greedy check"
    DFLASH_RUNTIME_BACKEND=cpu timeout 300 python3 tools/reference/hf_greedy_check.py \
        --dflash "$bin" --make all --work "$run/greedy" --new-tokens 64 \
        --report "$out/greedy_report.json" 2>&1 | tail -n 15
    echo "== drafter round trip (full demo on the GPU, then dflash on the CPU vs PyTorch)"
    timeout 400 "$bin" demo --output "$run/fulldemo" > "$out/demo_full.txt" 2>&1
    tail -n 12 "$out/demo_full.txt"
    DFLASH_RUNTIME_BACKEND=cpu timeout 400 python3 tools/reference/drafter_roundtrip.py \
        --dflash "$bin" --demo "$run/fulldemo" --out "$run/roundtrip" 2>&1 | tail -n 25
    cp "$run"/roundtrip/*.json "$out/" 2>/dev/null || true
fi
# Everything in one file: the device tool returns at most 8 files.
logs=$(mktemp -d)/gpu-logs.tgz
tar -C "$out" -czf "$logs" . && mv "$logs" "$out/gpu-logs.tgz"
exit "${#failed[@]}"
