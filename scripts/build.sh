#!/usr/bin/env bash
# Configures and builds into build/ (Release). Extra arguments go to cmake's configure step,
# e.g. scripts/build.sh -DDFLASH_CUDA=OFF. CI=true in the environment (.ci/run sets it) makes every
# C++ warning an error (DFLASH_WERROR).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_WERROR="$([[ ${CI:-} == true ]] && echo ON || echo OFF)" "$@"
cmake --build build -j "$jobs"
