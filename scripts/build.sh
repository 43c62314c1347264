#!/usr/bin/env bash
# Configures and builds into build/ (Release). Extra arguments go to cmake's configure step,
# e.g. scripts/build.sh -DDFLASH_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
