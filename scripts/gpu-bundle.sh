#!/usr/bin/env bash
# Packs what the GPU machine runs into gpu-bundle/bundle.tar.xz (ignored by git; name it in the
# device tool's `carry`): the dflash binary, the CUDA tests (one executable, cuda_tests: every
# tests/cuda/*_test.cpp) and the benchmarks. They need no shared library the GPU machine lacks (no
# OpenMP runtime: the CPU backend has its own threads). Binaries are stripped; xz shares their
# common code, so the bundle is a few MB.
# Run after scripts/build.sh (or on a fresh checkout): it turns on DFLASH_BUILD_GPU_TESTS in the
# build folder (a plain build leaves the CUDA tests and CUDA benchmarks out) and builds them. Then
# on the GPU machine: scripts/test-gpu.sh (it unpacks the bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA=ON \
    -DDFLASH_BUILD_GPU_TESTS=ON -DDFLASH_BUILD_BENCH=ON > /dev/null
cmake --build "$build" -j "$(nproc)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/bench" gpu-bundle
cp "$build/dflash" "$build/cuda_tests" "$stage/bin/"
cp "$build"/bench/* "$stage/bench/"
strip "$stage"/bin/* "$stage"/bench/*
tar -C "$stage" -cf - bin bench | xz -6 -T2 > gpu-bundle/bundle.tar.xz
ls -la gpu-bundle/bundle.tar.xz
