#!/usr/bin/env bash
# Configures and builds into build/ (Release). Extra arguments go to cmake's configure step,
# e.g. scripts/build.sh -DDFLASH_CUDA=OFF. DFLASH_WERROR=ON in the environment (CI sets it)
# makes every C++ warning an error.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_WERROR="${DFLASH_WERROR:-OFF}" "$@"
cmake --build build -j "$jobs"
