# Sourced by the scripts that run on the GPU machine (test-gpu.sh, multi-gpu-check.sh,
# online-train-check.sh), from the repository root: unpacks gpu-bundle/bundle.tar.xz
# (scripts/gpu-bundle.sh) into a fresh folder, $run, and points the loader at cuBLASLt and NCCL
# (which GPU workers load at run time to sum on the devices) where the CUDA toolkit or the
# machine's Python environment has them. NVLink multicast stays off (docs/performance.md).
run=$(mktemp -d)
tar -C "$run" -xJf gpu-bundle/bundle.tar.xz
pylib() {  # the lib/ folder of an nvidia.* Python package (a namespace package has no __file__)
    python3 -c "import importlib, sys; m = importlib.import_module(sys.argv[1]); print(list(m.__path__)[0] + '/lib')" "$1" 2>/dev/null || true
}
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$(pylib nvidia.cublas):$(pylib nvidia.nccl):${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0

# A byte-tokenized dataset of this repository's own text in $1 (for runs that need real text of
# any model's, e.g. throughput at a target's geometry), built with the bundle's dflash.
repo_text_data() {
    python3 - "$run/corpus.jsonl" <<'PY'
import json, pathlib, sys
with open(sys.argv[1], "w") as out:
    for d in ["docs", "src", "tests", "tools"]:
        for p in sorted(pathlib.Path(d).rglob("*")):
            if p.is_file() and p.suffix in {".md", ".cpp", ".h", ".cu", ".py", ".sh"}:
                out.write(json.dumps({"text": p.read_text(errors="replace")}) + "\n")
PY
    "$run/bin/dflash" data prepare -i "$run/corpus.jsonl" -o "$1"
}
