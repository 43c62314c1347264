#!/usr/bin/env bash
# Copies the build dependencies' Debian files (headers, CMake package files, the static libraries
# the binaries link) into build-deps/usr (git-ignored, about 7 MB), so that the GPU machine, which
# cannot install anything, can build the tree itself with its 16 cores (scripts/gpu-build-there.sh;
# name build-deps in the device tool's `carry`). Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf build-deps
packages="nlohmann-json3-dev libfmt-dev libfmt9 libtomlplusplus-dev libcli11-dev libgtest-dev
          libpcre2-dev libutf8proc-dev"
for p in $packages; do
    dpkg -L "$p" | while read -r f; do
        [[ -f $f || -L $f ]] || continue
        case $f in /usr/share/doc/* | /usr/share/man/*) continue ;; esac
        mkdir -p "build-deps$(dirname "$f")"
        cp -a "$f" "build-deps$f"
    done
done
du -sh build-deps
