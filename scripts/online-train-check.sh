#!/usr/bin/env bash
# Online drafter training at Qwen3-8B geometry (docs/performance.md targets #11 and #12; issue 12):
# a randomly initialised Qwen3-8B-shaped target (36 layers, hidden 4096, 152K vocabulary, bf16) runs
# its forward inside every step and a 5-layer drafter (block 16) trains on its features, sequences
# of 3072 tokens with 512 anchors, one sequence per GPU per step (torch and safetensors make the
# target's random weights; dflash reads them like any HF checkpoint). From binaries built elsewhere
# (gpu-bundle/bundle.tar.xz, scripts/gpu-bundle.sh); the data is this repository's own text,
# byte-tokenized and packed. Prints the median step time over the steps after the first three,
# samples/s for the machine and per GPU, and the peak GPU memory nvidia-smi saw.
# TARGET=qwen3_30b_a3b: a Qwen3-30B-A3B-shaped mixture-of-experts target instead (61 GB bf16; issue
# 24), written in transformers 5's fused expert spelling. TARGET=qwen3_5_27b: a Qwen3.5-27B-shaped
# hybrid target (issue 25: 48 Gated DeltaNet + 16 gated-attention layers, 248,320 vocabulary,
# 26.9B parameters, 54 GB bf16; drafter target layers [1, 16, 31, 46, 61]), its weights written by
# scripts/random_hybrid_target.py (plain Python: tiles of one random pool, no torch).
# GPUS (default 1), STEPS (default 12), SHARD=1 (train.shard_optimizer_state), RECOMPUTE=1
# (train.recompute_layers: the draft layers made again in the backward), EXCHANGE
# (runtime.gradient_exchange with several GPUs, default device), CKPT_EVERY (train.checkpoint_every,
# default 0: none; the wall time between steps then shows whether a checkpoint stalls them);
# output under $OUT or ./gpu-out.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${OUT:-gpu-out}
mkdir -p "$dest"
source scripts/gpu-env.sh  # $run: the unpacked bundle; the loader path
bin="$run/bin/dflash"
gpus=${GPUS:-1}
steps=${STEPS:-12}
repo_text_data "$run/data" > "$dest/online-data.txt" 2>&1 || { tail "$dest/online-data.txt"; exit 1; }
t0=$(date +%s)
target=${TARGET:-qwen3_8b}
case $target in
    qwen3_8b | qwen3_30b_a3b) vocab=151936 ;;
    qwen3_5_27b) vocab=248320 ;;
    *) echo "TARGET=$target: expected qwen3_8b, qwen3_30b_a3b or qwen3_5_27b" >&2; exit 2 ;;
esac
tdir="$run/target"
# A 54-61 GB target goes to memory (/dev/shm) when it has the room, the disk being small there.
if [[ $target != qwen3_8b ]] &&
    (($(df -k --output=avail /dev/shm 2> /dev/null | tail -1 || echo 0) > 62000000)); then
    tdir=/dev/shm/dflash-online-target
    rm -rf "$tdir"
    trap 'rm -rf "$tdir"' EXIT
fi
# The layout and tokenizer files from `dflash init` at a tiny width; the 8B-shaped weights from
# torch on the GPU (drawing 8.2 billion normals on one host core takes minutes).
"$bin" init target -o "$tdir" --vocab "$vocab" --pretrain.hidden_size 64 \
    --pretrain.num_layers 1 --pretrain.num_heads 4 --pretrain.num_kv_heads 2 \
    --pretrain.head_dim 16 --pretrain.intermediate_size 128 \
    --pretrain.tie_word_embeddings false > "$dest/online-init.txt" 2>&1 ||
    { tail "$dest/online-init.txt"; exit 1; }
if [[ $target == qwen3_5_27b ]]; then
    python3 scripts/random_hybrid_target.py "$tdir" qwen3_5_27b || exit 1
else
python3 - "$tdir" "$target" <<'PY' || exit 1
import json, os, sys, torch
from safetensors.torch import save_file
d, kind = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{d}/config.json"))
V = cfg["vocab_size"]
if kind == "qwen3_8b":
    L, D, H, KV, Dh, I, E, k, Ie = 36, 4096, 32, 8, 128, 12288, 0, 0, 0
elif kind == "qwen3_30b_a3b":  # Qwen3-30B-A3B: 128 experts of width 768, top 8, every layer
    L, D, H, KV, Dh, I, E, k, Ie = 48, 2048, 32, 4, 128, 6144, 128, 8, 768
else:
    sys.exit(f"TARGET={kind}: expected qwen3_8b or qwen3_30b_a3b")
cfg.update(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
           head_dim=Dh, intermediate_size=I, max_window_layers=L, rope_theta=1e6,
           tie_word_embeddings=False)
if E:
    cfg.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=E,
               num_experts_per_tok=k, moe_intermediate_size=Ie, norm_topk_prob=True,
               decoder_sparse_step=1, mlp_only_layers=[])
g = torch.Generator(device="cuda").manual_seed(0)
def w(*shape):
    return (torch.randn(*shape, device="cuda", generator=g) * 0.02).to(torch.bfloat16).cpu()
def ones(n):
    return torch.ones(n, dtype=torch.bfloat16)
# One shard per layer (and one for the rest), so no process holds the whole model at once.
weight_map, total = {}, 0
def shard(name, t):
    global total
    save_file(t, f"{d}/{name}", metadata={"format": "pt"})
    weight_map.update({key: name for key in t})
    total += sum(x.numel() for x in t.values())
shard("model-rest.safetensors", {"model.embed_tokens.weight": w(V, D), "model.norm.weight": ones(D),
                                 "lm_head.weight": w(V, D)})
for l in range(L):
    p = f"model.layers.{l}."
    t = {p + "input_layernorm.weight": ones(D), p + "post_attention_layernorm.weight": ones(D),
         p + "self_attn.q_proj.weight": w(H * Dh, D), p + "self_attn.k_proj.weight": w(KV * Dh, D),
         p + "self_attn.v_proj.weight": w(KV * Dh, D), p + "self_attn.o_proj.weight": w(D, H * Dh),
         p + "self_attn.q_norm.weight": ones(Dh), p + "self_attn.k_norm.weight": ones(Dh)}
    if E:  # transformers 5's fused spelling
        t.update({p + "mlp.gate.weight": w(E, D), p + "mlp.experts.gate_up_proj": w(E, 2 * Ie, D),
                  p + "mlp.experts.down_proj": w(E, D, Ie)})
    else:
        t.update({p + "mlp.gate_proj.weight": w(I, D), p + "mlp.up_proj.weight": w(I, D),
                  p + "mlp.down_proj.weight": w(D, I)})
    shard(f"model-layer{l:03d}.safetensors", t)
if os.path.exists(f"{d}/model.safetensors"):
    os.remove(f"{d}/model.safetensors")
json.dump({"metadata": {}, "weight_map": weight_map},
          open(f"{d}/model.safetensors.index.json", "w"), indent=1)
json.dump(cfg, open(f"{d}/config.json", "w"), indent=2)
print(f"{kind}: {total / 1e9:.2f}B parameters")
PY
fi
echo "random $target-shaped target written in $(($(date +%s) - t0)) s"
extra=()
[[ ${SHARD:-0} == 1 ]] && extra+=(--train.shard_optimizer_state true)
[[ ${RECOMPUTE:-0} == 1 ]] && extra+=(--train.recompute_layers true)
((gpus > 1)) && extra+=(--runtime.gradient_exchange "${EXCHANGE:-device}")
ckpt=${CKPT_EVERY:-0}
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 \
    > "$run/memory.csv" 2>/dev/null &
smi=$!
t0=$(date +%s)
timeout 420 "$bin" train --target "$tdir" --data "$run/data" --output "$run/r" \
    --runtime.devices "$gpus" --drafter.num_layers 5 --drafter.block_size 16 \
    --train.max_length 3072 --train.num_anchors 512 --train.max_steps "$steps" \
    --train.checkpoint_every "$ckpt" --train.eval_every 0 --train.log_every 1 --train.epochs 1000 \
    "${extra[@]}" > "$dest/online-train.txt" 2>&1
rc=$?
kill $smi 2> /dev/null
echo "dflash train: exit $rc after $(($(date +%s) - t0)) s (target load, planning, $steps steps)"
grep -E "drafter:|training on|graphs|sharded|gradients|memory: peak" "$dest/online-train.txt" |
    head -n 10
cp "$run/r/metrics.jsonl" "$dest/online-metrics.jsonl" 2> /dev/null
cp "$run/memory.csv" "$dest/online-memory.csv" 2> /dev/null
python3 - "$run/r/metrics.jsonl" "$run/memory.csv" "$gpus" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if not r.get("eval")]
gpus = int(sys.argv[3])
# The step time: the tokens of the whole step over its rate (the progress line's own figure).
steps = [r for r in rows if r.get("tokens_per_s")]
late = steps[3:] or steps
tps = statistics.median(r["tokens_per_s"] for r in late)
print(f"steps {len(rows)}: loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}")
print(f"tokens/s median over steps {late[0]['step']}..{late[-1]['step']}: {tps:.0f} "
      f"(min {min(r['tokens_per_s'] for r in late):.0f}, max {max(r['tokens_per_s'] for r in late):.0f})")
print(f"samples/s (3072-token sequences): {tps / 3072:.2f} for {gpus} GPU(s), "
      f"{tps / 3072 / gpus:.2f} per GPU; step {3072 * gpus / tps * 1e3:.1f} ms")
# Wall time between consecutive steps' records: a checkpoint that stalls the step shows here.
wall = [(b["step"], b["elapsed_s"] - a["elapsed_s"]) for a, b in zip(rows, rows[1:])
        if "elapsed_s" in a and "elapsed_s" in b]
print("wall s between steps:", " ".join(f"{s}:{t:.3f}" for s, t in wall))
peak, when, seen = {}, {}, {}
for line in open(sys.argv[2]):  # one line per GPU every 0.5 s from the start of dflash train
    try:
        i, m = (int(x) for x in line.split(","))
    except ValueError:
        continue
    seen[i] = seen.get(i, 0) + 1
    if m > peak.get(i, 0):
        peak[i], when[i] = m, (seen[i] - 1) * 0.5
print("peak GPU memory (MiB, nvidia-smi):", peak)
for i, m in sorted(peak.items()):  # target #12 counts GB: say both units
    print(f"GPU {i}: {m} MiB = {m / 1024:.2f} GiB = {m * 2**20 / 1e9:.2f}e9 bytes, first seen about "
          f"{when[i]:.1f} s after the start of {seen[i] * 0.5:.0f} s")
PY
exit $rc
