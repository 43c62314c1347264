#!/usr/bin/env bash
# On the GPU machine: builds dflash, the CUDA tests and the benchmarks from this tree with the
# dependencies carried in build-deps/ (scripts/pack-build-deps.sh), into build-gpu-there/, and packs
# them as gpu-bundle/bundle.tar.xz exactly as scripts/gpu-bundle.sh does here, so
# scripts/test-gpu.sh runs unchanged afterwards. 16 cores build the tree in about a minute and a
# half; the 2-core development machine needs much longer. Extra arguments go to cmake (e.g.
# -DCMAKE_CXX_FLAGS=-Wshadow to list a warning over the whole tree). The build log is
# build-gpu-there/build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$PWD/build-deps/usr
[[ -d $deps ]] || { echo "no build-deps/: run scripts/pack-build-deps.sh here and carry it" >&2; exit 2; }
build=build-gpu-there
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA=ON \
    -DDFLASH_BUILD_GPU_TESTS=ON -DDFLASH_BUILD_BENCH=ON -DCMAKE_PREFIX_PATH="$deps" \
    -DCMAKE_INCLUDE_PATH="$deps/include" -DCMAKE_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu" \
    "$@" > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
if ! cmake --build "$build" -j "$(nproc)" > "$build/build.log" 2>&1; then
    grep -E -A5 "error|FAILED" "$build/build.log" | head -80
    exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/bench" gpu-bundle
cp "$build/dflash" "$build/cuda_tests" "$stage/bin/"
cp "$build"/bench/* "$stage/bench/"
tar -C "$stage" -cf - bin bench | xz -1 -T0 > gpu-bundle/bundle.tar.xz
echo "built: $(grep -c '^\[' "$build/build.log") steps, $(grep -c 'warning:' "$build/build.log") warnings"
