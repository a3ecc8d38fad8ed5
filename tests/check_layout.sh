#!/usr/bin/env bash
# tests/check_layout.sh — the folders are the architecture (DESIGN §1, README "Layout"): each
# folder includes only the folders it may depend on, so the dependencies point one way.
#   model/       the network and the backend interface; reaches a backend only through the table
#                (model/backend.c is the one file of model/ that includes cpu/ or cuda/)
#   cpu/ cuda/   the two backends: each includes model/'s interface, never the other
#   dist/        the transport, over model/'s gradients
#   train.c, cli.c   the entry: model/, data/, checkpoint/, random/, dist/, util/, never a backend
#   SEEDGPT_LAYOUT_ROOT=DIR   check another tree (the test of this test plants bad includes there)
set -u
root=${SEEDGPT_LAYOUT_ROOT:-"$(dirname "$0")/.."}
cd "$root" || exit 1

# folder: the project folders its sources may include besides itself ("." is the entry point:
# train.c, cli.c, cli.h)
declare -A MAY=(
    [random]=""
    [util]=""
    [data]="util"
    [checkpoint]="random"
    [attention]="random cuda util"
    [model]="attention checkpoint random util"
    [cpu]="model random util"
    [cuda]="model random util"
    [dist]="model random util"
    [.]="model data checkpoint random dist util"
)
# files allowed more than their folder: the backend table binds the backends; the NCCL transport
# launches its rank-order sum and runs against the emulation through the device headers (checked
# below: no cuda/ file it reaches includes model/)
declare -A MAY_FILE=(
    [model/backend.c]="cpu cuda"
    [dist/dist_nccl.cu]="cuda"
)
FOLDERS="random util data checkpoint attention model cpu cuda dist ."
# the project's top-level folders that hold code (what an include can name)
PROJECT="random cuda cpu dist util data checkpoint attention model tests dev"

# a folder's sources: its own and its subfolders' (cuda/emu/); the entry point's are the root's
sources() {
    if [ "$1" = . ]; then find . -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) | sed 's#^\./##' | sort
    else find "$1" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cpp' \) | sort; fi
}
# the project folders a file's quoted includes name: "folder/file" -> folder
folders_included() {
    sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([a-z_]+)\/[^"]*".*/\1/p' "$1" | sort -u
}

for dir in $FOLDERS; do
    bad=""
    label=$([ "$dir" = . ] && echo entry || echo "$dir")
    for f in $(sources "$dir"); do
        for inc in $(folders_included "$f"); do
            case " $PROJECT " in *" $inc "*) ;; *) continue ;; esac
            [ "$inc" = "$dir" ] && continue
            case " ${MAY[$dir]} ${MAY_FILE[$f]:-} " in *" $inc "*) ;; *) bad="$bad $f->$inc/" ;; esac
        done
    done
    if [ -z "$bad" ]; then
        echo "ok   ${label}_includes_only_what_it_may: ${MAY[$dir]:-no other folder}"
    else
        echo "FAIL ${label}_includes_only_what_it_may (${MAY[$dir]:-no other folder}):$bad"
    fi
done

# attention/ and cuda/ point at each other only through the device headers: every cuda/ file the
# attention includes, and every cuda/ file those include in turn, reaches no model/ file (so the
# attention kernels sit below the backend table, not beside it). The same for dist/dist_nccl.cu.
device_headers_only() {   # NAME FILE...
    local name=$1; shift
    local seen="" bad="" next h
    local queue=$(for f in "$@"; do
                      sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"(cuda\/[^"]*)".*/\1/p' "$f"; done | sort -u)
    while [ -n "$queue" ]; do
        next=""
        for h in $queue; do
            case " $seen " in *" $h "*) continue ;; esac
            seen="$seen $h"
            [ -f "$h" ] || continue
            if folders_included "$h" | grep -qx model; then bad="$bad $h->model/"; fi
            next="$next $(sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"(cuda\/[^"]*)".*/\1/p' "$h")"
        done
        queue=$next
    done
    if [ -z "$bad" ]; then
        echo "ok   ${name}_reaches_cuda_device_headers_only:${seen:- none}"
    else
        echo "FAIL ${name}_reaches_cuda_device_headers_only:$bad"
    fi
}
device_headers_only attention $(sources attention)
device_headers_only dist_nccl dist/dist_nccl.cu

# nothing includes the entry point
hits=$(grep -l -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"(\.\./)*train\.c"' \
       $(for d in $FOLDERS tests tests/cuda dev/cuda; do sources "$d"; done 2>/dev/null) 2>/dev/null)
if [ -z "$hits" ]; then
    echo "ok   nothing_includes_train_c"
else
    echo "FAIL nothing_includes_train_c: $hits"
fi

# each folder holds its own kind of file: attention/ the attention kernels and their headers; model/
# no backend's kernel (no .cu, no *_cpu.* or *_cuda.*); cpu/ no CUDA source
others=$(find attention -maxdepth 1 -type f ! -name 'flash_*' ! -name 'attention*.h' | sort | tr '\n' ' ')
if [ -z "$others" ]; then
    echo "ok   attention_holds_attention_only"
else
    echo "FAIL attention_holds_attention_only: $others"
fi
others=$(find model -type f \( -name '*.cu' -o -name '*.cpp' -o -name '*_cpu.*' -o -name '*_cuda.*' \) | sort | tr '\n' ' ')
if [ -z "$others" ]; then
    echo "ok   model_holds_no_backend_file"
else
    echo "FAIL model_holds_no_backend_file: $others"
fi
others=$(find cpu -type f \( -name '*.cu' -o -name '*.cpp' -o -name '*_cuda.*' \) | sort | tr '\n' ' ')
if [ -z "$others" ]; then
    echo "ok   cpu_holds_no_cuda_file"
else
    echo "FAIL cpu_holds_no_cuda_file: $others"
fi

# the moved headers and sources are named by their new paths only (includes, the Makefile, scripts,
# the mutants' patches, the docs)
old=$(grep -rln -E '(#[[:space:]]*include[[:space:]]+"(attention/(philox|device|bf16|mma|cuda_emu|vexp)\.h|model/(fsync_dir\.h|device_cuda)))|model/(ops_cpu|ops_bf16_cpu|gemm_cpu|gemm_bf16_cpu|ln_rows|peak|ops_cuda|ops_bf16_cuda|profile_cuda|dist|dist_mpi|dist_nccl|dist_none)\.(c|h|cu|o)\b|cuda/(cuda_emu\.(h|cpp)|bf16\.h)' \
      --include='*.c' --include='*.h' --include='*.cu' --include='*.cpp' --include='*.sh' --include='*.patch' \
      --include='*.md' --include='*.py' \
      --include='Makefile' . 2>/dev/null | grep -v -e '^\./build/' -e '^\./tests/check_layout\.sh$' | tr '\n' ' ')
if [ -z "$old" ]; then
    echo "ok   no_use_of_a_moved_path"
else
    echo "FAIL no_use_of_a_moved_path: $old"
fi

# the check itself sees each kind of violation: in a copy of the tree, one planted include at a
# time must fail the rule it breaks (and only in that copy)
if [ -z "${SEEDGPT_LAYOUT_ROOT:-}" ]; then
    plant() {   # plant FILE INCLUDE RULE WHAT: the copy with FILE including INCLUDE fails RULE
        local tmp out
        tmp=$(mktemp -d)
        cp -r random cuda cpu dist util data checkpoint attention model train.c cli.c cli.h "$tmp"/
        printf '#include "%s"\n' "$2" >> "$tmp/$1"
        out=$(SEEDGPT_LAYOUT_ROOT="$tmp" bash "$0" 2>&1)
        rm -rf "$tmp"
        if printf '%s\n' "$out" | grep -q "^FAIL $3.*$1->${2%%/*}/"; then
            echo "ok   layout_check_catches_$4: $1 -> ${2%%/*}/ reported by $3"
        else
            echo "FAIL layout_check_catches_$4: $(printf '%s' "$out" | grep '^FAIL' | tr '\n' ' ' | head -c 300)"
        fi
    }
    plant data/shards.c model/gpt.h data_includes_only_what_it_may data_including_model
    plant cpu/ops_cpu.c cuda/device.h cpu_includes_only_what_it_may cpu_including_cuda
    plant cuda/ops_cuda.h cpu/gemm_cpu.h cuda_includes_only_what_it_may cuda_including_cpu
    plant model/gpt.c cpu/gemm_cpu.h model_includes_only_what_it_may model_including_a_backend
    plant model/plan.c cuda/ops_cuda.h model_includes_only_what_it_may model_including_cuda
    plant train.c cpu/peak.h entry_includes_only_what_it_may entry_including_a_backend
    plant dist/dist_none.c cpu/ops_bf16_cpu.h dist_includes_only_what_it_may dist_including_a_backend
    plant cuda/mma.h model/ops.h attention_reaches_cuda_device_headers_only attention_reaching_model_through_cuda
fi
