#!/usr/bin/env bash
# tests/run.sh TARGET... — runs each test target, prints its time, and ends with the one line
# "N passed, N failed[, N skipped]" counted over every check of every target.
# A target is an executable (C test binary) or a command line in quotes. A check prints "ok ",
# "FAIL ", "SKIP " or, for a check that only compiles and links, "built ": builds are counted on
# a line of their own, never as passed tests.
# A target written "pass:NAME:COMMAND" is a second pass of the suite (make test-asan): its checks
# are counted on a line of their own, not again in the total; its failures are added to the
# total's failed count, so the last line never hides one.
# A pass runs in the background, beside the targets after it, where the machine has more than one
# core (TEST_PASS_BG=0 runs it in its place): the other targets leave part of a second core idle
# (one test at a time, most of them one thread), and the pass is self-contained (its own build
# tree, its own temporary folders). Its output is printed whole once the other targets are done,
# so no line of it is interleaved with theirs.
set -u
passed=0; failed=0; skipped=0; built=0
passes=()
bg_pids=(); bg_targets=(); bg_names=(); bg_outs=(); bg_starts=()
BG=${TEST_PASS_BG:-auto}
if [ "$BG" = auto ]; then
    BG=0; [ "$(nproc 2>/dev/null || echo 1)" -gt 1 ] && BG=1
fi

# count NAME_OR_EMPTY TARGET OUT RC SECS: adds one target's checks to the totals and prints its line
count() {
    local pass_name=$1 target=$2 out=$3 rc=$4 secs=$5 p f s b
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
}
elapsed() { awk -v a="$1" -v b="${2:-$(date +%s.%N)}" 'BEGIN{print b-a}'; }

for target in "$@"; do
    pass_name=
    if [[ "$target" == pass:*:* ]]; then
        pass_name=${target#pass:}; pass_name=${pass_name%%:*}
        target=${target#pass:"$pass_name":}
    fi
    start=$(date +%s.%N)
    out=$(mktemp)
    if [ -n "$pass_name" ] && [ "$BG" = 1 ]; then
        echo "== $target (in the background; its output follows the other targets')"
        # its own status in $out.rc; stdin closed so it never reads the terminal
        ( bash -c "$target" > "$out" 2>&1 < /dev/null; echo $? > "$out.rc"; date +%s.%N > "$out.end" ) &
        bg_pids+=($!); bg_targets+=("$target"); bg_names+=("$pass_name"); bg_outs+=("$out")
        bg_starts+=("$start")
        continue
    fi
    echo "== $target"
    bash -c "$target" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    count "$pass_name" "$target" "$out" "$rc" "$(elapsed "$start")"
    rm -f "$out"
done
for i in "${!bg_pids[@]}"; do
    wait "${bg_pids[$i]}"
    out=${bg_outs[$i]}
    echo "== ${bg_targets[$i]} (ran in the background)"
    cat "$out"
    rc=$(cat "$out.rc" 2> /dev/null || echo 1)
    count "${bg_names[$i]}" "${bg_targets[$i]}" "$out" "$rc" \
        "$(elapsed "${bg_starts[$i]}" "$(cat "$out.end" 2> /dev/null)")"
    rm -f "$out" "$out.rc" "$out.end"
done
for line in "${passes[@]+"${passes[@]}"}"; do echo "$line"; done
[ "$built" -gt 0 ] && echo "compile-only checks: $built built (not counted as passed tests)"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
