#!/usr/bin/env bash
# tests/run.sh TARGET... — runs each test target, prints its time, and ends with the one line
# "N passed, N failed[, N skipped]" counted over every check of every target.
# A target is an executable (C test binary) or a command line in quotes.
set -u
passed=0; failed=0; skipped=0; crashed=0
for target in "$@"; do
    echo "== $target"
    start=$(date +%s.%N)
    out=$(mktemp)
    bash -c "$target" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    end=$(date +%s.%N)
    p=$(grep -c '^ok ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $target: exited with status $rc and no failed check (crash?)"
        f=1
    fi
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
        echo "FAIL $target: ran no check"
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    printf '   %s: %d passed, %d failed, %d skipped in %.1f s\n' "$target" "$p" "$f" "$s" \
        "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')"
    rm -f "$out"
done
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
