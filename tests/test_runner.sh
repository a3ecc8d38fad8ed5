#!/usr/bin/env bash
# tests/test_runner.sh — tests/run.sh's own counting, with toy targets: a failure of a pass run in
# the background (make test's ASan + UBSan pass) reaches the total and the exit status, its output
# comes after the other targets', and TEST_PASS_BG=0 runs it in its place.
set -u
cd "$(dirname "$0")/.."
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_runner.XXXXXX")
trap 'rm -rf "$W"' EXIT
# the toy targets' "ok" and "FAIL" are indented here, so that this test's own runner does not count them
run() { "$@" > "$W/out" 2>&1; echo $? > "$W/rc"; sed -i 's/^/  > /' "$W/out"; }
last() { tail -1 "$W/out" | sed 's/^  > //'; }

run env TEST_PASS_BG=1 tests/run.sh "pass:P:sleep 1; echo FAIL inner" "echo ok a" "echo ok b"
at() { grep -n -x -m1 "  > $1" "$W/out" | cut -d: -f1; }
oa=$(at "ok a"); fl=$(at "FAIL inner"); order="ok a at ${oa:-?}, FAIL inner at ${fl:-?}"
if [ "$(cat "$W/rc")" -eq 1 ] && [ "$(last)" = "2 passed, 1 failed" ] && \
   grep -q 'P pass: 0 passed, 1 failed' "$W/out" && [ "${oa:-0}" -gt 0 ] && [ "${fl:-0}" -gt "${oa:-0}" ]; then
    echo "ok   background_pass_failure_reaches_the_total_and_the_status: status 1, \"$(last)\", its output after the others' ($order)"
else
    echo "FAIL background_pass_failure_reaches_the_total_and_the_status: status $(cat "$W/rc"), last line \"$(last)\", $order"
fi

run env TEST_PASS_BG=1 tests/run.sh "pass:P:echo ok i; echo ok j" "echo ok a"
if [ "$(cat "$W/rc")" -eq 0 ] && [ "$(last)" = "1 passed, 0 failed" ] && grep -q 'P pass: 2 passed, 0 failed' "$W/out"; then
    echo "ok   background_pass_counted_on_its_own_line: status 0, \"$(last)\", the pass's 2 on its line"
else
    echo "FAIL background_pass_counted_on_its_own_line: status $(cat "$W/rc"), last line \"$(last)\""
fi

run env TEST_PASS_BG=0 tests/run.sh "pass:P:echo FAIL inner" "echo ok a"
oa=$(at "ok a"); fl=$(at "FAIL inner"); order="ok a at ${oa:-?}, FAIL inner at ${fl:-?}"
if [ "$(cat "$W/rc")" -eq 1 ] && [ "$(last)" = "1 passed, 1 failed" ] && [ "${fl:-0}" -gt 0 ] && [ "${oa:-0}" -gt "${fl:-0}" ]; then
    echo "ok   pass_in_its_place_with_test_pass_bg_0: status 1, \"$(last)\", its output first ($order)"
else
    echo "FAIL pass_in_its_place_with_test_pass_bg_0: status $(cat "$W/rc"), last line \"$(last)\", $order"
fi
