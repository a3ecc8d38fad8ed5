#!/usr/bin/env bash
# scripts/data/tinystories.sh — TinyStories (Eldan & Li; the archive llm.c's
# dev/data/tinystories.py downloads from Hugging Face, ~1.5 GB, 2.1 M stories) -> GPT-2 token
# shards, EOT before each story (each stripped of surrounding white space), the last 2% of the
# stream as val (llm.c keeps its first file, data00.json, as val instead).
#   --input FILE   a local copy: the archive (.tar.gz), one of its .json files (a JSON array of
#                  objects with "story"), or JSON lines with "story" or "text"
# Converting the .json arrays to JSON lines uses python3 (its standard library only).
#   scripts/data/tinystories.sh [--input FILE] [--out DIR] [--bpe-dir DIR] [--val-frac F]
RECIPE_HELP="TinyStories -> GPT-2 token shards (--input: the .tar.gz, a .json array or .jsonl)"
source "$(dirname "$0")/common.sh"
recipe_args tinystories "$@"
URL=https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz
if [ -z "$input" ]; then
    input=$out/raw/TinyStories_all_data.tar.gz
    fetch "$URL" "$input"
fi
stories=$out/raw/stories.jsonl
case "$input" in
    *.tar.gz|*.tgz)
        mkdir -p "$out/raw/json"
        tar -xzf "$input" -C "$out/raw/json"
        set -- "$out"/raw/json/*.json ;;
    *.jsonl) set -- ;;
    *) set -- "$input" ;;
esac
if [ $# -gt 0 ]; then   # JSON arrays -> one {"story": ...} line per story, in file order
    python3 - "$stories.part" "$@" << 'PY'
import json, sys
with open(sys.argv[1], "w", encoding="utf-8") as out:
    for path in sorted(sys.argv[2:]):
        for item in json.load(open(path, encoding="utf-8")):
            out.write(json.dumps({"story": item["story"].strip()}, ensure_ascii=False) + "\n")
PY
    mv "$stories.part" "$stories"
    field=story
else
    stories=$input
    field=text   # (grep -c reads all it is given: no early exit for pipefail to see)
    if head -c 100000 "$input" | grep -c '"story"' > /dev/null; then field=story; fi
fi
prepare --val-frac "${val_frac:-0.02}" --jsonl "$field" "$stories"
