#!/usr/bin/env bash
# House rules CI enforces (docs/design.md "Layers", docs/design.md "Memory and threads",
# docs/design.md "Builds and tests"): clang-format, no thread_local, no getenv outside the settings
# registry (src/config/), no mutable statics.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
files=$(git ls-files '*.h' '*.cpp' '*.cc' '*.cu' '*.cuh' 2>/dev/null || true)
if [ -n "$files" ]; then
    if ! clang-format --dry-run --Werror $files; then
        echo "style: files above are not clang-formatted (run: clang-format -i FILE)"
        fail=1
    fi
fi
# The keyword, not the word inside a string literal (the cuda_graphs.capture_mode choice "thread_local").
if grep -rnE '\bthread_local\b' src | grep -vE '"[^"]*\bthread_local\b[^"]*"'; then
    echo "style: thread_local found in src/ (state lives in objects that are passed in)"
    fail=1
fi
if grep -rnE '\b(std::)?(secure_)?getenv\s*\(' src --include='*.h' --include='*.cpp' --include='*.cu' \
        | grep -v '^src/config/'; then
    echo "style: getenv outside src/config/ (the settings registry is the only reader of the environment)"
    fail=1
fi
if grep -rnE '^\s*static\s+(std::|int|bool|float|double|size_t|int64_t|uint64_t|char\b|auto)' src \
        --include='*.cpp' --include='*.h' --include='*.cu' | grep -vE 'constexpr|static_assert|const\b|\('; then
    echo "style: mutable static found in src/ (only constexpr/immutable tables may be static)"
    fail=1
fi
[ "$fail" -eq 0 ] && echo "style: ok"
exit "$fail"
