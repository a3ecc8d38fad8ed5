#!/usr/bin/env bash
# scripts/data/tinyshakespeare.sh — Tiny Shakespeare (1.1 MB of the plays, the file char-rnn
# published and llm.c's dev/data/tinyshakespeare.py downloads) -> GPT-2 token shards, one
# document, the last 10% of its tokens as val. --input FILE takes a local plain-text copy.
#   scripts/data/tinyshakespeare.sh [--input input.txt] [--out DIR] [--bpe-dir DIR] [--val-frac F]
#   ./train --train "out/data/tinyshakespeare/train_*.bin" --val "out/data/tinyshakespeare/val_*.bin" \
#           --tokenizer gpt2 ...
RECIPE_HELP="Tiny Shakespeare -> GPT-2 token shards (--input: a local plain-text copy)"
source "$(dirname "$0")/common.sh"
recipe_args tinyshakespeare "$@"
URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
if [ -z "$input" ]; then
    input=$out/raw/input.txt
    fetch "$URL" "$input"
fi
prepare --val-frac "${val_frac:-0.1}" "$input"
