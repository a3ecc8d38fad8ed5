#!/usr/bin/env bash
# tests/check_cuda_archs.sh — one ./train_cuda for many GPUs (Makefile: CUDA_ARCHS), checked
# without a GPU and without cuobjdump (a bare CUDA image has none; where it exists its listing is
# held to ours):
#   - the build list is the issue's, sm_70 75 80 86 89 90: each target is built, or left out only
#     because this nvcc cannot build it (nvcc --list-gpu-code; CUDA 13 dropped sm_70);
#   - tests/cuda/arch_probe.cu, compiled once with the Makefile's NVCC_ARCH, holds in its
#     fatbinary (the .nv_fatbin section of the object, read here) one SASS image for each built
#     target and the PTX of the newest;
#   - the PTX per target: below sm_80 the sm_80 wrappers of cuda/mma.h (mma m16n8k16 bf16,
#     cp.async, ldmatrix) are the guard's trap and the sm_75 mma.m16n8k8 f16 is real; from sm_80 on
#     all are real;
#   - CUDA_ARCHS=90 is one target plus its PTX, built in a folder of its own (build/cuda-sm90).
# SKIP without nvcc.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
NAMES="cuda_archs_build_list_is_sm70_to_sm90 cuda_fatbinary_holds_each_sass_and_ptx cuda_sm80_wrappers_guarded_below_sm80 cuda_archs_override_builds_one_target"
if ! command -v "$NVCC" >/dev/null 2>&1; then
    for n in $NAMES; do echo "SKIP $n: nvcc not found"; done
    exit 0
fi
WANT="70 75 80 86 89 90"
D=build/check_cuda_archs
rm -rf "$D" && mkdir -p "$D"
fails=0
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

# ---- the build list -------------------------------------------------------------------------
make -s --no-print-directory NVCC="$NVCC" cuda-archs > "$D/archs.txt" 2>&1 || { fail cuda_archs_build_list_is_sm70_to_sm90 "make cuda-archs: $(head -c 300 "$D/archs.txt")"; exit 1; }
val() { sed -n "s/^$1=//p" "$D/archs.txt"; }
BUILT=$(val CUDA_ARCHS_BUILT); LEFT=$(val CUDA_ARCHS_LEFT_OUT); PTX=$(val CUDA_PTX_ARCH); FLAGS=$(val NVCC_ARCH)
CAN=$("$NVCC" --list-gpu-code 2>/dev/null | sed -n 's/^sm_//p' | tr '\n' ' ')
union=$(echo $BUILT $LEFT | tr ' ' '\n' | sort -n | tr '\n' ' ' | sed 's/ $//')
bad_left=""
for a in $LEFT; do case " $CAN " in *" $a "*) bad_left="$bad_left $a";; esac; done
if [ "$union" = "$WANT" ] && [ -z "$bad_left" ] && [ -n "$BUILT" ]; then
    echo "ok   cuda_archs_build_list_is_sm70_to_sm90: built: $BUILT + PTX compute_$PTX${LEFT:+; left out: $LEFT (not in nvcc --list-gpu-code of $("$NVCC" --version | grep -o 'release [0-9.]*'))}"
else
    fail cuda_archs_build_list_is_sm70_to_sm90 "built [$BUILT] + left out [$LEFT] is [$union], want [$WANT]${bad_left:+; left out though nvcc builds them:$bad_left}"
fi

# ---- the fatbinary of one object, compiled once ---------------------------------------------
# reads the ELF object's .nv_fatbin: a fatbinary header (magic 0xBA55ED50, its size, the size of
# what follows) and entries, each with its kind (1 PTX, 2 ELF = SASS) and its sm number
cat > "$D/fatbin.py" <<'PY'
import struct, sys
d = open(sys.argv[1], 'rb').read()
assert d[:4] == b'\x7fELF' and d[4] == 2, 'not an ELF64 object'
shoff, = struct.unpack_from('<Q', d, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3a)
hdr = lambda i: struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * shentsize)
stro = hdr(shstrndx)[4]
seen = set()
for i in range(shnum):
    h = hdr(i)
    name = d[stro + h[0]: d.index(b'\0', stro + h[0])].decode()
    if name != '.nv_fatbin':
        continue
    blob = d[h[4]: h[4] + h[5]]
    off = 0
    while off + 16 <= len(blob):
        magic, ver, hsize, fsize = struct.unpack_from('<IHHQ', blob, off)
        if magic != 0xBA55ED50:
            break
        e, end = off + hsize, off + hsize + fsize
        while e < end:
            kind, _, ehsize, padded = struct.unpack_from('<HHII', blob, e)
            sm, = struct.unpack_from('<I', blob, e + 28)
            seen.add(('ptx' if kind == 1 else 'elf' if kind == 2 else str(kind)) + ' ' + str(sm))
            e += ehsize + padded
        off = end
print('\n'.join(sorted(seen)))
PY
start=$(date +%s)
# shellcheck disable=SC2086
if "$NVCC" -O3 -std=c++17 -I. $FLAGS -c -o "$D/probe.o" tests/cuda/arch_probe.cu > "$D/nvcc.log" 2>&1; then
    secs=$(( $(date +%s) - start ))
    python3 "$D/fatbin.py" "$D/probe.o" > "$D/images.txt" 2> "$D/parse.log"
    want_img=$( (for a in $BUILT; do echo "elf $a"; done; echo "ptx $PTX") | sort)
    if [ "$(cat "$D/images.txt")" = "$want_img" ]; then
        echo "ok   cuda_fatbinary_holds_each_sass_and_ptx: tests/cuda/arch_probe.cu with the Makefile's flags ($secs s): $(tr '\n' ',' < "$D/images.txt" | sed 's/,$//; s/,/, /g')"
    else
        fail cuda_fatbinary_holds_each_sass_and_ptx "the object holds [$(tr '\n' ',' < "$D/images.txt")] $(head -c 200 "$D/parse.log"), want [$(echo "$want_img" | tr '\n' ',')]"
    fi
    CUOBJDUMP=$(command -v cuobjdump || { [ -x /usr/local/cuda/bin/cuobjdump ] && echo /usr/local/cuda/bin/cuobjdump; })
    if [ -n "$CUOBJDUMP" ]; then
        elfs=$("$CUOBJDUMP" --list-elf "$D/probe.o" | grep -o 'sm_[0-9]*' | sed 's/sm_//' | sort -n | tr '\n' ' ' | sed 's/ $//')
        ptxs=$("$CUOBJDUMP" --list-ptx "$D/probe.o" | grep -o 'sm_[0-9]*' | sed 's/sm_//' | tr '\n' ' ' | sed 's/ $//')
        if [ "$elfs" = "$BUILT" ] && [ "$ptxs" = "$PTX" ]; then
            echo "ok   cuda_fatbinary_cuobjdump_agrees: --list-elf sm_$elfs, --list-ptx $ptxs"
        else
            fail cuda_fatbinary_cuobjdump_agrees "cuobjdump --list-elf [$elfs] --list-ptx [$ptxs], want [$BUILT] [$PTX]"
        fi
    else
        echo "SKIP cuda_fatbinary_cuobjdump_agrees: no cuobjdump here (the fatbinary was read directly)"
    fi
else
    fail cuda_fatbinary_holds_each_sass_and_ptx "nvcc $FLAGS tests/cuda/arch_probe.cu: $(grep -m3 -i error "$D/nvcc.log" | tr '\n' ' ' | head -c 400)"
fi

# ---- the guards, read in each target's PTX (no ptxas: seconds) ------------------------------
guard_bad=""
for a in 75 80; do
    case " $CAN " in *" $a "*) ;; *) continue;; esac
    if ! "$NVCC" -O3 -std=c++17 -I. -arch=compute_$a -ptx -o "$D/probe_$a.ptx" tests/cuda/arch_probe.cu > "$D/ptx_$a.log" 2>&1; then
        guard_bad="$guard_bad compute_$a does not compile: $(grep -m2 -i error "$D/ptx_$a.log" | tr '\n' ' ' | head -c 200);"
        continue
    fi
    k16=$(grep -c 'mma.sync.aligned.m16n8k16' "$D/probe_$a.ptx"); k8=$(grep -c 'mma.sync.aligned.m16n8k8' "$D/probe_$a.ptx")
    cpa=$(grep -c 'cp.async' "$D/probe_$a.ptx"); ldm=$(grep -c 'ldmatrix' "$D/probe_$a.ptx"); trap=$(grep -c 'trap;' "$D/probe_$a.ptx")
    eval "fig_$a='m16n8k16 $k16, m16n8k8 $k8, cp.async $cpa, ldmatrix $ldm, trap $trap'"
    if [ "$a" = 75 ] && { [ "$k16" -ne 0 ] || [ "$cpa" -ne 0 ] || [ "$ldm" -ne 0 ] || [ "$k8" -lt 1 ] || [ "$trap" -lt 1 ]; }; then
        guard_bad="$guard_bad compute_75: m16n8k16 $k16, cp.async $cpa, ldmatrix $ldm (want 0), m16n8k8 $k8, trap $trap (want >= 1);"
    fi
    if [ "$a" = 80 ] && { [ "$k16" -lt 1 ] || [ "$cpa" -lt 1 ] || [ "$ldm" -lt 1 ] || [ "$k8" -lt 1 ] || [ "$trap" -ne 0 ]; }; then
        guard_bad="$guard_bad compute_80: m16n8k16 $k16, cp.async $cpa, ldmatrix $ldm, m16n8k8 $k8 (want >= 1), trap $trap (want 0);"
    fi
done
if [ -z "$guard_bad" ]; then
    echo "ok   cuda_sm80_wrappers_guarded_below_sm80: compute_75 PTX: ${fig_75:-not built}; compute_80 PTX: ${fig_80:-not built}"
else
    fail cuda_sm80_wrappers_guarded_below_sm80 "$guard_bad"
fi

# ---- the one-target override ----------------------------------------------------------------
one=$(make -s --no-print-directory NVCC="$NVCC" CUDA_ARCHS=90 cuda-archs | sed -n 's/^NVCC_ARCH=//p')
dir=$(make -n --no-print-directory NVCC="$NVCC" CUDA_ARCHS=90 cuda 2>/dev/null | grep -o 'build/cuda[^/ ]*/cuda/ops_cuda.o' | head -1)
want_one="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
if [ "$one" = "$want_one" ] && [ "$dir" = "build/cuda-sm90/cuda/ops_cuda.o" ]; then
    echo "ok   cuda_archs_override_builds_one_target: CUDA_ARCHS=90: $one, objects in build/cuda-sm90"
else
    fail cuda_archs_override_builds_one_target "CUDA_ARCHS=90 gives [$one] into [$dir], want [$want_one] into build/cuda-sm90/"
fi
[ "$fails" -eq 0 ]
