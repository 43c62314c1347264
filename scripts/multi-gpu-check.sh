#!/usr/bin/env bash
# Data-parallel drafter training on the GPUs of one machine (issue 11), from binaries built
# elsewhere (gpu-bundle/bundle.tar.xz) and a prepared dataset (gpu-bundle/demo-data.tar.xz: a
# `regenerated/` dataset of the byte tokenizer; without it, the repository's own text). Runs the
# same 1-layer drafter training against a random Qwen3-0.6B-shaped target: 1 GPU (batch 1),
# 1 GPU (batch 2), then 2 GPUs in one process and 2 processes of one GPU each (TCP rendezvous on
# localhost), each with the gradients summed through the host and on the GPUs (NCCL: in buckets
# beside the backward, in one sum after it, and with the optimizer state sharded); prints per-step losses side by side and the throughput of
# each. Then (KILL=1, the default) a kill test: two processes summing with NCCL, process 1 killed
# with SIGKILL mid-run, process 0 must fail naming the cause well within the deadline, and the
# last checkpoint must resume on one GPU; and the collectives' bus bandwidth
# (bench/collectives_bench) at gradient sizes. Output under $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${OUT:-gpu-out}
mkdir -p "$dest"
source scripts/gpu-env.sh  # $run: the unpacked bundle; the loader path
if [[ -f gpu-bundle/demo-data.tar.xz ]]; then
    tar -C "$run" -xJf gpu-bundle/demo-data.tar.xz
else  # no demo data carried: the repository's own text, byte-tokenized
    repo_text_data "$run/regenerated" > "$dest/data.txt" 2>&1 || { tail "$dest/data.txt"; exit 1; }
fi
nvidia-smi --query-gpu=index,name --format=csv
bin="$run/bin/dflash"
steps=${STEPS:-40}
"$bin" init target -o "$run/target" --vocab 151936 --pretrain.hidden_size 1024 \
    --pretrain.num_layers 28 --pretrain.num_heads 16 --pretrain.num_kv_heads 8 \
    --pretrain.head_dim 128 --pretrain.intermediate_size 3072 \
    --pretrain.tie_word_embeddings true --pretrain.rope_theta 1000000 | tail -n 1
common=(train --target "$run/target" --data "$run/regenerated" --train.max_steps "$steps"
    --train.max_length 2048 --train.num_anchors 128 --drafter.num_layers 1
    --drafter.block_size 16 --train.checkpoint_every 0 --train.eval_every 0
    --train.log_every 1 --train.epochs 1000)
t0=$(date +%s.%N)
# EXCHANGES="device" runs only those multi-GPU cases; SINGLE=0 skips the one-GPU runs.
if [[ ${SINGLE:-1} == 1 ]]; then
    "$bin" "${common[@]}" --output "$run/g1" --runtime.devices 1 > "$dest/g1.txt" 2>&1; echo "1 GPU batch 1: exit $?"
    "$bin" "${common[@]}" --output "$run/g1b2" --runtime.devices 1 --train.batch_size 2 > "$dest/g1b2.txt" 2>&1; echo "1 GPU batch 2: exit $?"
fi
for x in ${EXCHANGES:-host device}; do
    timeout 120 "$bin" "${common[@]}" --output "$run/g2$x" --runtime.devices 2 \
        --runtime.gradient_exchange $x > "$dest/g2$x.txt" 2>&1; echo "2 GPUs, 1 process, $x sum: exit $?"
    launch=(--launch.world_size 2 --launch.local_world_size 2 --launch.master_port 29555)
    timeout 120 "$bin" "${common[@]}" --output "$run/p2$x" --runtime.devices 1 "${launch[@]}" --launch.rank 1 \
        --launch.local_rank 1 --runtime.gradient_exchange $x > "$dest/p2$x-rank1.txt" 2>&1 &
    pid1=$!
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 timeout 120 "$bin" "${common[@]}" --output "$run/p2$x" --runtime.devices 1 \
        --launch.local_world_size 2 --launch.master_port 29555 --runtime.gradient_exchange $x \
        > "$dest/p2$x.txt" 2>&1; echo "2 processes x 1 GPU, $x sum: exit $?"
    wait $pid1; echo "   (process 1: exit $?)"
done
if [[ " ${EXCHANGES:-host device} " == *" device "* ]]; then
    timeout 120 "$bin" "${common[@]}" --output "$run/g2bucket0" --runtime.devices 2 \
        --runtime.gradient_exchange device --runtime.gradient_bucket_mb 0 \
        > "$dest/g2bucket0.txt" 2>&1; echo "2 GPUs, device sum after the backward: exit $?"
    timeout 120 "$bin" "${common[@]}" --output "$run/g2shard" --runtime.devices 2 \
        --runtime.gradient_exchange device --train.shard_optimizer_state true \
        > "$dest/g2shard.txt" 2>&1; echo "2 GPUs, sharded optimizer state: exit $?"
fi
runs="g1 g1b2 g2host p2host g2device p2device g2bucket0 g2shard"
for r in $runs; do cp "$run/$r/metrics.jsonl" "$dest/$r.metrics.jsonl" 2>/dev/null; done
python3 - "$dest" <<'PY'
import json, sys, statistics
d = sys.argv[1]
runs = {}
for r in ["g1", "g1b2", "g2host", "p2host", "g2device", "p2device", "g2bucket0", "g2shard"]:
    try:
        rows = [json.loads(l) for l in open(f"{d}/{r}.metrics.jsonl")]
    except OSError:
        continue
    runs[r] = [x for x in rows if not x.get("eval")]
print("step  " + "  ".join(f"{r:>14}" for r in runs))
for i in range(max(len(v) for v in runs.values())):
    print(f"{i+1:4d}  " + "  ".join(f"{v[i]['loss']:14.9f}" if i < len(v) else " " * 14 for v in runs.values()))
for r, v in runs.items():
    tps = [x["tokens_per_s"] for x in v[5:]]
    print(f"{r}: median {statistics.median(tps):.0f} tok/s over steps 6..{len(v)} (min {min(tps):.0f}, max {max(tps):.0f})")
for x in ["host", "device"]:
    g, p = runs.get("g2" + x), runs.get("p2" + x)
    if g and p:
        same = all(a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(g, p))
        print(f"{x} sum: 2 GPUs in one process vs 2 processes: losses and grad norms identical: {same}")
    if g and "g1b2" in runs:
        rel = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(g, runs["g1b2"]))
        print(f"{x} sum: 2 GPUs vs 1 GPU at batch 2: max relative loss difference {rel:.2e}")
PY
for x in g2bucket0 g2shard; do
    python3 - "$dest" "$x" <<'PY'
import json, sys
d, r = sys.argv[1], sys.argv[2]
try:
    a = [json.loads(l) for l in open(f"{d}/{r}.metrics.jsonl")]
    b = [json.loads(l) for l in open(f"{d}/g2device.metrics.jsonl")]
except OSError as e:
    sys.exit(f"{r}: {e}")
a, b = [x for x in a if not x.get("eval")], [x for x in b if not x.get("eval")]
rel = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
print(f"{r} vs g2device (buckets): max relative loss difference {rel:.2e} over {min(len(a), len(b))} steps")
PY
done
grep -h "gradients\|graphs:\|sharded" "$dest"/g2*.txt "$dest"/p2*.txt
if [[ ${KILL:-1} == 1 ]]; then
    echo "== kill test: 2 processes x 1 GPU (NCCL), process 1 killed at about step 12"
    kill_run=(--output "$run/kill" --runtime.devices 1 --runtime.gradient_exchange device
        --runtime.collective_timeout_s 60 --train.checkpoint_every 5 --train.max_steps 400
        --launch.world_size 2 --launch.local_world_size 2 --launch.master_port 29556)
    "$bin" "${common[@]}" "${kill_run[@]}" --launch.rank 1 --launch.local_rank 1 \
        > "$dest/kill-rank1.txt" 2>&1 &
    pid1=$!
    t0=$(date +%s)
    "$bin" "${common[@]}" "${kill_run[@]}" --launch.rank 0 --launch.local_rank 0 \
        > "$dest/kill-rank0.txt" 2>&1 &
    pid0=$!
    until grep -q "step 1[2-9]/" "$dest/kill-rank0.txt" 2>/dev/null || ! kill -0 $pid0 2>/dev/null; do
        sleep 0.5
        (($(date +%s) - t0 > 150)) && break
    done
    kill -9 $pid1
    tk=$(date +%s)
    wait $pid0
    echo "process 0: exit $? $(($(date +%s) - tk)) s after process 1 was killed"
    grep -h "error" "$dest/kill-rank0.txt" | tail -n 2
    timeout 120 "$bin" train --resume "$run/kill" --runtime.devices 1 --train.max_steps 20 \
        > "$dest/kill-resume.txt" 2>&1
    echo "resume of the last checkpoint on 1 GPU: exit $?"
    grep -h "resume\|trained after" "$dest/kill-resume.txt" | head -n 4
fi
echo "== device collectives at gradient sizes"
"$run/bench/collectives_bench" > "$dest/collectives.jsonl" 2> "$dest/collectives.txt"
cat "$dest/collectives.txt"
