#!/usr/bin/env bash
# tests/run.sh TARGET... — runs each test target, prints its time, and ends with the one line
# "N passed, N failed[, N skipped]" counted over every check of every target.
# A target is an executable (C test binary) or a command line in quotes. A check prints "ok ",
# "FAIL ", "SKIP " or, for a check that only compiles and links, "built ": builds are counted on
# a line of their own, never as passed tests.
# A target written "pass:NAME:COMMAND" is a second pass of the suite (make test-asan): its checks
# are counted on a line of their own, not again in the total; its failures are added to the
# total's failed count, so the last line never hides one.
set -u
passed=0; failed=0; skipped=0; built=0
passes=()
for target in "$@"; do
    pass_name=
    if [[ "$target" == pass:*:* ]]; then
        pass_name=${target#pass:}; pass_name=${pass_name%%:*}
        target=${target#pass:"$pass_name":}
    fi
    echo "== $target"
    start=$(date +%s.%N)
    out=$(mktemp)
    bash -c "$target" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    end=$(date +%s.%N)
    p=$(grep -c '^ok ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
    b=$(grep -c '^built ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $target: exited with status $rc and no failed check (crash?)"
        f=1
    fi
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ] && [ "$b" -eq 0 ]; then
        echo "FAIL $target: ran no check"
        f=1
    fi
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')
    if [ -n "$pass_name" ]; then
        # the nested runner's own last line is its count; it was printed above
        passes+=("$(printf '%s pass: %d passed, %d failed, %d skipped, %d built in %.0f s (not counted in the total below)' \
            "$pass_name" "$p" "$f" "$s" "$b" "$secs")")
        failed=$((failed + f))
    else
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s)); built=$((built + b))
    fi
    printf '   %s: %d passed, %d failed, %d skipped, %d built in %.1f s\n' "$target" "$p" "$f" "$s" \
        "$b" "$secs"
    rm -f "$out"
done
for line in "${passes[@]+"${passes[@]}"}"; do echo "$line"; done
[ "$built" -gt 0 ] && echo "compile-only checks: $built built (not counted as passed tests)"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
