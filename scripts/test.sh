#!/usr/bin/env bash
# Runs the house-rule checks and every test that needs no GPU (labels cpu and slow; in a build with
# DFLASH_BUILD_GPU_TESTS=ON the cuda tests run too and report themselves as skipped where no GPU is
# present). Exits non-zero on any failure. Extra arguments go to ctest, e.g. -L cpu, -R sgemm_test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/check_style.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE multi_gpu "$@"
