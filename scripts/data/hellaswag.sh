#!/usr/bin/env bash
# scripts/data/hellaswag.sh — HellaSwag's validation set (10,042 examples, the jsonl of the
# dataset's repository that llm.c's dev/data/hellaswag.py downloads) -> the eval file of
# `./train eval --hellaswag` and `--hellaswag` in a run, tokenized with GPT-2's BPE by
# `./train prepare --hellaswag` (no Python). --input FILE takes a local copy of the jsonl.
#   scripts/data/hellaswag.sh [--input hellaswag_val.jsonl] [--out DIR] [--bpe-dir DIR]
#   ./train eval --hellaswag out/data/hellaswag/hellaswag_val.bin --init MODEL.bin
RECIPE_HELP="HellaSwag val -> DIR/hellaswag_val.bin (--input: a local copy of hellaswag_val.jsonl)"
source "$(dirname "$0")/common.sh"
recipe_args hellaswag "$@"
[ -z "$val_frac" ] || { echo "$0: --val-frac does not apply to HellaSwag" >&2; exit 2; }
URL=https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl
if [ -z "$input" ]; then
    input=$out/raw/hellaswag_val.jsonl
    fetch "$URL" "$input"
fi
"$TRAIN" prepare --hellaswag "$input" "$out/hellaswag_val.bin" --tokenizer gpt2 --bpe-dir "$bpe_dir"
