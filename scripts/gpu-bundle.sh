#!/usr/bin/env bash
# Packs what the GPU machine runs into gpu-bundle/bundle.tar.xz (ignored by git; name it in the
# device tool's `carry`): the dflash binary, every CUDA test binary and the benchmarks. They need no
# shared library the GPU machine lacks (no OpenMP runtime: the CPU backend has its own threads).
# Binaries are stripped; xz shares their common code, so the bundle is a few MB.
# Run after scripts/build.sh; then on the GPU machine: scripts/test-gpu.sh (it unpacks the bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/bench" gpu-bundle
cp "$build/dflash" "$stage/bin/"
for t in tests/cuda/*_test.cpp; do
    name=$(basename "$t" .cpp)
    cp "$build/$name" "$stage/bin/"
done
cp "$build"/bench/* "$stage/bench/"
strip "$stage"/bin/* "$stage"/bench/*
tar -C "$stage" -cf - bin bench | xz -6 -T2 > gpu-bundle/bundle.tar.xz
ls -la gpu-bundle/bundle.tar.xz
