#!/usr/bin/env bash
# scripts/data/fineweb_edu.sh — FineWeb-Edu (Hugging Face's educational web text, the
# "sample-10BT" subset llm.c's dev/data/fineweb.py --type edu reads) -> GPT-2 token shards of
# 100 M tokens each, EOT before each document, the last 1% of the stream as val (llm.c keeps its
# first shard as val instead).
#   --input FILE   a local copy: JSON lines with "text" (one document per line), or a .parquet
#                  file of the dataset (read with python3 + pyarrow)
#   --docs N       the download keeps the first N documents (default 1000000, ~1 B tokens); the
#                  download reads the dataset with python3's `datasets` package (pip install
#                  datasets), streaming, so only the documents kept are fetched
#   scripts/data/fineweb_edu.sh [--input FILE] [--docs N] [--out DIR] [--bpe-dir DIR] [--val-frac F]
RECIPE_HELP="FineWeb-Edu -> GPT-2 token shards (--input: .jsonl with \"text\" or .parquet; --docs N)"
docs=1000000
args=()
while [ $# -gt 0 ]; do
    if [ "$1" = --docs ] && [ $# -ge 2 ]; then docs=$2; shift 2; else args+=("$1"); shift; fi
done
source "$(dirname "$0")/common.sh"
recipe_args fineweb_edu ${args[@]+"${args[@]}"}
case "$docs" in ''|*[!0-9]*) echo "$0: --docs $docs: expected a positive integer" >&2; exit 2 ;; esac
if [ -z "$input" ]; then
    input=$out/raw/fineweb_edu_$docs.jsonl
    if [ ! -s "$input" ]; then
        python3 - "$input.part" "$docs" << 'PY'
import json, sys
from datasets import load_dataset   # pip install datasets
ds = load_dataset("HuggingFaceFW/fineweb-edu", name="sample-10BT", split="train", streaming=True)
with open(sys.argv[1], "w", encoding="utf-8") as out:
    for i, row in enumerate(ds):
        if i == int(sys.argv[2]):
            break
        out.write(json.dumps({"text": row["text"]}, ensure_ascii=False) + "\n")
PY
        mv "$input.part" "$input"
    fi
fi
case "$input" in
    *.parquet)
        python3 - "$out/raw/parquet.jsonl" "$input" << 'PY'
import json, sys
import pyarrow.parquet as pq   # pip install pyarrow
with open(sys.argv[1], "w", encoding="utf-8") as out:
    for text in pq.read_table(sys.argv[2], columns=["text"]).column("text").to_pylist():
        out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
PY
        input=$out/raw/parquet.jsonl ;;
esac
prepare --val-frac "${val_frac:-0.01}" --jsonl text "$input"
