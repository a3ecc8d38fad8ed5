# tests/mpi_common.sh — the setup the multi-process tests share (test_mpi.sh, test_cp.sh,
# test_zero.sh), sourced from the repository root after the test sets
#   CHECKS  its check names (each printed as SKIP where mpirun cannot run here),
#   PREFIX  what each check name is printed with (e.g. "zero_"),
#   NEEDS   the binaries it runs, each with the make target that builds it ("PATH:TARGET").
# It gives mpin N CMD... (mpirun -np N, 1 OpenMP thread per rank, a 300 s bound), a work folder
# $W (removed unless a check failed), ok/fail/report, and $W/data: 6000 bytes of README.md
# prepared as byte-level shards (about 42 windows of 4 x 32). A test that cannot start two ranks
# here prints SKIP for every check and exits 0: an environment problem, not a seedgpt result.
skip_all() { for c in "${CHECKS[@]}"; do echo "SKIP $PREFIX$c: $1"; done; exit 0; }
command -v mpirun > /dev/null 2>&1 || skip_all "no mpirun (Debian: openmpi-bin)"
for need in "${NEEDS[@]}"; do
    [ -x "${need%%:*}" ] ||
        skip_all "${need%%:*} is not built (${need#*:}; needs mpicc from libopenmpi-dev)"
done

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
unset SEEDGPT_FAULT SEEDGPT_KEEP_EXPORT
# root needs --allow-run-as-root; more ranks than cores need --oversubscribe; shared memory
# without the single-copy mechanism, which containers often forbid
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader
        --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS -x OMP_WAIT_POLICY)
[ -n "${SEEDGPT_MPIRUN_FLAGS:-}" ] && read -r -a MPIRUN <<< "mpirun $SEEDGPT_MPIRUN_FLAGS"
mpin() { local n=$1; shift; timeout 300 "${MPIRUN[@]}" -np "$n" "$@"; }

W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_$(basename "$0" .sh).XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   $PREFIX$1: $2"; }
fail() { echo "FAIL $PREFIX$1: $2"; failed=1; }
report() { if [ "$2" = 0 ]; then ok "$1" "$3"; else fail "$1" "$3"; fi; }

if ! mpin 2 true > "$W/probe.out" 2>&1; then
    skip_all "mpirun -np 2 cannot start here: $(grep -m1 -v '^-*$' "$W/probe.out")"
fi

mkdir -p "$W/text"
head -c 6000 README.md > "$W/text/doc.txt"
"${TRAIN:-./train}" prepare "$W/text/doc.txt" "$W/data" > /dev/null ||
    { fail data "prepare failed"; exit 1; }
