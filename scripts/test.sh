#!/usr/bin/env bash
# Runs the house-rule checks and every test that needs no GPU (labels cpu and slow; cuda tests run
# too and report themselves as skipped where no GPU is present). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/check_style.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE multi_gpu "$@"
