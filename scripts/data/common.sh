# scripts/data/common.sh — what the data recipes share (sourced, not run): their flags, the
# download, the GPT-2 tokenizer's files and the call to ./train prepare.
#
# Every recipe takes:
#   --input FILE     a local copy of the dataset (the recipe's own formats), so nothing is
#                    downloaded: the recipe runs offline
#   --out DIR        where the shards go (default out/data/NAME); DIR/raw keeps a download
#   --bpe-dir DIR    GPT-2's encoder.json + vocab.bpe (default $SEEDGPT_BPE_DIR, else data/gpt2:
#                    scripts/get_gpt2_bpe.sh puts them there)
#   --val-frac F     the last F of the token stream is the val split (default: the recipe's)
# and SEEDGPT_TRAIN names the trainer (default ./train). Shards: DIR/train_NNNNNN.bin and
# DIR/val_NNNNNN.bin, llm.c's format (docs/formats.md), GPT-2 token ids, EOT before each document.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRAIN=${SEEDGPT_TRAIN:-$repo/train}
input= out= bpe_dir=${SEEDGPT_BPE_DIR:-} val_frac=
recipe_usage() {
    echo "usage: $0 [--input FILE] [--out DIR] [--bpe-dir DIR] [--val-frac F]" >&2
    echo "  $1" >&2
    exit 2
}
recipe_args() {   # recipe_args NAME "$@"
    local name=$1; shift
    while [ $# -gt 0 ]; do
        case "$1" in
            --input|--out|--bpe-dir|--val-frac)
                [ $# -ge 2 ] || { echo "$0: $1 needs a value" >&2; exit 2; }
                case "$1" in
                    --input) input=$2 ;; --out) out=$2 ;; --bpe-dir) bpe_dir=$2 ;;
                    --val-frac) val_frac=$2 ;;
                esac
                shift 2 ;;
            -h|--help) recipe_usage "$RECIPE_HELP" ;;
            *) echo "$0: unknown argument '$1' (see $0 --help)" >&2; exit 2 ;;
        esac
    done
    out=${out:-$repo/out/data/$name}
    bpe_dir=${bpe_dir:-$repo/data/gpt2}
    if [ -n "$input" ] && [ ! -f "$input" ]; then
        echo "$0: --input $input: no such file" >&2; exit 2
    fi
    if [ ! -f "$bpe_dir/encoder.json" ] || [ ! -f "$bpe_dir/vocab.bpe" ]; then
        echo "$0: GPT-2's tokenizer files are not in $bpe_dir (scripts/get_gpt2_bpe.sh, or --bpe-dir DIR)" >&2
        exit 2
    fi
    [ -x "$TRAIN" ] || { echo "$0: $TRAIN is not built (make)" >&2; exit 2; }
    mkdir -p "$out/raw"
}
fetch() {   # fetch URL FILE: downloads once (FILE.part, then renamed)
    [ -s "$2" ] && { echo "$(basename "$0"): $2 already downloaded"; return 0; }
    echo "$(basename "$0"): downloading $1"
    if command -v curl > /dev/null 2>&1; then curl -fL --retry 3 -o "$2.part" "$1"
    elif command -v wget > /dev/null 2>&1; then wget -O "$2.part" "$1"
    else echo "$0: neither curl nor wget is installed" >&2; exit 2; fi
    mv "$2.part" "$2"
}
prepare() {   # prepare [prepare flags] FILES...: GPT-2 token shards into $out
    "$TRAIN" prepare --tokenizer gpt2 --bpe-dir "$bpe_dir" "$@" "$out"
}
