#!/usr/bin/env bash
# The GPU machine's whole round in one call (docs/design.md): unpacks gpu-bundle/bundle.tar.xz
# (scripts/gpu-bundle.sh), runs every CUDA test binary, then (unless --tests-only) the benchmarks
# and the PyTorch reference of the same workloads (tools/reference/run_gpu_bench.sh), and a quick
# demo on the GPU, and `dflash bench` end to end on a Qwen3-0.6B-shaped random target (with a
# random 1-layer drafter: the point is measured vs predicted speed-up, not tau). Logs and JSON go
# to $OUT (the device tool's output folder) or ./gpu-out.
# Flags: --tests-only (tests, nothing else), --no-tests, --no-bench (skip the C++ benchmarks),
# --no-e2e (skip the end-to-end bench), --no-reference
# (skip the PyTorch reference), --no-demo, --crosscheck (the ecosystem cross-checks of
# tools/reference: tokenizers fixtures, transformers greedy decoding, the drafter round trip;
# dflash runs on the CPU there, against float32 transformers), --roundtrip TARBALL (below),
# --dspark-roundtrip (below).
# Exit status: non-zero when any test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# Logs go to a scratch folder; $OUT receives one tarball of them (the device tool returns at most 8
# files) and the summary printed here.
dest=${OUT:-gpu-out}
mkdir -p "$dest"
out=$(mktemp -d)
source scripts/gpu-env.sh  # $run: the unpacked bundle; the loader path
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"

# The test executables hold one tests/ folder each (bin/cuda_tests: tests/cuda); each file's tests
# run as one process with a log and a time limit of their own, as CTest runs them.
failed=()
[[ " $* " == *" --no-tests "* ]] || for t in "$run"/bin/*_tests; do
    files=$("$t" --list_test_files) || { failed+=("$(basename "$t")"); continue; }
    for name in $files; do
        if ! timeout 300 "$t" --test_file="$name" --gtest_brief=1 > "$out/$name.log" 2>&1; then
            failed+=("$name")
            tail -n 60 "$out/$name.log"
        fi
        echo "$name: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.log" | tr '\n' ' ')"
    done
done
echo "tests failed: ${#failed[@]} ${failed[*]:-}"
flags=" $* "
[[ $flags == *" --tests-only "* ]] && exit "${#failed[@]}"

# BENCHES="train_step decode" runs only those benchmarks.
[[ $flags == *" --no-bench "* ]] || for b in "$run"/bench/*_bench; do
    name=$(basename "$b")
    [[ -z ${BENCHES:-} || " $BENCHES " == *" ${name%_bench} "* ]] || continue
    echo "== $name"
    timeout 240 "$b" > "$out/$name.jsonl" 2> "$out/$name.txt"
    echo "exit status $?" >> "$out/$name.txt"
    cat "$out/$name.txt"
    grep -v '^{' "$out/$name.jsonl" || true
done
if [[ $flags != *" --no-e2e "* ]]; then
    echo "== dflash bench end to end: Qwen3-0.6B-shaped random target, random 1-layer drafter"
    e2e="$run/e2e"
    bin="$run/bin/dflash"
    "$bin" init target -o "$e2e/target" --vocab 151936 --pretrain.hidden_size 1024 \
        --pretrain.num_layers 28 --pretrain.num_heads 16 --pretrain.num_kv_heads 8 \
        --pretrain.head_dim 128 --pretrain.intermediate_size 3072 \
        --pretrain.tie_word_embeddings true --pretrain.rope_theta 1000000 > "$out/e2e.txt" 2>&1
    "$bin" init drafter --target "$e2e/target" -o "$e2e/drafter" --drafter.num_layers 1 \
        --drafter.block_size 16 >> "$out/e2e.txt" 2>&1
    python3 -c 'import json, random
r = random.Random(3)
for i in range(8):
    print(json.dumps({"prompt_ids": [r.randrange(256) for _ in range(64 + 16 * i)]}))' \
        > "$e2e/prompts.jsonl"
    timeout 300 "$bin" bench --target "$e2e/target" --drafter "$e2e/drafter" \
        --prompts "$e2e/prompts.jsonl" --infer.max_new_tokens 128 --json "$out/e2e_bench.json" \
        >> "$out/e2e.txt" 2>&1
    echo "exit status $?" >> "$out/e2e.txt"
    tail -n 30 "$out/e2e.txt"
fi
if [[ $flags != *" --no-reference "* && -x tools/reference/run_gpu_bench.sh ]]; then
    echo "== PyTorch reference"
    OUT="$out" TORCH_BENCH_BUDGET=${TORCH_BENCH_BUDGET:-360} \
        timeout $((${TORCH_BENCH_BUDGET:-360} + 60)) tools/reference/run_gpu_bench.sh ||
        echo "torch reference: exit $?"
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
# --dspark-roundtrip: DSpark drafters trained for the quick demo's target (the demo's run, or a
# new one), warm-started from its DFlash drafter, 60 steps on the GPU (on the CPU when the GPU run
# fails, which is reported), then decoded by dflash (CPU, f32) and by
# tools/reference/dspark_reference.py over transformers, every step compared. One drafter per
# Markov head in $DSPARK_HEADS (default "gated rnn"); the gated one with every draft verified and
# with a confidence cut at 0.8 (60 steps leave the confidences high: 0.5 cut nothing on the
# CPU-trained pair), the others with every draft verified. Each is also decoded by DeepSpec's own
# published model and loop where its source is carried (deepspec_roundtrip.py, DEEPSPEC_SRC).
if [[ $flags == *" --dspark-roundtrip "* ]]; then
    bin="$run/bin/dflash"
    demo="$run/demo"
    if [[ ! -f $demo/drafter/latest ]]; then
        demo="$run/dsdemo"
        timeout 300 "$bin" demo --quick --output "$demo" > "$out/dspark_demo.txt" 2>&1
        tail -n 12 "$out/dspark_demo.txt"
    fi
    tgt="$demo/target/$(cat "$demo/target/latest")"
    dft="$demo/drafter/$(cat "$demo/drafter/latest")"
    for head in ${DSPARK_HEADS:-gated rnn}; do
        shape=(--drafter.block_size 8 --drafter.num_layers 1 --drafter.target_layer_ids 1,2
            --drafter.markov_rank 32 --drafter.markov_head_type "$head")
        log="$out/dspark_train_$head.txt"
        "$bin" init drafter --target "$tgt" --output "$run/ds_init_$head" --from-drafter "$dft" \
            --dtype f32 --set drafter.architecture=dspark "${shape[@]}" > "$log" 2>&1
        train=(train --target "$tgt" --data "$demo/data/regenerated" --init-drafter
            "$run/ds_init_$head" "${shape[@]}" --train.max_steps 60 --train.max_length 256
            --train.batch_size 2 --train.num_anchors 48 --train.loss_decay_gamma 4 --train.lr 3e-3
            --train.log_every 20 --train.checkpoint_every 100000 --train.eval_every 100000)
        echo "== DSpark drafter training (GPU), $head head"
        if ! timeout 300 "$bin" "${train[@]}" --output "$run/ds_gpu_$head" >> "$log" 2>&1; then
            tail -n 20 "$log"
            echo "DSpark training on the GPU FAILED; training on the CPU instead"
            failed+=("dspark_train_gpu_$head")
            DFLASH_RUNTIME_BACKEND=cpu timeout 300 "$bin" "${train[@]}" \
                --output "$run/ds_gpu_$head" >> "$log" 2>&1
        fi
        grep -E "objective|step 60/60" "$log"
        ds="$run/ds_gpu_$head/$(cat "$run/ds_gpu_$head/latest")"
        thresholds="0"
        [[ $head == gated ]] && thresholds="0 0.8"
        for thr in $thresholds; do
            echo "== DSpark round trip, $head head, confidence threshold $thr"
            DFLASH_RUNTIME_BACKEND=cpu timeout 400 python3 tools/reference/drafter_roundtrip.py \
                --dflash "$bin" --target "$tgt" --drafter "$ds" \
                --prompts "$demo/corpus/heldout_prompts.jsonl" --confidence-threshold "$thr" \
                --out "$run/ds_roundtrip_${head}_$thr" 2>&1 | tail -n 16
            [[ ${PIPESTATUS[0]} == 0 ]] || failed+=("dspark_roundtrip_${head}_$thr")
            cp "$run/ds_roundtrip_${head}_$thr/roundtrip.json" \
                "$out/dspark_roundtrip_${head}_$thr.json" 2>/dev/null
            # DeepSpec's own model and decoding loop, where its source is carried
            # (tools/reference/deepspec_roundtrip.py; DEEPSPEC_SRC, default gpu-bundle/deepspec-src).
            src=${DEEPSPEC_SRC:-gpu-bundle/deepspec-src}
            [[ -d $src/deepspec ]] || continue
            echo "== DeepSpec's code, $head head, confidence threshold $thr"
            timeout 400 python3 tools/reference/deepspec_roundtrip.py --deepspec-src "$src" \
                --dflash "$bin" --target "$tgt" --drafter "$ds" \
                --prompts "$demo/corpus/heldout_prompts.jsonl" --confidence-threshold "$thr" \
                --out "$run/deepspec_${head}_$thr" 2>&1 | grep -v "^\$ \|Loading weights" | tail -n 14
            [[ ${PIPESTATUS[0]} == 0 ]] || failed+=("deepspec_roundtrip_${head}_$thr")
            cp "$run/deepspec_${head}_$thr/deepspec_roundtrip.json" \
                "$out/deepspec_roundtrip_${head}_$thr.json" 2>/dev/null
        done
    done
fi
# --roundtrip TARBALL: a target and drafters trained elsewhere (target/, drafter-*/ and
# heldout_prompts.jsonl in an .tar.xz), each drafter decoded by dflash (CPU, f32) and by the
# PyTorch re-implementation of tools/reference/drafter_roundtrip.py over transformers, histograms
# compared; then `dflash bench` on the GPU for the same pairs.
if [[ $flags == *" --roundtrip "* ]]; then
    tarball=$(sed -E 's/.* --roundtrip ([^ ]+) .*/\1/' <<< "$flags")
    pairs="$run/pairs"
    mkdir -p "$pairs"
    tar -C "$pairs" -xJf "$tarball"
    for d in "$pairs"/drafter-*; do
        name=$(basename "$d")
        echo "== round trip: $name"
        DFLASH_RUNTIME_BACKEND=cpu timeout 400 python3 tools/reference/drafter_roundtrip.py \
            --dflash "$run/bin/dflash" --target "$pairs/target" --drafter "$d" \
            --prompts "$pairs/heldout_prompts.jsonl" --out "$out/roundtrip-$name" 2>&1 | tail -n 25
        echo "== dflash bench on the GPU: $name"
        timeout 300 "$run/bin/dflash" bench --target "$pairs/target" --drafter "$d" \
            --prompts "$pairs/heldout_prompts.jsonl" --infer.max_new_tokens 128 \
            --json "$out/bench-gpu-$name.json" 2>&1 | tail -n 12
    done
fi
# Everything in one file: the device tool returns at most 8 files.
tar -C "$out" -czf "$dest/gpu-logs.tgz" .
exit "${#failed[@]}"
