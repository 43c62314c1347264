#!/usr/bin/env bash
# Installs every Debian package the build and the tests need, and the npm packages of tools/js
# where node is present. Safe to run again.
set -euo pipefail
packages=(
    build-essential cmake ninja-build pkg-config
    libgtest-dev libbenchmark-dev
    nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libfmt-dev
    libpcre2-dev libutf8proc-dev
    clang-format
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    echo "setup: all packages present"
fi
# The tokenizer cross-check (tests/tokenizer/hf_crosscheck_test.cpp) compares against tokenizers.js,
# an independent implementation from the npm registry, pinned in tools/js/package-lock.json. It is
# installed where node is present; the test skips visibly without node and fails, saying how to
# fix it, with node but without the package.
js="$(cd "$(dirname "$0")/.." && pwd)/tools/js"
if command -v npm >/dev/null 2>&1; then
    if [ ! -f "$js/node_modules/.package-lock.json" ] ||
        [ "$js/package-lock.json" -nt "$js/node_modules/.package-lock.json" ]; then
        echo "setup: installing tools/js (npm ci)"
        npm ci --prefix "$js" --no-audit --no-fund --loglevel=error ||
            echo "setup: warning: npm ci failed; hf_crosscheck_test will fail until it succeeds"
    else
        echo "setup: tools/js present"
    fi
else
    echo "setup: node/npm not found; hf_crosscheck_test will be skipped"
fi
