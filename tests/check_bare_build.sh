#!/usr/bin/env bash
# tests/check_bare_build.sh — seedgpt builds on a bare CUDA machine: one with the CUDA toolkit, a
# C compiler and no Debian -dev packages (the machines a GPU is lent on). In a private mount
# namespace this hides the headers and libraries of OpenBLAS, cJSON, PCRE2, zlib and MPI (an empty
# folder or /dev/null bound over each), then, in a fresh copy of the tree:
#   - make cuda cuda-test-bins dev-cuda succeeds (CUDA_ARCHS=90: one target; the full list is
#     tests/check_cuda_archs.sh's), and make cuda's ptxas report is summed up (kernels, spills).
#     Where this runs, tests/check_cuda_build.sh leaves these builds to it: the .cu objects take
#     the same nvcc flags with or without the libraries, so one build of them shows both;
#   - ldd ./train_cuda lists none of the hidden libraries, and --version names what was left out;
#   - the emulated trainer built the same bare way (build/emu/train) trains 5 steps on
#     --device cuda and writes its JSON log.
# PCRE2's and zlib's runtime libraries stay: every Debian system has them (grep needs PCRE2), and
# binding over their -dev symlink would hide the runtime file it points to. Their headers and
# static libraries go, which is what decides the build.
# SKIP where this is not root, unshare is refused, or nvcc is absent.
#   BARE_KEEP=1  keep the copy (printed) for a look; BARE_CMD="..." runs that too, in the copy, bare
set -u
cd "$(dirname "$0")/.."
SRC=$(pwd)
CHECKS=(bare_machine_builds_cuda_and_tests_and_dev_cuda bare_train_cuda_links_none_of_the_hidden_libraries
        bare_build_names_what_it_left_out bare_emulated_trainer_trains_5_steps)
skip_all() { for c in "${CHECKS[@]}"; do echo "SKIP $c: $1"; done; exit 0; }
NVCC=${NVCC:-nvcc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
command -v "$NVCC" >/dev/null 2>&1 || [ -x "$CUDA_HOME/bin/nvcc" ] || skip_all "nvcc not found"
[ "$(id -u)" -eq 0 ] || skip_all "needs root for a private mount namespace (unshare -m)"
unshare -m true 2>/dev/null || skip_all "unshare -m is refused here"

W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_bare.XXXXXX")
keep=${BARE_KEEP:-0}
trap '[ "$keep" = 1 ] && echo "# bare copy kept: $W/tree" || rm -rf "$W"' EXIT

# ---- the fresh copy: what git tracks and what it would add (a clone's files), else all but build/
mkdir -p "$W/tree" "$W/empty"
if git -C "$SRC" rev-parse >/dev/null 2>&1; then
    (cd "$SRC" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$W/tree" 2>/dev/null)
else
    (cd "$SRC" && tar --exclude=./build -cf - .) | (cd "$W/tree" && tar -xf -)
fi

# ---- what to hide: folders get an empty folder, files /dev/null (an empty header fails the
# Makefile's probes just as a missing one does; see scripts/probe/)
ML=/usr/lib/x86_64-linux-gnu
MI=/usr/include/x86_64-linux-gnu
HIDE_DIRS=()
HIDE_FILES=()
for d in $MI/openblas-pthread $MI/openblas-openmp $MI/openblas64-pthread $MI/openblas64-openmp \
         $ML/openblas-pthread $ML/openblas-openmp $ML/openblas64-pthread $ML/openblas64-openmp \
         /usr/include/cjson $ML/openmpi $MI/openmpi /usr/lib/x86_64-linux-gnu/cmake/cJSON; do
    [ -d "$d" ] && HIDE_DIRS+=("$(readlink -f "$d")")
done
for f in $MI/cblas*.h $MI/openblas_config.h $MI/f77blas.h /usr/include/cblas*.h \
         $ML/libopenblas*.so* $ML/libopenblas*.a $ML/libblas.so* $ML/libblas.a $ML/libcblas* \
         $ML/libcjson*.so* $ML/libcjson*.a \
         /usr/include/pcre2.h /usr/include/pcre2posix.h $ML/libpcre2-*.a \
         /usr/include/zlib.h /usr/include/zconf.h $MI/zconf.h $ML/libz.a \
         $MI/mpi.h /usr/include/mpi.h $ML/libmpi*.so* $ML/libmpi*.a $ML/libopen-pal* $ML/libopen-rte* \
         /usr/bin/mpicc /usr/bin/mpicxx /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun; do
    [ -e "$f" ] || continue                        # (also a symlink whose target is gone)
    HIDE_FILES+=("$(readlink -f "$f")")
done
# one mount per path, none inside a folder that is hidden already (it could not be mounted on)
printf '%s\n' "${HIDE_DIRS[@]}" "${HIDE_FILES[@]}" | sort -u | awk '
    { for (i = 1; i <= n; i++) if (index($0, d[i] "/") == 1) next; d[++n] = $0; print }' > "$W/hidden.txt"
echo "# hides $(wc -l < "$W/hidden.txt") paths: $(sed -E 's#^/usr/(lib|include)/x86_64-linux-gnu/#\1:#; s#^/usr/##' "$W/hidden.txt" | sort -u | tr '\n' ' ' | head -c 900)"

# ---- inside the namespace: hide, then build and run in the copy
cat > "$W/inner.sh" <<'INNER'
set -u
W=$1; NVCC=$2; CUDA_HOME=$3; CUDA_ARCHS=$4
mount --make-rprivate / || { echo "# mount --make-rprivate failed"; exit 90; }
while read -r p; do
    if [ -d "$p" ]; then mount --bind "$W/empty" "$p"; else mount --bind /dev/null "$p"; fi || {
        echo "# cannot hide $p"; exit 90; }
done < "$W/hidden.txt"
cd "$W/tree"
export PATH="$CUDA_HOME/bin:$PATH"
JOBS=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)
# make cuda first, on its own log (its ptxas report is read below), then the tests and dev/cuda
make -j"$JOBS" --no-print-directory NVCC="$NVCC" CUDA_ARCHS="$CUDA_ARCHS" cuda > "$W/build_cuda.log" 2>&1 &&
    make -j"$JOBS" --no-print-directory NVCC="$NVCC" CUDA_ARCHS="$CUDA_ARCHS" cuda-test-bins dev-cuda > "$W/build.log" 2>&1
echo "build_rc=$? build_s=$(( $(date +%s) - start ))" > "$W/result"
[ -x ./train_cuda ] && ldd ./train_cuda > "$W/ldd.txt" 2>&1
[ -x ./train_cuda ] && ./train_cuda --version > "$W/version.txt" 2>&1
start=$(date +%s)
make -j"$JOBS" --no-print-directory build/emu/train > "$W/emu_build.log" 2>&1
echo "emu_rc=$? emu_s=$(( $(date +%s) - start ))" >> "$W/result"
if [ -x build/emu/train ]; then
    mkdir -p "$W/text" && head -c 3000 README.md > "$W/text/doc.txt"
    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive build/emu/train prepare "$W/text/doc.txt" "$W/data" \
        > "$W/train.out" 2>&1 &&
    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive build/emu/train --device cuda \
        --train "$W/data/train_*.bin" --layers 2 --heads 2 --embd 32 --seq-len 16 --batch 2 \
        --steps 5 --dropout 0.1 --recompute layer --log-every 1 --log-json "$W/log.jsonl" \
        >> "$W/train.out" 2>&1
    echo "train_rc=$?" >> "$W/result"
fi
if [ -n "${BARE_CMD:-}" ]; then bash -c "$BARE_CMD"; echo "cmd_rc=$?" >> "$W/result"; fi
INNER
BARE_CMD=${BARE_CMD:-} unshare -m bash "$W/inner.sh" "$W" "$NVCC" "$CUDA_HOME" "${CUDA_ARCHS:-90}"
rc=$?
if [ $rc -eq 90 ]; then
    for c in "${CHECKS[@]}"; do echo "FAIL $c: could not hide a library inside the namespace (see above)"; done
    exit 1
fi
build_rc=1; build_s=0; emu_rc=1; emu_s=0; train_rc=1
[ -f "$W/result" ] && eval "$(cat "$W/result")"

if [ "$build_rc" -eq 0 ]; then
    echo "built bare_machine_builds_cuda_and_tests_and_dev_cuda: make cuda cuda-test-bins dev-cuda (CUDA_ARCHS=${CUDA_ARCHS:-90}) in $build_s s with $(wc -l < "$W/hidden.txt") paths hidden; make cuda: ./train_cuda with $("$NVCC" --version | grep -o 'release [0-9.]*'), ptxas reported $(grep -c "Compiling entry function" "$W/build_cuda.log") kernels"
    # the kernels of ./train_cuda that spill (tests/check_kernels.sh holds the hot ones to none)
    grep -A2 "Compiling entry function" "$W/build_cuda.log" | grep -E "spill" | \
        grep -v " 0 bytes spill stores, 0 bytes spill loads" | head -3 | sed 's/^/# ptxas: /'
else
    echo "FAIL bare_machine_builds_cuda_and_tests_and_dev_cuda: $(cat "$W/build_cuda.log" "$W/build.log" 2>/dev/null | grep -m3 -E 'error|Error' | tr '\n' ' ' | head -c 600)"
fi
linked=$(grep -o -E 'lib(openblas|blas|cblas|cjson|pcre2[^ ]*|z|mpi[^ ]*|open-pal|open-rte)\.so[^ ]*' "$W/ldd.txt" 2>/dev/null | sort -u | tr '\n' ' ')
if [ -s "$W/ldd.txt" ] && [ -z "$linked" ]; then
    echo "ok   bare_train_cuda_links_none_of_the_hidden_libraries: ldd lists $(grep -c '=>' "$W/ldd.txt") libraries: $(awk '{print $1}' "$W/ldd.txt" | grep -E 'cublas|cudart|gomp' | tr '\n' ' ')"
else
    echo "FAIL bare_train_cuda_links_none_of_the_hidden_libraries: ${linked:-no ldd output}"
fi
if grep -q -i 'left out' "$W/version.txt" 2>/dev/null && grep -q -i 'openblas' "$W/version.txt" && \
   grep -q -i 'gpt-2 tokenizer' "$W/version.txt" && grep -q -i 'mpi' "$W/version.txt"; then
    echo "ok   bare_build_names_what_it_left_out: $(grep -i 'left out' "$W/version.txt" | head -1 | head -c 300)"
else
    echo "FAIL bare_build_names_what_it_left_out: ./train_cuda --version printed: $(head -c 300 "$W/version.txt" 2>/dev/null)"
fi
rows=$(grep -c '"type":"train"' "$W/log.jsonl" 2>/dev/null)
if [ "$emu_rc" -eq 0 ] && [ "$train_rc" -eq 0 ] && [ "${rows:-0}" -eq 5 ]; then
    echo "ok   bare_emulated_trainer_trains_5_steps: built in $emu_s s; $rows train rows in the JSON log, last $(grep '"type":"train"' "$W/log.jsonl" | tail -1 | grep -o '"loss":[^,]*')"
else
    echo "FAIL bare_emulated_trainer_trains_5_steps: build rc $emu_rc ($(grep -m2 -E 'error' "$W/emu_build.log" 2>/dev/null | tr '\n' ' ' | head -c 300)), train rc $train_rc, $rows rows: $(tail -2 "$W/train.out" 2>/dev/null | tr '\n' ' ')"
fi
