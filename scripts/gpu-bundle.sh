#!/usr/bin/env bash
# Packs what the GPU machine runs into gpu-bundle/bundle.tar.xz (ignored by git; name it in the
# device tool's `carry`): the dflash binary, every CUDA test binary, the benchmarks, and the one
# shared library the binaries need that the GPU machine lacks (libgomp). Binaries are stripped;
# xz shares the statically linked OpenBLAS between them, so the bundle is a few MB.
# Run after scripts/build.sh; then on the GPU machine: scripts/test-gpu.sh (it unpacks the bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/bench" "$stage/lib" gpu-bundle
cp "$build/dflash" "$stage/bin/"
for t in tests/cuda/*_test.cpp; do
    name=$(basename "$t" .cpp)
    cp "$build/$name" "$stage/bin/"
done
cp "$build"/bench/* "$stage/bench/"
strip "$stage"/bin/* "$stage"/bench/*
cp "$(gcc -print-file-name=libgomp.so.1)" "$stage/lib/"
tar -C "$stage" -cf - bin bench lib | xz -6 -T2 > gpu-bundle/bundle.tar.xz
ls -la gpu-bundle/bundle.tar.xz
