#!/usr/bin/env bash
# tests/mutants/run.sh [FILTER...] — mutation testing: proof that the suite catches planted bugs.
#
# Each tests/mutants/NAME.patch is one small, realistic bug: a unified diff against the tree
# (patch -p1) after a header of comment lines that patch ignores, one of which names the tests
# that should catch it:
#     # tests: build/tests/test_philox build/tests/test_attention
# An entry under build/ is a make target and a test binary; any other entry is a command run from
# the tree's root (a shell test: it runs ./train, which is built for it, and tests/test_mpi.sh,
# tests/test_cp.sh and tests/test_cp_ranks.sh ./train_mpi too). A shell test that runs other
# binaries too has them named on a header line of make targets, built with the tests' own:
#     # targets: train_mpi build/tests/train_mpi_test
#
# The tree is copied once, build/ included, to a temporary folder. There, for each mutant: the
# patch is applied (one that does not apply is an ERROR, never a kill), the relevant targets are
# rebuilt with make, the tests run one by one under a timeout, and the patch is reverted (the
# reverted files are touched, so the next build recompiles what the mutant compiled). A mutant is
# killed by the first of its tests that exits non-zero; one that fails to compile is killed by
# "(build)", a weak kill that the table shows apart. Before any mutant, every test named must
# pass on the unmutated copy, else nothing is measured.
#
# A mutant that plants its bug in a kernel only some CPUs run (an AVX-512 table) names the CPU
# flags it needs on a header line, as /proc/cpuinfo spells them:
#     # requires: avx512f avx512bf16
# On a CPU without them its tests skip that kernel, so the mutant can be neither killed nor
# survive here: it is not run, its row says which flag is missing, and the last line counts it
# apart ("N not run on this CPU"); run make mutants on a CPU with the flag to judge it.
#
# Prints one row per mutant (name, what killed it or SURVIVED, seconds) and ends with the line
# "N killed, N survived" (", N error" added when a patch did not apply or a header is bad; ", N
# not run on this CPU" for the mutants above). Exits non-zero if any mutant survived or errored.
# FILTERs run only the mutants whose name contains one of them.
# Each mutant's log (patch, build, test output) is written to build/mutants/NAME.log.
#
# Where ccache is installed (apt-get install ccache), every compile goes through it (its compiler
# links in /usr/lib/ccache put first on PATH, so mpicc's gcc too): a reverted file then compiles
# from the cache, which halves a mutant of a shared header. MUTANTS_CCACHE=0 turns it off.
#
# Environment: MUTANTS_JOBS (make -j, default 2), MUTANTS_TIMEOUT (seconds per test, default
# 300), MUTANTS_KEEP=1 keeps the temporary copy.
set -u

usage="usage: tests/mutants/run.sh [FILTER...]  (run only the mutants whose name contains one of the FILTERs)"
filters=("$@")
for f in "${filters[@]+"${filters[@]}"}"; do
    case "$f" in
        -h|--help) echo "$usage"; exit 0 ;;
        -*) echo "tests/mutants/run.sh: unknown option $f; $usage" >&2; exit 2 ;;
    esac
done
jobs=${MUTANTS_JOBS:-2}
timeout_s=${MUTANTS_TIMEOUT:-300}
for v in "$jobs" "$timeout_s"; do
    case "$v" in
        ''|*[!0-9]*|0) echo "tests/mutants/run.sh: MUTANTS_JOBS and MUTANTS_TIMEOUT must be positive integers (got '$v')" >&2; exit 2 ;;
    esac
done

root=$(cd "$(dirname "$0")/../.." && pwd)
ccache_note=""
if [ "${MUTANTS_CCACHE:-1}" != 0 ] && [ -x /usr/lib/ccache/gcc ]; then
    export PATH="/usr/lib/ccache:$PATH"
    # each run's copy is a new folder: hash the sources, not the folder, so runs share the cache
    export CCACHE_NOHASHDIR=1
    ccache_note=" (compiles through ccache)"
fi
mutants=()
for p in "$root"/tests/mutants/*.patch; do
    [ -e "$p" ] || continue
    name=$(basename "$p" .patch)
    if [ ${#filters[@]} -eq 0 ]; then mutants+=("$p"); continue; fi
    for f in "${filters[@]}"; do
        if [[ "$name" == *"$f"* ]]; then mutants+=("$p"); break; fi
    done
done
if [ ${#mutants[@]} -eq 0 ]; then
    echo "tests/mutants/run.sh: no mutant in tests/mutants/ matches '${filters[*]}'" >&2
    exit 2
fi

# the tests a patch names, one per line
tests_of() { sed -n 's/^# tests:[[:space:]]*//p' "$1" | head -n 1 | tr -s ' \t' '\n' | sed '/^$/d'; }
# the make targets a test needs: itself under build/, the trainer for a shell test (and the MPI
# trainer for the tests that run it)
target_of() {
    case "$1" in
        build/*) echo "$1" ;;
        tests/test_mpi.sh|tests/test_cp.sh|tests/test_cp_ranks.sh) echo train train_mpi ;;
        *) echo train ;;
    esac
}
# the make targets a patch adds (# targets:), one per line
extra_targets_of() { sed -n 's/^# targets:[[:space:]]*//p' "$1" | head -n 1 | tr -s ' \t' '\n' | sed '/^$/d'; }
# the CPU flags a patch needs (# requires:), one per line
requires_of() { sed -n 's/^# requires:[[:space:]]*//p' "$1" | head -n 1 | tr -s ' \t' '\n' | sed '/^$/d'; }
# the first of those flags this CPU lacks (empty when it has them all)
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*://') "
missing_flag_of() {
    local f
    for f in $(requires_of "$1"); do
        case "$cpu_flags" in *" $f "*) ;; *) echo "$f"; return ;; esac
    done
}
# the files a patch changes
files_of() { sed -n 's/^+++ b\/\([^[:space:]]*\).*/\1/p' "$1"; }

t_start=$(date +%s.%N)
work=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt-mutants.XXXXXX") || { echo "tests/mutants/run.sh: cannot make a temporary folder" >&2; exit 2; }
cleanup() { if [ "${MUTANTS_KEEP:-0}" = 1 ]; then echo "(copy kept in $work)"; else rm -rf "$work"; fi; }
trap cleanup EXIT
logdir="$root/build/mutants"
mkdir -p "$logdir"

# One copy of the tree with its build (mtimes kept, so make rebuilds only what is out of date);
# the other backends' build folders are not needed here.
tar -C "$root" --exclude=./.git --exclude=./out --exclude=./build/asan --exclude=./build/emu \
    --exclude=./build/emu-tsan --exclude=./build/cuda --exclude=./build/dev_cuda \
    --exclude='./build/cuda-sm*' --exclude='./build/dev_cuda-sm*' --exclude='./build/mpi_cuda-sm*' \
    --exclude=./build/mpi --exclude=./build/mpi_cuda --exclude=./build/mutants -cf - . \
    | tar -C "$work" -xf - || { echo "tests/mutants/run.sh: copying the tree to $work failed" >&2; exit 2; }
cd "$work" || exit 2
export SEEDGPT_TRAIN="$work/train"

# ---- the baseline: every named test builds and passes on the unmutated copy -----------------
all_tests=$(for p in "${mutants[@]}"; do tests_of "$p"; done | awk '!seen[$0]++')
all_targets=$({ for t in $all_tests; do target_of "$t"; done
               for p in "${mutants[@]}"; do extra_targets_of "$p"; done; } | awk '!seen[$0]++')
echo "mutation testing: ${#mutants[@]} mutant(s); copy of the tree in $work; logs in build/mutants/$ccache_note"
if ! make -j"$jobs" $all_targets > "$logdir/baseline.log" 2>&1; then
    echo "tests/mutants/run.sh: the unmutated tree does not build (make $all_targets); see build/mutants/baseline.log" >&2
    exit 2
fi
for t in $all_tests; do
    timeout "$timeout_s" bash -c "$t" >> "$logdir/baseline.log" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then
        how="fails (status $rc)"
        [ "$rc" -eq 124 ] && how="runs past MUTANTS_TIMEOUT=$timeout_s s"
        echo "tests/mutants/run.sh: $t $how on the unmutated tree, so it cannot judge a mutant; see build/mutants/baseline.log" >&2
        exit 2
    fi
done
printf 'baseline: %d test(s) pass on the unmutated tree (%.0f s)\n\n' "$(echo "$all_tests" | wc -w)" \
    "$(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')"

# ---- the mutants ------------------------------------------------------------------------------
killed=0; survived=0; errors=0; build_kills=0; not_run=0
printf '%-38s %-42s %7s\n' "mutant" "killed by" "seconds"
printf '%-38s %-42s %7s\n' "------" "---------" "-------"
for p in "${mutants[@]}"; do
    name=$(basename "$p" .patch)
    log="$logdir/$name.log"
    start=$(date +%s.%N)
    tests=$(tests_of "$p")
    files=$(files_of "$p")
    result=""
    : > "$log"
    missing=$(missing_flag_of "$p")
    if [ -z "$tests" ]; then
        result="ERROR: no '# tests:' line"
    elif [ -n "$missing" ]; then
        result="not run: this CPU lacks $missing"
    elif [ -z "$files" ]; then
        result="ERROR: no file changed"
    elif ! patch -p1 -f -s --dry-run < "$p" >> "$log" 2>&1; then
        result="ERROR: patch does not apply"
    else
        # the files as they were, to check the revert against (not the tree, which may be edited
        # while a run goes on)
        rm -rf "$work/.pristine"
        for f in $files; do mkdir -p "$work/.pristine/$(dirname "$f")"; cp -p "$f" "$work/.pristine/$f"; done
        patch -p1 -f -s --no-backup-if-mismatch < "$p" >> "$log" 2>&1
        targets=$({ for t in $tests; do target_of "$t"; done; extra_targets_of "$p"; } | awk '!seen[$0]++')
        echo "== make $targets" >> "$log"
        if ! timeout 1800 make -j"$jobs" $targets >> "$log" 2>&1; then
            result="(build)"
            build_kills=$((build_kills + 1))
        else
            for t in $tests; do
                echo "== $t" >> "$log"
                timeout "$timeout_s" bash -c "$t" >> "$log" 2>&1
                rc=$?
                if [ "$rc" -ne 0 ]; then
                    result=$t
                    [ "$rc" -eq 124 ] && result="$t (timeout)"
                    break
                fi
            done
            [ -n "$result" ] || result="SURVIVED"
        fi
        # revert; the copy must equal the tree again, else later mutants would measure nonsense
        patch -p1 -f -s -R --no-backup-if-mismatch < "$p" >> "$log" 2>&1
        for f in $files; do
            if ! cmp -s "$f" "$work/.pristine/$f"; then
                echo "tests/mutants/run.sh: reverting $name left $f different from before; stopping" >&2
                exit 2
            fi
            touch "$f"   # newer than whatever was built from the mutant
        done
    fi
    case "$result" in
        SURVIVED) survived=$((survived + 1)) ;;
        ERROR*) errors=$((errors + 1)) ;;
        "not run"*) not_run=$((not_run + 1)) ;;
        *) killed=$((killed + 1)) ;;
    esac
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    printf '%-38s %-42s %7s\n' "$name" "$result" "$secs"
done

echo
[ "$build_kills" -gt 0 ] && echo "($build_kills of the kills by a build failure: weak kills)"
printf 'total %.0f s\n' "$(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')"
tail_line=""
[ "$errors" -gt 0 ] && tail_line="$tail_line, $errors error"
[ "$not_run" -gt 0 ] && tail_line="$tail_line, $not_run not run on this CPU"
echo "$killed killed, $survived survived$tail_line"
[ "$survived" -eq 0 ] && [ "$errors" -eq 0 ]
