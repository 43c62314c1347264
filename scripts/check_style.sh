#!/usr/bin/env bash
# House rules CI enforces (scripts/test.sh runs this): clang-format, the layering of src/
# (docs/design.md "Layers"), no thread_local, no getenv outside the settings registry (src/config/),
# no mutable statics (docs/design.md "Memory and threads", "Builds and tests").
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
# Layers, lowest first (docs/design.md "Layers"): a file in src/<layer>/ may include headers of its
# own layer and of lower ones only. A directory of src/ that is not listed is an error too, so a new
# layer gets its place here and in docs/design.md.
layers="core config comm backend tokenizer data model infer train options demo cli"
if ! find src -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) \
        -print0 | sort -z | xargs -0 -r awk -v order="$layers" '
    BEGIN { n = split(order, names, " "); for (i = 1; i <= n; ++i) rank[names[i]] = i; bad = 0 }
    FNR == 1 {
        split(FILENAME, parts, "/"); own = parts[2]
        if (!(own in rank)) {
            printf "%s: src/%s/ is not a known layer (add it to scripts/check_style.sh and docs/design.md)\n", FILENAME, own
            bad = 1; nextfile
        }
    }
    /^[ \t]*#[ \t]*include[ \t]*"[^"\/]+\// {
        inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
        split(inc, p, "/"); to = p[1]
        if ((to in rank) && rank[to] > rank[own]) {
            printf "%s:%d: %s (layer %s) includes %s of the higher layer %s\n", FILENAME, FNR, $0, own, inc, to
            bad = 1
        }
    }
    END { exit bad }'; then
    echo "style: an include goes up the layers (order: ${layers// / < }; see docs/design.md \"Layers\")"
    fail=1
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
