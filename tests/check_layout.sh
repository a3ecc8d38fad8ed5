#!/usr/bin/env bash
# tests/check_layout.sh — the folders are the architecture (DESIGN §1, README "Layout"): each
# folder includes only the folders it may depend on, so the dependencies point one way.
#   SEEDGPT_LAYOUT_ROOT=DIR   check another tree (the test of this test plants a bad include there)
set -u
root=${SEEDGPT_LAYOUT_ROOT:-"$(dirname "$0")/.."}
cd "$root" || exit 1

# folder: the project folders its sources may include besides itself
declare -A MAY=(
    [random]=""
    [cuda]=""
    [util]=""
    [data]="util"
    [checkpoint]="random"
    [attention]="random cuda util"
    [model]="attention checkpoint random cuda util"
)
# the project's top-level folders that hold code (what an include can name)
PROJECT="random cuda util data checkpoint attention model tests dev"

sources() { find "$@" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cpp' \) | sort; }

for dir in random cuda util data checkpoint attention model; do
    bad=""
    for f in $(sources "$dir"); do
        # every quoted include that names a project folder: "folder/file"
        for inc in $(sed -n -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([a-z_]+)\/[^"]*".*/\1/p' "$f" | sort -u); do
            case " $PROJECT " in *" $inc "*) ;; *) continue ;; esac
            [ "$inc" = "$dir" ] && continue
            case " ${MAY[$dir]} " in *" $inc "*) ;; *) bad="$bad $f->$inc/" ;; esac
        done
    done
    if [ -z "$bad" ]; then
        echo "ok   ${dir}_includes_only_what_it_may: ${MAY[$dir]:-no other folder}"
    else
        echo "FAIL ${dir}_includes_only_what_it_may (${MAY[$dir]:-no other folder}):$bad"
    fi
done

# nothing includes the entry point
hits=$(grep -l -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"(\.\./)*train\.c"' \
       $(sources . random cuda util data checkpoint attention model tests tests/cuda dev/cuda) 2>/dev/null)
if [ -z "$hits" ]; then
    echo "ok   nothing_includes_train_c"
else
    echo "FAIL nothing_includes_train_c: $hits"
fi

# attention/ holds the attention kernels and their headers only: no emulation, no generic CUDA
others=$(find attention -maxdepth 1 -type f ! -name 'flash_*' ! -name 'attention*.h' | sort | tr '\n' ' ')
if [ -z "$others" ]; then
    echo "ok   attention_holds_attention_only"
else
    echo "FAIL attention_holds_attention_only: $others"
fi

# the moved headers are included under their new names only
old=$(grep -rln -E '#[[:space:]]*include[[:space:]]+"(attention/(philox|device|bf16|mma|cuda_emu|vexp)\.h|model/(fsync_dir\.h|device_cuda))' \
      --include='*.c' --include='*.h' --include='*.cu' --include='*.cpp' . 2>/dev/null | grep -v '^./build/' | tr '\n' ' ')
if [ -z "$old" ]; then
    echo "ok   no_include_of_a_moved_path"
else
    echo "FAIL no_include_of_a_moved_path: $old"
fi

# the check itself sees a violation: data/ including model/ in a copy of the tree must fail
if [ -z "${SEEDGPT_LAYOUT_ROOT:-}" ]; then
    tmp=$(mktemp -d)
    cp -r random cuda util data checkpoint attention model "$tmp"/
    printf '#include "model/gpt.h"\n' >> "$tmp/data/shards.c"
    out=$(SEEDGPT_LAYOUT_ROOT="$tmp" bash "$0" 2>&1)
    rm -rf "$tmp"
    if printf '%s\n' "$out" | grep -q '^FAIL data_includes_only_what_it_may.*data/shards.c->model/'; then
        echo "ok   layout_check_catches_a_planted_include: data/shards.c -> model/ reported"
    else
        echo "FAIL layout_check_catches_a_planted_include: $(printf '%s' "$out" | tr '\n' ' ' | head -c 300)"
    fi
fi
